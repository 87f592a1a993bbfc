#include "kiln/store/plan_store.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>
#include <utility>

#include "kiln/core/log.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::raw_sql;
using store_test::TempDir;

std::unique_ptr<PlanStore> open_store(const std::string& path, StoreOpenOptions o = {}) {
  StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(path, o);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

// Captures warnings so the tests can check that corruption is logged.
class LogCapture {
 public:
  LogCapture() {
    set_log_sink([this](LogLevel, const std::string& m) { text_ += m + "\n"; });
  }
  ~LogCapture() { set_log_sink(nullptr); }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

class PlanStoreContract : public store_test::StoreContract {};

TEST_P(PlanStoreContract, PutGetRoundTrip) {
  TempDir dir;
  auto store = open_store(dir.file("a/b/plans.db"));  // folders are created
  ASSERT_TRUE(store);
  PlanRecord in = make_record(1);
  StatusOr<PlanRecord> stored = store->put(in);
  ASSERT_TRUE(stored.is_ok()) << stored.status().to_string();
  EXPECT_EQ(stored->checksum, compute_record_checksum(*stored));
  EXPECT_EQ(stored->checksum.size(), 32u);

  StatusOr<LookupResult> got = store->get(in.structure_sig, in.shape_key, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(got->outcome, LookupOutcome::kHit);
  ASSERT_TRUE(got->runnable());
  const PlanRecord& r = *got->record;
  EXPECT_EQ(r.plan_bytes, in.plan_bytes);
  EXPECT_EQ(r.engine_id, in.engine_id);
  EXPECT_EQ(r.knobs, in.knobs);
  EXPECT_EQ(knobs_to_text(r.knobs), "SPLIT_K=1;TILE_SIZE=2");
  EXPECT_EQ(r.stats.median_ms, in.stats.median_ms);
  EXPECT_EQ(r.stats.runner_up_knobs, in.stats.runner_up_knobs);
  EXPECT_EQ(r.numerics.verdict, Disposition::kPassed);
  EXPECT_EQ(r.numerics.nmse, in.numerics.nmse);
  EXPECT_EQ(r.tuned_by, "tester@host");
  EXPECT_EQ(r.created_at, in.created_at);
  EXPECT_EQ(fingerprint_to_json(r.fingerprint), fingerprint_to_json(in.fingerprint));
  EXPECT_EQ(r.checksum, stored->checksum);

  // Another shape is a miss.
  StatusOr<LookupResult> miss = store->get(in.structure_sig, "b=999", h200());
  ASSERT_TRUE(miss.is_ok());
  EXPECT_EQ(miss->outcome, LookupOutcome::kMiss);
  EXPECT_FALSE(miss->record);

  StoreCounters c = store->counters();
  EXPECT_EQ(c.hits, 1);
  EXPECT_EQ(c.misses, 1);
}

// Regression: a graph with no dynamic dimension has an empty shape key (GraphSignature::shape_key); the
// store refused such records, so static examples (matmul_bias_gelu, sdpa_fwd) could not be stored.
// A path that is not a regular file (a FIFO would block the open) is refused, for reading and writing.
TEST_P(PlanStoreContract, APipeIsRefusedNotOpened) {
  KILN_STORE_FILE_CASE();
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (bool ro : {false, true}) {
    StoreOpenOptions o;
    o.read_only = ro;
    auto s = open_impl(fifo, o);
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("is not a regular file"), std::string::npos) << s.status().to_string();
  }
}

TEST_P(PlanStoreContract, StaticGraphWithEmptyShapeKeyRoundTrips) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  ASSERT_TRUE(store);
  PlanRecord in = make_record(7);
  in.shape_key = "";
  StatusOr<PlanRecord> stored = store->put(in);
  ASSERT_TRUE(stored.is_ok()) << stored.status().to_string();
  StatusOr<LookupResult> got = store->get(in.structure_sig, "", h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_EQ(got->outcome, LookupOutcome::kHit);
  EXPECT_EQ(got->record->plan_bytes, in.plan_bytes);
  EXPECT_EQ(got->record->shape_key, "");
  // A dynamic shape of the same structure is another record.
  StatusOr<LookupResult> other = store->get(in.structure_sig, "batch=1", h200());
  ASSERT_TRUE(other.is_ok());
  EXPECT_EQ(other->outcome, LookupOutcome::kMiss);
}

TEST_P(PlanStoreContract, PutUpsertsAndFillsProvenance) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  PlanRecord r = make_record(2);
  r.tuned_by.clear();
  r.created_at = 0;
  ASSERT_TRUE(store->put(r).is_ok());
  r.engine_id = 42;
  StatusOr<PlanRecord> second = store->put(r);
  ASSERT_TRUE(second.is_ok());
  EXPECT_NE(second->tuned_by.find('@'), std::string::npos);
  EXPECT_GT(second->created_at, 1600000000);
  StatusOr<std::vector<PlanSummary>> all = store->list();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].record.engine_id, 42);
  EXPECT_EQ((*all)[0].plan_size, static_cast<int64_t>(r.plan_bytes.size()));
  EXPECT_TRUE((*all)[0].record.plan_bytes.empty());
}

