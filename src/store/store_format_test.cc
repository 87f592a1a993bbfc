// The store's format, pinned: the checksums of fixed records and the tables a new store is made with are the ones
// Kiln wrote before the store was reshaped around one codec (values taken from the store as of 6c44280), so
// that every store written before keeps loading and every record in it keeps its checksum.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

#include "kiln/store/plan_store.h"
#include "store_test_util.h"

namespace kiln {
namespace {

using store_test::TempDir;

EnvFingerprint fixed_fingerprint() {
  EnvFingerprint f;
  f.gpu_name = "NVIDIA H200";
  f.sm_version = 90;
  f.sm_count = 132;
  f.driver_version = 13000;
  f.cuda_runtime_version = 13000;
  f.cudnn_version = 91900;
  f.cudnn_frontend_version = 12300;
  f.kiln_version = "0.1.0";
  f.has_device = true;
  return f;
}

TEST(StoreFormat, ChecksumsAreTheOnesWrittenBeforeTheCodec) {
  PlanRecord r;
  r.structure_sig = "sigA0123456789";
  r.shape_key = "b=8";
  r.fingerprint = fixed_fingerprint();
  r.plan_bytes = std::string("\x01\x00\x02plan", 7);
  r.engine_id = 7;
  r.knobs = {{"TILE", 2}};
  r.workspace_bytes = 4096;
  r.tuned = true;
  r.stats.median_ms = 0.125;
  r.stats.min_ms = -0.0;  // written as +0 in the checksum
  r.stats.max_ms = 0.5;
  r.stats.samples = 9;
  r.stats.runner_up_engine = 3;
  r.stats.runner_up_knobs = {{"K", 1}};
  r.stats.runner_up_median_ms = 1e-3;
  r.numerics.verdict = Disposition::kPassed;
  r.numerics.max_abs = 1e-5;
  r.tuned_by = "t@h";
  r.created_at = 1700000000;
  EXPECT_EQ(compute_record_checksum(r), "69b6f25324eaff0543161034a8f4bd0a");

  FusionRecord fr;
  fr.structure_sig = "sigF";
  fr.shape_key = "b=8";
  fr.fingerprint = fixed_fingerprint();
  fr.materialized = "float32";
  fr.parts = {{"g/a", "sigA0123456789", "b=8"}, {"g/b", "sigB", "b=8"}};
  fr.policy = "auto";
  fr.fused_ms = 1.5;
  fr.unfused_ms = 1.25;
  fr.explanation = "chain wins";
  fr.created_at = 1700000001;
  EXPECT_EQ(compute_fusion_record_checksum(fr), "ae48c91b1fbac865e7d91a73f9fb243d");

  KernelCacheRecord kc;
  kc.structure_sig = "sigA0123456789";
  kc.fingerprint = fixed_fingerprint();
  kc.graph_name = "g";
  kc.cache_json = "{\"k\":[1,2]}";
  kc.created_at = 1700000002;
  EXPECT_EQ(compute_kernel_cache_checksum(kc), "1364b9b99de7afe92418c1d208557fb3");

  FirstUseRecord fu{"sigA0123456789", "b=8", "eng7_TILE=2", "fpkey/kiln", false, "max_abs 1", 1700000003, ""};
  EXPECT_EQ(compute_first_use_checksum(fu), "7f0a257846017cb8b6496718a0012ec9");

  GraphSpecEntry ge{"sigA0123456789", "b=8", "g", "{\"spec\":1}", 1700000004, ""};
  EXPECT_EQ(compute_graph_spec_checksum(ge), "c0bfd9b0b9860f1cb16ce20fe7d8baca");
}

// The CREATE TABLE texts of a new store, as SQLite keeps them (sqlite_master), by table name.
std::string table_texts(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* q = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT sql FROM sqlite_master WHERE type='table' ORDER BY name", -1, &q, nullptr),
            SQLITE_OK);
  std::string out;
  while (sqlite3_step(q) == SQLITE_ROW)
    out += std::string(reinterpret_cast<const char*>(sqlite3_column_text(q, 0))) + "\n";
  sqlite3_finalize(q);
  sqlite3_close(db);
  return out;
}

// The tables a new store is made with, as SQLite keeps their CREATE statements.
const char* const kTablesOfANewStore = R"sql(CREATE TABLE first_use_verdicts(
  structure_sig TEXT NOT NULL,
  shape_key TEXT NOT NULL,
  config TEXT NOT NULL,
  fingerprint_key TEXT NOT NULL,
  passed INTEGER NOT NULL,
  summary TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  checksum TEXT NOT NULL,
  PRIMARY KEY (structure_sig, shape_key, config, fingerprint_key)
)
CREATE TABLE fusion_decisions(
  structure_sig TEXT NOT NULL,
  shape_key TEXT NOT NULL,
  fingerprint_key TEXT NOT NULL,
  fingerprint_json TEXT NOT NULL,
  materialized TEXT NOT NULL,
  parts_json TEXT NOT NULL,
  policy TEXT NOT NULL,
  fused_ms REAL NOT NULL,
  unfused_ms REAL NOT NULL,
  explanation TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  checksum TEXT NOT NULL,
  PRIMARY KEY (structure_sig, shape_key, fingerprint_key)
)
CREATE TABLE graph_specs(
  structure_sig TEXT NOT NULL,
  shape_key TEXT NOT NULL,
  graph_name TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  checksum TEXT NOT NULL,
  PRIMARY KEY (structure_sig, shape_key)
)
CREATE TABLE kernel_caches(
  structure_sig TEXT NOT NULL,
  fingerprint_key TEXT NOT NULL,
  fingerprint_json TEXT NOT NULL,
  graph_name TEXT NOT NULL,
  cache_json BLOB NOT NULL,
  created_at INTEGER NOT NULL,
  checksum TEXT NOT NULL,
  PRIMARY KEY (structure_sig, fingerprint_key)
)
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL)
CREATE TABLE plan_history(
  structure_sig TEXT NOT NULL,
  shape_key TEXT NOT NULL,
  fingerprint_key TEXT NOT NULL,
  seq INTEGER NOT NULL,
  config TEXT NOT NULL,
  from_state TEXT NOT NULL,
  to_state TEXT NOT NULL,
  reason TEXT NOT NULL,
  evidence TEXT NOT NULL,
  by_whom TEXT NOT NULL,
  at INTEGER NOT NULL,
  PRIMARY KEY (structure_sig, shape_key, fingerprint_key, seq)
)
CREATE TABLE plan_rollout(
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  changed_at INTEGER NOT NULL,
  config TEXT NOT NULL,
  seq INTEGER NOT NULL,
  structure_sig TEXT NOT NULL,
  shape_key TEXT NOT NULL,
  fingerprint_key TEXT NOT NULL,
  fingerprint_json TEXT NOT NULL,
  plan_bytes BLOB NOT NULL,
  plan_size INTEGER NOT NULL,
  engine_id INTEGER NOT NULL,
  knobs TEXT NOT NULL,
  workspace_bytes INTEGER NOT NULL,
  tuned INTEGER NOT NULL,
  median_ms REAL NOT NULL,
  min_ms REAL NOT NULL,
  max_ms REAL NOT NULL,
  noise_rel REAL NOT NULL,
  samples INTEGER NOT NULL,
  runner_up_engine INTEGER NOT NULL,
  runner_up_knobs TEXT NOT NULL,
  runner_up_median_ms REAL NOT NULL,
  verdict TEXT NOT NULL,
  max_abs REAL NOT NULL,
  max_rel REAL NOT NULL,
  nmse REAL NOT NULL,
  tuned_by TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  kiln_schema_version INTEGER NOT NULL,
  checksum TEXT NOT NULL,
  PRIMARY KEY (structure_sig, shape_key, fingerprint_key, config)
)
CREATE TABLE plans(
  structure_sig TEXT NOT NULL,
  shape_key TEXT NOT NULL,
  fingerprint_key TEXT NOT NULL,
  fingerprint_json TEXT NOT NULL,
  plan_bytes BLOB NOT NULL,
  plan_size INTEGER NOT NULL,
  engine_id INTEGER NOT NULL,
  knobs TEXT NOT NULL,
  workspace_bytes INTEGER NOT NULL,
  tuned INTEGER NOT NULL,
  median_ms REAL NOT NULL,
  min_ms REAL NOT NULL,
  max_ms REAL NOT NULL,
  noise_rel REAL NOT NULL,
  samples INTEGER NOT NULL,
  runner_up_engine INTEGER NOT NULL,
  runner_up_knobs TEXT NOT NULL,
  runner_up_median_ms REAL NOT NULL,
  verdict TEXT NOT NULL,
  max_abs REAL NOT NULL,
  max_rel REAL NOT NULL,
  nmse REAL NOT NULL,
  tuned_by TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  kiln_schema_version INTEGER NOT NULL,
  checksum TEXT NOT NULL,
  PRIMARY KEY (structure_sig, shape_key, fingerprint_key)
)
CREATE TABLE quarantine(id INTEGER PRIMARY KEY AUTOINCREMENT, quarantined_at INTEGER, reason TEXT, structure_sig, shape_key, fingerprint_key, fingerprint_json, plan_bytes, plan_size, engine_id, knobs, workspace_bytes, tuned, median_ms, min_ms, max_ms, noise_rel, samples, runner_up_engine, runner_up_knobs, runner_up_median_ms, verdict, max_abs, max_rel, nmse, tuned_by, created_at, kiln_schema_version, checksum)
CREATE TABLE retune_leases(
  structure_sig TEXT NOT NULL,
  shape_key TEXT NOT NULL,
  fingerprint_key TEXT NOT NULL,
  state TEXT NOT NULL,
  worker TEXT NOT NULL,
  token TEXT NOT NULL,
  attempts INTEGER NOT NULL,
  lease_expires_at INTEGER NOT NULL,
  next_attempt_at INTEGER NOT NULL,
  last_error TEXT NOT NULL,
  updated_at INTEGER NOT NULL,
  PRIMARY KEY (structure_sig, shape_key, fingerprint_key)
)
CREATE TABLE retune_log(
  token TEXT NOT NULL,
  structure_sig TEXT NOT NULL,
  shape_key TEXT NOT NULL,
  fingerprint_key TEXT NOT NULL,
  worker TEXT NOT NULL,
  outcome TEXT NOT NULL,
  message TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  finished_at INTEGER NOT NULL,
  PRIMARY KEY (token)
)
CREATE TABLE retune_queue(
  structure_sig TEXT NOT NULL,
  shape_key TEXT NOT NULL,
  fingerprint_key TEXT NOT NULL,
  fingerprint_json TEXT NOT NULL,
  graph_name TEXT NOT NULL,
  spec_json TEXT NOT NULL,
  reasons TEXT NOT NULL,
  request_count INTEGER NOT NULL,
  first_seen INTEGER NOT NULL,
  last_seen INTEGER NOT NULL,
  requested_by TEXT NOT NULL,
  PRIMARY KEY (structure_sig, shape_key, fingerprint_key)
)
CREATE TABLE sqlite_sequence(name,seq)
CREATE TABLE winner_changes(
  structure_sig TEXT NOT NULL,
  shape_key TEXT NOT NULL,
  fingerprint_key TEXT NOT NULL,
  from_config TEXT NOT NULL,
  to_config TEXT NOT NULL,
  from_median_ms REAL NOT NULL,
  to_median_ms REAL NOT NULL,
  from_tuned_by TEXT NOT NULL,
  to_tuned_by TEXT NOT NULL,
  changed_at INTEGER NOT NULL,
  PRIMARY KEY (structure_sig, shape_key, fingerprint_key, changed_at, to_config)
)
)sql";

TEST(StoreFormat, ANewStoreHasTheTablesWrittenBeforeTheCodec) {
  TempDir dir;
  const std::string path = dir.file("plans.db");
  { ASSERT_TRUE(PlanStore::open(path).is_ok()); }
  EXPECT_EQ(table_texts(path), kTablesOfANewStore);
}

}  // namespace
}  // namespace kiln
