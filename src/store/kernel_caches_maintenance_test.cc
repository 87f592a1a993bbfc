// The store's maintenance of its kernel caches (docs/store.md "Kernel caches"): list shows each with its
// environment, verify checks every row without throwing, gc drops those of other environments, damaged or
// old ones, and its dry run drops nothing.
#include <gtest/gtest.h>

#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::open_store;
using store_test::raw_sql;
using store_test::TempDir;

const std::string kSigA = "aaaa56789abcdef0123456789abcdef0";
const std::string kSigB = "bbbb56789abcdef0123456789abcdef0";

KernelCacheRecord cache(const std::string& sig, const EnvFingerprint& fp = h200(), int64_t created_at = 0) {
  KernelCacheRecord r;
  r.structure_sig = sig;
  r.fingerprint = fp;
  r.graph_name = "mlp";
  r.cache_json = R"({"kernels":[{"id":1,"cubin":"AAECAwQ="}]})";
  r.created_at = created_at;
  return r;
}

EnvFingerprint new_cudnn() {
  EnvFingerprint f = h200();
  f.cudnn_version = 92000;
  return f;
}

bool has_cache(PlanStore& s, const std::string& sig, const EnvFingerprint& fp) {
  auto list = s.list_kernel_caches();
  EXPECT_TRUE(list.is_ok()) << list.status().to_string();
  for (const KernelCacheInfo& c : *list)
    if (c.structure_sig == sig && c.fingerprint_key == fingerprint_key(fp)) return true;
  return false;
}

class KernelCacheMaintenanceContract : public store_test::StoreContract {};

TEST(KernelCacheMismatches, NameEachFieldThatDiffersAtTheJudgedLevel) {
  EnvFingerprint other = h200();
  other.driver_version = 13010;
  other.cudnn_version = 92000;
  std::vector<std::string> all = kernel_cache_mismatches(other, h200());
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], "driver_version: kept 13.1, current 13.0 (must match exactly)");
  EXPECT_EQ(all[1], "cudnn_version: kept 9.20.0, current 9.19.0 (must match exactly)");
  EXPECT_FALSE(kernel_cache_environment_matches(other, h200()));
  // A device profile records no driver; without a GPU only the libraries are known.
  EXPECT_EQ(kernel_cache_mismatches(other, h200(), KernelCacheJudged::kWithoutDriver).size(), 1u);
  EnvFingerprint gpu = h200();
  gpu.gpu_name = "NVIDIA H100 80GB HBM3";
  gpu.driver_version = 13005;  // same text as 13.0: the numbers are shown instead
  EXPECT_EQ(kernel_cache_mismatches(gpu, h200(), KernelCacheJudged::kLibrariesOnly).size(), 0u);
  std::vector<std::string> device = kernel_cache_mismatches(gpu, h200());
  ASSERT_EQ(device.size(), 2u);
  EXPECT_EQ(device[0], "gpu_name: kept NVIDIA H100 80GB HBM3, current NVIDIA H200 (must match exactly)");
  EXPECT_EQ(device[1], "driver_version: kept 13005, current 13000 (must match exactly)");
  // Informational fields (the card, Kiln's own version) are not machine-code criteria.
  EnvFingerprint card = h200();
  card.device_uuid = "GPU-other";
  card.kiln_git_revision = "fedcba";
  EXPECT_TRUE(kernel_cache_mismatches(card, h200()).empty());
  EXPECT_TRUE(kernel_cache_environment_matches(card, h200()));
}

TEST_P(KernelCacheMaintenanceContract, ListShowsEachEnvironmentAndADamagedFingerprint) {
  TempDir dir;
  const std::string path = dir.file("p.db");
  auto s = open_store(path);
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigA)).is_ok());
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigA, new_cudnn())).is_ok());
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigB)).is_ok());
  ASSERT_EQ(raw_sql(path, "UPDATE kernel_caches SET fingerprint_json = '{\"gpu_name\": 7' WHERE structure_sig = '" +
                              kSigB + "'"),
            1);
  auto list = s->list_kernel_caches();
  ASSERT_TRUE(list.is_ok()) << list.status().to_string();
  ASSERT_EQ(list->size(), 3u);
  int with_new_cudnn = 0;
  for (const KernelCacheInfo& c : *list) {
    if (c.structure_sig == kSigB) {
      EXPECT_NE(c.problem.find("fingerprint:"), std::string::npos) << c.problem;
      continue;
    }
    EXPECT_TRUE(c.problem.empty()) << c.problem;
    EXPECT_EQ(c.fingerprint_key, fingerprint_key(c.fingerprint));
    EXPECT_EQ(c.fingerprint.gpu_name, "NVIDIA H200");
    ASSERT_TRUE(c.created_at.has_value());
    EXPECT_GT(*c.created_at, 0);
    EXPECT_EQ(c.bytes, static_cast<int64_t>(cache(kSigA).cache_json.size()));
    with_new_cudnn += c.fingerprint.cudnn_version == 92000 ? 1 : 0;
  }
  EXPECT_EQ(with_new_cudnn, 1);
}