// A tuned record replacing a tuned one of another configuration is a winner change, kept with both sides; the same
// configuration stored again, an untuned record, or another environment's key is not.
TEST_P(PlanStoreContract, PutKeepsEachChangeOfTunedWinner) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  PlanRecord r = make_record(2);
  r.tuned_by = "worker1@a";
  r.created_at = 1700000000;
  ASSERT_TRUE(store->put(r).is_ok());
  ASSERT_TRUE(store->put(r).is_ok());  // the same winner again
  PlanRecord other_env = r;
  other_env.fingerprint.cudnn_version += 100;  // a field the key holds
  other_env.engine_id = 99;
  auto put_other = store->put(other_env);
  ASSERT_TRUE(put_other.is_ok()) << put_other.status().to_string();  // a key of its own: nothing replaced
  PlanRecord untuned = r;
  untuned.tuned = false;
  untuned.engine_id = 55;
  untuned.created_at = 1700000050;
  ASSERT_TRUE(store->put(untuned).is_ok());  // an untuned record replaces the winner: no winner to flip to
  ASSERT_TRUE(store->put(r).is_ok());        // a tuned record over an untuned one: no winner flipped either
  auto none = store->winner_changes();
  ASSERT_TRUE(none.is_ok()) << none.status().to_string();
  EXPECT_TRUE(none->empty()) << none->front().from_config << " -> " << none->front().to_config;

  PlanRecord flip = r;
  flip.engine_id = 42;
  flip.stats.median_ms = 0.1;
  flip.tuned_by = "worker2@b";
  flip.created_at = 1700000100;
  ASSERT_TRUE(store->put(flip).is_ok());
  auto changes = store->winner_changes();
  ASSERT_TRUE(changes.is_ok()) << changes.status().to_string();
  ASSERT_EQ(changes->size(), 1u);
  const WinnerChange& c = changes->front();
  EXPECT_EQ(c.structure_sig, r.structure_sig);
  EXPECT_EQ(c.shape_key, r.shape_key);
  EXPECT_EQ(c.fingerprint_key, r.fingerprint_key());
  EXPECT_EQ(c.from_config, plan_identity(r.engine_id, r.knobs));
  EXPECT_EQ(c.to_config, plan_identity(42, r.knobs));
  EXPECT_DOUBLE_EQ(c.from_median_ms, r.stats.median_ms);
  EXPECT_DOUBLE_EQ(c.to_median_ms, 0.1);
  EXPECT_EQ(c.from_tuned_by, "worker1@a");
  EXPECT_EQ(c.to_tuned_by, "worker2@b");
  EXPECT_EQ(c.changed_at, 1700000100);
  // A read-only opening lists them too.
  store.reset();
  StoreOpenOptions ro;
  ro.read_only = true;
  auto reader = open_store(dir.file("plans.db"), ro);
  ASSERT_NE(reader, nullptr);
  auto again = reader->winner_changes();
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->size(), 1u);
}

// An import that replaces a tuned winner by a newer tuned one of another configuration keeps the change, as put does
// (found by a hostile trial: `kiln plans import` said "replaced 1 older" and `kiln stats --store` said 0 changes).
TEST_P(PlanStoreContract, AnImportThatReplacesAWinnerKeepsTheChange) {
  TempDir dir;
  auto a = open_store(dir.file("a.db"));
  PlanRecord r = make_record(3);
  r.created_at = 1700000000;
  ASSERT_TRUE(a->put(r).is_ok());
  auto b = open_store(dir.file("b.db"));
  PlanRecord newer = r;
  newer.engine_id = 58;
  newer.tuned_by = "hostB";
  newer.created_at = 1700000500;
  ASSERT_TRUE(b->put(newer).is_ok());
  const std::string bundle = dir.file("b.kilnbundle");
  ASSERT_TRUE(b->export_bundle(bundle).is_ok());
  auto im = a->import_bundle(bundle);
  ASSERT_TRUE(im.is_ok()) << im.status().to_string();
  EXPECT_EQ(im->replaced, 1);
  auto changes = a->winner_changes();
  ASSERT_TRUE(changes.is_ok()) << changes.status().to_string();
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ(changes->front().to_config, plan_identity(58, r.knobs));
  EXPECT_EQ(changes->front().to_tuned_by, "hostB");
  auto again = a->import_bundle(bundle);  // unchanged now: no second change
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(a->winner_changes()->size(), 1u);
}

TEST_P(PlanStoreContract, PutRejectsBadRecords) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  PlanRecord r = make_record(3);
  r.structure_sig.clear();
  EXPECT_EQ(store->put(r).status().code(), StatusCode::kInvalidArgument);
  r = make_record(3);
  r.stats.median_ms = std::nan("");
  StatusOr<PlanRecord> nan = store->put(r);
  EXPECT_EQ(nan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nan.status().message().find("median_ms"), std::string::npos);
  r = make_record(3);
  r.knobs["A=B"] = 1;
  EXPECT_EQ(store->put(r).status().code(), StatusCode::kInvalidArgument);
}

