// The padded source (runtime/plan_sources.h PaddedSource) through the Planner with a fake backend: a larger tuned
// shape's plan on scratch, its promotion, preload and its warm-up.
#include <gtest/gtest.h>

#include <unistd.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes

// The token graph prepared, with tokens=128 stored and tuned (eng41): the padded stopgaps' representative.
StatusOr<PreparedGraph> prepared_with_128_tuned(Fixture& f) {
  f.backend->stored.insert("tokens=128");
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  return f.planner->prepare(token_graph());
}

// A new shape in a tuned bucket: the representative's stored plan runs it at once on scratch copies
// (kiln/runtime/padding.h), then its own static plan replaces it.
TEST(PlannerPadded, ANewShapeRunsOnItsBucketsTunedPlanThenIsPromoted) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->compute_rows = true;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored.insert("tokens=128");
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {{"k2", 4}}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kPadded);
  EXPECT_EQ(a->plan->built_from(), PlanSource::kPadded);
  EXPECT_EQ(a->plan->config().identity(), "eng7");  // the stored plan's (the fake store builds eng7)
  EXPECT_NE(a->why.find("padded: runs the plan tuned for tokens=128 on scratch (x 25600 of 32768 bytes, y 51200 of "
                        "65536 bytes)"),
            std::string::npos)
      << a->why;
  EXPECT_EQ(f.backend->dynamic_builds.load(), 0);
  // Its workspace: the scratch of x and y, then the larger plan's own 1024 bytes.
  EXPECT_EQ(a->plan->workspace_bytes(), 32768 + 65536 + 1024);

  // Run it on the caller's buffers of 100 rows, with a canary past y's end.
  std::vector<uint16_t> x(100 * 128), w(128 * 256), b(256), y(100 * 256 + 64, 0xBEEF);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i % 1000);
  alignas(256) static char ws[32768 + 65536 + 1024];
  const int copies0 = FakeBackend::host_copies.load();
  Status s = a->plan->execute(
      nullptr,
      {{"x", {x.data(), x.size() * 2}}, {"w", {w.data()}}, {"b", {b.data()}}, {"y", {y.data(), 100 * 256 * 2}}}, ws);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(FakeBackend::host_copies.load() - copies0, 2);  // x in, y out
  for (int64_t r = 0; r < 100; ++r)
    for (int64_t j = 0; j < 256; j += 37)
      ASSERT_EQ(y[r * 256 + j], static_cast<uint16_t>(x[r * 128 + j % 128] + 128)) << r << "," << j;
  for (size_t i = 100 * 256; i < y.size(); ++i) ASSERT_EQ(y[i], 0xBEEF) << "written past the caller's rows at " << i;
  // Too small a workspace is refused before anything runs.
  const int runs0 = f.backend->runs.load();
  EXPECT_FALSE(
      a->plan->execute(nullptr, {{"x", {x.data()}}, {"w", {w.data()}}, {"b", {b.data()}}, {"y", {y.data()}}}, nullptr)
          .is_ok());
  EXPECT_EQ(f.backend->runs.load(), runs0);

  // The representative's plan is held now: a hit, the same object the padded plan runs.
  auto rep = f.planner->obtain(*pg, {{"tokens", 128}});
  ASSERT_TRUE(rep.is_ok());
  EXPECT_EQ(rep->source, PlanSource::kMemory);

  // Promotion: the bucket's configuration built for 100, which then computes with 100 rows.
  f.planner->wait_for_promotions();
  // tokens=128 once and the promotion's 100: obtain() did not ask the store for 100, which the structure's
  // tuned shapes do not hold (its promotion asks it first).
  EXPECT_EQ(f.backend->store_calls.load(), 2);
  auto p = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->source, PlanSource::kMemory);
  EXPECT_EQ(p->plan->built_from(), PlanSource::kBucket);
  ASSERT_TRUE(
      p->plan->execute(nullptr, {{"x", {x.data()}}, {"w", {w.data()}}, {"b", {b.data()}}, {"y", {y.data()}}}, ws)
          .is_ok());
  EXPECT_EQ(y[5 * 256 + 3], static_cast<uint16_t>(x[5 * 128 + 3] + 100));
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kPadded)], 1);
  EXPECT_EQ(st.promotions, 1);
  EXPECT_EQ(st.stopgaps, 0);
  EXPECT_NE(st.text().find("padded 1"), std::string::npos) << st.text();
}

