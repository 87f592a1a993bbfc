// The store's fusion decisions (kiln/store/fusion_record.h): what is kept, which environment may use it, what a
// damaged row does, gc, and bundles carrying decisions with their parts' records.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::open_store;
using store_test::make_record;
using store_test::raw_sql;
using store_test::TempDir;

// A fused record (index 0) and two parts (1, 2), all in `fp`, and the decision naming the parts.
struct Chain {
  PlanRecord fused = make_record(0), p1 = make_record(1), p2 = make_record(2);
  FusionRecord decision;
  explicit Chain(const EnvFingerprint& fp = h200()) {
    for (PlanRecord* r : {&fused, &p1, &p2}) r->fingerprint = fp;
    decision.structure_sig = fused.structure_sig;
    decision.shape_key = fused.shape_key;
    decision.fingerprint = fp;
    decision.materialized = "fp16";
    decision.parts = {{"g/mm", p1.structure_sig, p1.shape_key}, {"g/gelu", p2.structure_sig, p2.shape_key}};
    decision.policy = "faster";
    decision.fused_ms = 0.30;
    decision.unfused_ms = 0.21;
    decision.explanation = "unfused 0.21 ms < fused 0.30 ms";
  }
  void put_all(PlanStore& s) {
    for (const PlanRecord* r : {&fused, &p1, &p2}) ASSERT_TRUE(s.put(*r).is_ok());
    ASSERT_TRUE(s.put_fusion_record(decision).is_ok());
  }
};

class FusionRecordsContract : public store_test::StoreContract {};

TEST_P(FusionRecordsContract, RoundTripKeepsEveryField) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  Chain c;
  auto put = s->put_fusion_record(c.decision);
  ASSERT_TRUE(put.is_ok()) << put.status().to_string();
  EXPECT_GT(put->created_at, 0);
  EXPECT_EQ(put->checksum, compute_fusion_record_checksum(*put));
  auto got = s->get_fusion_record(c.fused.structure_sig, c.fused.shape_key, h200());
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  ASSERT_TRUE(got->has_value());
  const FusionRecord& r = **got;
  EXPECT_EQ(r.parts, c.decision.parts);
  EXPECT_EQ(r.materialized, "fp16");
  EXPECT_EQ(r.policy, "faster");
  EXPECT_DOUBLE_EQ(r.fused_ms, 0.30);
  EXPECT_DOUBLE_EQ(r.unfused_ms, 0.21);
  EXPECT_EQ(r.explanation, c.decision.explanation);
  EXPECT_EQ(r.fingerprint_key(), fingerprint_key(h200()));
  // Another key has none.
  auto other = s->get_fusion_record(c.p1.structure_sig, c.p1.shape_key, h200());
  ASSERT_TRUE(other.is_ok());
  EXPECT_FALSE(other->has_value());
  // Removed: gone, and a second removal removes nothing.
  EXPECT_EQ(*s->remove_fusion_record(r.structure_sig, r.shape_key, r.fingerprint_key()), 1);
  EXPECT_EQ(*s->remove_fusion_record(r.structure_sig, r.shape_key, r.fingerprint_key()), 0);
  EXPECT_FALSE(s->get_fusion_record(r.structure_sig, r.shape_key, h200())->has_value());
}

TEST_P(FusionRecordsContract, BadDecisionsAreRefusedBeforeWriting) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  Chain c;
  FusionRecord one = c.decision;
  one.parts.resize(1);
  auto st = s->put_fusion_record(one);
  EXPECT_EQ(st.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.status().message().find("at least two parts"), std::string::npos) << st.status().message();
  FusionRecord nan = c.decision;
  nan.unfused_ms = std::nan("");
  EXPECT_EQ(s->put_fusion_record(nan).status().code(), StatusCode::kInvalidArgument);
  FusionRecord nosig = c.decision;
  nosig.parts[1].structure_sig.clear();
  auto ns = s->put_fusion_record(nosig);
  EXPECT_EQ(ns.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ns.status().message().find("g/gelu"), std::string::npos) << ns.status().message();
  EXPECT_TRUE(s->list_fusion_records()->empty());
  // Read-only stores never write one.
  s.reset();
  auto ro = open_store(dir.file("p.db"), /*read_only=*/true);
  EXPECT_EQ(ro->put_fusion_record(c.decision).status().code(), StatusCode::kFailedPrecondition);
}

