#include "kiln/tuner.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "kiln/cuda_handles.h"
#include "kiln/device_io.h"
#include "kiln/log.h"
#include "kiln/plan_words.h"
#include "kiln/reference.h"
#include "tune/reference_choice.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

bool excluded(const EngineConfig& c, const std::vector<std::string>& exclude) {
  std::string id = c.identity();
  std::string eng = "eng" + std::to_string(c.engine_id);
  for (const auto& e : exclude)
    if (e == id || e == eng) return true;
  return false;
}

CandidateResult result_for(const EngineConfig& c, int rank) {
  CandidateResult r;
  r.engine_id = c.engine_id;
  for (auto& [k, v] : c.knobs) r.knobs["k" + std::to_string(k)] = v;
  r.heuristic_rank = rank;
  return r;
}

Disposition disposition_for_build(const Status& s) {
  return s.code() == StatusCode::kNotSupported ? Disposition::kNotSupported : Disposition::kFailed;
}

Disposition disposition_for_verdict(Verdict v) {
  switch (v) {
    case Verdict::kPassed: return Disposition::kPassed;
    case Verdict::kIncorrect: return Disposition::kIncorrect;
    case Verdict::kNotSupported: return Disposition::kNotSupported;
    case Verdict::kFailed: return Disposition::kFailed;
    case Verdict::kNotVerified: return Disposition::kNotVerified;
  }
  return Disposition::kNotVerified;
}

// Builds every configuration, `threads` at a time; each thread has its own cuDNN handle.
std::vector<StatusOr<LoweredGraph>> build_all(const Graph& graph, const std::vector<EngineConfig>& configs, int threads,
                                              const std::atomic<bool>* cancel) {
  std::vector<std::optional<StatusOr<LoweredGraph>>> slots(configs.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    auto handle = make_cudnn_handle();
    for (size_t i = next++; i < configs.size(); i = next++) {
      if (!handle.is_ok()) { slots[i].emplace(handle.status()); continue; }
      if (cancel && cancel->load()) { slots[i].emplace(cancelled("cancelled before build")); continue; }
      LowerTarget target;
      target.handle = handle->get();
      auto lg = LoweredGraph::create(graph, target);
      if (!lg.is_ok()) { slots[i].emplace(lg.status()); continue; }
      Status st = lg->build_config(configs[i]);
      if (!st.is_ok()) slots[i].emplace(st);
      else slots[i].emplace(std::move(lg).value());
    }
  };
  int n = std::max(1, std::min<int>(threads, static_cast<int>(configs.size())));
  std::vector<std::thread> pool;
  for (int t = 0; t < n; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  std::vector<StatusOr<LoweredGraph>> out;
  for (auto& s : slots) out.push_back(std::move(*s));
  return out;
}

}  // namespace

double graph_flops(const Graph& g) {
  double f = 0;
  for (const Node& n : g.nodes) {
    const TensorDesc& out = g.tensors[n.outputs[0]];
    switch (n.op) {
      case OpKind::kMatmul: {
        const TensorDesc& a = g.tensors[n.inputs[0]];
        f += 2.0 * static_cast<double>(out.element_count()) * static_cast<double>(a.dims.back().value);
        break;
      }
      case OpKind::kConvFprop:
      case OpKind::kConvDgrad:
      case OpKind::kConvWgrad: {
        // 2 * (elements of y) * (C/g * filter volume), expressed from the weight tensor.
        const TensorDesc& w = g.tensors[n.op == OpKind::kConvFprop || n.op == OpKind::kConvDgrad ? n.inputs[1] : n.outputs[0]];
        const TensorDesc& y = g.tensors[n.op == OpKind::kConvFprop ? n.outputs[0] : n.op == OpKind::kConvDgrad ? n.inputs[0] : n.inputs[1]];
        double per = static_cast<double>(w.element_count()) / static_cast<double>(w.dims[0].value);
        f += 2.0 * static_cast<double>(y.element_count()) * per;
        break;
      }
      case OpKind::kSdpa: {
        const TensorDesc& q = g.tensors[n.inputs[0]];
        const TensorDesc& k = g.tensors[n.inputs[1]];
        double bh = static_cast<double>(q.dims[0].value * q.dims[1].value);
        double s = static_cast<double>(q.dims[2].value), skv = static_cast<double>(k.dims[2].value);
        double d = static_cast<double>(q.dims[3].value);
        f += 4.0 * bh * s * skv * d * (n.sdpa.causal ? 0.5 : 1.0);
        break;
      }
      default: f += static_cast<double>(g.tensors[n.inputs[0]].element_count()); break;
    }
  }
  return f;
}