TEST(PlannerPadded, TwoNewShapesShareOneLoadOfTheirRepresentative) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  auto pg = prepared_with_128_tuned(f);
  ASSERT_TRUE(pg.is_ok());
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  auto b = f.planner->obtain(*pg, {{"tokens", 90}});
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->source, PlanSource::kPadded);
  EXPECT_EQ(b->source, PlanSource::kPadded);
  f.planner->wait_for_promotions();
  EXPECT_EQ(f.backend->store_calls.load(), 3);  // 128 once, the two promotions' misses (not the obtains)
}

// A plan stored for exactly the new shape that the structure's tuned shapes do not list (kiln compile's
// untuned plan, or one stored since they were read) is not asked for on the request's path, which a padded
// stopgap serves: the promotion asks the store first and swaps that plan in.
TEST(PlannerPadded, AnUntunedRecordOfTheShapeIsSwappedInByThePromotion) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored.insert("tokens=128");
  f.backend->stored.insert("tokens=100");  // stored, not tuned
  f.backend->stored.insert("tokens=256");
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  f.backend->tuned.push_back(TunedShape{"tokens=256", {{"tokens", 256}}, EngineConfig{41, {}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kPadded);
  EXPECT_NE(a->why.find("store: asked by the promotion"), std::string::npos) << a->why;
  f.planner->wait_for_promotions();
  auto b = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kMemory);
  EXPECT_EQ(b->plan->built_from(), PlanSource::kStore);
  EXPECT_EQ(f.backend->builds.load(), 0);  // nothing built: the stored plan replaced the stopgap
  // A shape the tuned shapes list is asked of the store first, as ever: a store hit, no stopgap.
  auto c = f.planner->obtain(*pg, {{"tokens", 256}});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->source, PlanSource::kStore) << c->why;
}

// PromoteBy::kTune: the stopgap's replacement is this shape tuned (within PromotionTuning's bounds).
TEST(PlannerPadded, PromotedByATuneOfTheShape) {
  Fixture f("tokens=pow2", NewShapes::kStopgap, PromoteBy::kTune);
  auto pg = prepared_with_128_tuned(f);
  ASSERT_TRUE(pg.is_ok());
  auto a = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kPadded);
  EXPECT_NE(a->why.find("its own plan is being tuned"), std::string::npos) << a->why;
  f.planner->wait_for_promotions();
  auto b = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->plan->built_from(), PlanSource::kTuned);
  EXPECT_EQ(b->plan->config().identity(), "eng99");
  EXPECT_EQ(b->plan->signature().shape_key, "tokens=100");
  EXPECT_EQ(f.backend->tunes.load(), 1);
  EXPECT_EQ(f.backend->last_tuning.top_k, 5);  // the Planner's bounds reach the tune
  EXPECT_EQ(f.backend->builds.load(), 0);
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotions, 1);
  EXPECT_EQ(st.promotions_tuned, 1);
  EXPECT_EQ(st.stopgaps, 0);
  EXPECT_NE(st.text().find("1 promoted, 1 by tuning"), std::string::npos) << st.text();
}

// A tuned winner that could not be stored still replaces the stopgap: a note, not a fallback.
TEST(PlannerPadded, ATunedWinnerNotStoredIsANoteNotAFallback) {
  Fixture f("tokens=pow2", NewShapes::kStopgap, PromoteBy::kTune);
  f.backend->tune_not_stored = true;
  auto pg = prepared_with_128_tuned(f);
  ASSERT_TRUE(pg.is_ok());
  ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", 100}}).is_ok());
  f.planner->wait_for_promotions();
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotions_tuned, 1);
  EXPECT_EQ(st.last_tune_fallback, "");
  EXPECT_EQ(st.last_tune_note, "mlp tokens=100: tuned eng99, not stored: the store is read-only (injected)");
  EXPECT_EQ(st.text().find("fell back"), std::string::npos) << st.text();
}

// Destroying the Planner cancels a background tune in progress instead of waiting for it to finish.
TEST(PlannerPadded, DestroyingThePlannerCancelsATuneInProgress) {
  auto f = std::make_unique<Fixture>("tokens=pow2", NewShapes::kStopgap, PromoteBy::kTune);
  FakeBackend* backend = f->backend;
  backend->tune_delay_ms = 20000;
  auto pg = f->planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  backend->stored.insert("tokens=128");
  backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  ASSERT_TRUE(f->planner->obtain(*pg, {{"tokens", 100}}).is_ok());
  while (backend->tunes.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const auto t0 = std::chrono::steady_clock::now();
  f->planner.reset();  // the backend dies with it: read the flag first
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 10000.0);  // far below the 20 s the tune would take
}

