// The re-tune queue and graph specs on real SQLite files: upsert, counts, reasons, listing and removal; a
// store written before the tables existed; read-only stores; bundles carrying graph specs.
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::open_store;
using store_test::make_record;
using store_test::raw_sql;
using store_test::TempDir;

const char* kSpec =
    R"({"name":"g","tensors":{"x":{"dims":[2,4]}},"nodes":[{"name":"r","op":"relu","inputs":["x"],"outputs":["y"]}],"outputs":["y"]})";

RetuneRequest request(int i, const std::string& reason, int64_t at = 0, const EnvFingerprint& fp = h200()) {
  RetuneRequest r;
  r.structure_sig = "sig" + std::to_string(i) + "_0123456789abcdef0123456789abcdef";
  r.shape_key = "batch=" + std::to_string(8 * (i + 1));
  r.fingerprint = fp;
  r.graph_name = "graph" + std::to_string(i);
  r.spec_json = kSpec;
  r.reason = reason;
  r.requested_at = at;
  return r;
}

EnvFingerprint newer_cudnn() {
  EnvFingerprint f = h200();
  f.cudnn_version = 92000;
  return f;
}

class GraphSpecsContract : public store_test::StoreContract {};
class RetuneQueueContract : public store_test::StoreContract {};

TEST_P(RetuneQueueContract, EnqueueIsAnUpsertThatCountsAndMergesReasons) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  StatusOr<RetuneQueueEntry> a = store->enqueue_retune(request(0, "store miss", 1000));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->request_count, 1);
  EXPECT_EQ(a->first_seen, 1000);
  EXPECT_EQ(a->last_seen, 1000);
  EXPECT_EQ(a->fingerprint_key, fingerprint_key(h200()));
  EXPECT_EQ(a->reasons, std::vector<std::string>{"store miss"});
  EXPECT_FALSE(a->requested_by.empty());

  RetuneRequest again = request(0, "store stale: cudnn_version: recorded 9.19.0, current 9.20.0 (must match)", 1500);
  again.graph_name = "renamed";
  ASSERT_TRUE(store->enqueue_retune(again).is_ok());
  StatusOr<RetuneQueueEntry> c = store->enqueue_retune(request(0, "store miss", 1200));  // a late, older request
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->request_count, 3);
  EXPECT_EQ(c->first_seen, 1000);
  EXPECT_EQ(c->last_seen, 1500);
  ASSERT_EQ(c->reasons.size(), 2u);  // distinct, in the order first seen
  EXPECT_EQ(c->reasons[0], "store miss");
  EXPECT_EQ(c->reasons[1], "store stale: cudnn_version: recorded 9.19.0, current 9.20.0 (must match)");
  EXPECT_EQ(c->graph_name, "graph0");  // the latest request's

  // What list() reads back from the file is what enqueue returned.
  store.reset();
  store = open_store(dir.file("plans.db"));
  StatusOr<std::vector<RetuneQueueEntry>> q = store->list_retune_queue();
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  ASSERT_EQ(q->size(), 1u);
  const RetuneQueueEntry& e = (*q)[0];
  EXPECT_EQ(e.structure_sig, request(0, "").structure_sig);
  EXPECT_EQ(e.shape_key, "batch=8");
  EXPECT_EQ(e.request_count, 3);
  EXPECT_EQ(e.reasons, c->reasons);
  EXPECT_EQ(e.spec_json, kSpec);
  EXPECT_EQ(e.fingerprint.gpu_name, "NVIDIA H200");
  EXPECT_EQ(e.fingerprint.cudnn_version, 91900);
  EXPECT_TRUE(e.problem.empty()) << e.problem;
}

