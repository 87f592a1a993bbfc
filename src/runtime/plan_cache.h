// The memory source: the plans a Planner holds, by key (structure, names, shape), in shards under shared locks,
// with single flight for concurrent misses of one key. Private to the runtime layer.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "kiln/runtime/plan_types.h"

namespace kiln::runtime_detail {

// What one build produced, shared with every caller that waited for it.
struct Built {
  std::shared_ptr<const ExecutablePlan> plan;
  PlanSource source = PlanSource::kHeuristics;
  std::string why;
};

class PlanCache {
 public:
  // hold()'s generation for a plan that is current whatever a job stored meanwhile (a stored record just read).
  static constexpr uint64_t kAnyGeneration = ~uint64_t{0};
  // The key: the prepared structure, its names and the values (sorted by symbol: a std::map).
  static std::string key(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape);

  // The plan held under `key`, or null: a lookup under a shared lock.
  std::shared_ptr<const ExecutablePlan> find(const std::string& key) const;
  // Holds `plan` under `key` unless a plan is held there already, and only while the generation is still
  // `generation` (a job that stored a plan for the structure meanwhile made this one stale). The plan held
  // afterwards, or null where it was stale; `inserted` says whether `plan` went in.
  std::shared_ptr<const ExecutablePlan> hold(const std::string& key, std::shared_ptr<const ExecutablePlan> plan,
                                             uint64_t generation, bool* inserted = nullptr);
  // A promotion: `plan` replaces `stopgap` under `key`, only if that stopgap is still what is held and the
  // generation has not moved. True when it did.
  bool replace(const std::string& key, const std::shared_ptr<const ExecutablePlan>& stopgap,
               std::shared_ptr<const ExecutablePlan> plan, uint64_t generation);
  // Drops every plan held for `structure`, and every chain of parts one of which is (segments, an unfused chain)
  // ("": every plan held), and bumps the generation first: a build that began before may have
  // read the store as it was, so its plan is not held (a concurrent job's stored plan wins).
  void forget(const std::string& structure);
  // Drops every key holding `plan` (a decided shadow trial's plan: compared by address, never used), and bumps the
  // generation. Plans dropped are released after the shard's lock (their destructors may free device memory).
  void drop(const ExecutablePlan* plan);

  // Single flight for `key`: the plan held under it (`*held` set), or else the first caller runs `make`
  // (which holds what it made), and every caller that comes meanwhile waits for that result (`*leader`
  // false). A failure is handed to the waiters and not kept.
  template <typename Make>
  StatusOr<Built> single_flight(const std::string& key, Make&& make, bool* leader,
                                std::shared_ptr<const ExecutablePlan>* held);

  uint64_t generation() const { return generation_.load(); }
  int64_t held() const { return held_.load(std::memory_order_relaxed); }
  // Of those, stopgaps (split, padded, dynamic) not yet replaced.
  int64_t stopgaps() const { return stopgaps_.load(std::memory_order_relaxed); }

 private:
  static constexpr int kShards = 16;
  struct Shard {
    mutable std::shared_mutex mu;
    std::unordered_map<std::string, std::shared_ptr<const ExecutablePlan>> plans;
  };
  Shard& shard_for(const std::string& key) { return shards_[std::hash<std::string>{}(key) % kShards]; }
  const Shard& shard_for(const std::string& key) const { return shards_[std::hash<std::string>{}(key) % kShards]; }
  void counted_in(const ExecutablePlan& plan);
  void erase_where(const std::function<bool(const std::string& key, const ExecutablePlan& plan)>& doomed);

  Shard shards_[kShards];
  std::mutex flight_mu_;
  std::unordered_map<std::string, std::shared_future<StatusOr<Built>>> in_flight_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> held_{0}, stopgaps_{0};
};

template <typename Make>
StatusOr<Built> PlanCache::single_flight(const std::string& key, Make&& make, bool* leader,
                                         std::shared_ptr<const ExecutablePlan>* held) {
  std::shared_future<StatusOr<Built>> fut;
  std::promise<StatusOr<Built>> promise;
  *leader = false;
  {
    std::lock_guard<std::mutex> lock(flight_mu_);
    if ((*held = find(key))) return Built{};  // a build may have finished between the caller's lookup and here
    auto it = in_flight_.find(key);
    if (it != in_flight_.end()) {
      fut = it->second;
    } else {
      fut = promise.get_future().share();
      in_flight_.emplace(key, fut);
      *leader = true;
    }
  }
  if (*leader) {
    StatusOr<Built> built = make();
    {
      std::lock_guard<std::mutex> lock(flight_mu_);
      in_flight_.erase(key);
    }
    promise.set_value(std::move(built));
  }
  return fut.get();
}

}  // namespace kiln::runtime_detail
