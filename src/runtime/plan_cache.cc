// The memory source (runtime/plan_cache.h).
#include "runtime/plan_cache.h"

namespace kiln::runtime_detail {

std::string PlanCache::key(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape) {
  std::string key = pg.signature.structure;
  key += '|';
  key += pg.names_key;
  key += '|';
  for (const auto& [sym, v] : shape) {
    key += sym;
    key += '=';
    key += std::to_string(v);
    key += ',';
  }
  return key;
}

std::shared_ptr<const ExecutablePlan> PlanCache::find(const std::string& key) const {
  const Shard& shard = shard_for(key);
  std::shared_lock<std::shared_mutex> lock(shard.mu);
  auto it = shard.plans.find(key);
  return it == shard.plans.end() ? nullptr : it->second;
}

void PlanCache::counted_in(const ExecutablePlan& plan) {
  held_.fetch_add(1, std::memory_order_relaxed);
  if (plan_source_is_stopgap(plan.built_from())) stopgaps_.fetch_add(1, std::memory_order_relaxed);
}

std::shared_ptr<const ExecutablePlan> PlanCache::hold(const std::string& key,
                                                      std::shared_ptr<const ExecutablePlan> plan, uint64_t generation,
                                                      bool* inserted) {
  if (inserted) *inserted = false;
  Shard& shard = shard_for(key);
  std::unique_lock<std::shared_mutex> wl(shard.mu);
  if (generation != kAnyGeneration && generation_.load() != generation) return nullptr;
  auto [it, in] = shard.plans.emplace(key, std::move(plan));
  if (in) counted_in(*it->second);
  if (inserted) *inserted = in;
  return it->second;
}

bool PlanCache::replace(const std::string& key, const std::shared_ptr<const ExecutablePlan>& stopgap,
                        std::shared_ptr<const ExecutablePlan> plan, uint64_t generation) {
  Shard& shard = shard_for(key);
  std::unique_lock<std::shared_mutex> wl(shard.mu);
  auto it = shard.plans.find(key);
  if (generation_.load() != generation || it == shard.plans.end() || it->second != stopgap) return false;
  const bool was_stopgap = plan_source_is_stopgap(it->second->built_from());
  it->second = std::move(plan);  // callers holding the stopgap keep it alive until they drop it
  if (was_stopgap) stopgaps_.fetch_sub(1, std::memory_order_relaxed);
  if (plan_source_is_stopgap(it->second->built_from())) stopgaps_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

namespace {

// Whether `plan` runs as parts (segments, an unfused chain) one of which is a plan for `structure`: a new plan
// for that part makes the chain out of date too.
bool has_part(const ExecutablePlan& plan, const std::string& structure) {
  for (const auto& part : plan.parts())
    if (part && (part->signature().structure == structure || has_part(*part, structure))) return true;
  return false;
}

}  // namespace

void PlanCache::forget(const std::string& structure) {
  const std::string prefix = structure + "|";
  erase_where([&](const std::string& key, const ExecutablePlan& plan) {
    return structure.empty() || key.compare(0, prefix.size(), prefix) == 0 || has_part(plan, structure);
  });
}

void PlanCache::drop(const ExecutablePlan* plan) {
  if (!plan) return;
  erase_where([&](const std::string&, const ExecutablePlan& held) { return &held == plan; });
}

// Bumps the generation first, then erases what `doomed` picks; the plans erased are released after the shards'
// locks (their destructors may free device memory).
void PlanCache::erase_where(const std::function<bool(const std::string&, const ExecutablePlan&)>& doomed) {
  generation_.fetch_add(1);
  std::vector<std::shared_ptr<const ExecutablePlan>> gone;
  for (Shard& shard : shards_) {
    std::unique_lock<std::shared_mutex> wl(shard.mu);
    for (auto it = shard.plans.begin(); it != shard.plans.end();) {
      if (!doomed(it->first, *it->second)) {  // never null: hold() counts what it holds
        ++it;
        continue;
      }
      if (plan_source_is_stopgap(it->second->built_from())) stopgaps_.fetch_sub(1, std::memory_order_relaxed);
      gone.push_back(std::move(it->second));
      it = shard.plans.erase(it);
      held_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace kiln::runtime_detail
