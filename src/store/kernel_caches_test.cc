// The store's kernel caches (kiln/store/kernel_cache_record.h): kept per structure and environment, read back
// only in exactly that environment, and a damaged row is a logged miss, dropped.
#include <gtest/gtest.h>

#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::open_store;
using store_test::raw_sql;
using store_test::TempDir;

KernelCacheRecord cache(const std::string& sig = "0123456789abcdef0123456789abcdef",
                        const EnvFingerprint& fp = h200()) {
  KernelCacheRecord r;
  r.structure_sig = sig;
  r.fingerprint = fp;
  r.graph_name = "mlp";
  r.cache_json = R"({"kernels":[{"id":1,"cubin":"AAECAwQ="}]})";
  return r;
}

class KernelCachesContract : public store_test::StoreContract {};

TEST_P(KernelCachesContract, RoundTripKeepsTheTextAndListsItWithoutIt) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  auto put = s->put_kernel_cache(cache());
  ASSERT_TRUE(put.is_ok()) << put.status().to_string();
  EXPECT_GT(put->created_at, 0);
  EXPECT_EQ(put->checksum, compute_kernel_cache_checksum(*put));
  auto got = s->get_kernel_cache(cache().structure_sig, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->cache_json, cache().cache_json);
  EXPECT_EQ((*got)->graph_name, "mlp");
  auto list = s->list_kernel_caches();
  ASSERT_TRUE(list.is_ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].bytes, static_cast<int64_t>(cache().cache_json.size()));
  EXPECT_EQ((*list)[0].fingerprint_key, fingerprint_key(h200()));
  // A later put for the same key replaces it.
  KernelCacheRecord more = cache();
  more.cache_json += " ";
  ASSERT_TRUE(s->put_kernel_cache(more).is_ok());
  EXPECT_EQ((*s->get_kernel_cache(more.structure_sig, h200()))->cache_json, more.cache_json);
  EXPECT_EQ(s->list_kernel_caches()->size(), 1u);
  EXPECT_EQ(*s->remove_kernel_cache(more.structure_sig, fingerprint_key(h200())), 1);
  EXPECT_FALSE(s->get_kernel_cache(more.structure_sig, h200())->has_value());
}

TEST_P(KernelCachesContract, OnlyTheExactEnvironmentReadsItBack) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  ASSERT_TRUE(s->put_kernel_cache(cache()).is_ok());
  // Another cuDNN, another driver, another GPU: machine code for them is not this one's.
  EnvFingerprint cudnn = h200(), driver = h200(), gpu = h200();
  cudnn.cudnn_version = 92000;
  driver.driver_version = 13010;
  gpu.gpu_name = "NVIDIA H100 80GB HBM3";
  for (const EnvFingerprint& other : {cudnn, driver, gpu}) {
    auto got = s->get_kernel_cache(cache().structure_sig, other);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_FALSE(got->has_value()) << fingerprint_to_json(other);
  }
  // Nor another structure.
  EXPECT_FALSE(s->get_kernel_cache("fedcba9876543210fedcba9876543210", h200())->has_value());
  // Each environment keeps its own.
  ASSERT_TRUE(s->put_kernel_cache(cache(cache().structure_sig, cudnn)).is_ok());
  EXPECT_EQ(s->list_kernel_caches()->size(), 2u);
  EXPECT_TRUE(s->get_kernel_cache(cache().structure_sig, cudnn)->has_value());
}

TEST_P(KernelCachesContract, BadRecordsAreRefusedBeforeTheyAreWritten) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  KernelCacheRecord r = cache();
  r.structure_sig.clear();
  EXPECT_EQ(s->put_kernel_cache(r).status().code(), StatusCode::kInvalidArgument);
  r = cache();
  r.cache_json.clear();
  auto empty = s->put_kernel_cache(r);
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("no cache text"), std::string::npos) << empty.status().message();
  r.cache_json.assign(static_cast<size_t>(kMaxKernelCacheBytes) + 1, 'x');
  auto big = s->put_kernel_cache(r);
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("over the"), std::string::npos) << big.status().message();
  EXPECT_TRUE(s->list_kernel_caches()->empty());
  auto ro = open_store(dir.file("p.db"), /*read_only=*/true);
  EXPECT_EQ(ro->put_kernel_cache(cache()).status().code(), StatusCode::kFailedPrecondition);
}

TEST_P(KernelCachesContract, ADamagedRowIsAMissDroppedUnlessReadOnly) {
  TempDir dir;
  const std::string path = dir.file("p.db");
  {
    auto s = open_store(path);
    ASSERT_TRUE(s->put_kernel_cache(cache()).is_ok());
  }
  // One changed byte of machine code: the checksum fails.
  ASSERT_EQ(raw_sql(path, sql_for("UPDATE kernel_caches SET cache_json = CAST(replace(CAST(cache_json AS TEXT), "
                                  "'AAEC', 'AAED') AS BLOB)",
                                  "UPDATE kernel_caches SET cache_json = convert_to(replace(convert_from(cache_json, "
                                  "'UTF8'), 'AAEC', 'AAED'), 'UTF8')")),
            1);
  {
    auto ro = open_store(path, /*read_only=*/true);
    auto got = ro->get_kernel_cache(cache().structure_sig, h200());
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_FALSE(got->has_value());
    EXPECT_EQ(ro->counters().corrupt, 1);
    EXPECT_EQ(ro->list_kernel_caches()->size(), 1u);  // left in place
  }
  auto s = open_store(path);
  auto got = s->get_kernel_cache(cache().structure_sig, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(s->counters().corrupt, 1);
  EXPECT_TRUE(s->list_kernel_caches()->empty());  // dropped
  // A row filed under this environment's key whose fingerprint is another's (a forged key) is corrupt too.
  KernelCacheRecord other = cache();
  other.fingerprint.cudnn_version = 92000;
  ASSERT_TRUE(s->put_kernel_cache(other).is_ok());
  ASSERT_EQ(raw_sql(path, "UPDATE kernel_caches SET fingerprint_key = '" + fingerprint_key(h200()) + "'"), 1);
  EXPECT_FALSE(s->get_kernel_cache(cache().structure_sig, h200())->has_value());
  EXPECT_EQ(s->counters().corrupt, 2);
  // A text column where the blob belongs: the wrong type (a PostgreSQL column holds only its own type).
  if (!file_case()) return;
  ASSERT_TRUE(s->put_kernel_cache(cache()).is_ok());
  ASSERT_EQ(raw_sql(path, "UPDATE kernel_caches SET cache_json = CAST(cache_json AS TEXT)"), 1);
  EXPECT_FALSE(s->get_kernel_cache(cache().structure_sig, h200())->has_value());
  EXPECT_EQ(s->counters().corrupt, 3);
}

TEST_P(KernelCachesContract, AStoreWrittenBeforeTheTableExistedHasNone) {
  TempDir dir;
  const std::string path = dir.file("p.db");
  { auto s = open_store(path); }
  raw_sql(path, "DROP TABLE kernel_caches");
  auto ro = open_store(path, /*read_only=*/true);
  auto got = ro->get_kernel_cache(cache().structure_sig, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_FALSE(got->has_value());
  EXPECT_TRUE(ro->list_kernel_caches()->empty());
  auto s = open_store(path);  // a writable open makes it again
  EXPECT_TRUE(s->put_kernel_cache(cache()).is_ok());
}

KILN_STORE_CONTRACT_SUITE(KernelCachesContract);

}  // namespace
}  // namespace kiln
