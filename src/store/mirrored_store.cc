// MirroredPlanStore (store/mirrored_store.h): a server store read through a local SQLite mirror.
#include "store/mirrored_store.h"

#include <cstdlib>
#include <map>

#include "kiln/core/hash.h"
#include "kiln/core/log.h"
#include "store/pg_conn.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

bool unreachable(const Status& s) { return s.code() == StatusCode::kUnavailable; }

}  // namespace

std::string default_mirror_path(const std::string& location) {
  const std::string name = "mirror-" + stable_hash128_hex(store::redact_location(location)).substr(0, 16) + ".db";
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') return std::string(xdg) + "/kiln/" + name;
  const char* home = std::getenv("HOME");
  if (home && *home) return std::string(home) + "/.cache/kiln/" + name;
  return name;
}

MirroredPlanStore::MirroredPlanStore(std::string location, StoreOpenOptions options, std::unique_ptr<PlanStore> mirror)
    : location_(std::move(location)),
      shown_(store::redact_location(location_)),
      options_(std::move(options)),
      mirror_(std::move(mirror)) {}

StatusOr<std::unique_ptr<PlanStore>> MirroredPlanStore::open(const std::string& location,
                                                             const StoreOpenOptions& options) {
  StoreOpenOptions mirror_options;  // the mirror is this host's own cache: always writable
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<PlanStore> mirror, PlanStore::open(options.mirror_path, mirror_options));
  StoreOpenOptions server_options = options;
  server_options.mirror_path.clear();
  std::unique_ptr<MirroredPlanStore> s(new MirroredPlanStore(location, server_options, std::move(mirror)));
  StatusOr<std::unique_ptr<PlanStore>> server = PlanStore::open(location, server_options);
  if (server.is_ok()) {
    s->server_ = std::move(server).value();
  } else if (unreachable(server.status())) {
    s->note(server.status());
    KILN_LOG(kWarn, "plan store " << s->shown_ << " cannot be reached: serving from its mirror " << options.mirror_path
                                  << " (" << server.status().message() << ")");
  } else {
    return server.status();
  }
  return std::unique_ptr<PlanStore>(std::move(s));
}

std::shared_ptr<PlanStore> MirroredPlanStore::server() {
  std::lock_guard<std::mutex> lock(mu_);
  if (last_error_.empty() && server_) return server_;
  if (Clock::now() < next_try_) return nullptr;
  next_try_ = Clock::now() +
              std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.mirror_retry_s));
  if (!server_) {
    StatusOr<std::unique_ptr<PlanStore>> opened = PlanStore::open(location_, options_);
    if (!opened.is_ok()) {
      last_error_ = opened.status().message();
      ++unreachable_;
      return nullptr;
    }
    server_ = std::move(opened).value();
    KILN_LOG(kInfo, "plan store " << shown_ << " reached again: serving from it");
  }
  // A server that was reached before: its connection is made again by the call itself.
  last_error_.clear();
  return server_;
}

void MirroredPlanStore::note(const Status& s) {
  if (!unreachable(s)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (last_error_.empty())
    KILN_LOG(kWarn, "plan store " << shown_ << " cannot be reached: serving from its mirror (" << s.message() << ")");
  last_error_ = s.message();
  ++unreachable_;
  next_try_ = Clock::now() +
              std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.mirror_retry_s));
}

template <class T, class FromServer, class FromMirror>
StatusOr<T> MirroredPlanStore::read_through(FromServer from_server, FromMirror from_mirror, bool count_hit) {
  if (std::shared_ptr<PlanStore> s = server()) {
    StatusOr<T> r = from_server(*s);
    if (!unreachable(r.status())) return r;
    note(r.status());
  }
  StatusOr<T> r = from_mirror(*mirror_);
  if (count_hit && r.is_ok()) ++mirror_hits_;
  return r;
}

template <class T, class Call>
StatusOr<T> MirroredPlanStore::on_server(Call call) {
  std::shared_ptr<PlanStore> s = server();
  if (!s) {
    std::lock_guard<std::mutex> lock(mu_);
    return unavailable("plan store " + shown_ + " cannot be reached (" + last_error_ +
                       "); its mirror serves reads only");
  }
  StatusOr<T> r = call(*s);
  note(r.status());
  return r;
}

