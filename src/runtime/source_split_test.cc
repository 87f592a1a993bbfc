// The split source (runtime/plan_sources.h SplitSource) through the Planner with a fake backend: tuned plans of
// smaller shapes on their rows of the caller's buffers.
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

// A new shape that is a sum of tuned shapes (kiln/runtime/padding.h "Split stopgaps"): their stored plans run
// one after another, each on its own rows of the caller's buffers, with no copies; then its own plan
// replaces it.
TEST(PlannerSplit, ASumOfTunedShapesRunsAsTheirPlansOnTheirRowsThenIsPromoted) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->compute_rows = true;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored = {"tokens=32", "tokens=64", "tokens=128"};
  for (int64_t t : {32, 64, 128})
    f.backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 96}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  EXPECT_EQ(a->source, PlanSource::kSplit);
  EXPECT_EQ(a->plan->built_from(), PlanSource::kSplit);
  EXPECT_TRUE(plan_source_is_stopgap(a->source));
  EXPECT_NE(a->why.find("split: tokens 96 = 64 + 32, the tuned plans on their rows of the caller's buffers"),
            std::string::npos)
      << a->why;
  EXPECT_EQ(a->plan->workspace_bytes(), 1024);           // the parts share one: no scratch
  EXPECT_EQ(a->plan->identity(), "split[eng7 + eng7]");  // the stored plans of 64 and 32, in run order
  ASSERT_EQ(a->plan->parts().size(), 2u);
  EXPECT_EQ(a->plan->parts()[0]->signature().shape_key, "tokens=64");
  EXPECT_EQ(f.backend->dynamic_builds.load(), 0);

  std::vector<uint16_t> x(96 * 128), w(128 * 256), b(256), y(96 * 256 + 64, 0xBEEF);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i % 1000);
  alignas(256) static char ws[1024];
  const int copies0 = FakeBackend::host_copies.load();
  const int runs0 = f.backend->runs.load();
  Status s = a->plan->execute(
      nullptr, {{"x", {x.data(), x.size() * 2}}, {"w", {w.data()}}, {"b", {b.data()}}, {"y", {y.data(), 96 * 256 * 2}}},
      ws);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_EQ(FakeBackend::host_copies.load(), copies0) << "a split copies nothing";
  EXPECT_EQ(f.backend->runs.load() - runs0, 2);
  // Rows 0..63 by the 64 plan (+64), rows 64..95 by the 32 plan (+32), each from its own input row.
  for (int64_t r = 0; r < 96; ++r)
    for (int64_t j = 0; j < 256; j += 37)
      ASSERT_EQ(y[r * 256 + j], static_cast<uint16_t>(x[r * 128 + j % 128] + (r < 64 ? 64 : 32))) << r << "," << j;
  for (size_t i = 96 * 256; i < y.size(); ++i) ASSERT_EQ(y[i], 0xBEEF) << "written past the caller's rows at " << i;

  // The parts' plans are held: hits.
  auto part = f.planner->obtain(*pg, {{"tokens", 32}});
  ASSERT_TRUE(part.is_ok());
  EXPECT_EQ(part->source, PlanSource::kMemory);

  f.planner->wait_for_promotions();
  auto p = f.planner->obtain(*pg, {{"tokens", 96}});
  ASSERT_TRUE(p.is_ok());
  EXPECT_EQ(p->source, PlanSource::kMemory);
  EXPECT_EQ(p->plan->built_from(), PlanSource::kBucket);
  const PlannerStats st = f.planner->stats();
  EXPECT_EQ(st.served[static_cast<int>(PlanSource::kSplit)], 1);
  EXPECT_EQ(st.promotions, 1);
  EXPECT_EQ(st.stopgaps, 0);
  EXPECT_NE(st.text().find("split 1"), std::string::npos) << st.text();
}

