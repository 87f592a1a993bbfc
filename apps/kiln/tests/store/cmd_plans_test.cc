// `kiln plans` as a user runs it: the built binary on a temporary store, checking exit codes and messages.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/exit_codes.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::TempDir;

using test::run_kiln;
using test::CliResult;

class PlansCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(KILN_BINARY)) GTEST_SKIP() << "kiln binary not built: " << KILN_BINARY;
    store_ = dir_.file("plans.db");
    StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(store_);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*s)->put(make_record(i)).is_ok());
    PlanRecord heuristic = make_record(7);
    heuristic.tuned = false;
    heuristic.numerics.verdict = Disposition::kNotVerified;
    ASSERT_TRUE((*s)->put(heuristic).is_ok());
  }
  TempDir dir_;
  std::string store_;
};

TEST_F(PlansCli, LsPrintsATable) {
  CliResult r = run_kiln("plans ls --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("STRUCTURE"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("sig0_0123456"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("NVIDIA H200"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("9.19.0"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("Passed"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("4 plans in"), std::string::npos) << r.output();
}

// Options that mean nothing as given are usage errors naming them (review): an empty path is not "not given",
// --target judges nothing without gc --stale, and --seed is --deep's.
TEST_F(PlansCli, EmptyPathsAndOptionsThatMeanNothingAreRefused) {
  const std::string profile = std::string(KILN_SOURCE_DIR) + "/profiles/h200.json";
  const std::pair<std::string, std::string> cases[] = {
      {"plans ls --store ''", "--store: the path is empty"},
      {"plans verify --store ''", "--store: the path is empty"},
      {"plans gc --stale --target '' --store " + store_, "--target: the path is empty"},
      {"plans gc --target " + profile + " --store " + store_, "--target judges which records are stale; add --stale"},
      {"plans verify --seed 5 --store " + store_, "--seed is the seed of --deep's inputs; add --deep"},
      {"run " + std::string(KILN_SOURCE_DIR) + "/examples/small/conv_bias_relu.json --store ''",
       "--store: the path is empty"},
      {"replay trace.json --record-shapes ''", "--record-shapes: the path is empty"},
  };
  for (const auto& [cmd, says] : cases) {
    CliResult r = run_kiln(cmd);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.output();
    EXPECT_NE(r.output().find(says), std::string::npos) << cmd << ": " << r.output();
  }
  CliResult ok = run_kiln("plans verify --store " + store_);  // the same store, nothing refused
  EXPECT_NE(ok.code, 2) << ok.output();
}

TEST_F(PlansCli, LsJsonParses) {
  CliResult r = run_kiln("plans ls --json --tuned --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  nlohmann::json j = nlohmann::json::parse(r.output(), nullptr, false);
  ASSERT_TRUE(j.is_array()) << r.output();
  EXPECT_EQ(j.size(), 3u);
  EXPECT_EQ(j[0]["fingerprint"]["gpu_name"], "NVIDIA H200");
  EXPECT_EQ(j[0]["knobs"], "SPLIT_K=0;TILE_SIZE=2");
}

// `ls --fingerprint` took only the whole key (32 digits) while ls shows 12: a prefix that begins one key of the
// store (its plans' or its kernel caches') now selects that environment, one that begins several is refused
// naming them (exit 2), one that begins none lists nothing, as a whole key not in the store does.
TEST_F(PlansCli, LsFingerprintTakesAUniquePrefixOfTheKey) {
  const std::string k0 = fingerprint_key(h200());  // the fixture's four records
  // Two environments whose keys begin with the same 6 digits (found by trying SM counts), and a third.
  EnvFingerprint a = h200(), b = h200(), c = h200();
  {
    std::map<std::string, int> seen;
    for (int sm = 1; sm < 1000000 && b.sm_count == h200().sm_count; ++sm) {
      EnvFingerprint f = h200();
      f.sm_count = sm;
      const std::string p = fingerprint_key(f).substr(0, 6);
      if (sm == h200().sm_count || p == k0.substr(0, 6)) continue;
      auto [it, fresh] = seen.emplace(p, sm);
      if (!fresh) a.sm_count = it->second, b.sm_count = sm;
    }
  }
  ASSERT_NE(b.sm_count, h200().sm_count);
  c.cudnn_version = 92000;
  const std::string ka = fingerprint_key(a), kb = fingerprint_key(b), kc = fingerprint_key(c);
  ASSERT_EQ(ka.substr(0, 6), kb.substr(0, 6));
  ASSERT_NE(ka.substr(0, 12), kb.substr(0, 12));
  ASSERT_NE(kc.substr(0, 6), k0.substr(0, 6));
  ASSERT_NE(kc.substr(0, 6), ka.substr(0, 6));
  {
    auto s = store_test::open_store(store_);
    ASSERT_TRUE(s->put(make_record(10, a)).is_ok());
    ASSERT_TRUE(s->put(make_record(11, b)).is_ok());
    KernelCacheRecord k;  // environment c has a kernel cache and no plan
    k.structure_sig = make_record(12).structure_sig;
    k.fingerprint = c;
    k.cache_json = R"({"kernels":[]})";
    ASSERT_TRUE(s->put_kernel_cache(k).is_ok());
  }
  auto listed = [&](const std::string& args) {
    CliResult r = run_kiln("plans ls --json " + args + " --store " + store_);
    EXPECT_EQ(r.code, kExitOk) << args << ": " << r.output();
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
    EXPECT_TRUE(j.is_array()) << r.out;
    std::vector<std::string> keys;
    if (j.is_array())
      for (const auto& e : j) keys.push_back(e["fingerprint_key"]);
    return keys;
  };
  // The 12 digits a table shows, and the whole key, select the same environment.
  EXPECT_EQ(listed("--fingerprint " + ka.substr(0, 12)), std::vector<std::string>{ka});
  EXPECT_EQ(listed("--fingerprint " + ka), std::vector<std::string>{ka});
  std::string upper = k0.substr(0, 6);
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_EQ(listed("--fingerprint " + upper), std::vector<std::string>(4, k0));
  // A kernel cache's environment (no plan under it): its caches are listed.
  EXPECT_EQ(listed("--kernel-caches --fingerprint " + kc.substr(0, 8)), std::vector<std::string>{kc});
  CliResult text = run_kiln("plans ls --fingerprint " + kb.substr(0, 12) + " --store " + store_);
  EXPECT_EQ(text.code, kExitOk) << text.output();
  EXPECT_NE(text.out.find("1 plan in " + store_), std::string::npos) << text.out;
  // Ambiguous: refused, naming both keys.
  CliResult amb = run_kiln("plans ls --fingerprint " + ka.substr(0, 6) + " --store " + store_);
  EXPECT_EQ(amb.code, kExitBadInput) << amb.output();
  EXPECT_NE(amb.output().find("--fingerprint " + ka.substr(0, 6) + " is ambiguous: it begins 2 environment keys in " +
                              store_ + ": " + std::min(ka, kb) + ", " + std::max(ka, kb) + " (give more of it)"),
            std::string::npos)
      << amb.output();
  // Begins none: nothing listed, as for a whole key that is not in the store.
  std::string none = "000000";
  for (char d = '0'; d <= '9' && (k0.rfind(none, 0) == 0 || ka.rfind(none, 0) == 0 || kb.rfind(none, 0) == 0 ||
                                  kc.rfind(none, 0) == 0);
       ++d)
    none = std::string(6, d);
  EXPECT_TRUE(listed("--fingerprint " + none).empty());
  EXPECT_TRUE(listed("--fingerprint " + std::string(32, 'f')).empty());
  // Too short, not hex, too long: usage errors naming the option (also without a store).
  for (const std::string& bad : {ka.substr(0, 5), std::string("xyz123"), ka + "0"})
    for (const std::string& where : {store_, dir_.file("absent.db")}) {
      CliResult r = run_kiln("plans ls --fingerprint " + bad + " --store " + where);
      EXPECT_EQ(r.code, kExitBadInput) << bad << ": " << r.output();
      EXPECT_NE(r.output().find("--fingerprint takes an environment key (32 hex digits) or a prefix of one of at "
                                "least 6"),
                std::string::npos)
          << r.output();
    }
}

TEST_F(PlansCli, ShowAndRm) {
  CliResult r = run_kiln("plans show sig1 --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("\"checksum_ok\": true"), std::string::npos) << r.output();
  r = run_kiln("plans show nosuch --store " + store_);
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  r = run_kiln("plans rm --store " + store_);
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  r = run_kiln("plans rm --structure sig1 --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("removed 1 plan"), std::string::npos) << r.output();
}

TEST_F(PlansCli, VerifyReportsCorruptionWithExit4) {
  CliResult r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("4 ok, 0 corrupt"), std::string::npos) << r.output();

  store_test::flip_blob_byte(store_, make_record(2).structure_sig, 3);
  r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  EXPECT_NE(r.output().find("CORRUPT  sig2_0123456"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("checksum mismatch"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("1 of 4 plan records"), std::string::npos) << r.output();

  r = run_kiln("plans verify --quarantine --store " + store_);
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();

  // --deep runs the plans on this GPU: without one it says so (exit 3) rather than passing silently. The host
  // tier hides the GPU from kiln, so this holds everywhere; with one, these fake records are reported as not
  // deep-checked (store.gpu.PlansCliWithAGpu.DeepVerifyOfRecordsWithoutAGraphSaysNotDeepChecked).
  r = run_kiln("plans verify --deep --store " + store_);
  EXPECT_EQ(r.code, kExitEnvironment) << r.output();
  EXPECT_NE(r.output().find("verify --deep runs each plan on this machine's GPU, and there is none"), std::string::npos)
      << r.output();
}

TEST_F(PlansCli, ExportImportRoundTrip) {
  std::string bundle = dir_.file("plans.kilnbundle");
  CliResult r = run_kiln("plans export " + bundle + " --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("exported 4 plans"), std::string::npos) << r.output();

  std::string other = dir_.file("other/plans.db");
  r = run_kiln("plans import " + bundle + " --store " + other);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("imported 4"), std::string::npos) << r.output();
  r = run_kiln("plans import " + bundle + " --store " + other);
  EXPECT_NE(r.output().find("4 unchanged"), std::string::npos) << r.output();

  CliResult a = run_kiln("plans ls --json --store " + store_);
  CliResult b = run_kiln("plans ls --json --store " + other);
  nlohmann::json ja = nlohmann::json::parse(a.output(), nullptr, false);
  nlohmann::json jb = nlohmann::json::parse(b.output(), nullptr, false);
  ASSERT_TRUE(ja.is_array() && jb.is_array());
  ASSERT_EQ(ja.size(), jb.size());
  for (size_t i = 0; i < ja.size(); ++i) EXPECT_EQ(ja[i]["checksum"], jb[i]["checksum"]);

  // A damaged bundle is refused with exit 4 and the record's name.
  store_test::flip_blob_byte(bundle, make_record(1).structure_sig, 0);
  r = run_kiln("plans import " + bundle + " --store " + dir_.file("third.db"));
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  EXPECT_NE(r.output().find("record sig1_0123456"), std::string::npos) << r.output();
}

TEST_F(PlansCli, DamagedStoreAndMissingFiles) {
  CliResult r = run_kiln("plans ls --store " + dir_.file("absent.db"));
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("no plan store at"), std::string::npos) << r.output();
  r = run_kiln("plans verify --store " + dir_.file("absent.db"));
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  r = run_kiln("plans import " + dir_.file("absent.kilnbundle") + " --store " + store_);
  EXPECT_EQ(r.code, kExitBadInput) << r.output();

  std::string junk = dir_.file("junk.db");
  {
    FILE* f = std::fopen(junk.c_str(), "wb");
    ASSERT_TRUE(f);
    for (int i = 0; i < 2000; ++i) std::fprintf(f, "junk %d ", i);
    std::fclose(f);
  }
  r = run_kiln("plans ls --store " + junk);
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  EXPECT_NE(r.output().find("is not a SQLite database"), std::string::npos) << r.output();
}

// Issue 10 case 4: `plans export FILE` wrote over any file, the live store included, and exited 0.
TEST_F(PlansCli, ExportRefusesAnExistingFileUnlessForced) {
  std::string bundle = dir_.file("taken.kilnbundle");
  {
    FILE* f = std::fopen(bundle.c_str(), "wb");
    ASSERT_TRUE(f);
    std::fputs("someone's file", f);
    std::fclose(f);
  }
  CliResult r = run_kiln("plans export " + bundle + " --store " + store_);
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.output().find("bundle " + bundle + " already exists (pass --force to write over it)"), std::string::npos)
      << r.output();
  EXPECT_EQ(test::file_text(bundle), "someone's file");

  r = run_kiln("plans export " + bundle + " --force --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("exported 4 plans"), std::string::npos) << r.output();
  r = run_kiln("plans import " + bundle + " --store " + dir_.file("fresh.db"));
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("imported 4"), std::string::npos) << r.output();
  // Nothing but the bundle, the stores and their companions: no temporary file left beside the bundle.
  for (const auto& e : std::filesystem::directory_iterator(dir_.path()))
    EXPECT_EQ(e.path().filename().string().find("kiln-tmp"), std::string::npos) << e.path();
}

TEST_F(PlansCli, ExportNeverWritesOverTheStoreItReads) {
  std::filesystem::create_directories(dir_.file("sub"));
  ASSERT_EQ(::symlink(store_.c_str(), dir_.file("link.db").c_str()), 0);
  ASSERT_EQ(::link(store_.c_str(), dir_.file("hard.db").c_str()), 0);
  const std::vector<std::string> targets = {
      store_,          dir_.file("sub/../plans.db"), dir_.file("link.db"), dir_.file("hard.db"), store_ + "-wal",
      store_ + "-shm", store_ + "-journal"};
  for (const std::string& target : targets)
    for (const char* force : {"", " --force"}) {
      CliResult r = run_kiln("plans export " + target + force + " --store " + store_);
      EXPECT_EQ(r.code, kExitBadInput) << target << force << ": " << r.output();
      EXPECT_NE(r.output().find("it is " + store_), std::string::npos) << r.output();
      EXPECT_NE(r.output().find("the plan store this export reads"), std::string::npos) << r.output();
      EXPECT_NE(r.output().find("never written over, --force or not"), std::string::npos) << r.output();
    }
  // Reached through the symlink as --store, the store is still recognised by identity.
  CliResult r = run_kiln("plans export " + store_ + " --force --store " + dir_.file("link.db"));
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_FALSE(std::filesystem::exists(store_ + "-journal"));
  r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("4 ok, 0 corrupt"), std::string::npos) << r.output();
}