void MirroredPlanStore::keep(const PlanRecord& record) {
  StatusOr<PlanRecord> held =
      mirror_->read(record.structure_sig, record.shape_key, fingerprint_key(record.fingerprint));
  if (held.is_ok() && held->checksum == record.checksum) return;
  StatusOr<PlanRecord> put = mirror_->put(record);
  if (!put.is_ok()) KILN_LOG(kWarn, "plan store mirror " << options_.mirror_path << ": " << put.status().message());
}

void MirroredPlanStore::forget(const std::string& structure_sig, const std::string& shape_key) {
  ListFilter f;
  f.structure_prefix = structure_sig;
  f.shape_key = shape_key;  // "" (a static graph): every record of the structure, kept again when read
  StatusOr<int64_t> n = mirror_->remove(f, /*all=*/true);
  if (!n.is_ok()) KILN_LOG(kWarn, "plan store mirror " << options_.mirror_path << ": " << n.status().message());
}

StatusOr<LookupResult> MirroredPlanStore::get(const std::string& structure_sig, const std::string& shape_key,
                                              const EnvFingerprint& current, const EnvPolicy& policy,
                                              const PlanValidator& validator) {
  bool from_server = false;
  StatusOr<LookupResult> r = read_through<LookupResult>(
      [&](PlanStore& s) {
        from_server = true;
        return s.get(structure_sig, shape_key, current, policy, validator);
      },
      [&](PlanStore& m) {
        from_server = false;
        return m.get(structure_sig, shape_key, current, policy, validator);
      });
  if (!r.is_ok()) return r;
  if (from_server) {
    if (r->runnable()) keep(*r->record);
    else forget(structure_sig, shape_key);
  } else if (r->runnable()) {
    ++mirror_hits_;
  }
  return r;
}

StatusOr<LoadAllResult> MirroredPlanStore::load_all(const EnvFingerprint& current, const EnvPolicy& policy,
                                                    const PlanValidator& validator) {
  bool from_server = false;
  StatusOr<LoadAllResult> r = read_through<LoadAllResult>(
      [&](PlanStore& s) {
        from_server = true;
        return s.load_all(current, policy, validator);
      },
      [&](PlanStore& m) {
        from_server = false;
        return m.load_all(current, policy, validator);
      });
  if (!r.is_ok()) return r;
  if (!from_server) {
    mirror_hits_ += static_cast<int64_t>(r->records.size());
    return r;
  }
  // The mirror gets what it lacks, read in one query first.
  std::map<std::string, std::string> held;  // key -> checksum
  StatusOr<LoadAllResult> mine = mirror_->load_all(current, policy);
  if (mine.is_ok())
    for (const PlanRecord& p : mine->records)
      held[p.structure_sig + "\n" + p.shape_key + "\n" + fingerprint_key(p.fingerprint)] = p.checksum;
  for (const PlanRecord& p : r->records) {
    auto it = held.find(p.structure_sig + "\n" + p.shape_key + "\n" + fingerprint_key(p.fingerprint));
    if (it != held.end() && it->second == p.checksum) continue;
    StatusOr<PlanRecord> put = mirror_->put(p);
    if (!put.is_ok()) KILN_LOG(kWarn, "plan store mirror " << options_.mirror_path << ": " << put.status().message());
  }
  return r;
}

StatusOr<PlanRecord> MirroredPlanStore::put(const PlanRecord& record) {
  StatusOr<PlanRecord> r = on_server<PlanRecord>([&](PlanStore& s) { return s.put(record); });
  if (r.is_ok()) keep(*r);
  return r;
}

StatusOr<std::vector<PlanSummary>> MirroredPlanStore::list(const ListFilter& filter) {
  return read_through<std::vector<PlanSummary>>([&](PlanStore& s) { return s.list(filter); },
                                                [&](PlanStore& m) { return m.list(filter); });
}

StatusOr<PlanRecord> MirroredPlanStore::read(const std::string& structure_sig, const std::string& shape_key,
                                             const std::string& fingerprint_key) {
  return read_through<PlanRecord>([&](PlanStore& s) { return s.read(structure_sig, shape_key, fingerprint_key); },
                                  [&](PlanStore& m) { return m.read(structure_sig, shape_key, fingerprint_key); });
}