// A shape past every tuned one runs as a repeated part; one that is no short sum is padded, and with split off
// the sum is padded too.
TEST(PlannerSplit, PastTheLargestTunedShapeTooAndPaddedWhereItIsNoShortSum) {
  for (int mode = 0; mode < 3; ++mode) {
    auto b = std::make_unique<FakeBackend>();
    FakeBackend* backend = b.get();
    backend->compute_rows = true;
    PlannerOptions o;
    o.buckets = *BucketPolicy::parse("tokens=pow2");
    o.split_max_parts = 2;
    if (mode == 2) o.split = false;
    auto planner = Planner::create_with_backend(std::move(b), o);
    auto pg = planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    backend->stored = {"tokens=8", "tokens=128"};
    for (int64_t t : {8, 128})
      backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
    if (mode == 0) {  // 256 = 128 + 128: no tuned shape is as large, so nothing else but a build could serve it
      auto a = planner->obtain(*pg, {{"tokens", 256}});
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      EXPECT_EQ(a->source, PlanSource::kSplit) << a->why;
      EXPECT_NE(a->why.find("tokens 256 = 128 + 128"), std::string::npos) << a->why;
      std::vector<uint16_t> x(256 * 128, 3), w(128 * 256), bias(256), y(256 * 256, 0);
      alignas(256) static char ws[1024];
      ASSERT_TRUE(
          a->plan->execute(nullptr, {{"x", {x.data()}}, {"w", {w.data()}}, {"b", {bias.data()}}, {"y", {y.data()}}}, ws)
              .is_ok());
      EXPECT_EQ(y[0], 3 + 128);
      EXPECT_EQ(y[255 * 256 + 255], 3 + 128) << "the second 128 rows were not written";
    } else {  // 120 = 8 x 15 (more than 2 parts), or split off: padded on the 128 plan
      auto a = planner->obtain(*pg, {{"tokens", 120}});
      ASSERT_TRUE(a.is_ok()) << a.status().to_string();
      EXPECT_EQ(a->source, PlanSource::kPadded) << a->why;
      if (mode == 1)
        EXPECT_NE(a->why.find("split: tokens 120 is no sum of at most 2 tuned extents"), std::string::npos) << a->why;
      else EXPECT_EQ(a->why.find("split:"), std::string::npos) << a->why;
    }
    planner->wait_for_promotions();
  }
}

// A shape that is no sum of tuned shapes is covered by overlapping parts (kiln/runtime/padding.h cover_extents):
// tokens 7 with 4 tuned runs the 4 plan on rows 0..3, then on rows 3..6; no copies, nothing past the caller's
// rows. A call whose output shares memory with an input is refused before anything runs; with split_overlap off
// the shape is padded instead.
TEST(PlannerSplit, NoSumIsCoveredByOverlappingPartsUnlessOff) {
  for (bool overlap : {true, false}) {
    auto b = std::make_unique<FakeBackend>();
    FakeBackend* backend = b.get();
    backend->compute_rows = true;
    PlannerOptions o;
    o.buckets = *BucketPolicy::parse("tokens=pow2");
    o.split_overlap = overlap;
    auto planner = Planner::create_with_backend(std::move(b), o);
    auto pg = planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    backend->stored = {"tokens=4", "tokens=8"};
    for (int64_t t : {4, 8})
      backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
    auto a = planner->obtain(*pg, {{"tokens", 7}});
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    if (!overlap) {
      EXPECT_EQ(a->source, PlanSource::kPadded) << a->why;
      EXPECT_NE(a->why.find("split: tokens 7 is no sum of at most 3 tuned extents (overlapping parts are off)"),
                std::string::npos)
          << a->why;
      planner->wait_for_promotions();
      continue;
    }
    EXPECT_EQ(a->source, PlanSource::kSplit) << a->why;
    EXPECT_NE(a->why.find("split: tokens 7 covered by 4 + 4 (the last part on rows 3..6, 1 of them computed twice)"),
              std::string::npos)
        << a->why;
    EXPECT_EQ(a->plan->identity(), "split[eng7 + eng7]");
    std::vector<uint16_t> x(7 * 128), w(128 * 256), bias(256), y(7 * 256 + 64, 0xBEEF);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i % 1000);
    alignas(256) static char ws[1024];
    const int copies0 = FakeBackend::host_copies.load();
    const int runs0 = backend->runs.load();
    Status s = a->plan->execute(
        nullptr,
        {{"x", {x.data(), x.size() * 2}}, {"w", {w.data()}}, {"b", {bias.data()}}, {"y", {y.data(), 7 * 256 * 2}}}, ws);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    EXPECT_EQ(FakeBackend::host_copies.load(), copies0) << "a cover copies nothing";
    EXPECT_EQ(backend->runs.load() - runs0, 2);
    for (int64_t r = 0; r < 7; ++r)  // every row from its own input row, by a 4 plan (+4)
      for (int64_t j = 0; j < 256; j += 37)
        ASSERT_EQ(y[r * 256 + j], static_cast<uint16_t>(x[r * 128 + j % 128] + 4)) << r << "," << j;
    for (size_t i = 7 * 256; i < y.size(); ++i) ASSERT_EQ(y[i], 0xBEEF) << "written past the caller's rows at " << i;

    // The output inside the input's memory: the last part would read rows the first one wrote.
    std::vector<uint16_t> shared(7 * 256 + 7 * 128);
    const int runs1 = backend->runs.load();
    Status aliased = a->plan->execute(
        nullptr, {{"x", {shared.data() + 7 * 64}}, {"w", {w.data()}}, {"b", {bias.data()}}, {"y", {shared.data()}}},
        ws);
    EXPECT_EQ(aliased.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(aliased.message().find("output 'y' shares memory with input 'x'"), std::string::npos)
        << aliased.message();
    EXPECT_EQ(backend->runs.load(), runs1) << "nothing ran";
    planner->wait_for_promotions();
  }
}