TEST_P(FusionRecordsContract, OnlyAnEnvironmentThePolicyAcceptsUsesIt) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  Chain c;
  ASSERT_TRUE(s->put_fusion_record(c.decision).is_ok());
  EnvFingerprint newer = h200();
  newer.cudnn_version = 92000;  // must match by default
  auto got = s->get_fusion_record(c.fused.structure_sig, c.fused.shape_key, newer);
  ASSERT_TRUE(got.is_ok());
  EXPECT_FALSE(got->has_value()) << "a decision measured under cuDNN 9.19 must not steer 9.20";
  // The exact environment is preferred over another one the policy accepts (here a policy that ignores the
  // cuDNN version, so that a 9.20 decision passes for 9.19 too).
  FusionRecord second = c.decision;
  second.fingerprint = newer;
  second.explanation = "measured under cuDNN 9.20";
  second.created_at = 1900000000;  // newer, but not this environment
  ASSERT_TRUE(s->put_fusion_record(second).is_ok());
  EnvPolicy lenient;
  lenient.set_rule(FingerprintField::kCudnnVersion, FieldRule::kInformational);
  auto mine = s->get_fusion_record(c.fused.structure_sig, c.fused.shape_key, h200(), lenient);
  ASSERT_TRUE(mine.is_ok() && mine->has_value());
  EXPECT_EQ((*mine)->explanation, c.decision.explanation);
  EXPECT_EQ(s->list_fusion_records()->size(), 2u);
  // Without this environment's own decision, the other one the policy accepts serves.
  ASSERT_EQ(*s->remove_fusion_record(c.decision.structure_sig, c.decision.shape_key, fingerprint_key(h200())), 1);
  auto theirs = s->get_fusion_record(c.fused.structure_sig, c.fused.shape_key, h200(), lenient);
  ASSERT_TRUE(theirs.is_ok() && theirs->has_value());
  EXPECT_EQ((*theirs)->explanation, "measured under cuDNN 9.20");
}

TEST_P(FusionRecordsContract, ADamagedRowIsDroppedNotServed) {
  TempDir dir;
  const std::string path = dir.file("p.db");
  Chain c;
  {
    auto s = open_store(path);
    c.put_all(*s);
  }
  // Tampered: another part list under the old checksum.
  EXPECT_EQ(raw_sql(path, "UPDATE fusion_decisions SET unfused_ms = 0.01"), 1);
  {
    auto ro = open_store(path, /*read_only=*/true);
    auto got = ro->get_fusion_record(c.fused.structure_sig, c.fused.shape_key, h200());
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    EXPECT_FALSE(got->has_value());
    EXPECT_EQ(ro->counters().corrupt, 1);
  }
  EXPECT_EQ(raw_sql(path, "UPDATE fusion_decisions SET policy = policy"), 1);  // still there: read-only left it
  auto s = open_store(path);
  EXPECT_TRUE(s->list_fusion_records()->empty());  // skipped as corrupt
  auto got = s->get_fusion_record(c.fused.structure_sig, c.fused.shape_key, h200());
  ASSERT_TRUE(got.is_ok());
  EXPECT_FALSE(got->has_value());
  // Dropped by the writable lookup: a fresh decision can be put again.
  ASSERT_TRUE(s->put_fusion_record(c.decision).is_ok());
  EXPECT_TRUE(s->get_fusion_record(c.fused.structure_sig, c.fused.shape_key, h200())->has_value());
  // A fingerprint key that does not match its fingerprint is damage too.
  EXPECT_EQ(raw_sql(path, "UPDATE fusion_decisions SET fingerprint_key = 'x'"), 1);
  auto s2 = open_store(path);
  EXPECT_FALSE(s2->get_fusion_record(c.fused.structure_sig, c.fused.shape_key, h200())->has_value());
}

// A row whose checksum matches but whose contents put_fusion_record would refuse (forged: the checksum is not
// a key) is corrupt too: not served, dropped by gc (found by review).
TEST_P(FusionRecordsContract, AForgedRowWithAMatchingChecksumIsStillCorrupt) {
  TempDir dir;
  const std::string path = dir.file("p.db");
  Chain c;
  FusionRecord stored;
  {
    auto s = open_store(path);
    c.put_all(*s);
    stored = *s->list_fusion_records()->begin();
  }
  FusionRecord forged = stored;
  forged.parts.clear();
  const std::string sum = compute_fusion_record_checksum(forged);
  EXPECT_EQ(raw_sql(path, "UPDATE fusion_decisions SET parts_json = '[]', checksum = '" + sum + "'"), 1);
  auto s = open_store(path);
  EXPECT_TRUE(s->list_fusion_records()->empty());
  auto gc = s->gc(GcOptions{});
  ASSERT_TRUE(gc.is_ok());
  EXPECT_EQ(gc->fusion_records_removed, 1);
}