StatusOr<int64_t> MirroredPlanStore::remove(const ListFilter& filter, bool all) {
  StatusOr<int64_t> r = on_server<int64_t>([&](PlanStore& s) { return s.remove(filter, all); });
  if (r.is_ok()) (void)mirror_->remove(filter, all);
  return r;
}

StatusOr<GcReport> MirroredPlanStore::gc(const GcOptions& o) {
  return on_server<GcReport>([&](PlanStore& s) { return s.gc(o); });
}
StatusOr<VerifyReport> MirroredPlanStore::verify(const VerifyOptions& o) {
  return on_server<VerifyReport>([&](PlanStore& s) { return s.verify(o); });
}
StatusOr<std::vector<QuarantineEntry>> MirroredPlanStore::quarantine() {
  return on_server<std::vector<QuarantineEntry>>([&](PlanStore& s) { return s.quarantine(); });
}
StatusOr<ExportReport> MirroredPlanStore::export_bundle(const std::string& p, const ExportOptions& o) {
  return on_server<ExportReport>([&](PlanStore& s) { return s.export_bundle(p, o); });
}
StatusOr<ImportReport> MirroredPlanStore::import_bundle(const std::string& p, const ImportOptions& o) {
  return on_server<ImportReport>([&](PlanStore& s) { return s.import_bundle(p, o); });
}

StatusOr<RetuneQueueEntry> MirroredPlanStore::enqueue_retune(const RetuneRequest& r) {
  return on_server<RetuneQueueEntry>([&](PlanStore& s) { return s.enqueue_retune(r); });
}
StatusOr<std::vector<RetuneQueueEntry>> MirroredPlanStore::list_retune_queue(const std::string& fp) {
  return on_server<std::vector<RetuneQueueEntry>>([&](PlanStore& s) { return s.list_retune_queue(fp); });
}
StatusOr<bool> MirroredPlanStore::remove_from_retune_queue(const std::string& sig, const std::string& shape,
                                                           const std::string& fp) {
  return on_server<bool>([&](PlanStore& s) { return s.remove_from_retune_queue(sig, shape, fp); });
}
StatusOr<std::optional<RetuneJob>> MirroredPlanStore::claim_retune(const std::string& fp, const RetuneLeaseOptions& o) {
  return on_server<std::optional<RetuneJob>>([&](PlanStore& s) { return s.claim_retune(fp, o); });
}
Status MirroredPlanStore::heartbeat_retune(const RetuneJob& job, int64_t lease_s) {
  return on_server<bool>([&](PlanStore& s) -> StatusOr<bool> {
           KILN_RETURN_IF_ERROR(s.heartbeat_retune(job, lease_s));
           return true;
         })
      .status();
}
Status MirroredPlanStore::finish_retune(const RetuneJob& job, const RetuneJobFinish& f) {
  return on_server<bool>([&](PlanStore& s) -> StatusOr<bool> {
           KILN_RETURN_IF_ERROR(s.finish_retune(job, f));
           return true;
         })
      .status();
}
StatusOr<std::vector<RetuneJobState>> MirroredPlanStore::list_retune_jobs(const std::string& fp) {
  return on_server<std::vector<RetuneJobState>>([&](PlanStore& s) { return s.list_retune_jobs(fp); });
}
StatusOr<std::vector<RetuneJobLogEntry>> MirroredPlanStore::retune_job_log() {
  return on_server<std::vector<RetuneJobLogEntry>>([&](PlanStore& s) { return s.retune_job_log(); });
}

StatusOr<GraphSpecEntry> MirroredPlanStore::put_graph_spec(const std::string& sig, const std::string& shape,
                                                           const std::string& name, const std::string& spec) {
  return on_server<GraphSpecEntry>([&](PlanStore& s) { return s.put_graph_spec(sig, shape, name, spec); });
}
StatusOr<std::optional<GraphSpecEntry>> MirroredPlanStore::get_graph_spec(const std::string& sig,
                                                                          const std::string& shape) {
  return read_through<std::optional<GraphSpecEntry>>([&](PlanStore& s) { return s.get_graph_spec(sig, shape); },
                                                     [&](PlanStore& m) { return m.get_graph_spec(sig, shape); });
}
StatusOr<std::vector<GraphSpecEntry>> MirroredPlanStore::list_graph_specs() {
  return read_through<std::vector<GraphSpecEntry>>([&](PlanStore& s) { return s.list_graph_specs(); },
                                                   [&](PlanStore& m) { return m.list_graph_specs(); });
}