// A request may stand for many (a hot shape's served calls, merged across hosts): the count adds up, a count
// below 1 counts as one request, and the sum saturates rather than wrapping negative.
TEST_P(RetuneQueueContract, RequestsCarryCountsThatAddUpAcrossHosts) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  RetuneRequest host_a = request(0, "hot shape: served 120 times", 1000);
  host_a.count = 120;
  RetuneRequest host_b = request(0, "hot shape: served 80 times", 1100);
  host_b.count = 80;
  ASSERT_TRUE(store->enqueue_retune(host_a).is_ok());
  StatusOr<RetuneQueueEntry> e = store->enqueue_retune(host_b);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->request_count, 200);
  RetuneRequest zero = request(0, "store miss", 1200);
  zero.count = 0;
  e = store->enqueue_retune(zero);
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->request_count, 201);
  RetuneRequest huge = request(0, "store miss", 1300);
  huge.count = std::numeric_limits<int64_t>::max();
  e = store->enqueue_retune(huge);
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->request_count, std::numeric_limits<int64_t>::max());
  StatusOr<std::vector<RetuneQueueEntry>> q = store->list_retune_queue();
  ASSERT_TRUE(q.is_ok());
  ASSERT_EQ(q->size(), 1u);
  EXPECT_EQ((*q)[0].request_count, std::numeric_limits<int64_t>::max());
}

TEST_P(RetuneQueueContract, OneRowPerEnvironmentListedOldestFirstAndRemovable) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->enqueue_retune(request(1, "store miss", 3000)).is_ok());
  ASSERT_TRUE(store->enqueue_retune(request(0, "store miss", 2000)).is_ok());
  ASSERT_TRUE(store->enqueue_retune(request(0, "store miss", 2500, newer_cudnn())).is_ok());
  StatusOr<std::vector<RetuneQueueEntry>> all = store->list_retune_queue();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].first_seen, 2000);
  EXPECT_EQ((*all)[1].first_seen, 2500);
  EXPECT_EQ((*all)[1].fingerprint.cudnn_version, 92000);
  EXPECT_EQ((*all)[2].first_seen, 3000);

  StatusOr<std::vector<RetuneQueueEntry>> newer = store->list_retune_queue(fingerprint_key(newer_cudnn()));
  ASSERT_TRUE(newer.is_ok());
  ASSERT_EQ(newer->size(), 1u);
  EXPECT_EQ((*newer)[0].request_count, 1);

  RetuneRequest r0 = request(0, "");
  StatusOr<bool> removed = store->remove_from_retune_queue(r0.structure_sig, r0.shape_key, fingerprint_key(h200()));
  ASSERT_TRUE(removed.is_ok());
  EXPECT_TRUE(*removed);
  removed = store->remove_from_retune_queue(r0.structure_sig, r0.shape_key, fingerprint_key(h200()));
  ASSERT_TRUE(removed.is_ok());
  EXPECT_FALSE(*removed);
  EXPECT_EQ(store->list_retune_queue()->size(), 2u);
  // Removing from the queue never touches plans.
  ASSERT_TRUE(store->put(make_record(0)).is_ok());
  ASSERT_TRUE(store
                  ->remove_from_retune_queue(make_record(0).structure_sig, make_record(0).shape_key,
                                             make_record(0).fingerprint_key())
                  .is_ok());
  EXPECT_EQ(store->list()->size(), 1u);
}

TEST_P(RetuneQueueContract, BadRequestsAreRefusedByName) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  RetuneRequest r = request(0, "store miss");
  r.structure_sig.clear();
  Status s = store->enqueue_retune(r).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("empty structure signature"), std::string::npos) << s.message();
  r = request(0, "store miss");
  r.spec_json.clear();
  s = store->enqueue_retune(r).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("no graph spec"), std::string::npos) << s.message();
  EXPECT_TRUE(store->list_retune_queue()->empty());
}