TEST_F(PlansCli, ExportToAFolderIsBadInput) {
  CliResult r = run_kiln("plans export " + dir_.path() + " --force --store " + store_);
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.output().find("is a folder, not a file"), std::string::npos) << r.output();
}

// Issue 10 case 5: damaged schemas and bundles exited 10 ("a bug"), newer versions 6 (a stale plan), a folder
// given as a bundle 3 (environment).
TEST_F(PlansCli, DamagedStoreSchemaIsCorruption) {
  std::string dropped = dir_.file("dropped.db");
  std::filesystem::copy_file(store_, dropped);
  store_test::raw_sql(dropped, "ALTER TABLE plans DROP COLUMN engine_id");
  for (const std::string& args :
       {std::string("plans ls"), std::string("plans verify"), "plans export " + dir_.file("d.kilnbundle")}) {
    CliResult r = run_kiln(args + " --store " + dropped);
    EXPECT_EQ(r.code, kExitCorruption) << args << ": " << r.output();
    EXPECT_NE(r.output().find("plan store " + dropped + ": table 'plans' lacks column 'engine_id' (damaged schema)"),
              std::string::npos)
        << r.output();
  }

  std::string view = dir_.file("view.db");
  std::filesystem::copy_file(store_, view);
  store_test::raw_sql(view, "ALTER TABLE plans RENAME TO old_plans; CREATE VIEW plans AS SELECT * FROM old_plans");
  CliResult r = run_kiln("plans ls --store " + view);
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  EXPECT_NE(r.output().find("'plans' is a view, not a table (damaged schema)"), std::string::npos) << r.output();

  std::string gone = dir_.file("gone.db");
  std::filesystem::copy_file(store_, gone);
  store_test::raw_sql(gone, "DROP TABLE plans");
  r = run_kiln("plans ls --store " + gone);
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  EXPECT_NE(r.output().find("no 'plans' table (damaged schema)"), std::string::npos) << r.output();
}

