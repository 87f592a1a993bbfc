// `kiln plans ls`, `verify` and `gc` on a store's kernel caches, as a user rolling out a driver or cuDNN
// upgrade runs them: the built binary on a store holding a cache of this environment, one of another
// environment and a damaged one (docs/store.md "Kernel caches").
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/core/exit_codes.h"
#include "kiln/lower/lower.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::make_record;
using store_test::TempDir;
using test::CliResult;
using test::run_kiln;

const std::string kProfile = std::string(KILN_SOURCE_DIR) + "/profiles/h200.json";
const std::string kSig = make_record(0).structure_sig;         // has plan records
const std::string kDamagedSig = make_record(9).structure_sig;  // has none

class PlansCliKernelCaches : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(KILN_BINARY)) GTEST_SKIP() << "kiln binary not built: " << KILN_BINARY;
    auto profile = load_device_profile(kProfile);
    ASSERT_TRUE(profile.is_ok()) << profile.status().to_string();
    // What `--target profiles/h200.json` judges against: the profile's GPU with this build's libraries.
    current_ = fingerprint_for_profile(*profile);
    // The same GPU and libraries but cuDNN Frontend 1.23 (this build has a later one): what a store holds
    // after an upgrade.
    foreign_ = current_;
    foreign_.cudnn_frontend_version = 12300;
    ASSERT_NE(foreign_.cudnn_frontend_version, current_.cudnn_frontend_version);
    store_ = dir_.file("plans.db");
    auto s = store_test::open_store(store_);
    ASSERT_TRUE(s);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->put(make_record(i)).is_ok());
    ASSERT_TRUE(s->put_kernel_cache(cache(kSig, current_)).is_ok());
    ASSERT_TRUE(s->put_kernel_cache(cache(kSig, foreign_)).is_ok());
    ASSERT_TRUE(s->put_kernel_cache(cache(kDamagedSig, current_)).is_ok());
    // The damaged one: its text cut short in place (as a torn write or a bad disk would leave it).
    ASSERT_EQ(store_test::raw_sql(store_, "UPDATE kernel_caches SET cache_json = CAST(substr(CAST(cache_json AS "
                                          "TEXT), 1, 12) AS BLOB) WHERE structure_sig = '" +
                                              kDamagedSig + "'"),
              1);
  }
  static KernelCacheRecord cache(const std::string& sig, const EnvFingerprint& fp) {
    KernelCacheRecord r;
    r.structure_sig = sig;
    r.fingerprint = fp;
    r.graph_name = "mlp";
    r.cache_json = R"({"kernels":[{"id":1,"cubin":"AAECAwQ="}]})";
    return r;
  }
  std::string name(const std::string& sig, const EnvFingerprint& fp) const {
    return sig.substr(0, 12) + "/" + fingerprint_key(fp).substr(0, 12);
  }
  std::vector<KernelCacheInfo> kept() {
    auto s = store_test::open_store(store_, /*read_only=*/true);
    auto l = s->list_kernel_caches();
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    return l.is_ok() ? *l : std::vector<KernelCacheInfo>();
  }
  TempDir dir_;
  std::string store_;
  EnvFingerprint current_, foreign_;
};