TEST_P(RetuneQueueContract, ReasonsAreBoundedAndClipped) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  for (size_t i = 0; i < kRetuneReasonsKept + 3; ++i)
    ASSERT_TRUE(store->enqueue_retune(request(0, "reason " + std::to_string(i))).is_ok());
  StatusOr<RetuneQueueEntry> e = store->enqueue_retune(request(0, std::string(2000, 'r')));
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->request_count, static_cast<int64_t>(kRetuneReasonsKept + 4));
  ASSERT_EQ(e->reasons.size(), kRetuneReasonsKept);
  EXPECT_EQ(e->reasons.front(), "reason 4");  // the oldest were dropped
  EXPECT_EQ(e->reasons.back().size(), kRetuneReasonMaxChars);
  EXPECT_EQ(e->reasons.back().substr(kRetuneReasonMaxChars - 3), "...");
  StatusOr<RetuneQueueEntry> empty_reason = store->enqueue_retune(request(1, ""));
  ASSERT_TRUE(empty_reason.is_ok());
  EXPECT_EQ(empty_reason->reasons, std::vector<std::string>{"requested"});
}

// How many tables of these names the file has.
int count_tables(const std::string& path, const std::string& names_sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  std::string sql = "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN (" + names_sql + ")";
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK);
  int n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int(st, 0) : -1;
  sqlite3_finalize(st);
  sqlite3_close(db);
  return n;
}

// A store file written before the queue and graph specs existed (same schema version 1, no such tables).
void make_old_store(const std::string& path) {
  {
    auto store = open_store(path);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->put(make_record(0)).is_ok());
  }
  raw_sql(path, "DROP TABLE retune_queue; DROP TABLE graph_specs");
  ASSERT_EQ(count_tables(path, "'retune_queue', 'graph_specs'"), 0);
}

TEST(RetuneQueue, OldStoreReadOnlyListsNothingAndNeverQueues) {
  TempDir dir;
  std::string path = dir.file("old.db");
  make_old_store(path);
  auto ro = open_store(path, /*read_only=*/true);
  ASSERT_TRUE(ro);
  StatusOr<std::vector<RetuneQueueEntry>> q = ro->list_retune_queue();
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  EXPECT_TRUE(q->empty());
  StatusOr<std::optional<GraphSpecEntry>> spec = ro->get_graph_spec("sig0", "");
  ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
  EXPECT_FALSE(spec->has_value());
  Status s = ro->enqueue_retune(request(0, "store miss")).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("read-only"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("not queued"), std::string::npos) << s.message();
  ro.reset();
  // The read-only open did not add the tables either.
  EXPECT_EQ(count_tables(path, "'retune_queue', 'graph_specs'"), 0);
}

TEST(RetuneQueue, OldStoreGetsTheTablesOnAWritableOpen) {
  TempDir dir;
  std::string path = dir.file("old.db");
  make_old_store(path);
  auto store = open_store(path);
  ASSERT_TRUE(store);
  EXPECT_EQ(count_tables(path, "'retune_queue', 'graph_specs'"), 2);
  StatusOr<RetuneQueueEntry> e = store->enqueue_retune(request(0, "store miss"));
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->request_count, 1);
  ASSERT_TRUE(store->put_graph_spec("sig0", "", "g", kSpec).is_ok());
  // The plan written before is untouched and the schema version did not change.
  StatusOr<LookupResult> hit = store->get(make_record(0).structure_sig, make_record(0).shape_key, h200());
  ASSERT_TRUE(hit.is_ok());
  EXPECT_EQ(hit->outcome, LookupOutcome::kHit);
  StatusOr<VerifyReport> v = store->verify();
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v->integrity, "ok");
  EXPECT_EQ(v->ok, 1);
  const std::string sv = std::to_string(kStoreSchemaVersion);
  EXPECT_EQ(raw_sql(path, "UPDATE meta SET value='" + sv + "' WHERE key='schema_version' AND value='" + sv + "'"), 1);
}

TEST_P(RetuneQueueContract, ReadOnlyStoreNeverQueues) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  { ASSERT_TRUE(open_store(path)); }
  auto ro = open_store(path, /*read_only=*/true);
  ASSERT_TRUE(ro);
  EXPECT_TRUE(ro->read_only());
  EXPECT_EQ(ro->enqueue_retune(request(0, "store miss")).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ro->remove_from_retune_queue("a", "b", "c").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ro->put_graph_spec("sig0", "", "g", kSpec).status().code(), StatusCode::kFailedPrecondition);
  ro.reset();
  auto rw = open_store(path);
  EXPECT_TRUE(rw->list_retune_queue()->empty());
}