TEST_F(PlansCli, NewerStoreSchemaExits7) {
  store_test::raw_sql(store_, "UPDATE meta SET value='3' WHERE key='schema_version'");
  CliResult r = run_kiln("plans ls --store " + store_);
  EXPECT_EQ(r.code, kExitNewerVersion) << r.output();
  EXPECT_EQ(kExitNewerVersion, 7);
  EXPECT_NE(
      r.output().find("kiln: NewerVersion: plan store " + store_ +
                      ": written with store schema version 3, newer than this Kiln understands (2): upgrade Kiln"),
      std::string::npos)
      << r.output();
}

TEST_F(PlansCli, DamagedNewerOrFolderBundles) {
  std::string bundle = dir_.file("plans.kilnbundle");
  CliResult r = run_kiln("plans export " + bundle + " --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();

  std::string no_plans = dir_.file("no_plans.kilnbundle");
  std::filesystem::copy_file(bundle, no_plans);
  store_test::raw_sql(no_plans, "DROP TABLE plans");
  r = run_kiln("plans import " + no_plans + " --store " + dir_.file("a.db"));
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  EXPECT_NE(r.output().find("bundle " + no_plans + ": no 'plans' table (damaged schema)"), std::string::npos)
      << r.output();

  std::string dropped = dir_.file("dropped.kilnbundle");
  std::filesystem::copy_file(bundle, dropped);
  store_test::raw_sql(dropped, "ALTER TABLE plans DROP COLUMN checksum");
  r = run_kiln("plans import " + dropped + " --store " + dir_.file("b.db"));
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  EXPECT_NE(r.output().find("table 'plans' lacks column 'checksum' (damaged schema)"), std::string::npos) << r.output();

  std::string newer = dir_.file("newer.kilnbundle");
  std::filesystem::copy_file(bundle, newer);
  store_test::raw_sql(newer, "UPDATE bundle_manifest SET json = json_set(json, '$.bundle_version', 9)");
  r = run_kiln("plans import " + newer + " --store " + dir_.file("c.db"));
  EXPECT_EQ(r.code, kExitNewerVersion) << r.output();
  EXPECT_NE(r.output().find("has bundle version 9, newer than this Kiln understands (1): it was made by a newer Kiln; "
                            "upgrade Kiln to import it"),
            std::string::npos)
      << r.output();

  std::filesystem::create_directories(dir_.file("folder.kilnbundle"));
  r = run_kiln("plans import " + dir_.file("folder.kilnbundle") + " --store " + dir_.file("d.db"));
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.output().find("is a folder, not a bundle file"), std::string::npos) << r.output();
}