TEST_F(PlansCliKernelCaches, LsListsThemUnderThePlansAndMarksTheForeignOneStale) {
  for (const std::string& target : {std::string(), " --target " + kProfile}) {
    CliResult r = run_kiln("plans ls --store " + store_ + target);
    ASSERT_EQ(r.code, kExitOk) << r.output();
    const std::string& out = r.out;
    // The plans' part as before, then the caches' section.
    const size_t plans_footer = out.find("3 plans in " + store_);
    const size_t section = out.find("KERNEL CACHE");
    ASSERT_NE(plans_footer, std::string::npos) << out;
    ASSERT_NE(section, std::string::npos) << out;
    EXPECT_LT(plans_footer, section) << out;
    EXPECT_NE(out.find("3 kernel caches in " + store_ + ", 1 stale, 0 damaged"), std::string::npos) << out;
    EXPECT_NE(
        out.find("kernel cache " + name(kSig, foreign_) + " is stale: cudnn_frontend_version: kept 1.23.0, current "),
        std::string::npos)
        << out;
    EXPECT_EQ(out.find("\nstale kernel"), std::string::npos) << out;  // a plan's stale line is "stale <plan>: ..."
    // One row each, with its graph, environment key, GPU and cuDNN, size and status.
    size_t rows = 0;
    for (size_t at = out.find("\nsig", section); at != std::string::npos; at = out.find("\nsig", at + 1)) {
      const std::string line = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
      EXPECT_NE(line.find(" mlp "), std::string::npos) << line;
      EXPECT_NE(line.find("NVIDIA H200"), std::string::npos) << line;
      // The damaged one's text was cut to 12 bytes.
      const bool damaged = line.rfind(kDamagedSig.substr(0, 12), 0) == 0;
      const size_t bytes = damaged ? 12 : cache(kSig, current_).cache_json.size();
      EXPECT_NE(line.find(std::to_string(bytes) + " B"), std::string::npos) << line;
      const bool foreign = line.find(fingerprint_key(foreign_).substr(0, 12)) != std::string::npos;
      EXPECT_NE(line.find(foreign ? "STALE" : "current"), std::string::npos) << line;
      EXPECT_EQ(line.find("1.23.0") != std::string::npos, foreign) << line;
      ++rows;
    }
    EXPECT_EQ(rows, 3u) << out;
  }
  // A filter only plans have leaves the section out; --structure narrows it.
  CliResult tuned = run_kiln("plans ls --tuned --store " + store_);
  ASSERT_EQ(tuned.code, kExitOk) << tuned.output();
  EXPECT_EQ(tuned.out.find("KERNEL CACHE"), std::string::npos) << tuned.out;
  CliResult one = run_kiln("plans ls --structure sig9 --store " + store_);
  ASSERT_EQ(one.code, kExitOk) << one.output();
  EXPECT_NE(one.out.find("1 kernel cache in "), std::string::npos) << one.out;
}

