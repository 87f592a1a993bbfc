// Plan states and their history (kiln/store/plan_rollout.h): every transition, activation's bookkeeping, rollback,
// and what a damaged or refused transition leaves; on every store implementation (SQLite and PostgreSQL).
#include "kiln/store/plan_rollout.h"

#include <gtest/gtest.h>

#include "kiln/core/engine_config.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::TempDir;

class PlanRolloutContract : public store_test::StoreContract {
 protected:
  static std::string config(const PlanRecord& r) { return plan_identity(r.engine_id, r.knobs); }
  static StoredPlanKey key(const PlanRecord& r) { return {r.structure_sig, r.shape_key, r.fingerprint_key()}; }
  // The configuration the store serves for the key (its plans row), or "" when none.
  static std::string active(PlanStore& s, const PlanRecord& r) {
    auto got = s.read(r.structure_sig, r.shape_key, r.fingerprint_key());
    return got.is_ok() ? config(*got) : "";
  }
  static std::string state_of(PlanStore& s, const PlanRecord& r) {
    auto e = s.rollout_entry(key(r), config(r));
    return e.is_ok() ? plan_state_name(e->state) : "";
  }
  // "from->to" of each history row of the key, in order.
  static std::vector<std::string> moves(PlanStore& s, const PlanRecord& r) {
    std::vector<std::string> out;
    auto h = s.plan_history(key(r));
    EXPECT_TRUE(h.is_ok()) << h.status().to_string();
    if (h.is_ok())
      for (const PlanTransition& t : *h) out.push_back(t.config + ":" + t.from_state + "->" + t.to_state);
    return out;
  }
  static PlanRecord variant(const PlanRecord& r, int64_t engine, double ms) {
    PlanRecord v = r;
    v.engine_id = engine;
    v.stats.median_ms = ms;
    v.created_at = r.created_at + engine;
    return v;
  }
};

TEST(PlanStates, NamesAndAllowedTransitions) {
  for (const auto& n : kPlanStateNames) EXPECT_EQ(parse_plan_state(n.name).value(), n.value);
  EXPECT_FALSE(parse_plan_state("live").is_ok());
  const PlanState all[] = {PlanState::kCandidate, PlanState::kShadow, PlanState::kActive, PlanState::kRetired,
                           PlanState::kRejected};
  int allowed = 0;
  for (PlanState a : all)
    for (PlanState b : all) allowed += plan_transition_allowed(a, b) ? 1 : 0;
  EXPECT_EQ(allowed, 7);  // candidate->{shadow,active,rejected}, shadow->{active,rejected,candidate}, retired->active
  EXPECT_TRUE(plan_transition_allowed(PlanState::kShadow, PlanState::kActive));
  EXPECT_FALSE(plan_transition_allowed(PlanState::kRejected, PlanState::kActive));
  EXPECT_FALSE(plan_transition_allowed(PlanState::kActive, PlanState::kRetired));  // only by another's activation
  EXPECT_FALSE(plan_transition_allowed(PlanState::kCandidate, PlanState::kRetired));
}