TEST_P(KernelCacheMaintenanceContract, VerifyChecksEveryRowAndReportsTheDamagedOnesByKey) {
  TempDir dir;
  const std::string path = dir.file("p.db");
  auto s = open_store(path);
  ASSERT_TRUE(s->put(make_record(0)).is_ok());
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigA)).is_ok());
  // A cut-off text written whole (its checksum is right): only the JSON check finds it.
  KernelCacheRecord cut = cache(kSigB);
  cut.cache_json = R"({"kernels":[{"id":1,"cub)";
  ASSERT_TRUE(s->put_kernel_cache(cut).is_ok());
  // A row truncated in place: its checksum fails.
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigA, new_cudnn())).is_ok());
  ASSERT_EQ(raw_sql(path, sql_for("UPDATE kernel_caches SET cache_json = CAST(substr(CAST(cache_json AS TEXT), 1, 9) "
                                  "AS BLOB)",
                                  "UPDATE kernel_caches SET cache_json = substring(cache_json from 1 for 9)") +
                              " WHERE fingerprint_key = '" + fingerprint_key(new_cudnn()) + "'"),
            1);
  auto rep = s->verify();
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->checked, 1);
  EXPECT_EQ(rep->ok, 1);
  EXPECT_TRUE(rep->problems.empty());
  EXPECT_EQ(rep->kernel_caches_checked, 3);
  EXPECT_EQ(rep->kernel_caches_ok, 1);
  ASSERT_EQ(rep->kernel_cache_problems.size(), 2u);
  const VerifyProblem& truncated = rep->kernel_cache_problems[0];  // by structure, then key
  EXPECT_EQ(truncated.structure_sig, kSigA);
  EXPECT_EQ(truncated.fingerprint_key, fingerprint_key(new_cudnn()));
  EXPECT_NE(truncated.reason.find("checksum mismatch"), std::string::npos) << truncated.reason;
  const VerifyProblem& not_json = rep->kernel_cache_problems[1];
  EXPECT_EQ(not_json.structure_sig, kSigB);
  EXPECT_EQ(not_json.fingerprint_key, fingerprint_key(h200()));
  EXPECT_NE(not_json.reason.find("cache text is not whole JSON (truncated or damaged)"), std::string::npos)
      << not_json.reason;
  EXPECT_EQ(s->counters().corrupt, 2);
  // Without --quarantine nothing moves; with it the damaged caches go, and the sound one stays.
  EXPECT_EQ(s->list_kernel_caches()->size(), 3u);
  VerifyOptions drop;
  drop.quarantine = true;
  ASSERT_TRUE(s->verify(drop).is_ok());
  auto after = s->verify();
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(after->kernel_caches_checked, 1);
  EXPECT_TRUE(after->kernel_cache_problems.empty());
  EXPECT_TRUE(has_cache(*s, kSigA, h200()));
  EXPECT_TRUE(s->quarantine()->empty());  // caches are dropped, not quarantined: the table holds plans
}

