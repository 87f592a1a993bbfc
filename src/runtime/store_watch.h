// StoreWatch: a Planner's thread that asks a server store, every few seconds, which plans other processes
// stored (PlanBackend::changed_plans: PostgreSQL NOTIFY) and hands each notice to the Planner, which drops what
// it holds for that structure so that the next obtain() reads the new plan (docs/fleet.md "Change notices").
// Private to the runtime.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace kiln::runtime_detail {

class StoreWatch {
 public:
  // Calls `poll` every `every_s` seconds on a thread of its own, until destroyed.
  StoreWatch(double every_s, std::function<void()> poll);
  ~StoreWatch();  // stops the thread and joins it
  StoreWatch(const StoreWatch&) = delete;
  StoreWatch& operator=(const StoreWatch&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is made
};

}  // namespace kiln::runtime_detail