TEST_P(FusionRecordsContract, GcDropsADecisionWhosePartIsGone) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  Chain c;
  c.put_all(*s);
  auto kept = s->gc(GcOptions{});
  ASSERT_TRUE(kept.is_ok()) << kept.status().to_string();
  EXPECT_EQ(kept->fusion_records_removed, 0);
  ListFilter f;
  f.structure_prefix = c.p2.structure_sig;
  ASSERT_EQ(*s->remove(f), 1);
  auto dropped = s->gc(GcOptions{});
  ASSERT_TRUE(dropped.is_ok());
  EXPECT_EQ(dropped->fusion_records_removed, 1);
  EXPECT_TRUE(s->list_fusion_records()->empty());
}

TEST_P(FusionRecordsContract, ABundleCarriesTheDecisionAndItsParts) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  Chain c;
  c.put_all(*s);
  ASSERT_TRUE(s->put(make_record(3)).is_ok());  // unrelated, filtered out
  ExportOptions eo;
  eo.filter.structure_prefix = c.fused.structure_sig;  // the fused key only: its parts must come along
  auto ex = s->export_bundle(dir.file("b.kbundle"), eo);
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  EXPECT_EQ(ex->records, 3);
  EXPECT_EQ(ex->fusion_records, 1);

  auto t = open_store(dir.file("target.db"));
  auto im = t->import_bundle(dir.file("b.kbundle"));
  ASSERT_TRUE(im.is_ok()) << im.status().to_string();
  EXPECT_EQ(im->imported, 3);
  EXPECT_EQ(im->fusion_records, 1);
  auto got = t->get_fusion_record(c.fused.structure_sig, c.fused.shape_key, h200());
  ASSERT_TRUE(got.is_ok() && got->has_value());
  EXPECT_EQ((*got)->parts, c.decision.parts);
  for (const PlanRecord* r : {&c.p1, &c.p2})
    EXPECT_TRUE(t->get(r->structure_sig, r->shape_key, h200())->runnable()) << r->structure_sig;
  // Imported again: nothing newer, nothing replaced.
  auto again = t->import_bundle(dir.file("b.kbundle"));
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->fusion_records, 0);
  // Skipped where the importing environment may not use it.
  ImportOptions io;
  EnvFingerprint newer = h200();
  newer.cudnn_version = 92000;
  io.current = newer;
  auto t2 = open_store(dir.file("t2.db"));
  auto skipped = t2->import_bundle(dir.file("b.kbundle"), io);
  ASSERT_TRUE(skipped.is_ok());
  EXPECT_EQ(skipped->fusion_records, 0);
  EXPECT_TRUE(t2->list_fusion_records()->empty());
}

TEST_P(FusionRecordsContract, ATamperedDecisionInABundleRefusesTheWholeImport) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  Chain c;
  c.put_all(*s);
  ASSERT_TRUE(s->export_bundle(dir.file("b.kbundle")).is_ok());
  EXPECT_EQ(raw_sql(dir.file("b.kbundle"), "UPDATE fusion_decisions SET policy = 'always_unfused'"), 1);
  auto t = open_store(dir.file("target.db"));
  auto im = t->import_bundle(dir.file("b.kbundle"));
  EXPECT_EQ(im.status().code(), StatusCode::kCorruption);
  EXPECT_NE(im.status().message().find("fusion decision"), std::string::npos) << im.status().message();
  EXPECT_TRUE(t->list({})->empty());  // nothing imported
  // A decision dropped from the bundle but still listed in its manifest is caught too.
  ASSERT_TRUE(s->export_bundle(dir.file("c.kbundle")).is_ok());
  EXPECT_EQ(raw_sql(dir.file("c.kbundle"), "DELETE FROM fusion_decisions"), 1);
  auto im2 = t->import_bundle(dir.file("c.kbundle"));
  EXPECT_EQ(im2.status().code(), StatusCode::kCorruption);
  EXPECT_NE(im2.status().message().find("missing"), std::string::npos) << im2.status().message();
}

KILN_STORE_CONTRACT_SUITE(FusionRecordsContract);

}  // namespace
}  // namespace kiln
