// prime_cudnn (kiln/runtime/cudnn_primer.h) needs no GPU: it runs here as on the GPU machine.
#include "kiln/runtime/cudnn_primer.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "kiln/lower/lower.h"

namespace kiln {
namespace {

TEST(CudnnPrimer, BuildsOnceWithoutAGpuAndLaterCallsReturnItsStatus) {
  std::vector<PrimeReport> reports(4);
  std::vector<std::thread> threads;
  for (auto& r : reports) threads.emplace_back([&r] { r = prime_cudnn(); });
  for (auto& t : threads) t.join();
  int first = 0;
  for (const PrimeReport& r : reports) {
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    if (r.first) {
      ++first;
      EXPECT_GT(r.ms, 0.0);
    } else {
      EXPECT_EQ(r.ms, 0.0);
    }
  }
  EXPECT_LE(first, 1);  // one build at most, whoever asked first (0: a test before this one primed)
  const PrimeReport again = prime_cudnn();
  EXPECT_FALSE(again.first);
  EXPECT_TRUE(again.status.is_ok());
  // With the cuDNN Kiln is built against (9.19) the pinned engine builds: the cheap trigger, not mode A's query. A
  // cuDNN where it does not build still primes (by the query) but at twice the cost: find the engine its heuristics
  // choose for the primer's graph and set kPrimerEngine to it.
  EXPECT_EQ(again.how, "engine " + std::to_string(kPrimerEngine) + " pinned") << again.how;
}

// start_priming_cudnn() returns at once and its thread is joined by the object it returns, moved or not; threads
// started after the first priming return at once.
TEST(CudnnPrimer, PrimerThreadsAreJoinedByTheirOwners) {
  PrimerThread a = start_priming_cudnn();
  PrimerThread b = start_priming_cudnn();
  PrimerThread moved = std::move(b);
  moved.join();
  moved.join();          // twice is harmless
  a = std::move(moved);  // joins a's thread first
  a.join();
  const PrimeReport r = prime_cudnn();
  EXPECT_FALSE(r.first);
  EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
  PrimerThread empty;  // default: nothing to join
}

// Review: move-assignment over a running PrimerThread joins it and takes the other's (still running or not),
// a self-move keeps the thread, and moved-from objects are empty (their destructors join nothing).
TEST(CudnnPrimer, PrimerThreadMovesJoinWhatTheyReplaceAndSelfMovesKeep) {
  PrimerThread a = start_priming_cudnn();
  PrimerThread b = start_priming_cudnn();
  PrimerThread& also_a = a;
  a = std::move(also_a);  // self: nothing joined, nothing lost
  a = std::move(b);       // a's thread joined first, b's taken while it may still run
  PrimerThread c;
  c = std::move(a);  // into an empty one
  std::vector<PrimerThread> v;
  v.push_back(std::move(c));
  v.push_back(start_priming_cudnn());
  v.clear();  // joins both
  EXPECT_FALSE(prime_cudnn().first);
}

TEST(CudnnPrimer, TheBuiltInProfileIsTheRecordedH200) {
  auto p = builtin_h200_profile();
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->gpu_name, "NVIDIA H200");
  EXPECT_EQ(p->sm_version, 90);
  EXPECT_EQ(p->sm_count, 132);
  EXPECT_NE(p->cudnn_device_properties.find("multiProcessorCount"), std::string::npos);
  auto bad = parse_device_profile("{\"gpu_name\": 3}", "x.json");
  EXPECT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("device profile 'x.json'"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace kiln