TEST_F(PlansCli, GcClearsQuarantine) {
  store_test::flip_blob_byte(store_, make_record(0).structure_sig, 1);
  CliResult r = run_kiln("plans gc --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("1 corrupt plan"), std::string::npos) << r.output();
  EXPECT_NE(r.output().find("cleared 1 quarantined"), std::string::npos) << r.output();
  r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
}

// Regression (hostile pass, item 1): `plans import FIFO` waited for a writer forever, and `import /dev/zero`
// exited 4 (corruption). Both are bad input (exit 2), refused as every other reader of a named file refuses
// them, and the store is left as it was.
TEST_F(PlansCli, ImportRefusesAFifoAndADevice) {
  const std::string fifo = dir_.file("bundle.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  test::CliOptions quick;
  quick.timeout_s = 20;
  CliResult r = run_kiln("plans import " + fifo + " --store " + store_, quick);
  EXPECT_FALSE(r.timed_out) << "import waited on the FIFO";
  EXPECT_EQ(r.code, kExitBadInput) << r.how_it_ended() << ": " << r.output();
  EXPECT_NE(r.err.find("bundle '" + fifo + "' is not a regular file (a pipe, socket or device)"), std::string::npos)
      << r.err;
  r = run_kiln("plans import /dev/zero --store " + store_, quick);
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.err.find("bundle '/dev/zero' is not a regular file"), std::string::npos) << r.err;
  EXPECT_NE(run_kiln("plans ls --store " + store_).out.find("4 plans in"), std::string::npos);
}

// Regression (hostile pass, item 2): on a store file this user cannot write, `plans rm --all`, `import` and
// `compile` exited 6 with SQLite's "attempt to write a readonly database", and `plans gc` printed that it
// removed a plan, exiting 0, having removed nothing. Each is now bad input (exit 2) naming the store file and
// that it is read-only; nothing is removed, and reading the store still works.
TEST_F(PlansCli, ReadOnlyStoreFileIsRefusedNamingItForEveryWrite) {
  std::string bundle = dir_.file("b.kilnbundle");
  ASSERT_EQ(run_kiln("plans export " + bundle + " --store " + store_).code, kExitOk);
  store_test::flip_blob_byte(store_, make_record(2).structure_sig, 3);     // something for gc to remove
  std::filesystem::permissions(dir_.path(), std::filesystem::perms::all);  // the folder stays writable
  std::filesystem::permissions(bundle, std::filesystem::perms::owner_read | std::filesystem::perms::others_read |
                                           std::filesystem::perms::group_read);
  std::filesystem::permissions(store_, std::filesystem::perms::owner_read | std::filesystem::perms::others_read |
                                           std::filesystem::perms::group_read);
  const std::string root = KILN_SOURCE_DIR;
  for (const std::string& cmd :
       {std::string("plans rm --all"), std::string("plans gc"), "plans import " + bundle,
        "compile " + root + "/examples/conv_bias_relu.json --target " + root + "/profiles/h200.json"}) {
    bool skipped = false;
    CliResult r = test::run_kiln_unprivileged(cmd + " --store " + store_, &skipped);
    if (skipped) GTEST_SKIP() << "running as root without setpriv: a read-only file is writable to root";
    EXPECT_EQ(r.code, kExitBadInput) << cmd << ": " << r.output();
    EXPECT_NE(r.err.find("plan store " + store_ +
                         " cannot be written here (the file, or the folder it is in, is "
                         "read-only to this user)"),
              std::string::npos)
        << cmd << ": " << r.err;
    EXPECT_EQ(r.output().find("readonly database"), std::string::npos) << cmd << ": " << r.output();
    EXPECT_EQ(r.out.find("removed"), std::string::npos) << cmd << ": " << r.out;
  }
  bool skipped = false;
  CliResult ls = test::run_kiln_unprivileged("plans ls --store " + store_, &skipped);
  EXPECT_EQ(ls.code, kExitOk) << ls.output();
  EXPECT_NE(ls.out.find("4 plans in"), std::string::npos) << ls.out;
}

// Regression (hostile pass, item 7): `plans ls` listed a record whose plan bytes fail their checksum as
// current, and one whose fingerprint JSON cannot be read as stale ("recorded 0.0.0"), where `plans verify`
// calls both corrupt. ls now says corrupt too, with verify's reason, and judges no fingerprint of theirs.
TEST_F(PlansCli, LsReportsCorruptRecordsAsVerifyDoes) {
  store_test::flip_blob_byte(store_, make_record(2).structure_sig, 3);
  ASSERT_EQ(store_test::raw_sql(store_, "UPDATE plans SET fingerprint_json='{not json' WHERE structure_sig='" +
                                            make_record(1).structure_sig + "'"),
            1);
  CliResult v = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(v.code, kExitCorruption) << v.output();
  EXPECT_NE(v.output().find("2 of 4 plan records"), std::string::npos) << v.output();

  CliResult r = run_kiln("plans ls --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.out.find("corrupt sig2_0123456"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checksum mismatch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("corrupt sig1_0123456"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("recorded 0.0.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("4 plans in " + store_ + ", 2 stale, 2 corrupt"), std::string::npos) << r.out;
  nlohmann::json j = nlohmann::json::parse(run_kiln("plans ls --json --store " + store_).out, nullptr, false);
  ASSERT_TRUE(j.is_array()) << j;
  int corrupt = 0;
  for (const auto& rec : j) corrupt += rec["status"] == "corrupt" && rec.contains("problem") ? 1 : 0;
  EXPECT_EQ(corrupt, 2) << j.dump(1);
}

// Regression (hostile pass, item 9): a store that is a symbolic link to itself was "no plan store" (exit 0),
// and a store in a folder this user may not enter was NotFound. Both say the system's reason with the path,
// exit 2.
TEST_F(PlansCli, UnreachableStoreSaysWhy) {
  const std::string loop = dir_.file("loop.db");
  ASSERT_EQ(::symlink(loop.c_str(), loop.c_str()), 0);
  for (const std::string cmd : {"plans ls", "plans verify", "plans rm --all", "plans queue", "plans queue --clear"}) {
    CliResult r = run_kiln(cmd + " --store " + loop);
    EXPECT_EQ(r.code, kExitBadInput) << cmd << ": " << r.output();
    EXPECT_NE(r.err.find("plan store '" + loop + "' cannot be reached: Too many levels of symbolic links"),
              std::string::npos)
        << cmd << ": " << r.err;
    EXPECT_EQ(r.out.find("no plan store"), std::string::npos) << cmd << ": " << r.out;
  }
  const std::string closed = dir_.file("closed");
  std::filesystem::create_directories(closed);
  std::filesystem::permissions(dir_.path(), std::filesystem::perms::all);
  std::filesystem::permissions(closed, std::filesystem::perms::none);
  bool skipped = false;
  CliResult r = test::run_kiln_unprivileged("plans ls --store " + closed + "/plans.db", &skipped);
  std::filesystem::permissions(closed, std::filesystem::perms::owner_all);
  if (skipped) GTEST_SKIP() << "running as root without setpriv";
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.err.find("plan store '" + closed + "/plans.db' cannot be reached: Permission denied"), std::string::npos)
      << r.err;
}

