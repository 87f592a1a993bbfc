// Promotions (runtime/promotions.h).
#include "runtime/promotions.h"

namespace kiln::runtime_detail {

Promotions::~Promotions() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;  // queued promotions are dropped: their stopgaps die with the cache
  }
  state_.cancel_tunes() = true;  // and a tune in progress stops after its current candidate
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Promotions::queue(Promotion p) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return;
  queue_.push_back(std::move(p));
  start_locked();
  cv_.notify_one();
}

void Promotions::start() {
  std::lock_guard<std::mutex> lock(mu_);
  start_locked();
}

void Promotions::start_locked() {
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { loop(); });
}

void Promotions::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [&] { return stopping_ || (queue_.empty() && !busy_); });
}

Promotions::Notes Promotions::notes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return notes_;
}

StatusOr<Built> Promotions::run(const Promotion& p, std::string* fallback, std::string* note) {
  StatusOr<Built> built = catch_exceptions("promoting a plan for graph '" + p.graph.graph->name + "'", [&] {
    bool store_asked = false;
    if (state_.options().promote_by == PromoteBy::kTune) {
      store_asked = true;  // tune_for asks it first
      std::string why;
      StatusOr<Built> tuned = chain_.tuned().tune_for(p.graph, p.shape, &why);
      if (!tuned.is_ok()) {
        *fallback = tuned.status().message();
      } else if (tuned->plan) {
        *note = why;
        return tuned;
      } else {
        *fallback = why;
      }
    }
    return chain_.build(p.graph, p.shape, /*allow_stopgap=*/false, store_asked);
  });
  if (!built.is_ok()) return built;
  // A promoted plan that fails the gate leaves its (verified) stopgap serving.
  KILN_RETURN_IF_ERROR(state_.first_use().admit(*built->plan, built->source, p.graph.graph->name));
  return built;
}

void Promotions::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  PlannerCounters& c = state_.counters();
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) break;
    Promotion p = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::string fallback, note;  // why a tune gave no plan; the note of one that did
    StatusOr<Built> built = run(p, &fallback, &note);
    if (built.is_ok()) {
      c.builds.fetch_add(1, std::memory_order_relaxed);
      if (built->source == PlanSource::kTuned) c.promotions_tuned.fetch_add(1, std::memory_order_relaxed);
      // It replaces its stopgap only: a job that stored a plan for the structure meanwhile dropped it (forget),
      // and what is held now, or the next obtain's read of the store, is newer than this build.
      if (state_.cache().replace(p.key, p.stopgap, built->plan, p.generation))
        c.promotions.fetch_add(1, std::memory_order_relaxed);
    } else {
      c.promotion_failures.fetch_add(1, std::memory_order_relaxed);
    }
    // The stopgap's kernels, compiled for the structure, kept for the next process (off the request path).
    if (state_.options().save_kernel_caches && p.stopgap && p.stopgap->built_from() == PlanSource::kDynamic)
      (void)state_.backend().save_kernel_cache(p.stopgap->signature(), p.graph.graph->name);  // counted, noted
    lock.lock();
    if (!built.is_ok()) notes_.last_failure = built.status().message();
    const std::string which = p.graph.graph->name + " " + shape_key_text(p.shape) + ": ";
    if (!fallback.empty()) notes_.last_tune_fallback = which + fallback;
    if (!note.empty()) notes_.last_tune_note = which + note;
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
  busy_ = false;
  idle_.notify_all();
}

}  // namespace kiln::runtime_detail