TEST_P(GraphSpecsContract, PutGetListAndReplace) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  StatusOr<GraphSpecEntry> put = store->put_graph_spec("sigA", "batch=2", "first", kSpec);
  ASSERT_TRUE(put.is_ok()) << put.status().to_string();
  EXPECT_EQ(put->checksum, compute_graph_spec_checksum(*put));
  EXPECT_GT(put->created_at, 0);
  ASSERT_TRUE(store->put_graph_spec("sigA", "batch=2", "second", kSpec).is_ok());
  ASSERT_TRUE(store->put_graph_spec("sigB", "", "static", kSpec).is_ok());
  StatusOr<std::optional<GraphSpecEntry>> got = store->get_graph_spec("sigA", "batch=2");
  ASSERT_TRUE(got.is_ok() && got->has_value());
  EXPECT_EQ((*got)->graph_name, "second");
  EXPECT_EQ((*got)->spec_json, kSpec);
  EXPECT_FALSE(store->get_graph_spec("sigA", "batch=4")->has_value());
  StatusOr<std::vector<GraphSpecEntry>> all = store->list_graph_specs();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[1].shape_key, "");
  EXPECT_EQ(store->put_graph_spec("", "", "g", kSpec).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store->put_graph_spec("sigC", "", "g", "").status().code(), StatusCode::kInvalidArgument);
}

TEST_P(GraphSpecsContract, ADamagedSpecIsDroppedNotServed) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto store = open_store(path);
  ASSERT_TRUE(store);
  ASSERT_TRUE(store->put_graph_spec("sigA", "", "g", kSpec).is_ok());
  ASSERT_TRUE(store->put_graph_spec("sigB", "", "g", kSpec).is_ok());
  EXPECT_EQ(
      raw_sql(path, "UPDATE graph_specs SET spec_json = replace(spec_json, 'relu', 'tanh') WHERE structure_sig='sigA'"),
      1);
  EXPECT_EQ(store->list_graph_specs()->size(), 1u);  // skipped
  StatusOr<std::optional<GraphSpecEntry>> got = store->get_graph_spec("sigA", "");
  ASSERT_TRUE(got.is_ok());
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(raw_sql(path, "DELETE FROM graph_specs WHERE structure_sig='sigA'"), 0);  // get() dropped it
  EXPECT_TRUE(store->get_graph_spec("sigB", "")->has_value());
}

TEST_P(GraphSpecsContract, GcDropsSpecsNothingRefersTo) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  PlanRecord r = make_record(0);
  ASSERT_TRUE(store->put(r).is_ok());
  ASSERT_TRUE(store->put_graph_spec(r.structure_sig, r.shape_key, "planned", kSpec).is_ok());
  RetuneRequest q = request(5, "store miss");
  ASSERT_TRUE(store->enqueue_retune(q).is_ok());
  ASSERT_TRUE(store->put_graph_spec(q.structure_sig, q.shape_key, "queued", kSpec).is_ok());
  ASSERT_TRUE(store->put_graph_spec("orphan", "", "orphan", kSpec).is_ok());
  StatusOr<GcReport> gc = store->gc(GcOptions{});
  ASSERT_TRUE(gc.is_ok()) << gc.status().to_string();
  EXPECT_EQ(gc->graph_specs_removed, 1);
  EXPECT_TRUE(store->get_graph_spec(r.structure_sig, r.shape_key)->has_value());
  EXPECT_TRUE(store->get_graph_spec(q.structure_sig, q.shape_key)->has_value());
  EXPECT_FALSE(store->get_graph_spec("orphan", "")->has_value());
  EXPECT_EQ(store->list_retune_queue()->size(), 1u);  // gc leaves the queue alone
}