// A record written by a schema-1 Kiln binds its plan's tensors by declaration order: it must never run,
// whatever the fingerprint says, and the reason names the schema.
TEST_P(PlanStoreContract, Schema1RecordIsStaleNotRun) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  PlanRecord r = make_record(5);
  {
    auto store = open_store(path);
    StatusOr<PlanRecord> stored = store->put(r);
    ASSERT_TRUE(stored.is_ok()) << stored.status().to_string();
    PlanRecord old = *stored;
    old.kiln_schema_version = 1;
    const std::string sum = compute_record_checksum(old);  // a consistent schema-1 record, not a corrupt one
    EXPECT_EQ(raw_sql(path, "UPDATE plans SET kiln_schema_version=1, checksum='" + sum + "'"), 1);
  }
  auto store = open_store(path);
  StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->outcome, LookupOutcome::kStale);
  EXPECT_FALSE(got->runnable());
  std::string reasons;
  for (const auto& x : got->reasons) reasons += x + "\n";
  EXPECT_NE(reasons.find("kiln_schema_version: recorded 1, runnable from 2"), std::string::npos) << reasons;
  StatusOr<LoadAllResult> all = store->load_all(h200());
  ASSERT_TRUE(all.is_ok());
  EXPECT_TRUE(all->records.empty());
  EXPECT_EQ(all->stale, 1);
}

TEST_P(PlanStoreContract, StaleRecordIsNeverRunnableUnderAnyPolicy) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  PlanRecord r = make_record(4);
  ASSERT_TRUE(store->put(r).is_ok());
  EnvFingerprint cur = h200();
  cur.cudnn_version = 92000;
  for (MismatchPolicy p : {MismatchPolicy::kRetune, MismatchPolicy::kHeuristicsAndQueue, MismatchPolicy::kFail}) {
    EnvPolicy policy;
    policy.on_mismatch = p;
    StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, cur, policy);
    if (p == MismatchPolicy::kFail) {
      ASSERT_FALSE(got.is_ok());
      EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(got.status().message().find("cudnn_version: recorded 9.19.0, current 9.20.0 (must match)"),
                std::string::npos)
          << got.status().message();
      continue;
    }
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_EQ(got->outcome, LookupOutcome::kStale);
    EXPECT_FALSE(got->runnable());
    ASSERT_TRUE(got->record);
    EXPECT_TRUE(got->record->plan_bytes.empty());    // never the bytes of a stale plan
    EXPECT_EQ(got->record->engine_id, r.engine_id);  // but the identity, as a hint
    EXPECT_EQ(got->action, p);
    ASSERT_EQ(got->reasons.size(), 1u);
    EXPECT_EQ(got->reasons[0], "cudnn_version: recorded 9.19.0, current 9.20.0 (must match)");
  }
  StoreCounters c = store->counters();
  EXPECT_EQ(c.stale, 3);
  EXPECT_EQ(c.stale_by_field["cudnn_version"], 3);
  EXPECT_EQ(c.hits, 0);
  // load_all skips it too.
  StatusOr<LoadAllResult> all = store->load_all(cur);
  ASSERT_TRUE(all.is_ok());
  EXPECT_TRUE(all->records.empty());
  EXPECT_EQ(all->stale, 1);
}

TEST_P(PlanStoreContract, EachExactFieldMakesTheRecordStale) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  PlanRecord r = make_record(5);
  ASSERT_TRUE(store->put(r).is_ok());
  struct Case {
    const char* field;
    void (*change)(EnvFingerprint&);
  };
  const Case cases[] = {
      {"gpu_name", [](EnvFingerprint& f) { f.gpu_name = "NVIDIA H100"; }},
      {"sm_version", [](EnvFingerprint& f) { f.sm_version = 89; }},
      {"sm_count", [](EnvFingerprint& f) { f.sm_count = 66; }},
      {"cudnn_version", [](EnvFingerprint& f) { f.cudnn_version = 91801; }},
      {"cudnn_frontend_version", [](EnvFingerprint& f) { f.cudnn_frontend_version = 12200; }},
      {"cuda_runtime_version", [](EnvFingerprint& f) { f.cuda_runtime_version = 12090; }},
      {"driver_version", [](EnvFingerprint& f) { f.driver_version = 14000; }},
  };
  for (const Case& c : cases) {
    EnvFingerprint cur = h200();
    c.change(cur);
    StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, cur);
    ASSERT_TRUE(got.is_ok());
    EXPECT_EQ(got->outcome, LookupOutcome::kStale) << c.field;
    ASSERT_EQ(got->reasons.size(), 1u) << c.field;
    EXPECT_EQ(got->reasons[0].rfind(std::string(c.field) + ": recorded", 0), 0u) << got->reasons[0];
  }
  // A driver minor change, another card of the same kind and another Kiln build still hit.
  EnvFingerprint cur = h200();
  cur.driver_version = 13020;
  cur.driver_release = "580.200.00";
  cur.device_uuid = "GPU-other";
  cur.kiln_git_revision = "fedcba654321";
  StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, cur);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->outcome, LookupOutcome::kHit);
}

