// kiln::Planner (kiln/runtime/planner.h): the owner of the cache, the backend's handles and the chain of sources
// (kiln/runtime/source_chain.h). obtain() looks in memory, then walks the chain once per key (single flight),
// admits what it got through the first-use gate, holds it and queues a stopgap's promotion. Nothing here touches
// cuDNN: plans come from a PlanBackend (planner_cudnn.cc on the GPU, a fake in host tests).
#include "kiln/runtime/planner.h"

#include <algorithm>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "kiln/core/log.h"

#include "kiln/runtime/shape_recorder.h"
#include "kiln/runtime/workshop.h"
#include "kiln/store/store_path.h"
#include "runtime/plan_sources.h"
#include "runtime/planner_options_check.h"
#include "runtime/promotions.h"
#include "runtime/shadow_trial.h"
#include "runtime/shapes.h"
#include "runtime/store_watch.h"
#include "runtime/warmed_loads.h"

namespace kiln {

using runtime_detail::Built;
using runtime_detail::PlanCache;
using runtime_detail::Promotion;

struct Planner::Impl {
  Impl(std::unique_ptr<PlanBackend> backend, const PlannerOptions& options)
      : state(std::move(backend), options),
        chain(state),
        promotions(state, chain),
        workshop(state.backend(), state.options(), [this](const GraphSignature& sig) { state.forget(sig); }) {
    state.set_shadow_judge(std::make_shared<runtime_detail::ShadowJudge>(state));
  }
  // create()'s loads first (their thread joined: they use everything below), then the shadow judge (its thread
  // joined): it writes verdicts through the state's backend.
  ~Impl() {
    stop_loading.store(true);
    if (loader.joinable()) loader.join();
    state.shadow_judge()->stop();
  }

  runtime_detail::PlannerState state;
  runtime_detail::SourceChain chain;
  runtime_detail::Promotions promotions;  // after the chain: stopped (its thread joined) before the chain goes
  Workshop workshop;
  ShapeRecorder recorder;
  std::shared_ptr<GraphCounters> graphs = std::make_shared<GraphCounters>();
  std::atomic<int64_t> store_notices{0};
  std::string last_watch_error;  // the watcher thread's alone
  // Last: stopped (its thread joined) before anything it touches goes.
  std::unique_ptr<runtime_detail::StoreWatch> watch;

  // The store's notices (a server's NOTIFY, a SQLite store's history rows): what the Planner holds of each structure
  // changed elsewhere (a plan stored, promoted, rolled back, put in shadow) is dropped, so that the next obtain()
  // reads the store again (and its new plan), as a promotion swaps a plan in.
  void poll_store() {
    StatusOr<std::vector<StoredPlanKey>> keys = state.backend().changed_plans();
    if (!keys.is_ok()) {
      if (keys.status().message() != last_watch_error)
        KILN_LOG(kWarn, "plan store notices: " << keys.status().message());
      last_watch_error = keys.status().message();
      return;
    }
    last_watch_error.clear();
    for (const StoredPlanKey& k : *keys) {
      state.forget_structure(k.structure_sig == "*" ? std::string() : k.structure_sig);
      store_notices.fetch_add(1, std::memory_order_relaxed);
      KILN_LOG(kInfo, "plan store notice: " << (k.structure_sig == "*"
                                                    ? std::string("notices may have been missed: every held plan is "
                                                                  "read again")
                                                    : "a plan for " + k.structure_sig.substr(0, 12) + "/" +
                                                          k.shape_key + " changed elsewhere: read again"));
    }
  }