TEST_P(GraphSpecsContract, BundlesCarryTheSpecsOfTheirRecords) {
  TempDir dir;
  auto src = open_store(dir.file("src.db"));
  ASSERT_TRUE(src);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(src->put(make_record(i)).is_ok());
  ASSERT_TRUE(src->put_graph_spec(make_record(0).structure_sig, make_record(0).shape_key, "g0", kSpec).is_ok());
  ASSERT_TRUE(src->put_graph_spec(make_record(1).structure_sig, make_record(1).shape_key, "g1", kSpec).is_ok());
  ASSERT_TRUE(src->put_graph_spec("unrelated", "", "u", kSpec).is_ok());
  std::string bundle = dir.file("b.kilnbundle");
  StatusOr<ExportReport> ex = src->export_bundle(bundle);
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  EXPECT_EQ(ex->records, 3);
  EXPECT_EQ(ex->graph_specs, 2);

  auto dst = open_store(dir.file("dst.db"));
  ASSERT_TRUE(dst);
  StatusOr<ImportReport> im = dst->import_bundle(bundle);
  ASSERT_TRUE(im.is_ok()) << im.status().to_string();
  EXPECT_EQ(im->imported, 3);
  EXPECT_EQ(im->graph_specs, 2);
  StatusOr<std::optional<GraphSpecEntry>> g0 =
      dst->get_graph_spec(make_record(0).structure_sig, make_record(0).shape_key);
  ASSERT_TRUE(g0.is_ok() && g0->has_value());
  EXPECT_EQ((*g0)->graph_name, "g0");
  EXPECT_EQ((*g0)->checksum, (*src->get_graph_spec(make_record(0).structure_sig, make_record(0).shape_key))->checksum);
  EXPECT_FALSE(dst->get_graph_spec("unrelated", "")->has_value());
  im = dst->import_bundle(bundle);
  ASSERT_TRUE(im.is_ok());
  EXPECT_EQ(im->graph_specs, 0);  // already there

  // A damaged spec in a bundle is refused like a damaged record: nothing imported.
  EXPECT_EQ(raw_sql(bundle, "UPDATE graph_specs SET graph_name='tampered' WHERE graph_name='g1'"), 1);
  auto third = open_store(dir.file("third.db"));
  Status s = third->import_bundle(bundle).status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);
  EXPECT_NE(s.message().find("graph spec " + make_record(1).structure_sig.substr(0, 12)), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.message();
  EXPECT_TRUE(third->list()->empty());
  // A bundle written before graph specs existed (no table, no manifest entry) still imports.
  EXPECT_EQ(raw_sql(bundle, "DROP TABLE graph_specs"), 0);
  s = third->import_bundle(bundle).status();
  EXPECT_EQ(s.code(), StatusCode::kCorruption);  // the manifest lists specs that are gone
  EXPECT_NE(s.message().find("listed in the manifest but missing"), std::string::npos) << s.message();
}

TEST_P(GraphSpecsContract, BundleFromBeforeGraphSpecsImports) {
  TempDir dir;
  auto src = open_store(dir.file("src.db"));
  ASSERT_TRUE(src);
  ASSERT_TRUE(src->put(make_record(0)).is_ok());
  std::string bundle = dir.file("b.kilnbundle");
  ASSERT_TRUE(src->export_bundle(bundle).is_ok());
  // Make it look like an older bundle: no graph_specs table, no manifest key.
  raw_sql(bundle, "DROP TABLE graph_specs");
  raw_sql(bundle, "UPDATE bundle_manifest SET json = json_remove(json, '$.graph_specs')");
  auto dst = open_store(dir.file("dst.db"));
  StatusOr<ImportReport> im = dst->import_bundle(bundle);
  ASSERT_TRUE(im.is_ok()) << im.status().to_string();
  EXPECT_EQ(im->imported, 1);
  EXPECT_EQ(im->graph_specs, 0);
}

KILN_STORE_CONTRACT_SUITE(GraphSpecsContract);
KILN_STORE_CONTRACT_SUITE(RetuneQueueContract);

}  // namespace
}  // namespace kiln