// Review: with two dynamic dims, an exact sum in one dim is preferred to a cover in another (a cover computes rows
// twice and refuses in-place calls that an exact split serves). Here "a" (first in the shape's order) has only a
// cover (4 + 4 for 6), "b" an exact sum (4 + 4 = 8).
TEST(PlannerSplit, AnExactSumInAnyDimIsPreferredToACover) {
  Fixture f("", NewShapes::kStopgap);
  auto g = parse_spec_string(R"({"name": "two", "io_dtype": "fp16", "dynamic": {"a": 6, "b": 8},
    "tensors": {"p": {"dims": ["a", 128]}, "q": {"dims": ["b", 128]}},
    "nodes": [{"name": "r1", "op": "relu", "inputs": ["p"], "outputs": ["u"]},
              {"name": "r2", "op": "relu", "inputs": ["q"], "outputs": ["v"]}],
    "outputs": ["u", "v"]})",
                             "two.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  auto pg = f.planner->prepare(*g);
  ASSERT_TRUE(pg.is_ok()) << pg.status().to_string();
  auto key = [&](int64_t a, int64_t b) {
    auto r = reshape_graph(*pg->graph, {{"a", a}, {"b", b}});
    return r.is_ok() ? compute_signature(*r)->shape_key : std::string();
  };
  f.backend->stored = {key(4, 8), key(6, 4)};
  f.backend->tuned = {TunedShape{"a=4,b=8", {{"a", 4}, {"b", 8}}, EngineConfig{41, {}}},
                      TunedShape{"a=6,b=4", {{"a", 6}, {"b", 4}}, EngineConfig{42, {}}}};
  auto got = f.planner->obtain(*pg, {{"a", 6}, {"b", 8}});
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  EXPECT_EQ(got->source, PlanSource::kSplit) << got->why;
  EXPECT_NE(got->why.find("split: b 8 = 4 + 4"), std::string::npos) << got->why;
  EXPECT_EQ(got->why.find("covered"), std::string::npos) << got->why;
  f.planner->wait_for_promotions();
}

// Review: a cover's `why` names the last part's rows and how many are computed twice (60 = 32 + 32: rows
// 28..59, 4 twice; a cover of exactly split_max_parts parts: 9 as 4 + 4 + 4, the last on rows 5..8, 3 twice), and
// every row is computed from its own input row.
TEST(PlannerSplit, ACoversWhyNamesItsRowsAndEveryRowIsRight) {
  struct Case {
    int64_t n;
    std::vector<int64_t> tuned;
    std::string why;
  };
  for (const Case& c :
       {Case{60, {32, 64}, "tokens 60 covered by 32 + 32 (the last part on rows 28..59, 4 of them"},
        Case{9, {4, 16}, "tokens 9 covered by 4 + 4 + 4 (the last part on rows 5..8, 3 of them"},
        Case{36, {4, 32, 64}, "tokens 36 covered by 32 + 4 (the last part on rows 32..35, 0 of them"}}) {
    Fixture f("tokens=pow2", NewShapes::kStopgap);
    f.backend->compute_rows = true;
    auto pg = f.planner->prepare(token_graph());
    ASSERT_TRUE(pg.is_ok());
    for (int64_t t : c.tuned) {
      f.backend->stored.insert("tokens=" + std::to_string(t));
      f.backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
    }
    auto a = f.planner->obtain(*pg, {{"tokens", c.n}});
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    if (c.n == 36) {  // 32 + 4 is an exact sum: no cover at all
      EXPECT_NE(a->why.find("tokens 36 = 32 + 4"), std::string::npos) << a->why;
      f.planner->wait_for_promotions();
      continue;
    }
    EXPECT_EQ(a->source, PlanSource::kSplit) << a->why;
    EXPECT_NE(a->why.find(c.why), std::string::npos) << a->why;
    const size_t n = static_cast<size_t>(c.n);
    std::vector<uint16_t> x(n * 128), w(128 * 256), bias(256), y(n * 256 + 64, 0xBEEF);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i % 1000);
    alignas(256) static char ws[1024];
    ASSERT_TRUE(
        a->plan->execute(nullptr, {{"x", {x.data()}}, {"w", {w.data()}}, {"b", {bias.data()}}, {"y", {y.data()}}}, ws)
            .is_ok());
    const int64_t part = c.n == 60 ? 32 : 4;
    for (size_t r = 0; r < n; ++r)
      for (size_t j = 0; j < 256; j += 37)
        ASSERT_EQ(y[r * 256 + j], static_cast<uint16_t>(x[r * 128 + j % 128] + part)) << c.n << ": " << r;
    for (size_t i = n * 256; i < y.size(); ++i) ASSERT_EQ(y[i], 0xBEEF) << c.n << ": past the rows at " << i;
    f.planner->wait_for_promotions();
  }
}