  const PlannerOptions& options() const { return state.options(); }
  Status serves_plans() const {
    if (options().target)
      return failed_precondition("this Planner is deviceless (PlannerOptions::target: " + options().target->gpu_name +
                                 "): it compiles plans, it does not serve them");
    return Status::ok();
  }
  // An obtain() answered by `src` with `plan`: counted, and recorded (PlannerOptions::record_shapes).
  Obtained served(PlanSource src, std::shared_ptr<const ExecutablePlan> plan, const std::string& graph_name,
                  std::chrono::steady_clock::time_point t0, std::string why = "") {
    state.counters().served[static_cast<int>(src)].fetch_add(1, std::memory_order_relaxed);
    if (options().record_shapes)
      recorder.record(plan->signature().structure, plan->signature().shape_key, graph_name, plan_source_name(src));
    Obtained o;
    o.plan = std::move(plan);
    o.source = src;
    o.why = std::move(why);
    o.obtain_ms = runtime_detail::ms_since(t0);
    return o;
  }
  StatusOr<Obtained> failed(Status s) {
    state.counters().failures.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  // The walk of the chain for a key no one holds, as obtain()'s single-flight leader: built, admitted (a heuristic
  // choice that fails gives way to the next one that passes), held unless a job stored a plan for the structure
  // meanwhile, and a stopgap's promotion queued.
  StatusOr<Built> make(const PreparedGraph& pg, const std::map<std::string, int64_t>& shape, const std::string& key,
                       uint64_t generation) {
    StatusOr<Built> built = catch_exceptions("obtaining a plan for graph '" + pg.graph->name + "'",
                                             [&] { return chain.build(pg, shape, /*allow_stopgap=*/true); });
    if (!built.is_ok()) return built;  // a failure is handed to the waiters and not cached
    state.counters().builds.fetch_add(1, std::memory_order_relaxed);
    KILN_RETURN_IF_ERROR(runtime_detail::HeuristicsSource::admit_or_next(state, &*built, pg.graph->name));
    if (built->source == PlanSource::kStore) runtime_detail::shadow_if_any(state, &*built, pg.graph->name);
    bool inserted = false;
    state.cache().hold(key, built->plan, generation, &inserted);
    if (inserted && plan_source_is_stopgap(built->source) && options().promote)
      promotions.queue(Promotion{key, pg, shape, built->plan, generation});
    return built;
  }
  Status check_shape(const PreparedGraph& pg, const std::map<std::string, int64_t>& requested) const;
  // preload's load of one tuned shape into memory (and its warm-up); failures noted in `rep`.
  void preload_shape(const PreparedGraph& pg, const TunedShape& t, bool warm, PreloadReport* rep);
  // preload() of several graphs, their shapes loaded on up to `threads` threads; one report for all.
  StatusOr<PreloadReport> preload_all(const std::vector<PreparedGraph>& graphs, bool warm, int threads);

  // PlannerOptions::preload, loading on `loader` since create(); `loaded` its report (wait_for_preload).
  std::thread loader;
  std::shared_future<StatusOr<PreloadReport>> loaded;
  std::atomic<bool> stop_loading{false};
};

Planner::Planner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Planner::~Planner() = default;

namespace {

// PlannerOptions::preload, each graph validated and signed once; the first that fails is `bad`, named.
std::vector<PreparedGraph> prepare_preload(const PlannerOptions& options, Status* bad) {
  std::vector<PreparedGraph> graphs;
  for (const Graph& g : options.preload) {
    StatusOr<PreparedGraph> pg = runtime_detail::prepare_graph(g);
    if (pg.is_ok()) graphs.push_back(std::move(*pg));
    else if (bad->is_ok()) *bad = pg.status().with_context("PlannerOptions::preload, graph '" + g.name + "'");
  }
  return graphs;
}

}  // namespace

std::unique_ptr<Planner> Planner::create_with_backend(std::unique_ptr<PlanBackend> backend,
                                                      const PlannerOptions& options) {
  // Validated by create(); a graph that fails here (create_with_backend called directly) is a failed load.
  Status bad;
  std::vector<PreparedGraph> graphs = prepare_preload(options, &bad);
  return assemble(std::move(backend), options, std::move(graphs), bad);
}

std::unique_ptr<Planner> Planner::assemble(std::unique_ptr<PlanBackend> backend, const PlannerOptions& options,
                                           std::vector<PreparedGraph> graphs, Status bad) {
  auto impl = std::make_unique<Impl>(std::move(backend), options);
  if (options.store_watch_s > 0 && !options.store_path.empty() && !options.target) {
    Impl* i = impl.get();
    impl->watch = std::make_unique<runtime_detail::StoreWatch>(options.store_watch_s, [i] { i->poll_store(); });
  }
  if (!options.preload.empty() && !options.target) {
    auto done = std::make_shared<std::promise<StatusOr<PreloadReport>>>();
    impl->loaded = done->get_future().share();
    Impl* i = impl.get();
    try {
      impl->loader = std::thread([i, graphs = std::move(graphs), bad, done] {
        StatusOr<PreloadReport> rep = catch_exceptions("loading PlannerOptions::preload", [&] {
          return i->preload_all(graphs, i->options().preload_warm, i->options().preload_threads);
        });
        if (rep.is_ok() && !bad.is_ok()) {
          ++rep->failed;
          rep->last_failure = bad.message();
        }
        done->set_value(std::move(rep));
      });
    } catch (const std::exception& e) {  // no thread: nothing is preloaded, and wait_for_preload() says why
      done->set_value(unavailable(std::string("PlannerOptions::preload: no thread to load on: ") + e.what()));
    }
  }
  return std::unique_ptr<Planner>(new Planner(std::move(impl)));
}

StatusOr<std::unique_ptr<Planner>> Planner::create(const PlannerOptions& options) {
  KILN_RETURN_IF_ERROR(runtime_detail::check_planner_options(options));
  // Before any GPU work: a graph that cannot be served fails create.
  Status bad;
  std::vector<PreparedGraph> graphs = prepare_preload(options, &bad);
  KILN_RETURN_IF_ERROR(bad);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<PlanBackend> backend, make_cudnn_plan_backend(options));
  return assemble(std::move(backend), options, std::move(graphs), Status::ok());
}

StatusOr<PreloadReport> Planner::wait_for_preload() const {
  if (!impl_->loaded.valid()) return PreloadReport{};
  return impl_->loaded.get();
}

StatusOr<PreparedGraph> Planner::prepare(const Graph& graph) const { return runtime_detail::prepare_graph(graph); }

StatusOr<Obtained> Planner::obtain(const Graph& graph) {
  KILN_ASSIGN_OR_RETURN(PreparedGraph pg, prepare(graph));
  return obtain(pg);
}

Status Planner::Impl::check_shape(const PreparedGraph& pg, const std::map<std::string, int64_t>& requested) const {
  if (requested.empty()) return Status::ok();
  bool same_symbols = requested.size() == pg.shape.size();
  for (auto a = requested.begin(), b = pg.shape.begin(); same_symbols && a != requested.end(); ++a, ++b)
    same_symbols = a->first == b->first;
  if (same_symbols) return Status::ok();
  std::string known;
  for (const auto& [sym, v] : pg.shape) known += (known.empty() ? "" : ", ") + sym;
  return invalid_argument("graph '" + pg.graph->name + "': shape " + shape_key_text(requested) +
                          " does not name exactly its dynamic dims (" + (known.empty() ? "none" : known) + ")");
}

StatusOr<Obtained> Planner::obtain(const PreparedGraph& pg, const std::map<std::string, int64_t>& requested) {
  KILN_RETURN_IF_ERROR(impl_->serves_plans());
  const auto t0 = std::chrono::steady_clock::now();
  Impl& s = *impl_;
  if (!pg.graph) return invalid_argument("obtain: the PreparedGraph is empty (use Planner::prepare)");
  if (Status st = s.check_shape(pg, requested); !st.is_ok()) return s.failed(st);
  const std::map<std::string, int64_t>& shape = requested.empty() ? pg.shape : requested;
  const std::string key = PlanCache::key(pg, shape);
  if (auto hit = s.state.cache().find(key)) return s.served(PlanSource::kMemory, std::move(hit), pg.graph->name, t0);
  bool leader = false;
  std::shared_ptr<const ExecutablePlan> held;
  StatusOr<Built> r = Built{};
  // A preload of this key that found nothing to load (or whose plan the store replaced meanwhile) hands its waiters an
  // empty Built: they walk the chain as if it had not been there. Each empty result is a flight that ended; after a
  // few (a graph preloaded twice, a user's preload() beside create()'s) this call walks the chain itself.
  for (int attempt = 0; !held && r.is_ok() && !r->plan; ++attempt) {
    const uint64_t generation = s.state.cache().generation();
    if (attempt == 8) {
      leader = true;
      r = s.make(pg, shape, key, generation);
      break;
    }
    r = s.state.cache().single_flight(
        key, [&] { return s.make(pg, shape, key, generation); }, &leader, &held);
  }
  if (held) return s.served(PlanSource::kMemory, std::move(held), pg.graph->name, t0);
  if (!r.is_ok()) return s.failed(r.status());
  if (leader) return s.served(r->source, r->plan, pg.graph->name, t0, r->why);
  return s.served(PlanSource::kMemory, r->plan, pg.graph->name, t0,
                  "waited for a concurrent build from " + std::string(plan_source_name(r->source)));
}

std::optional<Obtained> Planner::obtain_held(const PreparedGraph& pg, const std::map<std::string, int64_t>& requested) {
  const auto t0 = std::chrono::steady_clock::now();
  Impl& s = *impl_;
  if (!pg.graph || !s.serves_plans().is_ok() || !s.check_shape(pg, requested).is_ok()) return std::nullopt;
  const std::map<std::string, int64_t>& shape = requested.empty() ? pg.shape : requested;
  auto hit = s.state.cache().find(PlanCache::key(pg, shape));
  if (!hit) return std::nullopt;
  return s.served(PlanSource::kMemory, std::move(hit), pg.graph->name, t0);
}

StatusOr<Obtained> Planner::obtain_pinned(const PreparedGraph& pg, const EngineConfig& config,
                                          const std::map<std::string, int64_t>& requested) {
  KILN_RETURN_IF_ERROR(impl_->serves_plans());
  const auto t0 = std::chrono::steady_clock::now();
  Impl& s = *impl_;
  if (!pg.graph) return invalid_argument("obtain_pinned: the PreparedGraph is empty (use Planner::prepare)");
  const std::map<std::string, int64_t>& shape = requested.empty() ? pg.shape : requested;
  // Its own key: the graph's plan from the other sources is another entry.
  const std::string key = PlanCache::key(pg, shape) + "|pin=" + config.identity();
  if (auto hit = s.state.cache().find(key)) return s.served(PlanSource::kMemory, std::move(hit), pg.graph->name, t0);
  // Single flight, as obtain(): concurrent first calls for one pinned key build once.
  bool leader = false;
  std::shared_ptr<const ExecutablePlan> held;
  StatusOr<Built> r = s.state.cache().single_flight(
      key,
      [&]() -> StatusOr<Built> {
        KILN_ASSIGN_OR_RETURN(Built out, s.chain.pinned().build(pg, shape, config));
        s.state.cache().hold(key, out.plan, PlanCache::kAnyGeneration);
        return out;
      },
      &leader, &held);
  if (held) return s.served(PlanSource::kMemory, std::move(held), pg.graph->name, t0);
  if (!r.is_ok()) return s.failed(r.status());
  if (leader) return s.served(PlanSource::kPinned, r->plan, pg.graph->name, t0, r->why);
  return s.served(PlanSource::kMemory, r->plan, pg.graph->name, t0,
                  "waited for a concurrent build of the pinned configuration");
}

void Planner::Impl::preload_shape(const PreparedGraph& pg, const TunedShape& t, bool warm, PreloadReport* rep) {
  const std::string key = PlanCache::key(pg, t.shape);
  if (state.cache().find(key)) return;
  auto note = [&](const std::string& reason) {
    ++rep->failed;
    rep->last_failure = t.shape_key + ": " + reason;
  };
  auto g = t.shape == pg.shape ? StatusOr<Graph>(*pg.graph) : reshape_graph(*pg.graph, t.shape);
  if (!g.is_ok()) return note(g.status().message());
  // Through obtain()'s single flight: an obtain() of this shape meanwhile waits for this load instead of loading it
  // again. The plan runs once (warm) before it is held, so that no caller gets it cold.
  std::string miss, warm_failure;
  bool inserted = false, warmed = false, leader = false;
  std::shared_ptr<const ExecutablePlan> held;
  StatusOr<Built> r = state.cache().single_flight(
      key,
      [&]() -> StatusOr<Built> {
        return catch_exceptions("preloading graph '" + g->name + "'", [&]() -> StatusOr<Built> {
          // The generation before the read: a notice or a job's forget during the load or the warm-up makes the plan
          // stale, and it is not held (the next obtain reads the store again).
          const uint64_t generation = state.cache().generation();
          // Warmed below before it is held: its load may run beside the other preload threads' (LoadsWarmedByCaller),
          // without the Frontend's warmup.
          std::shared_ptr<const ExecutablePlan> plan;
          if (warm) {
            runtime_detail::LoadsWarmedByCaller beside_others;
            plan = runtime_detail::load_stored(state, *g, &miss);
          } else {
            plan = runtime_detail::load_stored(state, *g, &miss);
          }
          if (!plan) return Built{};  // nothing loaded: a waiting obtain() walks the chain itself
          if (warm) {
            Status w = state.backend().warm_up(*plan);
            warmed = w.is_ok();
            if (!warmed) {
              warm_failure = w.message().empty() ? "failed" : w.message();
              // Loaded beside others without the Frontend's warmup, and never run: loaded again the ordinary way
              // (with it), so that a caller's first run may be captured; held all the same, as before. (Its
              // first-use admission and the build counter then count it twice.)
              plan = runtime_detail::load_stored(state, *g, &miss);
              if (!plan) {
                miss = "warm-up: " + warm_failure + "; loaded again the ordinary way: " + miss + " (not held)";
                return Built{};
              }
            }
          }
          std::shared_ptr<const ExecutablePlan> now = state.cache().hold(key, plan, generation, &inserted);
          if (!now) {
            miss = "the store changed while it loaded: not held";
            return Built{};
          }
          // Held first by a source that loads without the single flight (a padded or split stopgap's tuned shape):
          // that plan, warmed too, is the one callers get.
          if (!inserted && warm && now != plan) (void)state.backend().warm_up(*now);
          return Built{std::move(now), PlanSource::kStore, ""};
        });
      },
      &leader, &held);
  if (!leader) return;  // held meanwhile, or another thread's load or build of this shape
  if (!r.is_ok()) return note(r.status().message());
  if (!r->plan) return note(miss);
  if (!inserted) return;  // a concurrent holder was first
  ++rep->loaded;
  if (!warm_failure.empty()) note("warm-up: " + warm_failure);
  else if (warmed) ++rep->warmed;
}

StatusOr<PreloadReport> Planner::Impl::preload_all(const std::vector<PreparedGraph>& graphs, bool warm, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  const PlannerOptions& o = options();
  PreloadReport rep;
  if (o.promote && o.new_shapes == NewShapes::kStopgap) promotions.start();
  struct Job {
    const PreparedGraph* pg;
    TunedShape shape;
  };
  std::vector<Job> jobs;
  std::vector<std::vector<TunedShape>> tuned(graphs.size());
  std::set<std::string> keys;  // a graph listed twice (or two of one key) is loaded once
  for (size_t i = 0; i < graphs.size() && !stop_loading.load(); ++i) {
    StatusOr<std::vector<TunedShape>> shapes = state.tuned_shapes(graphs[i].signature, /*refresh=*/true);
    if (!shapes.is_ok()) {  // that graph's loads only: the others go on
      if (graphs.size() == 1) return shapes.status();
      ++rep.failed;
      rep.last_failure = "graph '" + graphs[i].graph->name + "': " + shapes.status().message();
      continue;
    }
    tuned[i] = std::move(*shapes);
    for (const TunedShape& t : tuned[i])
      if (t.shape.size() == graphs[i].shape.size() && keys.insert(PlanCache::key(graphs[i], t.shape)).second)
        jobs.push_back({&graphs[i], t});
  }
  // Each thread takes the next shape; their reports are summed (the last failure is any thread's last).
  std::atomic<size_t> next{0};
  std::mutex mu;
  auto work = [&] {
    PreloadReport mine;
    for (size_t j; !stop_loading.load() && (j = next.fetch_add(1)) < jobs.size();)
      preload_shape(*jobs[j].pg, jobs[j].shape, warm, &mine);
    std::lock_guard<std::mutex> lock(mu);
    rep.loaded += mine.loaded;
    rep.warmed += mine.warmed;
    rep.failed += mine.failed;
    if (!mine.last_failure.empty()) rep.last_failure = mine.last_failure;
  };
  std::vector<std::thread> pool;
  const size_t n = std::min(jobs.size(), static_cast<size_t>(std::clamp(threads, 1, 64)));
  for (size_t k = 1; k < n; ++k) {
    try {
      pool.emplace_back(work);
    } catch (const std::exception&) {  // no more threads: the ones made (and this one) do the rest
      break;
    }
  }
  work();
  for (std::thread& th : pool) th.join();
  if (warm && !stop_loading.load()) {
    Status h = state.backend().warm_concurrency();
    if (!h.is_ok()) {
      ++rep.failed;
      rep.last_failure = "warm-up of the handles: " + h.message();
    }
    for (size_t i = 0; i < graphs.size() && !stop_loading.load(); ++i) {
      std::string why;
      if ((o.padded || o.split) && o.new_shapes == NewShapes::kStopgap && !graphs[i].shape.empty())
        rep.padded_warmed = chain.padded().warm(graphs[i], tuned[i], &why) || rep.padded_warmed;
      if (!why.empty()) {
        ++rep.failed;
        rep.last_failure = "padded warm-up: " + why;
      }
    }
  }
  rep.ms = runtime_detail::ms_since(t0);
  return rep;
}

StatusOr<PreloadReport> Planner::preload(const PreparedGraph& pg, bool warm) {
  KILN_RETURN_IF_ERROR(impl_->serves_plans());
  if (!pg.graph) return invalid_argument("preload: the PreparedGraph is empty (use Planner::prepare)");
  return impl_->preload_all({pg}, warm, /*threads=*/1);
}

PlannerStats Planner::stats() const {
  PlannerStats st;
  runtime_detail::PlannerState& state = impl_->state;
  runtime_detail::PlannerCounters& c = state.counters();
  for (int i = 0; i < kPlanSourceCount; ++i) st.served[i] = c.served[i].load(std::memory_order_relaxed);
  st.builds = c.builds.load(std::memory_order_relaxed);
  st.failures = c.failures.load(std::memory_order_relaxed);
  st.cached = state.cache().held();
  const GraphCounters& g = *impl_->graphs;
  st.graph_captures = g.captures.load(std::memory_order_relaxed);
  st.graph_instantiations = g.instantiations.load(std::memory_order_relaxed);
  st.graph_replays = g.replays.load(std::memory_order_relaxed);
  st.graph_stream_runs = g.stream_runs.load(std::memory_order_relaxed);
  st.graph_updates = g.updates.load(std::memory_order_relaxed);
  st.graph_update_refusals = g.update_refusals.load(std::memory_order_relaxed);
  st.graph_reinstantiations = g.reinstantiations.load(std::memory_order_relaxed);
  st.stopgaps = state.cache().stopgaps();
  st.promotions = c.promotions.load(std::memory_order_relaxed);
  st.promotions_tuned = c.promotions_tuned.load(std::memory_order_relaxed);
  st.promotion_failures = c.promotion_failures.load(std::memory_order_relaxed);
  st.first_use_checks = state.first_use().checks();
  st.first_use_refused = state.first_use().refused();
  st.heuristic_fall_throughs = c.heuristic_fall_throughs.load();
  st.first_use_rollbacks = c.first_use_rollbacks.load();
  st.shadow_trials = c.shadow_trials.load();
  st.shadow_samples = c.shadow_samples.load();
  st.shadow_disagreements = c.shadow_disagreements.load();
  st.shadow_promotions = c.shadow_promotions.load();
  st.shadow_rejections = c.shadow_rejections.load();
  st.shadow_unrecorded = c.shadow_unrecorded.load();
  st.last_first_use_failure = state.first_use().last_failure();
  const runtime_detail::Promotions::Notes notes = impl_->promotions.notes();
  st.last_promotion_failure = notes.last_failure;
  st.last_tune_fallback = notes.last_tune_fallback;
  st.last_tune_note = notes.last_tune_note;
  const KernelCacheCounts k = state.backend().kernel_cache_counts();
  st.kernel_caches_loaded = k.loaded;
  st.kernel_caches_saved = k.saved;
  st.last_kernel_cache_note = k.last_note;
  st.store_mirror_hits = k.store_mirror_hits;
  st.store_notices = impl_->store_notices.load(std::memory_order_relaxed);
  st.store_unreachable = k.store_unreachable;
  return st;
}

Status Planner::save_kernel_caches() {
  if (!impl_->options().save_kernel_caches)
    return failed_precondition("the Planner keeps no kernel caches (PlannerOptions::save_kernel_caches is off)");
  Status first;
  for (const auto& [structure, sig_name] : impl_->state.dynamic_structures()) {
    Status st = impl_->state.backend().save_kernel_cache(sig_name.first, sig_name.second);
    if (!st.is_ok() && first.is_ok()) first = st.with_context("graph '" + sig_name.second + "'");
  }
  return first;
}

Workshop& Planner::workshop() { return impl_->workshop; }

void Planner::wait_for_promotions() { impl_->promotions.wait(); }

const ShapeRecorder& Planner::recorder() const { return impl_->recorder; }
const BucketPolicy& Planner::buckets() const { return impl_->options().buckets; }
const PlannerOptions& Planner::options() const { return impl_->options(); }
std::shared_ptr<GraphCounters> Planner::graph_counters() const { return impl_->graphs; }

}  // namespace kiln