TEST_P(KernelCacheMaintenanceContract, VerifyNeverThrowsOnDamagedColumns) {
  KILN_STORE_FILE_CASE();
  TempDir dir;
  const std::string path = dir.file("p.db");
  auto s = open_store(path);
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigA)).is_ok());
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigB)).is_ok());
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigB, new_cudnn())).is_ok());
  // The wrong type; a fingerprint that is not JSON; a key filed under another environment (forged).
  ASSERT_EQ(raw_sql(path, "UPDATE kernel_caches SET created_at = 'yesterday' WHERE structure_sig = '" + kSigA + "'"),
            1);
  ASSERT_EQ(raw_sql(path, "UPDATE kernel_caches SET fingerprint_json = 'not json' WHERE structure_sig = '" + kSigB +
                              "' AND fingerprint_key = '" + fingerprint_key(h200()) + "'"),
            1);
  ASSERT_EQ(raw_sql(path, "UPDATE kernel_caches SET fingerprint_key = '0123' WHERE fingerprint_key = '" +
                              fingerprint_key(new_cudnn()) + "'"),
            1);
  auto rep = s->verify();
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->kernel_caches_checked, 3);
  EXPECT_EQ(rep->kernel_caches_ok, 0);
  ASSERT_EQ(rep->kernel_cache_problems.size(), 3u);
  std::string reasons;
  for (const VerifyProblem& p : rep->kernel_cache_problems) reasons += p.reason + "\n";
  EXPECT_NE(reasons.find("column created_at has the wrong type"), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("fingerprint: "), std::string::npos) << reasons;
  EXPECT_NE(reasons.find("fingerprint_key 0123 does not match its fingerprint"), std::string::npos) << reasons;
  // A read-only store reports them and leaves them.
  auto ro = open_store(path, /*read_only=*/true);
  auto ro_rep = ro->verify();
  ASSERT_TRUE(ro_rep.is_ok()) << ro_rep.status().to_string();
  EXPECT_EQ(ro_rep->kernel_cache_problems.size(), 3u);
  // gc drops all three (corrupt), whatever their columns hold.
  auto gc = s->gc({});
  ASSERT_TRUE(gc.is_ok()) << gc.status().to_string();
  EXPECT_EQ(gc->kernel_caches_corrupt_removed, 3);
  EXPECT_TRUE(s->list_kernel_caches()->empty());
}

TEST_P(KernelCacheMaintenanceContract, VerifyRefusesAnOversizedRowWithoutReadingIt) {
  TempDir dir;
  const std::string path = dir.file("p.db");
  auto s = open_store(path);
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigA)).is_ok());
  ASSERT_EQ(raw_sql(path, sql_for("UPDATE kernel_caches SET cache_json = zeroblob(" +
                                      std::to_string(kMaxKernelCacheBytes + 1) + ")",
                                  "UPDATE kernel_caches SET cache_json = convert_to(repeat('0', " +
                                      std::to_string(kMaxKernelCacheBytes + 1) + "), 'UTF8')")),
            1);
  auto rep = s->verify();
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  ASSERT_EQ(rep->kernel_cache_problems.size(), 1u);
  EXPECT_EQ(rep->kernel_cache_problems[0].reason, std::to_string(kMaxKernelCacheBytes + 1) +
                                                      " bytes of cache text, over the " +
                                                      std::to_string(kMaxKernelCacheBytes) + " a row may hold");
}

TEST_P(KernelCacheMaintenanceContract, GcDropsOtherEnvironmentsOnlyWhenJudgingAndKeepsCachesWithoutPlans) {
  TempDir dir;
  const std::string path = dir.file("p.db");
  auto s = open_store(path);
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigA)).is_ok());
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigA, new_cudnn())).is_ok());
  EnvFingerprint other_driver = h200();
  other_driver.driver_version = 13010;
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigB, other_driver)).is_ok());
  // No --stale: nothing is judged, nothing goes (no plan record refers to these structures: they stay).
  auto plain = s->gc({});
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  EXPECT_TRUE(plain->kernel_caches_removed.empty());
  EXPECT_EQ(s->list_kernel_caches()->size(), 3u);
  // Judged against a profile of this GPU (no driver known): only the other cuDNN's cache goes.
  GcOptions profile;
  profile.current = h200();
  profile.kernel_cache_judged = KernelCacheJudged::kWithoutDriver;
  auto by_profile = s->gc(profile);
  ASSERT_TRUE(by_profile.is_ok()) << by_profile.status().to_string();
  EXPECT_EQ(by_profile->kernel_caches_stale_removed, 1);
  ASSERT_EQ(by_profile->kernel_caches_removed.size(), 1u);
  EXPECT_EQ(by_profile->kernel_caches_removed[0].structure_sig, kSigA);
  EXPECT_EQ(by_profile->kernel_caches_removed[0].fingerprint_key, fingerprint_key(new_cudnn()));
  EXPECT_EQ(by_profile->kernel_caches_removed[0].graph_name, "mlp");
  EXPECT_EQ(by_profile->kernel_caches_removed[0].why,
            "kept for another environment: cudnn_version: kept 9.20.0, current 9.19.0 (must match exactly)");
  EXPECT_FALSE(has_cache(*s, kSigA, new_cudnn()));
  EXPECT_TRUE(has_cache(*s, kSigB, other_driver));
  // Judged against this GPU: the other driver's goes too.
  GcOptions gpu;
  gpu.current = h200();
  auto by_gpu = s->gc(gpu);
  ASSERT_TRUE(by_gpu.is_ok()) << by_gpu.status().to_string();
  EXPECT_EQ(by_gpu->kernel_caches_stale_removed, 1);
  EXPECT_FALSE(has_cache(*s, kSigB, other_driver));
  EXPECT_TRUE(has_cache(*s, kSigA, h200()));
}