// Review: the cover's aliasing check. Buffers side by side in one allocation are disjoint and run; an output whose
// last bytes overlap an input's first ones, one equal to an input, and one over a non-varying input (the weights,
// which the last part reads after the first wrote) are refused before anything runs.
TEST(PlannerSplit, ACoverRefusesOverlapsOnlyWhereTheBytesShare) {
  Fixture f("tokens=pow2", NewShapes::kStopgap);
  f.backend->compute_rows = true;
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  f.backend->stored = {"tokens=4", "tokens=8"};
  for (int64_t t : {4, 8})
    f.backend->tuned.push_back(TunedShape{"tokens=" + std::to_string(t), {{"tokens", t}}, EngineConfig{41, {}}});
  auto a = f.planner->obtain(*pg, {{"tokens", 7}});
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_EQ(a->source, PlanSource::kSplit) << a->why;
  // x: 7 x 128 fp16 = 1792 bytes (7 rows of 256); y: 7 x 256 fp16 = 3584; w: 65536; b: 512.
  constexpr size_t kX = 7 * 128, kY = 7 * 256, kW = 128 * 256, kB = 256;
  std::vector<uint16_t> arena(kX + kY + kW + kB + 4 * 128);
  uint16_t* base = arena.data() + (256 - reinterpret_cast<uintptr_t>(arena.data()) % 256) % 256 / 2;
  alignas(256) static char ws[1024];
  auto run = [&](uint16_t* x, uint16_t* y, uint16_t* w, uint16_t* b) {
    return a->plan->execute(nullptr, {{"x", {x}}, {"w", {w}}, {"b", {b}}, {"y", {y}}}, ws);
  };
  uint16_t* x = base;
  uint16_t* y = x + kX;  // right after x: disjoint
  uint16_t* w = y + kY;
  uint16_t* b = w + kW;
  Status adjacent = run(x, y, w, b);
  EXPECT_TRUE(adjacent.is_ok()) << adjacent.to_string();
  // y ends 256 bytes into x (y = x - 3584 + 256): partial overlap.
  std::vector<uint16_t> arena2(kY + kX + 256);
  uint16_t* base2 = arena2.data() + (256 - reinterpret_cast<uintptr_t>(arena2.data()) % 256) % 256 / 2;
  const int runs0 = f.backend->runs.load();
  Status tail = run(base2 + kY - 128, base2, w, b);
  EXPECT_EQ(tail.code(), StatusCode::kInvalidArgument) << tail.to_string();
  EXPECT_NE(tail.message().find("output 'y' shares memory with input 'x'"), std::string::npos) << tail.message();
  Status same = run(x, x, w, b);
  EXPECT_EQ(same.code(), StatusCode::kInvalidArgument) << same.to_string();
  Status weights = run(x, w, w, b);
  EXPECT_EQ(weights.code(), StatusCode::kInvalidArgument) << weights.to_string();
  EXPECT_NE(weights.message().find("output 'y' shares memory with input 'w'"), std::string::npos) << weights.message();
  EXPECT_EQ(f.backend->runs.load(), runs0) << "nothing ran";
  f.planner->wait_for_promotions();
}

TEST(PlannerSplit, MaxPartsOutOfRangeIsRefusedByCreate) {
  for (int bad : {1, 0, -1, 65}) {
    PlannerOptions o;
    o.split_max_parts = bad;
    auto p = Planner::create(o);
    ASSERT_FALSE(p.is_ok());
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("PlannerOptions::split_max_parts must be 2..64 (one part is the shape itself), "
                                        "got " +
                                        std::to_string(bad)),
              std::string::npos)
        << p.status().message();
  }
}

}  // namespace
}  // namespace kiln