StatusOr<FusionRecord> MirroredPlanStore::put_fusion_record(const FusionRecord& r) {
  StatusOr<FusionRecord> out = on_server<FusionRecord>([&](PlanStore& s) { return s.put_fusion_record(r); });
  if (out.is_ok()) (void)mirror_->put_fusion_record(*out);
  return out;
}
StatusOr<std::optional<FusionRecord>> MirroredPlanStore::get_fusion_record(const std::string& sig,
                                                                           const std::string& shape,
                                                                           const EnvFingerprint& current,
                                                                           const EnvPolicy& policy) {
  bool from_server = false;
  StatusOr<std::optional<FusionRecord>> r = read_through<std::optional<FusionRecord>>(
      [&](PlanStore& s) {
        from_server = true;
        return s.get_fusion_record(sig, shape, current, policy);
      },
      [&](PlanStore& m) {
        from_server = false;
        return m.get_fusion_record(sig, shape, current, policy);
      });
  // The decision travels with its plans: kept in the mirror as the server holds it.
  if (r.is_ok() && from_server && r->has_value()) (void)mirror_->put_fusion_record(**r);
  return r;
}
StatusOr<int64_t> MirroredPlanStore::remove_fusion_record(const std::string& sig, const std::string& shape,
                                                          const std::string& fp) {
  StatusOr<int64_t> r = on_server<int64_t>([&](PlanStore& s) { return s.remove_fusion_record(sig, shape, fp); });
  if (r.is_ok()) (void)mirror_->remove_fusion_record(sig, shape, fp);
  return r;
}
StatusOr<std::vector<FusionRecord>> MirroredPlanStore::list_fusion_records() {
  return read_through<std::vector<FusionRecord>>([&](PlanStore& s) { return s.list_fusion_records(); },
                                                 [&](PlanStore& m) { return m.list_fusion_records(); });
}

StatusOr<FirstUseRecord> MirroredPlanStore::put_first_use_verdict(const FirstUseRecord& r) {
  return on_server<FirstUseRecord>([&](PlanStore& s) { return s.put_first_use_verdict(r); });
}
StatusOr<std::optional<FirstUseRecord>> MirroredPlanStore::get_first_use_verdict(const std::string& sig,
                                                                                 const std::string& shape,
                                                                                 const std::string& config,
                                                                                 const std::string& fp) {
  return read_through<std::optional<FirstUseRecord>>(
      [&](PlanStore& s) { return s.get_first_use_verdict(sig, shape, config, fp); },
      [&](PlanStore& m) { return m.get_first_use_verdict(sig, shape, config, fp); });
}
StatusOr<std::vector<FirstUseRecord>> MirroredPlanStore::list_first_use_verdicts() {
  return read_through<std::vector<FirstUseRecord>>([&](PlanStore& s) { return s.list_first_use_verdicts(); },
                                                   [&](PlanStore& m) { return m.list_first_use_verdicts(); });
}

StatusOr<KernelCacheRecord> MirroredPlanStore::put_kernel_cache(const KernelCacheRecord& r) {
  StatusOr<KernelCacheRecord> out = on_server<KernelCacheRecord>([&](PlanStore& s) { return s.put_kernel_cache(r); });
  if (out.is_ok()) (void)mirror_->put_kernel_cache(*out);
  return out;
}
StatusOr<std::optional<KernelCacheRecord>> MirroredPlanStore::get_kernel_cache(const std::string& sig,
                                                                               const EnvFingerprint& current) {
  bool from_server = false;
  StatusOr<std::optional<KernelCacheRecord>> r = read_through<std::optional<KernelCacheRecord>>(
      [&](PlanStore& s) {
        from_server = true;
        return s.get_kernel_cache(sig, current);
      },
      [&](PlanStore& m) {
        from_server = false;
        return m.get_kernel_cache(sig, current);
      });
  if (r.is_ok() && from_server && r->has_value()) (void)mirror_->put_kernel_cache(**r);
  return r;
}
StatusOr<int64_t> MirroredPlanStore::remove_kernel_cache(const std::string& sig, const std::string& fp) {
  StatusOr<int64_t> r = on_server<int64_t>([&](PlanStore& s) { return s.remove_kernel_cache(sig, fp); });
  if (r.is_ok()) (void)mirror_->remove_kernel_cache(sig, fp);
  return r;
}
StatusOr<std::vector<KernelCacheInfo>> MirroredPlanStore::list_kernel_caches() {
  return read_through<std::vector<KernelCacheInfo>>([&](PlanStore& s) { return s.list_kernel_caches(); },
                                                    [&](PlanStore& m) { return m.list_kernel_caches(); });
}