TEST_P(PlanStoreContract, PrefersTheExactEnvironmentThenTunedThenNewest) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  PlanRecord exact = make_record(6);
  exact.engine_id = 1;
  ASSERT_TRUE(store->put(exact).is_ok());
  PlanRecord other = make_record(6);
  other.fingerprint.sm_count = 114;  // another key
  other.engine_id = 2;
  other.created_at += 100;
  ASSERT_TRUE(store->put(other).is_ok());
  EnvPolicy relaxed;
  relaxed.set_rule(FingerprintField::kSmCount, FieldRule::kInformational);
  StatusOr<LookupResult> got = store->get(exact.structure_sig, exact.shape_key, h200(), relaxed);
  ASSERT_TRUE(got.is_ok());
  ASSERT_EQ(got->outcome, LookupOutcome::kHit);
  EXPECT_EQ(got->record->engine_id, 1);
  // Under the default policy the other record is invisible for an H200 with 132 SMs.
  EnvFingerprint small = h200();
  small.sm_count = 114;
  got = store->get(exact.structure_sig, exact.shape_key, small);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->record->engine_id, 2);
}

TEST(PlanStore, FlippedBlobByteIsQuarantinedAndAMiss) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto store = open_store(path);
  PlanRecord r = make_record(7);
  ASSERT_TRUE(store->put(r).is_ok());
  ASSERT_TRUE(store->put(make_record(8)).is_ok());
  // Flip the first byte of the blob, keeping its length.
  store_test::flip_blob_byte(path, r.structure_sig, 17);
  LogCapture log;
  StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->outcome, LookupOutcome::kCorrupt);
  EXPECT_FALSE(got->runnable());
  ASSERT_EQ(got->reasons.size(), 1u);
  EXPECT_NE(got->reasons[0].find("checksum mismatch"), std::string::npos) << got->reasons[0];
  EXPECT_NE(log.text().find("quarantined"), std::string::npos) << log.text();
  // Moved: now a plain miss, and listed in quarantine.
  got = store->get(r.structure_sig, r.shape_key, h200());
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->outcome, LookupOutcome::kMiss);
  StatusOr<std::vector<QuarantineEntry>> q = store->quarantine();
  ASSERT_TRUE(q.is_ok());
  ASSERT_EQ(q->size(), 1u);
  EXPECT_EQ((*q)[0].structure_sig, r.structure_sig);
  EXPECT_NE((*q)[0].reason.find("checksum"), std::string::npos);
  StoreCounters c = store->counters();
  EXPECT_EQ(c.corrupt, 1);
  EXPECT_EQ(c.quarantined, 1);
  EXPECT_EQ(c.misses, 2);
  // The other record is untouched.
  StatusOr<VerifyReport> v = store->verify();
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v->checked, 1);
  EXPECT_TRUE(v->problems.empty());
  EXPECT_EQ(v->integrity, "ok");
}

TEST_P(PlanStoreContract, TruncatedBlobIsCorrupt) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto store = open_store(path);
  PlanRecord r = make_record(9);
  ASSERT_TRUE(store->put(r).is_ok());
  raw_sql(path, "UPDATE plans SET plan_bytes = substr(plan_bytes, 1, 10)");
  StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, h200());
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->outcome, LookupOutcome::kCorrupt);
  EXPECT_NE(got->reasons[0].find("truncated plan blob (10 of"), std::string::npos) << got->reasons[0];
}

// An empty stored checksum is a mismatch like any other, never "no checksum to check" (issue 14 item 6).
TEST_P(PlanStoreContract, EmptyStoredChecksumIsCorrupt) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto store = open_store(path);
  PlanRecord r = make_record(15);
  ASSERT_TRUE(store->put(r).is_ok());
  ASSERT_EQ(raw_sql(path, "UPDATE plans SET checksum = ''"), 1);
  StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->outcome, LookupOutcome::kCorrupt);
  EXPECT_FALSE(got->runnable());
  ASSERT_EQ(got->reasons.size(), 1u);
  EXPECT_NE(got->reasons[0].find("checksum mismatch (stored , computed "), std::string::npos) << got->reasons[0];
  EXPECT_EQ(store->quarantine()->size(), 1u);
}

// The fingerprint_key column must be the key of the row's fingerprint JSON (the checksum covers the JSON,
// not the key): a row whose key says another environment is corrupt, not a hit (issue 14 item 6).
TEST_P(PlanStoreContract, StoredKeyNotMatchingTheFingerprintIsCorrupt) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto store = open_store(path);
  PlanRecord r = make_record(16);
  ASSERT_TRUE(store->put(r).is_ok());
  const std::string other(32, '0');
  ASSERT_EQ(raw_sql(path, "UPDATE plans SET fingerprint_key = '" + other + "'"), 1);
  StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->outcome, LookupOutcome::kCorrupt);
  EXPECT_FALSE(got->runnable());
  ASSERT_EQ(got->reasons.size(), 1u);
  EXPECT_EQ(got->reasons[0], "fingerprint key " + other + " does not match the stored fingerprint");
  EXPECT_EQ(store->quarantine()->size(), 1u);
}

TEST_P(PlanStoreContract, GarbageFingerprintJsonIsCorrupt) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto store = open_store(path);
  PlanRecord r = make_record(10);
  ASSERT_TRUE(store->put(r).is_ok());
  raw_sql(path, "UPDATE plans SET fingerprint_json = '{\"gpu_name\": [garbage'");
  StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, h200());
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->outcome, LookupOutcome::kCorrupt);
  EXPECT_NE(got->reasons[0].find("fingerprint"), std::string::npos) << got->reasons[0];
  EXPECT_EQ(store->quarantine()->size(), 1u);
}