TEST(KernelCacheMaintenance, GcDryRunReportsWhatARealRunRemovesAndRemovesNothing) {
  TempDir dir;
  const std::string path = dir.file("p.db");
  auto s = open_store(path);
  ASSERT_TRUE(s->put(make_record(0)).is_ok());
  ASSERT_TRUE(s->put(make_record(1, new_cudnn())).is_ok());
  ASSERT_TRUE(s->put(make_record(2)).is_ok());
  store_test::flip_blob_byte(path, make_record(2).structure_sig, 1);
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigA, h200(), 1000)).is_ok());       // old
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigA, new_cudnn())).is_ok());        // another environment
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigB)).is_ok());                     // kept
  ASSERT_TRUE(s->put_kernel_cache(cache(kSigB, new_cudnn(), 1000)).is_ok());  // both: counted as stale
  KernelCacheRecord cut = cache("cccc56789abcdef0123456789abcdef0");
  cut.cache_json = "{\"kernels\": [";
  ASSERT_TRUE(s->put_kernel_cache(cut).is_ok());  // corrupt
  GcOptions g;
  g.current = h200();
  g.older_than = 2000;
  g.dry_run = true;
  auto dry = s->gc(g);
  ASSERT_TRUE(dry.is_ok()) << dry.status().to_string();
  EXPECT_TRUE(dry->dry_run);
  EXPECT_EQ(dry->kernel_caches_stale_removed, 2);
  EXPECT_EQ(dry->kernel_caches_old_removed, 1);
  EXPECT_EQ(dry->kernel_caches_corrupt_removed, 1);
  EXPECT_EQ(dry->kernel_caches_removed.size(), 4u);
  EXPECT_EQ(dry->stale_removed, 1);
  EXPECT_EQ(dry->corrupt_removed, 1);
  EXPECT_EQ(dry->quarantine_removed, 1);
  // Nothing moved: every row is where it was, the damaged plan not even quarantined.
  EXPECT_EQ(s->list_kernel_caches()->size(), 5u);
  EXPECT_EQ(s->list()->size(), 3u);
  EXPECT_TRUE(s->quarantine()->empty());
  // The real run removes what the dry run said.
  g.dry_run = false;
  auto real = s->gc(g);
  ASSERT_TRUE(real.is_ok()) << real.status().to_string();
  EXPECT_FALSE(real->dry_run);
  EXPECT_EQ(real->kernel_caches_stale_removed, dry->kernel_caches_stale_removed);
  EXPECT_EQ(real->kernel_caches_old_removed, dry->kernel_caches_old_removed);
  EXPECT_EQ(real->kernel_caches_corrupt_removed, dry->kernel_caches_corrupt_removed);
  EXPECT_EQ(real->stale_removed, dry->stale_removed);
  EXPECT_EQ(real->corrupt_removed, dry->corrupt_removed);
  EXPECT_EQ(real->quarantine_removed, dry->quarantine_removed);
  EXPECT_EQ(real->graph_specs_removed, dry->graph_specs_removed);
  for (size_t i = 0; i < real->kernel_caches_removed.size() && i < dry->kernel_caches_removed.size(); ++i)
    EXPECT_EQ(real->kernel_caches_removed[i].why, dry->kernel_caches_removed[i].why);
  auto left = s->list_kernel_caches();
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ((*left)[0].structure_sig, kSigB);
  EXPECT_EQ((*left)[0].fingerprint_key, fingerprint_key(h200()));
  EXPECT_EQ(s->list()->size(), 1u);
}

KILN_STORE_CONTRACT_SUITE(KernelCacheMaintenanceContract);

}  // namespace
}  // namespace kiln