// Without promotions nothing would ask the store later: it is asked before the padded source, as ever.
TEST(PlannerPadded, WithoutPromotionsTheStoreIsAskedFirst) {
  auto b = std::make_unique<FakeBackend>();
  FakeBackend* backend = b.get();
  PlannerOptions o;
  o.new_shapes = NewShapes::kStopgap;
  o.promote = false;
  o.buckets = *BucketPolicy::parse("tokens=pow2");
  auto planner = Planner::create_with_backend(std::move(b), o);
  auto pg = planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  backend->stored.insert("tokens=128");
  backend->stored.insert("tokens=100");  // stored, not tuned
  backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  auto a = planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(a.is_ok());
  EXPECT_EQ(a->source, PlanSource::kStore) << a->why;
}

// A tune that finds no winner falls back to the static build, and the stats say why.
TEST(PlannerPadded, ATuneWithoutAWinnerFallsBackToTheBuild) {
  Fixture f("tokens=pow2", NewShapes::kStopgap, PromoteBy::kTune);
  f.backend->tune_finds_none = true;
  auto pg = prepared_with_128_tuned(f);
  ASSERT_TRUE(pg.is_ok());
  const int before = f.backend->store_calls.load();
  ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", 100}}).is_ok());
  f.planner->wait_for_promotions();
  // The padded stopgap loads the tuned 128's plan (one store call); the promotion asks the store once, before
  // its tune, not again before the build it falls back to (that was a third call).
  EXPECT_EQ(f.backend->store_calls.load(), before + 2);
  auto b = f.planner->obtain(*pg, {{"tokens", 100}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->plan->built_from(), PlanSource::kBucket);
  EXPECT_EQ(b->plan->config().identity(), "eng41");
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotions, 1);
  EXPECT_EQ(st.promotions_tuned, 0);
  EXPECT_EQ(st.last_tune_fallback, "mlp tokens=100: no correct candidate of 3 (injected)");
  EXPECT_NE(st.text().find("a tune fell back to a build: mlp tokens=100: no correct candidate"), std::string::npos)
      << st.text();
}

// Where padding does not apply the stopgap is a dynamic-shape build, and `why` says what padding lacked.
TEST(PlannerPadded, WithoutALargerTunedShapeOrItsRecordTheStopgapIsDynamic) {
  {
    // Covers off: 80 + 80 would cover 100 (PlannerSplit.NoSumIsCoveredByOverlappingPartsUnlessOff).
    Fixture f("tokens=ranges:65-200", NewShapes::kStopgap, PromoteBy::kBuild, /*split_overlap=*/false);
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    f.backend->stored.insert("tokens=80");
    f.backend->tuned.push_back(TunedShape{"tokens=80", {{"tokens", 80}}, EngineConfig{41, {}}});
    auto a = f.planner->obtain(*pg, {{"tokens", 100}});  // 80 < 100: no plan to pad into
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(a->source, PlanSource::kDynamic);
    EXPECT_NE(a->why.find("padded: no tuned shape at least as large in bucket tokens=65-200"), std::string::npos)
        << a->why;
    f.planner->wait_for_promotions();
  }
  {
    Fixture f("tokens=pow2", NewShapes::kStopgap);
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});  // no record
    auto a = f.planner->obtain(*pg, {{"tokens", 100}});
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(a->source, PlanSource::kDynamic);
    EXPECT_NE(a->why.find("padded: the plan tuned for tokens=128 did not load: miss"), std::string::npos) << a->why;
    f.planner->wait_for_promotions();
  }
}

TEST(PlannerPadded, OffByOptionAndNeverWhenBuildingNow) {
  for (int mode = 0; mode < 2; ++mode) {
    auto b = std::make_unique<FakeBackend>();
    FakeBackend* backend = b.get();
    PlannerOptions o;
    o.buckets = *BucketPolicy::parse("tokens=pow2");
    if (mode == 0) o.padded = false;
    else o.new_shapes = NewShapes::kBuildNow;
    auto planner = Planner::create_with_backend(std::move(b), o);
    auto pg = planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    backend->stored.insert("tokens=128");
    backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
    auto a = planner->obtain(*pg, {{"tokens", 100}});
    ASSERT_TRUE(a.is_ok());
    EXPECT_EQ(a->source, mode == 0 ? PlanSource::kDynamic : PlanSource::kBucket) << mode;
    planner->wait_for_promotions();
  }
}