TEST_P(PlanStoreContract, WrongColumnTypesAreCorrupt) {
  KILN_STORE_FILE_CASE();
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto store = open_store(path);
  PlanRecord r = make_record(11);
  ASSERT_TRUE(store->put(r).is_ok());
  raw_sql(path, "UPDATE plans SET engine_id = 'seven'");
  StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, h200());
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->outcome, LookupOutcome::kCorrupt);
  EXPECT_NE(got->reasons[0].find("column engine_id holds text"), std::string::npos) << got->reasons[0];
  EXPECT_EQ(store->quarantine()->size(), 1u);
}

TEST_P(PlanStoreContract, ValidatorRefusalQuarantines) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  PlanRecord r = make_record(12);
  ASSERT_TRUE(store->put(r).is_ok());
  PlanValidator refuse = [](const PlanRecord&) { return corruption("cannot deserialize the plan"); };
  StatusOr<LookupResult> got = store->get(r.structure_sig, r.shape_key, h200(), EnvPolicy{}, refuse);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->outcome, LookupOutcome::kCorrupt);
  EXPECT_NE(got->reasons[0].find("cannot deserialize the plan"), std::string::npos);
  EXPECT_EQ(store->quarantine()->size(), 1u);
  // A validator that throws is a refusal too, never an escaping exception.
  ASSERT_TRUE(store->put(make_record(13)).is_ok());
  PlanRecord r13 = make_record(13);
  PlanValidator thrower = [](const PlanRecord&) -> Status { throw std::runtime_error("boom"); };
  got = store->get(r13.structure_sig, r13.shape_key, h200(), EnvPolicy{}, thrower);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->outcome, LookupOutcome::kCorrupt);
  // An accepting validator sees the record and lets it through.
  ASSERT_TRUE(store->put(make_record(14)).is_ok());
  PlanRecord r14 = make_record(14);
  int calls = 0;
  PlanValidator accept = [&](const PlanRecord& rec) {
    ++calls;
    EXPECT_EQ(rec.plan_bytes, r14.plan_bytes);
    return Status::ok();
  };
  got = store->get(r14.structure_sig, r14.shape_key, h200(), EnvPolicy{}, accept);
  ASSERT_TRUE(got.is_ok());
  EXPECT_EQ(got->outcome, LookupOutcome::kHit);
  EXPECT_EQ(calls, 1);
}

TEST(PlanStore, LoadAllReturnsRunnableRecordsInOneCall) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto store = open_store(path);
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store->put(make_record(i)).is_ok());
  EnvFingerprint old = h200();
  old.cudnn_version = 91800;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store->put(make_record(100 + i, old)).is_ok());
  store_test::flip_blob_byte(path, make_record(3).structure_sig);
  StatusOr<LoadAllResult> all = store->load_all(h200());
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  EXPECT_EQ(all->records.size(), 19u);
  EXPECT_EQ(all->stale, 5);
  EXPECT_EQ(all->corrupt, 1);
  for (const PlanRecord& r : all->records) EXPECT_EQ(r.checksum, compute_record_checksum(r));
}

