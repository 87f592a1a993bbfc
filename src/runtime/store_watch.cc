#include "runtime/store_watch.h"

#include <chrono>

namespace kiln::runtime_detail {

StoreWatch::StoreWatch(double every_s, std::function<void()> poll)
    : thread_([this, every_s, poll = std::move(poll)] {
        std::unique_lock<std::mutex> lock(mu_);
        while (!cv_.wait_for(lock, std::chrono::duration<double>(every_s), [this] { return stop_; })) {
          lock.unlock();
          poll();
          lock.lock();
        }
      }) {}

StoreWatch::~StoreWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace kiln::runtime_detail