// A service at start: every stored shape of the structure loaded, so they are hits and new shapes of
// their buckets are padded without loading anything.
TEST(PlannerPadded, PreloadHoldsEveryStoredShapeOfTheStructure) {
  // Covers off: 128 + 128 would cover 200 below; this test is about the padded path.
  Fixture f("tokens=pow2", NewShapes::kStopgap, PromoteBy::kBuild, /*split_overlap=*/false);
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored = {"tokens=128", "tokens=256"};
  for (int64_t t : {128, 256, 512})  // 512: tuned, but its record does not load here
    f.backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
  auto n = f.planner->preload(*pg, /*warm=*/true);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(n->loaded, 2);
  EXPECT_EQ(n->warmed, 2);
  EXPECT_EQ(f.backend->warmed.load(), 2);
  EXPECT_EQ(n->failed, 1);
  EXPECT_EQ(n->last_failure, "tokens=512: miss");
  // The padded path ran once, for a shape one below the tuned shape nearest the graph's own (64: 128), and
  // that plan is not held; the backend made its handles.
  EXPECT_TRUE(n->padded_warmed);
  EXPECT_EQ(f.backend->warmed_padded.load(), 1);
  EXPECT_EQ(f.backend->last_padded_warmed, "tokens=127");
  EXPECT_EQ(f.backend->concurrency_warms.load(), 1);
  EXPECT_EQ(f.planner->stats().cached, 2);
  EXPECT_EQ(f.planner->stats().served[static_cast<int>(PlanSource::kPadded)], 0) << "a warm-up serves no one";
  auto again = f.planner->preload(*pg);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->loaded, 0);  // held already: nothing loaded twice
  EXPECT_EQ(f.backend->warmed.load(), 2);
  const int calls = f.backend->store_calls.load();
  auto hit = f.planner->obtain(*pg, {{"tokens", 256}});
  ASSERT_TRUE(hit.is_ok());
  EXPECT_EQ(hit->source, PlanSource::kMemory);
  auto padded = f.planner->obtain(*pg, {{"tokens", 200}});
  ASSERT_TRUE(padded.is_ok());
  EXPECT_EQ(padded->source, PlanSource::kPadded) << padded->why;
  // Not even 200's own miss: its promotion asks (on the promotion thread, which may already have).
  EXPECT_NE(padded->why.find("store: asked by the promotion"), std::string::npos) << padded->why;
  f.planner->wait_for_promotions();
  EXPECT_EQ(f.backend->store_calls.load(), calls + 1);
}

// The padded warm-up runs only where padded stopgaps serve, and only for a shape that is untuned and in its
// representative's bucket; where none is, it is skipped without counting a failure.
TEST(PlannerPadded, PreloadWarmsThePaddedPathOnlyWhereItServes) {
  {
    Fixture f("tokens=pow2", NewShapes::kBuildNow);  // no stopgaps
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    f.backend->stored = {"tokens=128"};
    f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
    auto r = f.planner->preload(*pg, /*warm=*/true);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_FALSE(r->padded_warmed);
    EXPECT_EQ(f.backend->warmed_padded.load(), 0);
    EXPECT_EQ(f.backend->concurrency_warms.load(), 1);
  }
  {
    // 127 is not in 128's exact bucket, but 128 is at most twice as large: padded all the same. A padded
    // stopgap warms the padded path whatever the buckets.
    Fixture f("tokens=exact", NewShapes::kStopgap);
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    f.backend->stored = {"tokens=128"};
    f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
    auto r = f.planner->preload(*pg, /*warm=*/true);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_TRUE(r->padded_warmed);
    EXPECT_EQ(f.backend->last_padded_warmed, "tokens=127");
    EXPECT_EQ(r->failed, 0) << r->last_failure;
  }
  {
    // The tuned shape nearest the graph's own (200) is 128, whose neighbour 127 is tuned itself: the next
    // nearest, 127, gives 126.
    Fixture f("tokens=pow2", NewShapes::kStopgap);
    auto pg = f.planner->prepare(token_graph(200));
    ASSERT_TRUE(pg.is_ok());
    f.backend->stored = {"tokens=127", "tokens=128"};
    for (int64_t t : {127, 128})
      f.backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
    auto r = f.planner->preload(*pg, /*warm=*/true);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_TRUE(r->padded_warmed);
    EXPECT_EQ(f.backend->last_padded_warmed, "tokens=126");
  }
}