TEST_P(PlanStoreContract, ListRemoveAndGc) {
  TempDir dir;
  auto store = open_store(dir.file("plans.db"));
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(store->put(make_record(i)).is_ok());
  EnvFingerprint old = h200();
  old.cudnn_version = 91800;
  ASSERT_TRUE(store->put(make_record(50, old)).is_ok());
  ListFilter f;
  f.structure_prefix = "sig1";
  EXPECT_EQ(store->list(f)->size(), 1u);
  EXPECT_EQ(store->remove(ListFilter{}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*store->remove(f), 1);
  EXPECT_EQ(store->list()->size(), 6u);

  GcOptions gc;
  gc.current = h200();
  gc.older_than = 1700000003;  // records 0 and 2 (1 is gone)
  StatusOr<GcReport> rep = store->gc(gc);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  EXPECT_EQ(rep->stale_removed, 1);
  EXPECT_EQ(rep->old_removed, 2);
  EXPECT_EQ(store->list()->size(), 3u);
  EXPECT_EQ(*store->remove(ListFilter{}, /*all=*/true), 3);
}

// `plans gc --dry-run` ran gc's deletions in a write transaction and rolled it back: refused on a store opened
// read-only (a baked store in a read-only folder), and it wrote the file. A dry run finds the rows by reading
// alone: on a read-only open it reports what a real run then removes, in every category, and the file is byte
// for byte as it was.
TEST(PlanStore, GcDryRunOnAReadOnlyStoreReportsWhatARealRunRemovesAndWritesNothing) {
  TempDir dir;
  const std::string path = dir.file("plans.db");
  EnvFingerprint old = h200();
  old.cudnn_version = 91800;
  const std::string spec = R"({"name":"g"})";
  {
    auto store = open_store(path);
    for (int i : {0, 1, 2, 3, 4, 6, 7}) ASSERT_TRUE(store->put(make_record(i)).is_ok());  // created 1700000000 + i
    ASSERT_TRUE(store->put(make_record(5, old)).is_ok());                                 // stale
    store_test::flip_blob_byte(path, make_record(4).structure_sig, 1);
    VerifyOptions vo;
    vo.quarantine = true;
    ASSERT_TRUE(store->verify(vo).is_ok());  // record 4 in quarantine
    ASSERT_EQ(store->quarantine()->size(), 1u);
    store_test::flip_blob_byte(path, make_record(3).structure_sig, 1);  // record 3 corrupt
    // Specs of an old, a stale, a corrupt and a kept record, an orphan, and a queued graph's.
    for (int i : {0, 5, 3, 2}) {
      const PlanRecord r = make_record(i);
      ASSERT_TRUE(store->put_graph_spec(r.structure_sig, r.shape_key, "g", spec).is_ok());
    }
    ASSERT_TRUE(store->put_graph_spec("orphan", "", "g", spec).is_ok());
    RetuneRequest q;
    q.structure_sig = "queued";
    q.fingerprint = h200();
    q.spec_json = spec;
    q.reason = "store miss";
    ASSERT_TRUE(store->enqueue_retune(q).is_ok());
    ASSERT_TRUE(store->put_graph_spec("queued", "", "g", spec).is_ok());
    // A decision with an old part (it goes) and one whose parts stay.
    for (auto [fused, a, b] : {std::tuple{2, 1, 2}, std::tuple{6, 6, 7}}) {
      FusionRecord f;
      f.structure_sig = make_record(fused).structure_sig;
      f.shape_key = make_record(fused).shape_key;
      f.fingerprint = h200();
      f.materialized = "fp16";
      f.parts = {{"g/a", make_record(a).structure_sig, make_record(a).shape_key},
                 {"g/b", make_record(b).structure_sig, make_record(b).shape_key}};
      f.policy = "faster";
      f.fused_ms = 0.3;
      f.unfused_ms = 0.2;
      ASSERT_TRUE(store->put_fusion_record(f).is_ok());
    }
    // Kernel caches: one of this environment, one of another, one damaged.
    for (const auto& [sig, fp] : {std::pair{std::string("k1"), h200()}, std::pair{std::string("k2"), old},
                                  std::pair{std::string("k3"), h200()}}) {
      KernelCacheRecord k;
      k.structure_sig = sig;
      k.fingerprint = fp;
      k.cache_json = R"({"kernels":[]})";
      ASSERT_TRUE(store->put_kernel_cache(k).is_ok());
    }
    ASSERT_EQ(raw_sql(path, "UPDATE kernel_caches SET graph_name = 'x' WHERE structure_sig = 'k3'"), 1);
  }
  auto bytes = [&] {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string before = bytes();
  GcOptions g;
  g.current = h200();
  g.older_than = 1700000002;  // records 0 and 1
  g.dry_run = true;
  StoreOpenOptions ro_options;
  ro_options.read_only = true;
  GcReport dry;
  {
    auto ro = open_store(path, ro_options);
    ASSERT_TRUE(ro);
    StatusOr<GcReport> rep = ro->gc(g);
    ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
    dry = *rep;
    GcOptions real = g;
    real.dry_run = false;
    EXPECT_EQ(ro->gc(real).status().code(), StatusCode::kFailedPrecondition);  // a real run needs a writable store
  }
  EXPECT_EQ(bytes(), before);
  EXPECT_TRUE(dry.dry_run);
  EXPECT_EQ(dry.corrupt_removed, 1);
  EXPECT_EQ(dry.stale_removed, 1);
  EXPECT_EQ(dry.old_removed, 2);
  EXPECT_EQ(dry.quarantine_removed, 2);   // record 4, and record 3 moved there first
  EXPECT_EQ(dry.graph_specs_removed, 4);  // the old, stale and corrupt records' and the orphan
  EXPECT_EQ(dry.fusion_records_removed, 1);
  EXPECT_EQ(dry.kernel_caches_stale_removed, 1);
  EXPECT_EQ(dry.kernel_caches_corrupt_removed, 1);

  g.dry_run = false;
  auto store = open_store(path);
  StatusOr<GcReport> real = store->gc(g);
  ASSERT_TRUE(real.is_ok()) << real.status().to_string();
  EXPECT_EQ(real->corrupt_removed, dry.corrupt_removed);
  EXPECT_EQ(real->stale_removed, dry.stale_removed);
  EXPECT_EQ(real->old_removed, dry.old_removed);
  EXPECT_EQ(real->quarantine_removed, dry.quarantine_removed);
  EXPECT_EQ(real->graph_specs_removed, dry.graph_specs_removed);
  EXPECT_EQ(real->fusion_records_removed, dry.fusion_records_removed);
  EXPECT_EQ(real->kernel_caches_stale_removed, dry.kernel_caches_stale_removed);
  EXPECT_EQ(real->kernel_caches_corrupt_removed, dry.kernel_caches_corrupt_removed);
  ASSERT_EQ(real->kernel_caches_removed.size(), dry.kernel_caches_removed.size());
  for (size_t i = 0; i < dry.kernel_caches_removed.size(); ++i)
    EXPECT_EQ(real->kernel_caches_removed[i].why, dry.kernel_caches_removed[i].why);
  EXPECT_EQ(store->list()->size(), 3u);  // records 2, 6, 7
  EXPECT_TRUE(store->quarantine()->empty());
  EXPECT_EQ(store->list_graph_specs()->size(), 2u);
  EXPECT_EQ(store->list_fusion_records()->size(), 1u);
  EXPECT_EQ(store->list_kernel_caches()->size(), 1u);
  // Nothing left to remove: a second dry run, read-only, finds nothing.
  store.reset();
  g.dry_run = true;
  StatusOr<GcReport> again = open_store(path, ro_options)->gc(g);
  ASSERT_TRUE(again.is_ok()) << again.status().to_string();
  EXPECT_EQ(again->stale_removed + again->old_removed + again->corrupt_removed + again->quarantine_removed +
                again->graph_specs_removed + again->fusion_records_removed,
            0);
  EXPECT_TRUE(again->kernel_caches_removed.empty());
}

TEST_P(PlanStoreContract, VerifyFindsAndQuarantinesBadRecords) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  auto store = open_store(path);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(store->put(make_record(i)).is_ok());
  raw_sql(path, "UPDATE plans SET median_ms = 99 WHERE structure_sig LIKE 'sig2_%'");
  StatusOr<VerifyReport> v = store->verify();
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v->checked, 4);
  EXPECT_EQ(v->ok, 3);
  ASSERT_EQ(v->problems.size(), 1u);
  EXPECT_EQ(v->problems[0].structure_sig.rfind("sig2_", 0), 0u);
  EXPECT_TRUE(store->quarantine()->empty());  // verify alone does not move
  VerifyOptions vo;
  vo.quarantine = true;
  ASSERT_TRUE(store->verify(vo).is_ok());
  EXPECT_EQ(store->quarantine()->size(), 1u);
  EXPECT_EQ(store->verify()->problems.size(), 0u);
}