TEST_P(PlanRolloutContract, ACandidateIsStoredButNotServed) {
  TempDir dir;
  auto s = open_store(dir.file("plans.db"));
  PlanRecord a = make_record(1);
  ASSERT_TRUE(s->put(a).is_ok());
  PlanRecord b = variant(a, 40, 0.1);
  auto put = s->put_candidate(b, "tuned by kiln tune");
  ASSERT_TRUE(put.is_ok()) << put.status().to_string();
  EXPECT_EQ(active(*s, a), config(a));  // the served plan did not change
  auto got = s->get(a.structure_sig, a.shape_key, h200());
  ASSERT_TRUE(got.is_ok() && got->runnable());
  EXPECT_EQ(config(*got->record), config(a));
  EXPECT_EQ(state_of(*s, b), "candidate");
  auto entry = s->rollout_entry(key(b), config(b));
  ASSERT_TRUE(entry.is_ok());
  EXPECT_EQ(entry->record.plan_bytes, b.plan_bytes);  // whole, to be activated later
  EXPECT_EQ(entry->reason, "tuned by kiln tune");
  EXPECT_EQ(entry->problem, "");
  auto listed = s->rollout_entries({});
  ASSERT_TRUE(listed.is_ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_TRUE(listed->front().record.plan_bytes.empty());
  EXPECT_EQ(moves(*s, a), (std::vector<std::string>{config(a) + ":->active", config(b) + ":->candidate"}));
  // The active configuration itself is no candidate.
  auto same = s->put_candidate(a, "again");
  EXPECT_EQ(same.status().code(), StatusCode::kFailedPrecondition) << same.status().to_string();
}

TEST_P(PlanRolloutContract, CandidateThroughShadowToActiveRetiresTheOldPlan) {
  TempDir dir;
  auto s = open_store(dir.file("plans.db"));
  PlanRecord a = make_record(2);
  ASSERT_TRUE(s->put(a).is_ok());
  PlanRecord b = variant(a, 41, 0.1);
  ASSERT_TRUE(s->put_candidate(b, "tuned").is_ok());
  ASSERT_TRUE(s->transition(key(b), config(b), PlanState::kShadow, "shadow sampling 5%").is_ok());
  EXPECT_EQ(state_of(*s, b), "shadow");
  EXPECT_EQ(active(*s, a), config(a));
  Status up = s->transition(key(b), config(b), PlanState::kActive, "200 agreeing samples, 1.20x", "{\"samples\":200}");
  ASSERT_TRUE(up.is_ok()) << up.to_string();
  EXPECT_EQ(active(*s, a), config(b));
  EXPECT_EQ(state_of(*s, a), "retired");
  EXPECT_EQ(state_of(*s, b), "");  // active: the plans row, no rollout row
  auto changes = s->winner_changes();
  ASSERT_TRUE(changes.is_ok());
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ(changes->front().to_config, config(b));
  auto h = s->plan_history(key(a));
  ASSERT_TRUE(h.is_ok());
  EXPECT_EQ(moves(*s, a), (std::vector<std::string>{config(a) + ":->active", config(b) + ":->candidate",
                                                    config(b) + ":candidate->shadow", config(a) + ":active->retired",
                                                    config(b) + ":shadow->active"}));
  EXPECT_EQ(h->back().evidence, "{\"samples\":200}");
  EXPECT_EQ(h->back().reason, "200 agreeing samples, 1.20x");
  EXPECT_FALSE(h->back().by.empty());
  EXPECT_GT(h->back().at, 0);
}

TEST_P(PlanRolloutContract, RemovingAKeyRemovesItsPlansInEveryStateButKeepsItsHistory) {
  TempDir dir;
  auto s = open_store(dir.file("plans.db"));
  PlanRecord a = make_record(3);
  PlanRecord other = make_record(4);  // another structure: untouched
  ASSERT_TRUE(s->put(a).is_ok());
  ASSERT_TRUE(s->put(other).is_ok());
  PlanRecord b = variant(a, 42, 0.1), c = variant(a, 43, 0.2);
  ASSERT_TRUE(s->put(b).is_ok());  // a retired
  ASSERT_TRUE(s->put_candidate(c, "tuned").is_ok());
  ASSERT_TRUE(s->put_candidate(variant(other, 44, 0.1), "tuned").is_ok());
  ListFilter f;
  f.structure_prefix = a.structure_sig;
  auto removed = s->remove(f);
  ASSERT_TRUE(removed.is_ok()) << removed.status().to_string();
  EXPECT_EQ(*removed, 3);  // b active, a retired, c candidate
  EXPECT_EQ(active(*s, a), "");
  EXPECT_EQ(state_of(*s, a), "");
  EXPECT_EQ(state_of(*s, c), "");
  auto back = s->rollback(key(a), "bring it back");
  EXPECT_FALSE(back.is_ok());  // nothing left to restore
  EXPECT_EQ(active(*s, other), config(other));
  auto left = s->rollout_entries({});
  ASSERT_TRUE(left.is_ok());
  EXPECT_EQ(left->size(), 1u);         // the other structure's candidate
  EXPECT_EQ(moves(*s, a).size(), 4u);  // a, b, its retirement, c: what was served stays readable
}

TEST_P(PlanRolloutContract, RefusedTransitionsChangeNothing) {
  TempDir dir;
  auto s = open_store(dir.file("plans.db"));
  PlanRecord a = make_record(3);
  ASSERT_TRUE(s->put(a).is_ok());
  PlanRecord b = variant(a, 42, 0.1);
  ASSERT_TRUE(s->put_candidate(b, "tuned").is_ok());
  ASSERT_TRUE(s->transition(key(b), config(b), PlanState::kRejected, "disagreed on 3 of 100 samples").is_ok());
  const size_t rows = moves(*s, a).size();
  Status again = s->transition(key(b), config(b), PlanState::kActive, "try anyway");
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.message().find("cannot go from rejected to active"), std::string::npos) << again.message();
  Status retire = s->transition(key(b), config(b), PlanState::kRetired, "x");
  EXPECT_EQ(retire.code(), StatusCode::kFailedPrecondition);
  Status of_active = s->transition(key(a), config(a), PlanState::kRejected, "x");
  EXPECT_EQ(of_active.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(of_active.message().find("is active"), std::string::npos) << of_active.message();
  Status unknown = s->transition(key(a), "eng999", PlanState::kShadow, "x");
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_EQ(active(*s, a), config(a));
  EXPECT_EQ(state_of(*s, b), "rejected");
  EXPECT_EQ(moves(*s, a).size(), rows);
  // A rejected plan may enter again as a candidate (a new tune of the same configuration), with its history.
  ASSERT_TRUE(s->put_candidate(b, "tuned again").is_ok());
  EXPECT_EQ(moves(*s, a).back(), config(b) + ":rejected->candidate");
}

TEST_P(PlanRolloutContract, RollbackRestoresTheRetiredPlanAndRejectsTheActiveOne) {
  TempDir dir;
  auto s = open_store(dir.file("plans.db"));
  PlanRecord a = make_record(4);
  ASSERT_TRUE(s->put(a).is_ok());
  auto none = s->rollback(key(a), "no earlier plan");
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  PlanRecord b = variant(a, 43, 0.1);
  ASSERT_TRUE(s->put(b).is_ok());  // the immediate policy: active at once, a retired
  EXPECT_EQ(state_of(*s, a), "retired");
  PlanRecord c = variant(a, 44, 0.09);
  ASSERT_TRUE(s->put(c).is_ok());  // b retired too, newer than a
  auto back = s->rollback(key(a), "first-use verification failed on host x");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(config(*back), config(b));  // the newest retired plan
  EXPECT_EQ(back->plan_bytes, b.plan_bytes);
  EXPECT_EQ(active(*s, a), config(b));
  EXPECT_EQ(state_of(*s, c), "rejected");
  auto rej = s->rollout_entry(key(c), config(c));
  ASSERT_TRUE(rej.is_ok());
  EXPECT_NE(rej->reason.find("first-use verification failed on host x"), std::string::npos);
  auto got = s->get(a.structure_sig, a.shape_key, h200());
  ASSERT_TRUE(got.is_ok() && got->runnable());
  EXPECT_EQ(config(*got->record), config(b));
  // Again: back to a; then nothing is left to go back to.
  ASSERT_TRUE(s->rollback(key(a), "again").is_ok());
  EXPECT_EQ(active(*s, a), config(a));
  EXPECT_EQ(s->rollback(key(a), "once more").status().code(), StatusCode::kFailedPrecondition);
  auto changes = s->winner_changes();
  ASSERT_TRUE(changes.is_ok());
  EXPECT_EQ(changes->size(), 4u);  // a->b, b->c, c->b, b->a: each is a change of the served winner
  auto no_key = s->rollback({"nosuch", "", a.fingerprint_key()}, "x");
  EXPECT_EQ(no_key.status().code(), StatusCode::kNotFound);
}

TEST_P(PlanRolloutContract, ARetiredPlanActivatedByTransitionIsALastingRollback) {
  TempDir dir;
  auto s = open_store(dir.file("plans.db"));
  PlanRecord a = make_record(5);
  ASSERT_TRUE(s->put(a).is_ok());
  PlanRecord b = variant(a, 45, 0.1);
  ASSERT_TRUE(s->put(b).is_ok());
  ASSERT_TRUE(s->transition(key(a), config(a), PlanState::kActive, "operator chose it").is_ok());
  EXPECT_EQ(active(*s, a), config(a));
  EXPECT_EQ(state_of(*s, b), "retired");  // replaced by an activation, not rejected
}

TEST_P(PlanRolloutContract, SameConfigurationStoredAgainIsNoTransition) {
  TempDir dir;
  auto s = open_store(dir.file("plans.db"));
  PlanRecord a = make_record(6);
  ASSERT_TRUE(s->put(a).is_ok());
  ASSERT_TRUE(s->put(a).is_ok());
  EXPECT_EQ(moves(*s, a).size(), 1u);
  auto entries = s->rollout_entries({});
  ASSERT_TRUE(entries.is_ok());
  EXPECT_TRUE(entries->empty());
}

TEST_P(PlanRolloutContract, ReadOnlyStoresRefuseTransitionsAndListHistory) {
  TempDir dir;
  const std::string where = dir.file("plans.db");
  {
    auto s = open_store(where);
    PlanRecord a = make_record(7);
    ASSERT_TRUE(s->put(a).is_ok());
    ASSERT_TRUE(s->put_candidate(variant(a, 46, 0.1), "tuned").is_ok());
  }
  auto r = open_store(where, /*read_only=*/true);
  ASSERT_NE(r, nullptr);
  PlanRecord a = make_record(7);
  EXPECT_EQ(moves(*r, a).size(), 2u);
  EXPECT_EQ(r->put_candidate(variant(a, 47, 0.1), "x").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r->transition(key(a), plan_identity(46, a.knobs), PlanState::kShadow, "x").code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(r->rollback(key(a), "x").status().code(), StatusCode::kFailedPrecondition);
}

TEST_P(PlanRolloutContract, ADamagedRolloutRowIsNamedNeverActivated) {
  TempDir dir;
  const std::string where = dir.file("plans.db");
  auto s = open_store(where);
  PlanRecord a = make_record(8);
  ASSERT_TRUE(s->put(a).is_ok());
  PlanRecord b = variant(a, 48, 0.1);
  ASSERT_TRUE(s->put_candidate(b, "tuned").is_ok());
  s.reset();
  raw_sql(where, "UPDATE plan_rollout SET median_ms = 0.5");  // the record's checksum no longer holds
  s = open_store(where);
  auto e = s->rollout_entry(key(b), config(b));
  ASSERT_TRUE(e.is_ok());
  EXPECT_NE(e->problem, "");
  Status up = s->transition(key(b), config(b), PlanState::kActive, "x");
  EXPECT_EQ(up.code(), StatusCode::kCorruption) << up.to_string();
  EXPECT_EQ(active(*s, a), config(a));
  // verify names it (the active plan stays sound), and leaves it where it is.
  auto v = s->verify();
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(v->checked, 1);
  EXPECT_EQ(v->ok, 1);
  EXPECT_EQ(v->rollout_checked, 1);
  EXPECT_EQ(v->rollout_ok, 0);
  ASSERT_EQ(v->rollout_problems.size(), 1u);
  EXPECT_EQ(v->rollout_problems[0].structure_sig, b.structure_sig);
  EXPECT_EQ(v->rollout_problems[0].reason.rfind(config(b) + " (candidate): ", 0), 0u) << v->rollout_problems[0].reason;
  EXPECT_EQ(state_of(*s, b), "candidate");
}

// The state column is not in the record's checksum: it must be what the history says (found by a hostile trial).
TEST_P(PlanRolloutContract, AStateOrNumberEditedBehindTheStoresBackIsNeverActivated) {
  TempDir dir;
  const std::string where = dir.file("plans.db");
  auto s = open_store(where);
  PlanRecord a = make_record(9);
  ASSERT_TRUE(s->put(a).is_ok());
  PlanRecord b = variant(a, 49, 0.1);
  ASSERT_TRUE(s->put(b).is_ok());                           // a retired
  ASSERT_TRUE(s->rollback(key(b), "b regressed").is_ok());  // b rejected, a active again
  PlanRecord c = variant(a, 50, 0.1);
  ASSERT_TRUE(s->put_candidate(c, "tuned").is_ok());
  s.reset();
  raw_sql(where, "UPDATE plan_rollout SET state = 'retired' WHERE engine_id = 49");  // rejected -> retired
  raw_sql(where, "UPDATE plan_rollout SET seq = -5 WHERE engine_id = 50");
  s = open_store(where);
  auto back = s->rollback(key(a), "try");
  EXPECT_EQ(back.status().code(), StatusCode::kCorruption) << back.status().to_string();
  EXPECT_NE(back.status().message().find("is not what its history row"), std::string::npos) << back.status().message();
  EXPECT_EQ(active(*s, a), config(a));
  Status up = s->transition(key(c), config(c), PlanState::kActive, "x");
  EXPECT_EQ(up.code(), StatusCode::kCorruption) << up.to_string();
  EXPECT_NE(up.message().find("history number (seq) is damaged"), std::string::npos) << up.message();
  auto v = s->verify();
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v->rollout_checked, 2);
  EXPECT_EQ(v->rollout_ok, 0);
  EXPECT_EQ(v->rollout_problems.size(), 2u);
}

TEST_P(PlanRolloutContract, AnImportRetiresThePlanItReplaces) {
  TempDir dir;
  auto a = open_store(dir.file("a.db"));
  PlanRecord r = make_record(9);
  r.created_at = 1700000000;
  ASSERT_TRUE(a->put(r).is_ok());
  auto b = open_store(dir.file("b.db"));
  PlanRecord newer = variant(r, 49, 0.1);
  newer.created_at = 1700000500;
  ASSERT_TRUE(b->put(newer).is_ok());
  const std::string bundle = dir.file("b.kilnbundle");
  ASSERT_TRUE(b->export_bundle(bundle).is_ok());
  ASSERT_TRUE(a->import_bundle(bundle).is_ok());
  EXPECT_EQ(active(*a, r), config(newer));
  EXPECT_EQ(state_of(*a, r), "retired");
  auto back = a->rollback(key(r), "the imported plan is wrong here");
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(active(*a, r), config(r));
}

// Found by a hostile trial: an import of the very plan a rollback rejected brought it back, active.
TEST_P(PlanRolloutContract, AnImportDoesNotBringBackARejectedOrRetiredPlan) {
  TempDir dir;
  auto s = open_store(dir.file("plans.db"));
  PlanRecord a = make_record(10);
  ASSERT_TRUE(s->put(a).is_ok());
  PlanRecord b = variant(a, 50, 0.1);
  ASSERT_TRUE(s->put(b).is_ok());
  const std::string bundle = dir.file("b.kilnbundle");
  ASSERT_TRUE(s->export_bundle(bundle).is_ok());  // holds b, active at the time
  ASSERT_TRUE(s->rollback(key(a), "p99 regressed").is_ok());
  EXPECT_EQ(active(*s, a), config(a));
  auto im = s->import_bundle(bundle);
  ASSERT_TRUE(im.is_ok()) << im.status().to_string();
  EXPECT_EQ(im->skipped_decided, 1);
  EXPECT_EQ(im->replaced, 0);
  EXPECT_EQ(active(*s, a), config(a));
  EXPECT_EQ(state_of(*s, b), "rejected");
  // A new plan of that configuration (another tune: another checksum) is imported as any newer plan is.
  auto other = open_store(dir.file("other.db"));
  PlanRecord b2 = b;
  b2.created_at += 1000;
  b2.stats.median_ms = 0.09;
  ASSERT_TRUE(other->put(b2).is_ok());
  ASSERT_TRUE(other->export_bundle(dir.file("b2.kilnbundle")).is_ok());
  auto im2 = s->import_bundle(dir.file("b2.kilnbundle"));
  ASSERT_TRUE(im2.is_ok());
  EXPECT_EQ(im2->skipped_decided, 0);
  EXPECT_EQ(active(*s, a), config(b));
}

// Found by a hostile trial: a damaged newest retired row was passed over for an older one.
TEST_P(PlanRolloutContract, RollbackNamesADamagedNewestRetiredPlan) {
  TempDir dir;
  const std::string where = dir.file("plans.db");
  auto s = open_store(where);
  PlanRecord a = make_record(11);
  ASSERT_TRUE(s->put(a).is_ok());
  PlanRecord b = variant(a, 51, 0.1);
  ASSERT_TRUE(s->put(b).is_ok());
  PlanRecord c = variant(a, 52, 0.09);
  ASSERT_TRUE(s->put(c).is_ok());
  s.reset();
  raw_sql(where, "UPDATE plan_rollout SET median_ms = 0.5 WHERE engine_id = 51");
  s = open_store(where);
  auto back = s->rollback(key(a), "x");
  EXPECT_EQ(back.status().code(), StatusCode::kCorruption) << back.status().to_string();
  EXPECT_NE(back.status().message().find(config(b)), std::string::npos) << back.status().message();
  EXPECT_EQ(active(*s, a), config(c));
}

// Found by a hostile trial: a history number at the end of its range wrapped and replaced a row.
TEST_P(PlanRolloutContract, DamagedHistoryNumbersAreRefusedNotWrapped) {
  TempDir dir;
  const std::string where = dir.file("plans.db");
  auto s = open_store(where);
  PlanRecord a = make_record(12);
  ASSERT_TRUE(s->put(a).is_ok());
  ASSERT_TRUE(s->put_candidate(variant(a, 53, 0.1), "tuned").is_ok());
  s.reset();
  raw_sql(where, "UPDATE plan_history SET seq = 9223372036854775807 WHERE seq = 2");
  s = open_store(where);
  const size_t rows = moves(*s, a).size();
  Status up = s->transition(key(a), plan_identity(53, a.knobs), PlanState::kActive, "x");
  EXPECT_EQ(up.code(), StatusCode::kCorruption) << up.to_string();
  EXPECT_EQ(active(*s, a), config(a));
  EXPECT_EQ(moves(*s, a).size(), rows);
}

KILN_STORE_CONTRACT_SUITE(PlanRolloutContract);

}  // namespace
}  // namespace kiln