// A plan that loads but does not warm is held all the same (it runs, just not warm), and counted.
TEST(PlannerPadded, AWarmUpThatFailsKeepsThePlanAndSaysWhy) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->warm_fails = true;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored = {"tokens=128"};
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  auto r = f.planner->preload(*pg, /*warm=*/true);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->loaded, 1);
  EXPECT_EQ(r->warmed, 0);
  EXPECT_EQ(r->failed, 2);  // the plan's warm-up, then the padded one's
  EXPECT_FALSE(r->padded_warmed);
  EXPECT_EQ(r->last_failure, "padded warm-up: tokens=127: out of device memory (injected)");
  auto hit = f.planner->obtain(*pg, {{"tokens", 128}});
  ASSERT_TRUE(hit.is_ok());
  EXPECT_EQ(hit->source, PlanSource::kMemory);
}

// The tuned shapes of a structure are read from the store once, not on every miss; preload reads them
// again (a shape another process tuned meanwhile is found by its exact key all the same).
TEST(PlannerPadded, TunedShapesAreReadOncePerStructureAndAgainByPreload) {
  Fixture f("tokens=pow2", NewShapes::kBuildNow);
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->tuned.push_back(TunedShape{"tokens=128", {{"tokens", 128}}, EngineConfig{41, {}}});
  for (int t : {100, 90, 120}) ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", t}}).is_ok());
  EXPECT_EQ(f.backend->tuned_queries.load(), 1);
  // Tuned meanwhile: 256; seen after preload, by the bucket source of a new shape in 129-256.
  f.backend->tuned.push_back(TunedShape{"tokens=256", {{"tokens", 256}}, EngineConfig{42, {}}});
  auto before = f.planner->obtain(*pg, {{"tokens", 200}});
  ASSERT_TRUE(before.is_ok());
  EXPECT_EQ(before->source, PlanSource::kHeuristics) << before->why;
  ASSERT_TRUE(f.planner->preload(*pg).is_ok());
  EXPECT_EQ(f.backend->tuned_queries.load(), 2);
  auto after = f.planner->obtain(*pg, {{"tokens", 210}});
  ASSERT_TRUE(after.is_ok());
  EXPECT_EQ(after->source, PlanSource::kBucket) << after->why;
  EXPECT_EQ(after->plan->config().identity(), "eng42");
}

// The nearest covering shape may not pad (here it differs in h, an inner dim); a farther one that
// differs only in the rows does, and serves.
TEST(PlannerPadded, AFartherTunedShapeServesWhereTheNearestDoesNotPad) {
  Fixture f("tokens=ranges:1-256;h=ranges:1-8", NewShapes::kStopgap);
  auto g = parse_spec_string(R"({"name": "rows", "io_dtype": "fp16", "dynamic": {"tokens": 64, "h": 4},
    "tensors": {"x": {"dims": ["tokens", "h"]}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})",
                             "rows.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto pg = f.planner->prepare(*g);
  ASSERT_TRUE(pg.is_ok()) << pg.status().to_string();
  auto key = [&](int64_t tokens, int64_t h) {
    auto r = reshape_graph(*pg->graph, {{"tokens", tokens}, {"h", h}});
    return r.is_ok() ? compute_signature(*r)->shape_key : std::string();
  };
  f.backend->stored = {key(128, 5), key(256, 4)};
  f.backend->tuned = {TunedShape{"h=5,tokens=128", {{"h", 5}, {"tokens", 128}}, EngineConfig{41, {}}},
                      TunedShape{"h=4,tokens=256", {{"h", 4}, {"tokens", 256}}, EngineConfig{42, {}}}};
  auto a = f.planner->obtain(*pg, {{"tokens", 100}, {"h", 4}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kPadded) << a->why;
  EXPECT_NE(a->why.find("runs the plan tuned for h=4,tokens=256"), std::string::npos) << a->why;
  // Where none pads, `why` gives the nearest one's reason.
  f.backend->tuned.pop_back();
  Fixture f2("tokens=ranges:1-256;h=ranges:1-8", NewShapes::kStopgap);
  f2.backend->stored = {key(128, 5)};
  f2.backend->tuned = {TunedShape{"h=5,tokens=128", {{"h", 5}, {"tokens", 128}}, EngineConfig{41, {}}}};
  auto pg2 = f2.planner->prepare(*g);
  ASSERT_TRUE(pg2.is_ok());
  auto b = f2.planner->obtain(*pg2, {{"tokens", 100}, {"h", 4}});
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b->source, PlanSource::kDynamic);
  EXPECT_NE(b->why.find("padded: h=5,tokens=128: no padded plan: tensor 'x' varies in two dims"), std::string::npos)
      << b->why;
  f.planner->wait_for_promotions();
  f2.planner->wait_for_promotions();
}