TEST_P(PlanStoreContract, ReopenKeepsRecords) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  {
    auto store = open_store(path);
    ASSERT_TRUE(store->put(make_record(1)).is_ok());
  }
  auto store = open_store(path);
  PlanRecord r = make_record(1);
  EXPECT_EQ(store->get(r.structure_sig, r.shape_key, h200())->outcome, LookupOutcome::kHit);
  StoreOpenOptions ro;
  ro.read_only = true;
  auto reader = open_store(path, ro);
  ASSERT_TRUE(reader);
  EXPECT_EQ(reader->get(r.structure_sig, r.shape_key, h200())->outcome, LookupOutcome::kHit);
  EXPECT_EQ(reader->put(r).status().code(), StatusCode::kFailedPrecondition);
}

TEST_P(PlanStoreContract, NewerSchemaIsRefusedClearly) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  { auto store = open_store(path); }
  raw_sql(path, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  StatusOr<std::unique_ptr<PlanStore>> s = open_impl(path);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNewerVersion);  // exit 7, not 6 (a stale plan refused by policy)
  EXPECT_NE(s.status().message().find("schema version 99, newer than this Kiln"), std::string::npos)
      << s.status().message();
}

// Issue 10 case 5: a damaged schema was a SQL error at the first query (Internal, exit 10); it is Corruption
// at open, naming the table, for a writable and a read-only open alike.
TEST_P(PlanStoreContract, DamagedSchemaIsCorruptionAtOpen) {
  TempDir dir;
  struct Damage {
    const char* sql;
    const char* message;
  };
  const Damage damages[] = {
      {"ALTER TABLE plans DROP COLUMN knobs", "table 'plans' lacks column 'knobs' (damaged schema)"},
      {"ALTER TABLE plans RENAME TO p0; CREATE VIEW plans AS SELECT * FROM p0", "'plans' is a view, not a table"},
      {"DROP TABLE plans", "no 'plans' table (damaged schema)"},
      {"ALTER TABLE quarantine DROP COLUMN reason", "table 'quarantine' lacks column 'reason'"},
      {"DROP TABLE graph_specs; CREATE VIEW graph_specs AS SELECT 1 AS x", "'graph_specs' is a view, not a table"},
      {"ALTER TABLE retune_queue DROP COLUMN reasons", "table 'retune_queue' lacks column 'reasons'"},
      {"ALTER TABLE meta RENAME COLUMN value TO v", "table 'meta' lacks column 'value'"},
  };
  int n = 0;
  for (const Damage& d : damages) {
    std::string path = dir.file("s" + std::to_string(n++) + ".db");
    {
      auto store = open_store(path);
      ASSERT_TRUE(store->put(make_record(1)).is_ok());
    }
    raw_sql(path, d.sql);
    for (bool read_only : {false, true}) {
      StoreOpenOptions o;
      o.read_only = read_only;
      StatusOr<std::unique_ptr<PlanStore>> s = open_impl(path, o);
      ASSERT_FALSE(s.is_ok()) << d.sql;
      EXPECT_EQ(s.status().code(), StatusCode::kCorruption) << d.sql << ": " << s.status().to_string();
      EXPECT_NE(s.status().message().find("plan store " + location(path) + ": "), std::string::npos)
          << s.status().message();
      EXPECT_NE(s.status().message().find(d.message), std::string::npos) << s.status().message();
    }
  }
  // A store without the tables added within version 1 (retune_queue, graph_specs) is not damaged.
  std::string old = dir.file("old.db");
  { auto store = open_store(old); }
  raw_sql(old, "DROP TABLE retune_queue; DROP TABLE graph_specs");
  StoreOpenOptions ro;
  ro.read_only = true;
  EXPECT_TRUE(open_impl(old, ro).is_ok());
  EXPECT_TRUE(open_impl(old).is_ok());
}