double graph_min_bytes(const Graph& g) {
  double b = 0;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    int idx = static_cast<int>(i);
    if (g.tensors[i].by_value || g.is_virtual(idx)) continue;
    b += static_cast<double>(g.tensors[i].element_count()) * static_cast<double>(dtype_size(g.dtype_of(idx)));
  }
  return b;
}

namespace {
StatusOr<TuneResult> tune_graph_unchecked(const Graph& graph, const TuneOptions& o);
}  // namespace

StatusOr<TuneResult> tune_graph(const Graph& graph, const TuneOptions& o) {
  return catch_exceptions("tuning graph '" + graph.name + "'", [&] { return tune_graph_unchecked(graph, o); });
}

namespace {
StatusOr<TuneResult> tune_graph_unchecked(const Graph& graph, const TuneOptions& o) {
  auto t0 = Clock::now();
  TuneResult r;
  r.graph_name = graph.name;
  KILN_ASSIGN_OR_RETURN(UniqueStream stream, make_stream());
  KILN_ASSIGN_OR_RETURN(UniqueCudnnHandle handle, make_cudnn_handle(stream.get()));

  // 1. Candidates.
  std::vector<EngineConfig> configs;
  std::vector<int> ranks;
  std::vector<std::string> notes;
  KILN_ASSIGN_OR_RETURN(std::optional<EngineConfig> pin, resolve_pin(graph, o.pin));
  if (pin) {
    configs.push_back(*pin);
    ranks.push_back(-1);
    notes.push_back("pinned");
  } else {
    LowerTarget target;
    target.handle = handle.get();
    KILN_ASSIGN_OR_RETURN(LoweredGraph lg, with_plan_words(LoweredGraph::create(graph, target), graph.name));
    KILN_ASSIGN_OR_RETURN(auto cands, with_plan_words(lg.list_candidates(o.modes), graph.name));
    for (const CandidateInfo& c : cands) {
      if (excluded(c.config, o.exclude)) continue;
      if (o.top_k > 0 && (c.heuristic_rank < 0 || c.heuristic_rank >= o.top_k)) continue;
      configs.push_back(c.config);
      ranks.push_back(c.heuristic_rank);
      std::string n;
      for (auto& s : c.behavior_notes) n += (n.empty() ? "" : ",") + s;
      notes.push_back(n);
    }
    if (configs.empty()) return not_supported("no engine configuration left for graph '" + graph.name + "' after filters");
  }
  r.behavior_notes = notes;

  // 2. Parallel build.
  auto tb = Clock::now();
  int threads = o.build_threads > 0 ? o.build_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<StatusOr<LoweredGraph>> built = build_all(graph, configs, threads, o.cancel);
  r.build_wall_ms = ms_since(tb);

  // 3. Inputs, reference and buffers (workspace sized for the largest allowed plan).
  KILN_ASSIGN_OR_RETURN(auto inputs, make_random_inputs(graph, o.seed));
  std::optional<ReferenceOutputs> reference;
  r.reference_kind = "none";
  if (o.verify) reference = tune_internal::compute_reference(graph, inputs, &r.reference_kind);
  int64_t ws = 0;
  for (auto& b : built)
    if (b.is_ok() && (o.max_workspace_bytes < 0 || b->workspace_size() <= o.max_workspace_bytes))
      ws = std::max(ws, b->workspace_size());
  KILN_ASSIGN_OR_RETURN(GraphBuffers buffers, allocate_graph_buffers(graph, inputs, ws));
  std::map<int, void*> ptrs = buffers.pointers();
  KILN_ASSIGN_OR_RETURN(Timer timer, Timer::create());
  MeasureOptions mo = o.measure;
  mo.stream = stream.get();
  double flops = graph_flops(graph), bytes = graph_min_bytes(graph);

  // 4. Check and time each candidate.
  std::vector<std::string> checks(configs.size());
  for (size_t i = 0; i < configs.size(); ++i) {
    CandidateResult c = result_for(configs[i], ranks[i]);
    c.flops = flops;
    c.bytes = bytes;
    auto finish = [&] {
      r.candidates.push_back(c);
      if (o.progress) o.progress(i + 1, configs.size(), configs[i].identity());
    };
    if (!built[i].is_ok()) {
      c.disposition = built[i].status().code() == StatusCode::kCancelled ? Disposition::kNotVerified
                                                                         : disposition_for_build(built[i].status());
      c.message = built[i].status().message();
      finish();
      continue;
    }
    const LoweredGraph& lg = *built[i];
    c.workspace_bytes = lg.workspace_size();
    if ((o.cancel && o.cancel->load()) || r.cancelled) {
      r.cancelled = true;
      c.disposition = Disposition::kNotVerified;
      c.message = "not run: interrupted";
      finish();
      continue;
    }
    if (o.time_budget_s > 0 && ms_since(t0) > o.time_budget_s * 1000.0) {
      r.budget_exhausted = true;
      c.disposition = Disposition::kNotVerified;
      c.message = "not run: time budget reached";
      finish();
      continue;
    }
    if (o.max_workspace_bytes >= 0 && c.workspace_bytes > o.max_workspace_bytes) {
      c.disposition = Disposition::kNotSupported;
      c.message = "workspace " + std::to_string(c.workspace_bytes) + " B over the limit";
      finish();
      continue;
    }
    // Numerics gate: one run on poisoned outputs, compared with the reference.
    Status st = poison_outputs(graph, buffers, stream.get());
    if (st.is_ok()) st = lg.execute(handle.get(), ptrs, buffers.workspace.data());
    if (st.is_ok()) st = cuda_status(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
    if (!st.is_ok()) {
      c.disposition = Disposition::kFailed;
      c.message = st.message();
      cudaGetLastError();
      finish();
      continue;
    }
    std::string check_summary;
    if (reference) {
      KILN_ASSIGN_OR_RETURN(auto outs, download_outputs(graph, buffers));
      if (o.output_hook) o.output_hook(configs[i], outs);
      KILN_ASSIGN_OR_RETURN(CheckReport rep, check_outputs(graph, outs, *reference, o.check));
      c.disposition = disposition_for_verdict(rep.verdict);
      check_summary = rep.summary();
      if (c.disposition != Disposition::kPassed) {
        c.message = check_summary;
        finish();
        continue;  // an incorrect candidate is never timed, never chosen
      }
    } else {
      c.disposition = Disposition::kNotVerified;
      c.message = "no reference: not verified";
    }
    auto m = timer.measure([&](cudaStream_t) { return lg.execute(handle.get(), ptrs, buffers.workspace.data()); }, mo);
    if (!m.is_ok()) {
      c.disposition = Disposition::kFailed;
      c.message = m.status().message();
    } else {
      c.set_timing(*m);
      c.throttled = m->throttled;
      if (m->throttled) c.message += (c.message.empty() ? "" : "; ") + std::string("throttled: ") + m->throttle_note;
    }
    checks[i] = check_summary;
    finish();
  }

  // 5. Winner: fastest correct candidate, then the incumbent rule.
  // Without a reference (--no-verify, or none could be computed) every timed candidate is NotVerified;
  // the winner is then the fastest of those, and it stays marked NotVerified in reports and the store.
  std::vector<CandidateResult> eligible = r.candidates;
  if (!reference)
    for (auto& c : eligible)
      if (c.disposition == Disposition::kNotVerified && c.timed()) c.disposition = Disposition::kPassed;
  auto w = pick_winner(eligible, o.winner);
  if (w.is_ok()) {
    r.fastest = *w;
    r.winner = *w;
    if (o.incumbent) {
      IncumbentDecision d = decide_incumbent(*o.incumbent, r.candidates[*w], o.incumbent_options);
      r.incumbent_decision = d;
      if (!d.replace) {
        for (size_t i = 0; i < r.candidates.size(); ++i)
          if (eligible[i].identity() == o.incumbent->identity && eligible[i].disposition == Disposition::kPassed)
            r.winner = i;
      }
    }
    size_t wi = *r.winner;
    r.winner_config = configs[wi];
    r.winner_check = checks[wi];
    KILN_ASSIGN_OR_RETURN(r.winner_plan, built[wi]->serialize());
  }
  r.total_wall_ms = ms_since(t0);
  return r;
}
}  // namespace

}  // namespace kiln