// Many threads asking for new shapes of one bucket at once: each shape one padded plan, the
// representative loaded at most once per racing thread and held once.
TEST(PlannerPadded, ManyThreadsOnePaddedPlanPerShape) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->build_delay_ms = 5;
  auto pg = prepared_with_128_tuned(f);
  ASSERT_TRUE(pg.is_ok());
  std::atomic<int> errors{0}, padded{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      for (int r = 0; r < 20; ++r) {
        auto o = f.planner->obtain(*pg, {{"tokens", 100 + (i + r) % 4}});
        if (!o.is_ok()) ++errors;
        else if (o->source == PlanSource::kPadded) ++padded;
      }
    });
  for (auto& t : threads) t.join();
  f.planner->wait_for_promotions();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(padded.load(), 4);
  EXPECT_EQ(f.backend->dynamic_builds.load(), 0);
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.promotions, 4);
  EXPECT_EQ(st.cached, 5);  // four shapes and their representative
}

// A shape below its bucket's tuned shapes (pow2: 50 is in 33-64, where nothing is tuned) is padded on a tuned
// shape of another bucket at most twice as large; three times as large is not a stopgap (a dynamic build).
TEST(PlannerPadded, OutsideTheBucketAtMostTwiceAsLarge) {
  for (int64_t tuned_at : {100, 150}) {
    Fixture f("tokens=pow2", NewShapes::kStopgap);
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    const std::string key = "tokens=" + std::to_string(tuned_at);
    f.backend->stored.insert(key);
    f.backend->tuned.push_back(TunedShape{key, {{"tokens", tuned_at}}, EngineConfig{41, {}}});
    auto a = f.planner->obtain(*pg, {{"tokens", 50}});
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    if (tuned_at == 100) {
      EXPECT_EQ(a->source, PlanSource::kPadded) << a->why;
      EXPECT_NE(a->why.find("padded: runs the plan tuned for tokens=100"), std::string::npos) << a->why;
    } else {
      EXPECT_EQ(a->source, PlanSource::kDynamic) << a->why;
      EXPECT_NE(a->why.find("padded: no tuned shape at least as large in bucket tokens=33-64, nor one at most twice "
                            "as large outside it"),
                std::string::npos)
          << a->why;
    }
    f.planner->wait_for_promotions();
  }
}

// preload(warm) warms the padded path itself, even where a split would serve the shape one below a tuned one
// (7 = 4 + 2 + 1), and with the default exact buckets, whose padded stopgaps come from a tuned shape at most
// twice as large.
TEST(PlannerPadded, PreloadWarmsAPaddedPlanWhereSplitsServeAndWithExactBuckets) {
  for (const std::string buckets : {"tokens=pow2", ""}) {
    Fixture f(buckets, NewShapes::kStopgap);
    auto pg = f.planner->prepare(token_graph(8));
    ASSERT_TRUE(pg.is_ok());
    const std::vector<int64_t> tuned = buckets.empty() ? std::vector<int64_t>{8} : std::vector<int64_t>{1, 2, 4, 8};
    for (int64_t t : tuned) {
      const std::string key = "tokens=" + std::to_string(t);
      f.backend->stored.insert(key);
      f.backend->tuned.push_back(TunedShape{key, {{"tokens", t}}, EngineConfig{41, {}}});
    }
    auto n = f.planner->preload(*pg, /*warm=*/true);
    ASSERT_TRUE(n.is_ok()) << n.status().to_string();
    EXPECT_TRUE(n->padded_warmed) << buckets;
    EXPECT_EQ(f.backend->warmed_padded.load(), 1) << buckets;
    EXPECT_EQ(f.backend->last_padded_warmed, "tokens=7") << buckets;
    auto five = f.planner->obtain(*pg, {{"tokens", 5}});  // 4 + 1 where they are tuned, else padded on 8
    ASSERT_TRUE(five.is_ok());
    EXPECT_EQ(five->source, buckets.empty() ? PlanSource::kPadded : PlanSource::kSplit) << five->why;
    f.planner->wait_for_promotions();
  }
}

}  // namespace
}  // namespace kiln