TEST_P(PlanStoreContract, ForeignSqliteFileIsRefused) {
  TempDir dir;
  std::string path = dir.file("other.db");
  raw_sql(path, "CREATE TABLE users(name TEXT)");
  StatusOr<std::unique_ptr<PlanStore>> s = open_impl(path);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("not a Kiln plan store"), std::string::npos) << s.status().message();
}

// Issue 10 case 4: a writable open switched any SQLite file to WAL mode (its header rewritten) before
// finding that it was not a store; a bundle given as --store was changed that way. It is refused untouched.
TEST_P(PlanStoreContract, ForeignSqliteFileIsLeftUntouched) {
  TempDir dir;
  std::string path = dir.file("other.db");
  raw_sql(path, "CREATE TABLE users(name TEXT); INSERT INTO users VALUES ('ada')");
  auto bytes = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  const std::string before = bytes(path);
  EXPECT_FALSE(open_impl(path).is_ok());
  EXPECT_EQ(bytes(path), before);
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
}

TEST_P(PlanStoreContract, GarbageFileFailsToOpen) {
  KILN_STORE_FILE_CASE();
  TempDir dir;
  std::string path = dir.file("plans.db");
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 5000; ++i) f << "this is not a database " << i;
  }
  StatusOr<std::unique_ptr<PlanStore>> s = open_impl(path);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kCorruption);
  EXPECT_NE(s.status().message().find("is not a SQLite database"), std::string::npos) << s.status().message();
}

TEST_P(PlanStoreContract, TruncatedDatabaseFailsToOpen) {
  KILN_STORE_FILE_CASE();
  TempDir dir;
  std::string path = dir.file("plans.db");
  {
    auto store = open_store(path);
    for (int i = 0; i < 60; ++i) {
      PlanRecord r = make_record(i);
      r.plan_bytes = std::string(3000, static_cast<char>(i));
      ASSERT_TRUE(store->put(r).is_ok());
    }
  }  // the last close checkpoints the WAL into the main file
  auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 100000u);
  std::filesystem::resize_file(path, size / 2);
  StatusOr<std::unique_ptr<PlanStore>> s = open_impl(path);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kCorruption);
  EXPECT_NE(s.status().message().find(path), std::string::npos) << s.status().message();
}

TEST_P(PlanStoreContract, GarbledPagesFailToOpen) {
  KILN_STORE_FILE_CASE();
  TempDir dir;
  std::string path = dir.file("plans.db");
  {
    auto store = open_store(path);
    for (int i = 0; i < 60; ++i) ASSERT_TRUE(store->put(make_record(i)).is_ok());
  }
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(4096);  // pages 2..5: b-tree pages of the tables and index
    std::string junk(4 * 4096, '\x5a');
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  StatusOr<std::unique_ptr<PlanStore>> s = open_impl(path);
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.status().code(), StatusCode::kCorruption) << s.status().to_string();
}

TEST_P(PlanStoreContract, DefaultPathFollowsTheEnvironment) {
  std::string saved_store = std::getenv("KILN_STORE") ? std::getenv("KILN_STORE") : "";
  std::string saved_xdg = std::getenv("XDG_CACHE_HOME") ? std::getenv("XDG_CACHE_HOME") : "";
  setenv("KILN_STORE", "/tmp/x/store.db", 1);
  EXPECT_EQ(default_store_path(), "/tmp/x/store.db");
  unsetenv("KILN_STORE");
  setenv("XDG_CACHE_HOME", "/tmp/cache", 1);
  EXPECT_EQ(default_store_path(), "/tmp/cache/kiln/plans.db");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_NE(default_store_path().find("/.cache/kiln/plans.db"), std::string::npos);
  if (!saved_store.empty()) setenv("KILN_STORE", saved_store.c_str(), 1);
  if (!saved_xdg.empty()) setenv("XDG_CACHE_HOME", saved_xdg.c_str(), 1);
}

TEST_P(PlanStoreContract, KnobText) {
  Knobs k = {{"b", -3}, {"a", 1}};
  EXPECT_EQ(knobs_to_text(k), "a=1;b=-3");
  EXPECT_EQ(*knobs_from_text("a=1;b=-3"), k);
  EXPECT_TRUE(knobs_from_text("")->empty());
  EXPECT_FALSE(knobs_from_text("a=").is_ok());
  EXPECT_FALSE(knobs_from_text("a=1;a=2").is_ok());
  EXPECT_FALSE(knobs_from_text("=1").is_ok());
  EXPECT_FALSE(knobs_from_text("a=1;").is_ok());
}

KILN_STORE_CONTRACT_SUITE(PlanStoreContract);

}  // namespace
}  // namespace kiln
