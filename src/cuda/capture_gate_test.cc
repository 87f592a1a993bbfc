// The capture gate (kiln/cuda/capture_gate.h): synchronizing work waits for captures on other threads and
// captures wait for it; nested holds on one thread never wait for themselves. Host only: no CUDA call.
#include "kiln/cuda/capture_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace kiln {
namespace {

using namespace std::chrono_literals;

TEST(CaptureGate, SynchronizingWorkWaitsForACaptureOnAnotherThread) {
  std::atomic<bool> capture_ended{false}, work_ran_during_capture{false};
  std::promise<void> capturing;
  std::thread capturer([&] {
    CaptureGuard guard;
    capturing.set_value();
    std::this_thread::sleep_for(200ms);
    capture_ended = true;
  });
  capturing.get_future().wait();
  {
    SynchronizingWork work;
    work_ran_during_capture = !capture_ended.load();
  }
  capturer.join();
  EXPECT_FALSE(work_ran_during_capture.load()) << "the work began before the capture on the other thread ended";
}

TEST(CaptureGate, ACaptureWaitsForSynchronizingWorkInProgress) {
  std::atomic<bool> work_ended{false}, captured_during_work{false};
  std::promise<void> working;
  std::thread worker([&] {
    SynchronizingWork work;
    working.set_value();
    std::this_thread::sleep_for(200ms);
    work_ended = true;
  });
  working.get_future().wait();
  {
    CaptureGuard guard;
    captured_during_work = !work_ended.load();
  }
  worker.join();
  EXPECT_FALSE(captured_during_work.load()) << "the capture began before the other thread's work ended";
}

TEST(CaptureGate, CapturesOnSeveralThreadsHoldItTogether) {
  CaptureGuard mine;
  auto other = std::async(std::launch::async, [] {
    CaptureGuard theirs;  // would block for ever if captures excluded one another
    return true;
  });
  ASSERT_EQ(other.wait_for(5s), std::future_status::ready) << "a second capture waited for the first";
  EXPECT_TRUE(other.get());
}

TEST(CaptureGate, NestedHoldsOnOneThreadDoNotWaitForThemselves) {
  auto nested = std::async(std::launch::async, [] {
    {
      CaptureGuard capture;
      SynchronizingWork work_under_capture;  // e.g. a first-use check started while this thread captures
      CaptureGuard again;
    }
    {
      SynchronizingWork work;
      CaptureGuard capture_in_work;  // e.g. the tuner's graph timing inside a build promotion
      SynchronizingWork again;
    }
    return true;
  });
  ASSERT_EQ(nested.wait_for(5s), std::future_status::ready) << "a nested hold waited for its own thread";
  EXPECT_TRUE(nested.get());
  // And the gate is free afterwards: another thread's work does not wait.
  auto after = std::async(std::launch::async, [] {
    SynchronizingWork work;
    return true;
  });
  ASSERT_EQ(after.wait_for(5s), std::future_status::ready) << "a nested hold was not released";
}

}  // namespace
}  // namespace kiln