TEST_F(PlansCliKernelCaches, LsJsonKeepsThePlansArrayAndKernelCachesHaveTheirOwn) {
  CliResult plans = run_kiln("plans ls --json --store " + store_);
  ASSERT_EQ(plans.code, kExitOk) << plans.output();
  nlohmann::json p = nlohmann::json::parse(plans.out, nullptr, false);
  ASSERT_TRUE(p.is_array()) << plans.out;
  EXPECT_EQ(p.size(), 3u);
  for (const auto& rec : p) EXPECT_TRUE(rec.contains("shape_key")) << rec.dump();

  CliResult r = run_kiln("plans ls --kernel-caches --json --target " + kProfile + " --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_array()) << r.out;
  ASSERT_EQ(j.size(), 3u);
  int current = 0, stale = 0;
  for (const auto& c : j) {
    EXPECT_EQ(c["graph_name"], "mlp");
    EXPECT_GT(c["created_at"].get<int64_t>(), 0);
    EXPECT_GT(c["bytes"].get<int64_t>(), 0);
    EXPECT_EQ(c["fingerprint"]["gpu_name"], "NVIDIA H200");
    if (c["fingerprint_key"] == fingerprint_key(foreign_)) {
      EXPECT_EQ(c["structure_sig"], kSig);
      EXPECT_EQ(c["status"], "stale");
      ASSERT_FALSE(c["stale_reasons"].empty());
      EXPECT_EQ(c["stale_reasons"][0].get<std::string>().rfind("cudnn_frontend_version: kept 1.23.0", 0), 0u)
          << c.dump();
      ++stale;
    } else {
      EXPECT_EQ(c["fingerprint_key"], fingerprint_key(current_));
      EXPECT_EQ(c["status"], "current");
      EXPECT_TRUE(c["stale_reasons"].empty());
      ++current;
    }
  }
  EXPECT_EQ(current, 2);
  EXPECT_EQ(stale, 1);

  CliResult text = run_kiln("plans ls --kernel-caches --store " + store_);
  ASSERT_EQ(text.code, kExitOk) << text.output();
  EXPECT_EQ(text.out.find("STRUCTURE"), std::string::npos) << text.out;  // no plans table
  EXPECT_NE(text.out.find("3 kernel caches in"), std::string::npos) << text.out;

  CliResult shape = run_kiln("plans ls --kernel-caches --shape b=8 --store " + store_);
  EXPECT_EQ(shape.code, kExitBadInput) << shape.output();
  EXPECT_NE(shape.output().find("a kernel cache has neither"), std::string::npos) << shape.output();
}

TEST_F(PlansCliKernelCaches, VerifyFlagsTheDamagedCacheWithExit4) {
  CliResult r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  EXPECT_NE(r.output().find("CORRUPT  kernel cache " + name(kDamagedSig, current_) + ": checksum mismatch"),
            std::string::npos)
      << r.output();
  EXPECT_NE(r.output().find("checked 3 plans: 3 ok, 0 corrupt; 3 kernel caches: 2 ok, 1 corrupt"), std::string::npos)
      << r.output();
  EXPECT_NE(r.output().find("1 of 3 kernel caches in " + store_ + " are corrupt"), std::string::npos) << r.output();
  // The sound ones, this environment's and the other's, are not flagged.
  EXPECT_EQ(r.output().find("CORRUPT  kernel cache " + name(kSig, current_)), std::string::npos) << r.output();
  EXPECT_EQ(r.output().find("CORRUPT  kernel cache " + name(kSig, foreign_)), std::string::npos) << r.output();

  CliResult j = run_kiln("plans verify --json --store " + store_);
  EXPECT_EQ(j.code, kExitCorruption) << j.output();
  nlohmann::json doc = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << j.out;
  EXPECT_EQ(doc["checked"], 3);
  EXPECT_EQ(doc["kernel_caches"]["checked"], 3);
  EXPECT_EQ(doc["kernel_caches"]["ok"], 2);
  ASSERT_EQ(doc["kernel_caches"]["problems"].size(), 1u);
  EXPECT_EQ(doc["kernel_caches"]["problems"][0]["structure_sig"], kDamagedSig);
  EXPECT_EQ(doc["kernel_caches"]["problems"][0]["fingerprint_key"], fingerprint_key(current_));

  // A corrupt plan too: both are counted, exit 4 still.
  store_test::flip_blob_byte(store_, make_record(1).structure_sig, 2);
  r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  EXPECT_NE(r.output().find("1 of 3 plan records in " + store_ + " are corrupt, and 1 of 3 kernel caches"),
            std::string::npos)
      << r.output();

  // --quarantine drops the damaged cache (and quarantines the plan); verify then passes, the sound caches kept.
  r = run_kiln("plans verify --quarantine --store " + store_);
  EXPECT_EQ(r.code, kExitCorruption) << r.output();
  const size_t dropped = r.output().find("CORRUPT  kernel cache " + name(kDamagedSig, current_));
  ASSERT_NE(dropped, std::string::npos) << r.output();
  EXPECT_NE(r.output().substr(dropped, r.output().find('\n', dropped) - dropped).find("(dropped)"), std::string::npos)
      << r.output();
  r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.output().find("2 ok, 0 corrupt; 2 kernel caches: 2 ok, 0 corrupt"), std::string::npos) << r.output();
  EXPECT_EQ(kept().size(), 2u);
}

TEST_F(PlansCliKernelCaches, GcDropsTheForeignCacheAndItsDryRunDropsNothing) {
  const std::string stale = "plans gc --stale --target " + kProfile + " --store " + store_;
  CliResult dry = run_kiln(stale + " --dry-run");
  ASSERT_EQ(dry.code, kExitOk) << dry.output();
  EXPECT_NE(dry.out.find("would remove kernel cache " + name(kSig, foreign_) +
                         " (mlp): kept for another environment: cudnn_frontend_version: kept 1.23.0"),
            std::string::npos)
      << dry.out;
  EXPECT_NE(dry.out.find("would remove kernel cache " + name(kDamagedSig, current_) + ": corrupt: checksum mismatch"),
            std::string::npos)
      << dry.out;
  EXPECT_NE(dry.out.find("would remove 2 kernel caches: 1 kept for another environment, 0 old, 1 corrupt"),
            std::string::npos)
      << dry.out;
  EXPECT_NE(dry.out.find("dry run: nothing was removed"), std::string::npos) << dry.out;
  EXPECT_EQ(dry.out.find("\nremoved"), std::string::npos) << dry.out;
  EXPECT_EQ(kept().size(), 3u);
  {
    auto s = store_test::open_store(store_, /*read_only=*/true);
    EXPECT_EQ(s->list()->size(), 3u);  // the plans (of frontend 1.23: stale for this build) are all there too
  }
  CliResult plans_after_dry = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(plans_after_dry.code, kExitCorruption) << plans_after_dry.output();  // the damaged cache is still there

  CliResult r = run_kiln(stale);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.out.find("removed kernel cache " + name(kSig, foreign_) + " (mlp): kept for another environment"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("removed 2 kernel caches: 1 kept for another environment, 0 old, 1 corrupt"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("dry run"), std::string::npos) << r.out;
  std::vector<KernelCacheInfo> left = kept();
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].structure_sig, kSig);
  EXPECT_EQ(left[0].fingerprint_key, fingerprint_key(current_));
  r = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(r.code, kExitOk) << r.output();
}

