// Device tier for the timer: runs on a GPU machine, SKIPPED elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "gpu_test_util.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/cuda/device.h"
#include "kiln/measure/measure.h"

namespace kiln {
namespace {

#define ASSERT_OK(expr)                                    \
  do {                                                     \
    const auto& kiln_st_ = (expr);                         \
    ASSERT_TRUE(kiln_st_.is_ok()) << kiln_st_.to_string(); \
  } while (0)

MeasureOptions quick_options() {
  MeasureOptions o;
  o.stopping.time_budget_ms = 500.0;
  o.stopping.max_samples = 2000;
  return o;
}

// The settle time after each flush is idle GPU time before the start event: each sample's wall time holds it,
// its GPU time does not; with the blocking kernel and without it. A settle time out of range is refused by name.
TEST(Measure, TheSettleTimeIsIdleBeforeTheSampleAndNotInIt) {
  KILN_REQUIRE_GPU();
  auto buf = DeviceBuffer::allocate(size_t{1} << 20);
  ASSERT_OK(buf.status());
  auto launch = [&](cudaStream_t s) {
    return cuda_status(cudaMemsetAsync(buf->data(), 1, size_t{1} << 20, s), "memset");
  };
  for (bool blocking : {true, false}) {
    MeasureOptions o = quick_options();
    o.block_launch = blocking;
    o.settle_us = 2000.0;
    o.stopping.max_samples = 20;
    auto m = measure(launch, o);
    ASSERT_OK(m.status());
    EXPECT_DOUBLE_EQ(m->settle_us, 2000.0);
    EXPECT_DOUBLE_EQ(m->to_json()["settle_us"].get<double>(), 2000.0);
    EXPECT_LT(m->stats.median_ms, 1.0) << "a 1 MiB memset; the 2 ms settle must not be in the sample";
    EXPECT_GE(m->elapsed_ms, 2.0 * static_cast<double>(m->stats.samples)) << "each sample waited out the settle";
  }
  MeasureOptions hot = quick_options();
  hot.hot_cache = true;
  auto h = measure(launch, hot);
  ASSERT_OK(h.status());
  EXPECT_DOUBLE_EQ(h->settle_us, 0.0) << "no flush, nothing to settle";
  for (double bad : {-1.0, 2e6, std::nan("")}) {
    MeasureOptions o = quick_options();
    o.settle_us = bad;
    auto r = measure(launch, o);
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("settle_us"), std::string::npos) << r.status().message();
  }
}

TEST(Measure, MemsetOfOneGiBGivesSaneStatistics) {
  KILN_REQUIRE_GPU();
  const size_t bytes = size_t{1} << 30;
  auto buf = DeviceBuffer::allocate(bytes);
  ASSERT_OK(buf.status());
  auto m = measure([&](cudaStream_t s) { return cuda_status(cudaMemsetAsync(buf->data(), 0, bytes, s), "memset"); },
                   quick_options());
  ASSERT_OK(m.status());
  const SampleSummary& st = m->stats;
  EXPECT_GE(st.samples, 10u);
  EXPECT_GT(st.min_ms, 0.0);
  EXPECT_LE(st.min_ms, st.median_ms);
  EXPECT_LE(st.median_ms, st.max_ms);
  EXPECT_GT(st.mean_ms, 0.0);
  EXPECT_TRUE(std::isfinite(st.rel_error));
  // 1 GiB at no more than ~10 TB/s and no less than ~50 GB/s: between 0.1 ms and 25 ms.
  EXPECT_GT(st.median_ms, 0.1);
  EXPECT_LT(st.median_ms, 25.0);
  EXPECT_NE(m->stop_reason, StopReason::kNotStopped);
  EXPECT_GE(m->warmup_runs, 3);
  EXPECT_GT(m->flush_bytes, 0u);
  EXPECT_FALSE(m->device_name.empty());
  EXPECT_EQ(m->samples_ms.size(), st.samples);
  const double gbps = static_cast<double>(bytes) / (st.median_ms * 1e-3) / 1e9;
  std::printf("memset 1 GiB: median %.4f ms (%.0f GB/s), rel_error %.4f, %zu samples, stop %s, clocks %s\n",
              st.median_ms, gbps, st.rel_error, st.samples, stop_reason_name(m->stop_reason),
              m->meta()["clocks"].dump().c_str());
  nlohmann::json j = m->to_json();
  EXPECT_EQ(j["stop_reason"], stop_reason_name(m->stop_reason));
  EXPECT_TRUE(j["meta"].contains("clocks"));
}

TEST(Measure, StoppingRuleEndsSampling) {
  KILN_REQUIRE_GPU();
  auto buf = DeviceBuffer::allocate(1 << 20);
  ASSERT_OK(buf.status());
  auto launch = [&](cudaStream_t s) { return cuda_status(cudaMemsetAsync(buf->data(), 1, buf->size(), s), "memset"); };

  MeasureOptions o;
  o.stopping.target_rel_error = 0.0;  // unreachable unless all samples are identical
  o.stopping.time_budget_ms = 0.0;    // no budget
  o.stopping.min_samples = 5;
  o.stopping.max_samples = 37;
  auto m = measure(launch, o);
  ASSERT_OK(m.status());
  if (m->stop_reason == StopReason::kMaxSamples) {
    EXPECT_EQ(m->stats.samples, 37u);
  } else {
    EXPECT_EQ(m->stop_reason, StopReason::kConverged);  // identical samples: MAD 0
  }

  o.stopping.max_samples = 1000000;
  o.stopping.time_budget_ms = 100.0;
  m = measure(launch, o);
  ASSERT_OK(m.status());
  if (m->stop_reason != StopReason::kConverged) {
    EXPECT_EQ(m->stop_reason, StopReason::kTimeBudget);
    EXPECT_GE(m->elapsed_ms, 100.0);
    EXPECT_LT(m->elapsed_ms, 1000.0);
  }

  o = MeasureOptions{};  // defaults: a small memset converges quickly
  m = measure(launch, o);
  ASSERT_OK(m.status());
  EXPECT_NE(m->stop_reason, StopReason::kNotStopped);
  EXPECT_GE(m->stats.samples, o.stopping.min_samples);
}

// A read-heavy workload that fits in L2 must not look faster when the L2 is flushed before each sample.
TEST(Measure, ColdL2IsNotFasterThanHotForASmallWorkload) {
  KILN_REQUIRE_GPU();
  auto info = query_device(0);
  ASSERT_OK(info.status());
  // Source and destination together take a quarter of L2.
  const size_t bytes = std::max<size_t>(static_cast<size_t>(info->l2_cache_bytes) / 8, 1 << 20);
  auto src = DeviceBuffer::allocate(bytes);
  auto dst = DeviceBuffer::allocate(bytes);
  ASSERT_OK(src.status());
  ASSERT_OK(dst.status());
  ASSERT_OK(src->fill_bytes(3));
  auto launch = [&](cudaStream_t s) {
    return cuda_status(cudaMemcpyAsync(dst->data(), src->data(), bytes, cudaMemcpyDeviceToDevice, s), "memcpy");
  };
  auto timer = Timer::create(0);
  ASSERT_OK(timer.status());
  MeasureOptions cold = quick_options();
  MeasureOptions hot = quick_options();
  hot.hot_cache = true;
  auto c = timer->measure(launch, cold);
  auto h = timer->measure(launch, hot);
  ASSERT_OK(c.status());
  ASSERT_OK(h.status());
  EXPECT_EQ(h->flush_bytes, 0u);
  EXPECT_GE(c->flush_bytes, 2u * static_cast<size_t>(info->l2_cache_bytes));
  std::printf("copy %zu bytes: cold %.4f ms (±%.2f%%), hot %.4f ms (±%.2f%%)\n", bytes, c->stats.median_ms,
              100 * c->stats.rel_error, h->stats.median_ms, 100 * h->stats.rel_error);
  // Allow the two measurements' noise (and event resolution) before calling the cold median faster.
  const double slack = 2.0 * (c->stats.rel_error + h->stats.rel_error) * h->stats.median_ms + 0.001;
  EXPECT_GE(c->stats.median_ms + slack, h->stats.median_ms);
}

TEST(Measure, LaunchErrorsComeBackAsStatus) {
  KILN_REQUIRE_GPU();
  int calls = 0;
  auto m =
      measure([&](cudaStream_t) { return ++calls > 2 ? invalid_argument("synthetic launch failure") : Status::ok(); });
  ASSERT_FALSE(m.is_ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("synthetic launch failure"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("warm-up launch 2"), std::string::npos) << m.status().message();

  auto bad = measure(nullptr);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  MeasureOptions o;
  o.stopping.min_samples = 10;
  o.stopping.max_samples = 5;
  auto invalid = measure([](cudaStream_t) { return Status::ok(); }, o);
  EXPECT_EQ(invalid.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(invalid.status().message().find("min_samples"), std::string::npos);
}

// A launch that synchronises its stream would deadlock against the blocking kernel; the timer must
// notice the timeout, drop that sample and carry on without the kernel.
TEST(Measure, SynchronisingLaunchFallsBackFromBlockingKernel) {
  KILN_REQUIRE_GPU();
  auto buf = DeviceBuffer::allocate(1 << 20);
  ASSERT_OK(buf.status());
  MeasureOptions o;
  o.block_timeout_ms = 50.0;
  o.stopping.time_budget_ms = 200.0;
  auto m = measure(
      [&](cudaStream_t s) {
        KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(buf->data(), 0, buf->size(), s));
        KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
        return Status::ok();
      },
      o);
  ASSERT_OK(m.status());
  EXPECT_TRUE(m->block_launch);
  EXPECT_TRUE(m->block_launch_fell_back);
  EXPECT_GE(m->stats.samples, o.stopping.min_samples);
}

TEST(Measure, ClocksAreReportedOrUnknown) {
  KILN_REQUIRE_GPU();
  ClockReading c = read_sm_clock(0);
  if (nvml_available() && c.known) {
    EXPECT_GT(c.sm_mhz, 0u);
    if (c.max_sm_mhz) {
      EXPECT_LE(c.sm_mhz, c.max_sm_mhz);
    }
  } else {
    std::printf("NVML: %s\n", nvml_unavailable_reason().c_str());
  }
  nlohmann::json env = environment_meta({"measure_gpu_test"}, 0);
  EXPECT_FALSE(env["device"].is_null()) << env.dump();
  std::printf("%s\n", env.dump().c_str());
}

}  // namespace
}  // namespace kiln