// Regression (hostile pass, item 12): `plans export --fingerprint zz` wrote an empty bundle where `plans ls
// --fingerprint zz` refuses the value. export refuses it the same way, writing nothing.
TEST_F(PlansCli, ExportRefusesAFingerprintLsRefuses) {
  const std::string bundle = dir_.file("zz.kilnbundle");
  CliResult ls = run_kiln("plans ls --fingerprint zz --store " + store_);
  CliResult ex = run_kiln("plans export " + bundle + " --fingerprint zz --store " + store_);
  EXPECT_EQ(ls.code, kExitBadInput) << ls.output();
  EXPECT_EQ(ex.code, kExitBadInput) << ex.output();
  EXPECT_NE(ex.err.find("--fingerprint takes an environment key (32 hex digits)"), std::string::npos) << ex.err;
  EXPECT_EQ(ex.err, ls.err);
  EXPECT_FALSE(std::filesystem::exists(bundle));
}

// Regression (hostile pass, item 5): `plans ls > /dev/full` exited 0. A failed write to standard output fails
// the command (exit 3), with or without a store.
TEST_F(PlansCli, LsToAFullDeviceFails) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  for (const std::string& store : {store_, dir_.file("absent.db")}) {
    CliResult r = run_kiln("plans ls --store " + store + " > /dev/full");
    EXPECT_EQ(r.code, kExitEnvironment) << store << ": " << r.output();
    EXPECT_NE(r.err.find("writing standard output failed: No space left on device"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace kiln