// The commands that only read leave the file as it was, byte for byte: an older store (no kernel_caches table,
// a rollback journal) is not given the table nor switched to WAL by ls, ls --kernel-caches, verify, export or
// gc --dry-run (which opened the store to write, and rolled its deletions back: it did both).
// A command that writes says so on a bad --older-than (review: NaN was taken and ignored).
TEST_F(PlansCliKernelCaches, ReadingCommandsLeaveAnOlderStoreUntouched) {
  store_test::raw_sql(store_, "DROP TABLE kernel_caches");
  store_test::raw_sql(store_, "PRAGMA journal_mode=DELETE");
  auto bytes = [&] {
    std::ifstream f(store_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string before = bytes();
  ASSERT_FALSE(before.empty());
  for (const std::string& cmd :
       {std::string("plans ls"), std::string("plans ls --kernel-caches --json"), std::string("plans verify"),
        std::string("plans export ") + dir_.file("b.kpb"), std::string("plans gc --dry-run"),
        "plans gc --dry-run --stale --older-than 0 --target " + kProfile}) {
    CliResult r = run_kiln(cmd + " --store " + store_);
    EXPECT_NE(r.code, kExitInternal) << cmd << ": " << r.output();
    EXPECT_EQ(bytes(), before) << cmd << " changed the store";
    EXPECT_FALSE(std::filesystem::exists(store_ + "-wal")) << cmd;
    if (cmd.rfind("plans gc", 0) == 0) {
      EXPECT_EQ(r.code, kExitOk) << cmd << ": " << r.output();
      EXPECT_NE(r.out.find("dry run: nothing was removed"), std::string::npos) << cmd << ": " << r.out;
    }
  }
  // What the dry run said is what a real run then removes (the plans: 1.23's, stale for this build).
  CliResult dry = run_kiln("plans gc --dry-run --stale --target " + kProfile + " --store " + store_);
  ASSERT_EQ(dry.code, kExitOk) << dry.output();
  EXPECT_NE(dry.out.find("would remove 3 stale, 0 old, 0 corrupt plans; would clear 0 quarantined; would drop 0 "
                         "unused graph specs"),
            std::string::npos)
      << dry.out;
  CliResult real = run_kiln("plans gc --stale --target " + kProfile + " --store " + store_);
  ASSERT_EQ(real.code, kExitOk) << real.output();
  EXPECT_NE(real.out.find("removed 3 stale, 0 old, 0 corrupt plans; cleared 0 quarantined; dropped 0 unused graph "
                          "specs"),
            std::string::npos)
      << real.out;
  for (const char* bad : {"nan", "NaN", "1e300", "0x10", "abc", "-1", "5d"}) {
    CliResult r = run_kiln(std::string("plans gc --dry-run --older-than ") + bad + " --store " + store_);
    EXPECT_EQ(r.code, kExitBadInput) << bad << ": " << r.output();
    EXPECT_NE(r.output().find("--older-than"), std::string::npos) << r.output();
  }
}

// A kernel_caches table rebuilt WITHOUT ROWID, or with a column named rowid that takes the rowid's place, is a
// damaged schema (exit 4, named) for every command, not an internal error (exit 10) or six healthy caches
// reported corrupt and "removed" while nothing was (review).
TEST_F(PlansCliKernelCaches, ARowidlessOrRowidShadowingTableIsADamagedSchema) {
  const std::string cols =
      "structure_sig TEXT NOT NULL, fingerprint_key TEXT NOT NULL, fingerprint_json TEXT NOT NULL, graph_name TEXT "
      "NOT NULL, cache_json BLOB NOT NULL, created_at INTEGER NOT NULL, checksum TEXT NOT NULL";
  for (const std::string& table :
       {"CREATE TABLE kernel_caches(" + cols + ", PRIMARY KEY(structure_sig, fingerprint_key)) WITHOUT ROWID",
        "CREATE TABLE kernel_caches(rowid TEXT, " + cols + ")"}) {
    TempDir d;
    const std::string db = d.file("s.db");
    {
      auto s = store_test::open_store(db);
      ASSERT_TRUE(s);
      ASSERT_TRUE(s->put(make_record(0)).is_ok());
    }
    store_test::raw_sql(db, "DROP TABLE kernel_caches");
    store_test::raw_sql(db, table);
    for (const char* cmd : {"plans verify", "plans gc --dry-run", "plans ls --kernel-caches"}) {
      CliResult r = run_kiln(std::string(cmd) + " --store " + db);
      EXPECT_EQ(r.code, kExitCorruption) << table << " / " << cmd << ": " << r.output();
      EXPECT_NE(r.output().find("table 'kernel_caches'"), std::string::npos) << r.output();
      EXPECT_NE(r.output().find("(damaged schema)"), std::string::npos) << r.output();
    }
  }
}

// A store row's text reaches the terminal escaped (review: a graph name with an escape sequence and a newline
// printed as-is made a fake table row): ls, verify and gc print no control byte of it.
TEST_F(PlansCliKernelCaches, RowTextIsPrintedEscaped) {
  {
    auto s = store_test::open_store(store_);
    ASSERT_TRUE(s);
    KernelCacheRecord r = cache(make_record(5).structure_sig, foreign_);
    r.graph_name = "\x1b[31mRED\x1b[0m\nFAKE LINE";
    ASSERT_TRUE(s->put_kernel_cache(r).is_ok());
  }
  for (const std::string& cmd :
       {"plans ls --store " + store_, "plans ls --kernel-caches --store " + store_, "plans verify --store " + store_,
        "plans gc --dry-run --stale --target " + kProfile + " --store " + store_}) {
    CliResult r = run_kiln(cmd);
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << cmd << ": " << r.out;
    EXPECT_EQ(r.out.find("\nFAKE LINE"), std::string::npos) << cmd << ": " << r.out;
  }
  CliResult ls = run_kiln("plans ls --kernel-caches --store " + store_);
  EXPECT_NE(ls.out.find("\\x1b[31mRED\\x1b[0m\\x0aFAKE LINE"), std::string::npos) << ls.out;
}

// A kept cache whose created_at is NULL was listed as 20790 days old (the age of 0, the epoch), and a row whose
// key columns are NULL was named "/" in messages. An unknown age is "unknown" (null in JSON), and a row
// without its key is named by its rowid as well.
TEST_F(PlansCliKernelCaches, AnUnknownAgeIsUnknownAndAKeylessRowIsNamedByItsRowid) {
  // The table as a store holds it whose columns are not NOT NULL (the schema check asks for the columns): the
  // sound cache of this environment with a NULL created_at, and a copy of the foreign one with NULL keys at
  // rowid 77.
  const std::string cols =
      "structure_sig TEXT, fingerprint_key TEXT, fingerprint_json TEXT, graph_name TEXT, cache_json BLOB, "
      "created_at INTEGER, checksum TEXT";
  store_test::raw_sql(store_, "CREATE TABLE kc(" + cols +
                                  ", PRIMARY KEY(structure_sig, fingerprint_key)); INSERT INTO kc SELECT "
                                  "structure_sig, fingerprint_key, fingerprint_json, graph_name, cache_json, "
                                  "created_at, checksum FROM kernel_caches; DROP TABLE kernel_caches; ALTER TABLE "
                                  "kc RENAME TO kernel_caches");
  ASSERT_EQ(store_test::raw_sql(store_, "UPDATE kernel_caches SET created_at = NULL WHERE structure_sig = '" + kSig +
                                            "' AND fingerprint_key = '" + fingerprint_key(current_) + "'"),
            1);
  ASSERT_EQ(store_test::raw_sql(store_, "INSERT INTO kernel_caches(rowid, structure_sig, fingerprint_key, "
                                        "fingerprint_json, graph_name, cache_json, created_at, checksum) SELECT 77, "
                                        "NULL, NULL, fingerprint_json, graph_name, cache_json, created_at, checksum "
                                        "FROM kernel_caches WHERE fingerprint_key = '" +
                                            fingerprint_key(foreign_) + "'"),
            1);
  const std::string keyless = "kernel cache ?/? (rowid 77)";
  const std::string epoch_age = std::to_string(static_cast<int64_t>(std::time(nullptr)) / 86400) + "d";

  CliResult ls = run_kiln("plans ls --kernel-caches --store " + store_);
  ASSERT_EQ(ls.code, kExitOk) << ls.output();
  EXPECT_EQ(ls.out.find(epoch_age), std::string::npos) << ls.out;
  bool found = false;
  for (size_t at = ls.out.find("\n" + kSig.substr(0, 12)); at != std::string::npos;
       at = ls.out.find("\n" + kSig.substr(0, 12), at + 1)) {
    const std::string line = ls.out.substr(at + 1, ls.out.find('\n', at + 1) - at - 1);
    if (line.find(fingerprint_key(current_).substr(0, 12)) == std::string::npos) continue;
    found = true;
    EXPECT_NE(line.find(" unknown "), std::string::npos) << line;
  }
  EXPECT_TRUE(found) << ls.out;
  EXPECT_NE(ls.out.find(keyless + " is damaged: fingerprint_key does not match its fingerprint"), std::string::npos)
      << ls.out;

  CliResult js = run_kiln("plans ls --kernel-caches --json --store " + store_);
  ASSERT_EQ(js.code, kExitOk) << js.output();
  nlohmann::json doc = nlohmann::json::parse(js.out, nullptr, false);
  ASSERT_TRUE(doc.is_array()) << js.out;
  ASSERT_EQ(doc.size(), 4u) << js.out;
  for (const auto& e : doc) {
    const bool unknown = e["structure_sig"] == kSig && e["fingerprint_key"] == fingerprint_key(current_);
    EXPECT_EQ(e["created_at"].is_null(), unknown) << e.dump();
    EXPECT_TRUE(unknown || e["created_at"].is_number_integer()) << e.dump();
  }

  CliResult verify = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(verify.code, kExitCorruption) << verify.output();
  EXPECT_NE(verify.out.find("CORRUPT  " + keyless + ": column structure_sig has the wrong type"), std::string::npos)
      << verify.out;
  EXPECT_NE(verify.out.find("CORRUPT  kernel cache " + name(kSig, current_) + ": column created_at has the wrong type"),
            std::string::npos)
      << verify.out;

  CliResult dry = run_kiln("plans gc --dry-run --store " + store_);
  ASSERT_EQ(dry.code, kExitOk) << dry.output();
  EXPECT_NE(dry.out.find("would remove " + keyless + ": corrupt: column structure_sig has the wrong type"),
            std::string::npos)
      << dry.out;
  CliResult gc = run_kiln("plans gc --store " + store_);
  ASSERT_EQ(gc.code, kExitOk) << gc.output();
  EXPECT_NE(gc.out.find("removed " + keyless + ": corrupt: column structure_sig has the wrong type"), std::string::npos)
      << gc.out;
  verify = run_kiln("plans verify --store " + store_);
  EXPECT_EQ(verify.code, kExitOk) << verify.output();
  EXPECT_EQ(kept().size(), 1u);  // the foreign cache (gc without --stale keeps it)
}

TEST_F(PlansCliKernelCaches, GcWithoutStaleKeepsTheForeignCacheAndDropsTheDamagedOne) {
  CliResult r = run_kiln("plans gc --store " + store_);
  ASSERT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.out.find("removed 1 kernel cache: 0 kept for another environment, 0 old, 1 corrupt"), std::string::npos)
      << r.out;
  std::vector<KernelCacheInfo> left = kept();
  ASSERT_EQ(left.size(), 2u);
  for (const KernelCacheInfo& c : left) EXPECT_EQ(c.structure_sig, kSig);
  // --stale without a GPU or a profile judges nothing and removes nothing (exit 3), as for plans.
  r = run_kiln("plans gc --stale --store " + store_);
  EXPECT_EQ(r.code, kExitEnvironment) << r.output();
  EXPECT_EQ(kept().size(), 2u);
}

}  // namespace
}  // namespace kiln
