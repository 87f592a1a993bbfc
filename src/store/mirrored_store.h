// MirroredPlanStore: a server store (PostgreSQL) read through a local SQLite mirror (docs/fleet.md "Local
// mirror"). Plans read from the server are kept in the mirror; while the server cannot be reached (at start
// or later), lookups are answered from the mirror (stale-while-unreachable, counted in counters()), and the
// server is tried again every mirror_retry_s. A key the server no longer serves (miss, stale, corrupt) leaves
// the mirror too, so the mirror never serves what the fleet removed. Writes, upkeep and the queue go to the
// server only (Unavailable while it is unreachable). The mirror's records pass the same checksum and
// fingerprint policy as any store's. Private to the store layer: PlanStore::open makes one.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/store/plan_store.h"

namespace kiln {

class MirroredPlanStore final : public PlanStore {
 public:
  // Opens the mirror (made when absent), then the server; a server that cannot be reached is not an error
  // (the mirror serves, and it is tried again later); any other error of either is.
  static StatusOr<std::unique_ptr<PlanStore>> open(const std::string& location, const StoreOpenOptions& options);

  const std::string& path() const override { return shown_; }
  bool read_only() const override { return options_.read_only; }
  std::vector<std::string> database_files() const override { return mirror_->database_files(); }

#include "store/plan_store_methods.inc"  // put() ... reset_counters(), each an override

 private:
  MirroredPlanStore(std::string location, StoreOpenOptions options, std::unique_ptr<PlanStore> mirror);
  // The server, or null while it cannot be reached (tried again once mirror_retry_s has passed).
  std::shared_ptr<PlanStore> server();
  // Notes an error of the server: Unavailable makes the mirror serve until the server answers again.
  void note(const Status& s);
  // A read: the server's answer, else (server unreachable) the mirror's.
  template <class T, class FromServer, class FromMirror>
  StatusOr<T> read_through(FromServer from_server, FromMirror from_mirror, bool count_hit = false);
  // A write or upkeep call: the server's, Unavailable while it is unreachable.
  template <class T, class Call>
  StatusOr<T> on_server(Call call);
  // Keeps a record the server served in the mirror (when the mirror's copy differs).
  void keep(const PlanRecord& record);
  // The server no longer serves this key: the mirror's copies go too.
  void forget(const std::string& structure_sig, const std::string& shape_key);

  std::string location_, shown_;
  StoreOpenOptions options_;  // the server's (mirror_path cleared)
  std::unique_ptr<PlanStore> mirror_;
  mutable std::mutex mu_;  // server_, next_try_, last_error_
  std::shared_ptr<PlanStore> server_;
  std::chrono::steady_clock::time_point next_try_{};
  std::string last_error_;
  std::atomic<int64_t> mirror_hits_{0}, unreachable_{0};
};

}  // namespace kiln
