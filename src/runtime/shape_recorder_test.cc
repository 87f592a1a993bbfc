// ShapeRecorder (kiln/runtime/shape_recorder.h): what the Planner served, counted per source.
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

TEST(ShapeRecorder, CountsPerSourceWritesAndReadsItsFile) {
  Fixture f("tokens=pow2");
  auto pg = f.planner->prepare(token_graph());
  ASSERT_TRUE(pg.is_ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", 100}}).is_ok());
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(f.planner->obtain(*pg, {{"tokens", 7}}).is_ok());
  auto snap = f.planner->recorder().snapshot();
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].shape_key, "tokens=100");
  EXPECT_EQ(snap[0].count, 5);
  EXPECT_EQ(snap[0].sources.at("heuristics"), 1);
  EXPECT_EQ(snap[0].sources.at("memory"), 4);
  EXPECT_EQ(snap[0].graph, "mlp");
  const std::string path = ::testing::TempDir() + "/kiln_shapes_" + std::to_string(::getpid()) + ".json";
  std::remove(path.c_str());
  ASSERT_TRUE(f.planner->recorder().write_file(path).is_ok());
  Status again = f.planner->recorder().write_file(path);  // an existing file is not written over unasked
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("already exists"), std::string::npos) << again.to_string();
  EXPECT_TRUE(f.planner->recorder().write_file(path, /*overwrite=*/true).is_ok());
  auto back = read_shapes_file(path);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].structure, snap[0].structure);
  EXPECT_EQ((*back)[1].count, 2);
  std::remove(path.c_str());
  // Damaged files are refused naming the entry and field.
  auto bad = parse_shapes_json(
      R"({"format":"kiln-shapes","version":1,"shapes":[{"structure":"xyz","shape_key":"","count":1}]})", "f.json");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("f.json: shapes[0]: \"structure\" 'xyz' is not 32 lowercase hex digits"),
            std::string::npos)
      << bad.status().to_string();
  bad = parse_shapes_json(R"({"format":"kiln-shapes","version":2,"shapes":[]})", "f.json");
  EXPECT_NE(bad.status().message().find("version 2 (this Kiln reads version 1)"), std::string::npos);
  bad = parse_shapes_json("[1,2]", "f.json");
  EXPECT_NE(bad.status().message().find("not a recorded-shapes file"), std::string::npos);
  bad = parse_shapes_json(R"({"format":5,"version":1,"shapes":[]})", "f.json");  // a format of another type
  EXPECT_NE(bad.status().message().find("not a recorded-shapes file"), std::string::npos) << bad.status().to_string();
  for (const char* key : {"tokens=", "=5", "a=1,a=2", "tokens=0", "tokens=99999999999"}) {
    bad = parse_shapes_json(std::string(R"({"format":"kiln-shapes","version":1,"shapes":[{"structure":")") +
                                "0123456789abcdef0123456789abcdef\",\"shape_key\":\"" + key + "\",\"count\":1}]}",
                            "f.json");
    ASSERT_FALSE(bad.is_ok()) << key;
    EXPECT_NE(bad.status().message().find("f.json: shapes[0]: \"shape_key\""), std::string::npos)
        << bad.status().to_string();
  }
  auto zero = read_shapes_file("/dev/zero");  // a device: never read
  ASSERT_FALSE(zero.is_ok());
  EXPECT_NE(zero.status().message().find("is not a regular file"), std::string::npos) << zero.status().to_string();
  // A regular file past the limit (sparse: no disk used) is read in pieces up to the limit, then refused.
  const std::string big = ::testing::TempDir() + "/kiln_big_shapes_" + std::to_string(::getpid());
  std::ofstream(big).put(' ');
  ASSERT_EQ(::truncate(big.c_str(), (65LL << 20)), 0);
  auto over = read_shapes_file(big);
  std::remove(big.c_str());
  ASSERT_FALSE(over.is_ok());
  EXPECT_NE(over.status().message().find("over the limit"), std::string::npos) << over.status().to_string();
}

// Every Planner source has its own count (a stopgap's "dynamic" is not folded into "other").
TEST(ShapeRecorder, EveryPlannerSourceIsCountedByName) {
  ShapeRecorder rec;
  for (int i = 0; i < kPlanSourceCount; ++i)
    rec.record("s", "tokens=5", "g", plan_source_name(static_cast<PlanSource>(i)));
  auto shapes = rec.snapshot();
  ASSERT_EQ(shapes.size(), 1u);
  EXPECT_EQ(shapes[0].sources.size(), static_cast<size_t>(kPlanSourceCount));
  EXPECT_EQ(shapes[0].sources.count("other"), 0u);
  EXPECT_EQ(shapes[0].sources.at("dynamic"), 1);
}

// A FIFO (or any file that is not a regular one) is refused, not read forever.
TEST(ShapeRecorder, APipeIsRefusedNotWaitedOn) {
  const std::string fifo = ::testing::TempDir() + "/kiln_fifo_" + std::to_string(::getpid());
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = read_shapes_file(fifo);
  std::remove(fifo.c_str());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("is not a regular file"), std::string::npos) << r.status().to_string();
}

TEST(ShapeRecorder, ManyThreadsLoseNoCount) {
  ShapeRecorder r;
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i)
        r.record("0123456789abcdef0123456789abcdef", "tokens=" + std::to_string(i % 7), "g",
                 t % 2 ? "memory" : "bucket");
    });
  for (auto& t : threads) t.join();
  int64_t total = 0;
  for (const auto& s : r.snapshot()) total += s.count;
  EXPECT_EQ(total, 16 * 5000);
}

}  // namespace
}  // namespace kiln