// The server store's: its notices are read there (changed_plans goes to the server). A server store made again
// after a lost connection starts without it (its Planner then re-reads after its own promotions, as before).
void MirroredPlanStore::treat_writes_as_own(PlanStore& writer) {
  auto* w = dynamic_cast<MirroredPlanStore*>(&writer);
  std::shared_ptr<PlanStore> mine, theirs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine = server_;
  }
  if (w != nullptr && w != this) {
    std::lock_guard<std::mutex> lock(w->mu_);
    theirs = w->server_;
  }
  if (mine) mine->treat_writes_as_own(theirs ? *theirs : writer);
}

StatusOr<std::vector<StoredPlanKey>> MirroredPlanStore::changed_plans() {
  // While the server is away nothing changes that this host could read: nothing to say.
  return read_through<std::vector<StoredPlanKey>>([&](PlanStore& s) { return s.changed_plans(); },
                                                  [&](PlanStore&) { return std::vector<StoredPlanKey>(); });
}

StatusOr<std::vector<WinnerChange>> MirroredPlanStore::winner_changes() {
  return on_server<std::vector<WinnerChange>>([&](PlanStore& s) { return s.winner_changes(); });
}

// Plan states live on the server; a change of a key's active plan is kept in the mirror as put() keeps it.
StatusOr<PlanRecord> MirroredPlanStore::put_candidate(const PlanRecord& record, const std::string& reason) {
  return on_server<PlanRecord>([&](PlanStore& s) { return s.put_candidate(record, reason); });
}
StatusOr<std::vector<RolloutEntry>> MirroredPlanStore::rollout_entries(const ListFilter& filter) {
  return on_server<std::vector<RolloutEntry>>([&](PlanStore& s) { return s.rollout_entries(filter); });
}
StatusOr<RolloutEntry> MirroredPlanStore::rollout_entry(const StoredPlanKey& key, const std::string& config) {
  return on_server<RolloutEntry>([&](PlanStore& s) { return s.rollout_entry(key, config); });
}
Status MirroredPlanStore::transition(const StoredPlanKey& key, const std::string& config, PlanState to,
                                     const std::string& reason, const std::string& evidence) {
  StatusOr<PlanRecord> active = on_server<PlanRecord>([&](PlanStore& s) -> StatusOr<PlanRecord> {
    KILN_RETURN_IF_ERROR(s.transition(key, config, to, reason, evidence));
    if (to != PlanState::kActive) return PlanRecord{};  // the key's active plan is what it was
    return s.read(key.structure_sig, key.shape_key, key.fingerprint_key);
  });
  if (!active.is_ok()) return active.status();
  if (to == PlanState::kActive) keep(*active);
  return Status::ok();
}
StatusOr<PlanRecord> MirroredPlanStore::rollback(const StoredPlanKey& key, const std::string& reason,
                                                 const std::string& if_active) {
  StatusOr<PlanRecord> r = on_server<PlanRecord>([&](PlanStore& s) { return s.rollback(key, reason, if_active); });
  if (r.is_ok()) keep(*r);
  return r;
}
StatusOr<std::vector<PlanTransition>> MirroredPlanStore::plan_history(const StoredPlanKey& key) {
  return on_server<std::vector<PlanTransition>>([&](PlanStore& s) { return s.plan_history(key); });
}

StoreCounters MirroredPlanStore::counters() const {
  StoreCounters c;
  std::shared_ptr<PlanStore> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = server_;
    c.unreachable_error = last_error_;
  }
  if (s) {
    const std::string e = c.unreachable_error;
    c = s->counters();
    c.unreachable_error = e;
  }
  c.mirror_hits = mirror_hits_.load();
  c.unreachable = unreachable_.load();
  return c;
}

void MirroredPlanStore::reset_counters() {
  std::shared_ptr<PlanStore> s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = server_;
  }
  if (s) s->reset_counters();
  mirror_hits_ = 0;
  unreachable_ = 0;
}

}  // namespace kiln
