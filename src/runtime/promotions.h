// Promotions: a stopgap's static plan (or, under PromoteBy::kTune, its shape tuned) made on one background thread
// and swapped in for the stopgap. Private to the runtime layer; the Planner owns one.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/plan_sources.h"

namespace kiln::runtime_detail {

// A stopgap's static plan, to build in the background and swap in.
struct Promotion {
  std::string key;
  PreparedGraph graph;
  std::map<std::string, int64_t> shape;
  std::shared_ptr<const ExecutablePlan> stopgap;  // what it replaces: only that, if still held
  uint64_t generation = 0;                        // the cache's generation when queued
};

class Promotions {
 public:
  Promotions(PlannerState& state, SourceChain& chain) : state_(state), chain_(chain) {}
  // Queued promotions are dropped (their stopgaps die with the cache); a tune in progress stops after its
  // current candidate.
  ~Promotions();

  void queue(Promotion p);
  // Starts the thread before it is needed (preload): its creation is then not on the first stopgap's path.
  void start();
  // Until every queued promotion has finished.
  void wait();

  struct Notes {
    std::string last_failure;        // why the last promotion failed
    std::string last_tune_fallback;  // PromoteBy::kTune: why the last tune gave no plan (a build replaced it)
    std::string last_tune_note;      // PromoteBy::kTune: the last tuned winner's note
  };
  Notes notes() const;

 private:
  void start_locked();
  void loop();
  // One promotion: its plan made, admitted and swapped in; what to note in `fallback` and `note`.
  StatusOr<Built> run(const Promotion& p, std::string* fallback, std::string* note);

  PlannerState& state_;
  SourceChain& chain_;
  mutable std::mutex mu_;
  std::condition_variable cv_;    // work queued, or stopping
  std::condition_variable idle_;  // the queue drained
  std::deque<Promotion> queue_;
  bool busy_ = false, stopping_ = false;
  Notes notes_;  // under mu_
  std::thread thread_;
};

}  // namespace kiln::runtime_detail
