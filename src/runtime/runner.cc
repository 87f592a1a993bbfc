#include "kiln/runtime/runner.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "kiln/core/atomic_file.h"
#include "kiln/core/log.h"
#include "kiln/lower/environment.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/plan_keeping.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/segments.h"
#include "kiln/tune/device_io.h"
#include "kiln/tune/plan_chain.h"
#include "kiln/tune/plan_words.h"
#include "kiln/validate/device_check.h"
#include "kiln/validate/reference.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

namespace {

// obtain_plan under kRetune: tunes the graph now, stores the winner (and the graph's spec) when the store
// is writable, and deserializes the winner on the caller's handle.
StatusOr<ObtainedPlan> tune_now(const Graph& graph, const GraphSignature& sig, cudnnHandle_t handle, PlanStore& store,
                                const EnvFingerprint& env, const RetuneNowOptions& retune) {
  ObtainedPlan out;
  KILN_ASSIGN_OR_RETURN(TuneResult tr, tune_graph(graph, tune_options_for(retune)));
  if (!tr.winner)
    return check_failed("no correct candidate among " + std::to_string(tr.candidates.size()) +
                        (tr.budget_exhausted ? " within the time budget" : ""));
  KILN_ASSIGN_OR_RETURN(out.plan, LoweredGraph::deserialize(graph, handle, tr.winner_plan));
  out.config = tr.winner_config;
  out.source = "tuned";
  out.reasons.push_back("re-tuned now: " + tr.winner_config.identity() + " " + tr.winner_check);
  if (store.read_only()) {
    out.reasons.push_back("tuned plan not stored: the store is read-only");
    return out;
  }
  Status stored = [&]() -> Status {
    KILN_ASSIGN_OR_RETURN(PlanRecord rec, record_from_tuning(sig, env, tr));
    rec.tuned = tuning_is_complete(tr);
    KILN_ASSIGN_OR_RETURN(KeptPlan kept, keep_plan(store, graph, rec));
    for (const std::string& w : kept.warnings) out.reasons.push_back(w);
    return Status::ok();
  }();
  if (stored.is_ok())
    out.reasons.push_back("stored in " + store.path() +
                          (tuning_is_complete(tr) ? "" : " (untuned: the tuning was cut short)"));
  else out.reasons.push_back("tuned plan not stored: " + stored.message());
  return out;
}

}  // namespace

StatusOr<ObtainedPlan> obtain_plan(const Graph& graph, cudnnHandle_t handle, PlanStore* store,
                                   const EnvFingerprint& env, const EnvPolicy& policy,
                                   const std::optional<EngineConfig>& pin, const RetuneNowOptions& retune) {
  auto t0 = Clock::now();
  ObtainedPlan out;
  if (store && !pin) {
    KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(graph));
    // The validator deserializes the record once; on a hit that same plan is the one run.
    std::optional<LoweredGraph> loaded;
    PlanValidator validator = [&](const PlanRecord& r) -> Status {
      std::vector<uint8_t> bytes(r.plan_bytes.begin(), r.plan_bytes.end());
      auto lg = LoweredGraph::deserialize(graph, handle, bytes);
      if (!lg.is_ok()) return lg.status();
      loaded = std::move(lg).value();
      return Status::ok();
    };
    KILN_ASSIGN_OR_RETURN(LookupResult look, store->get(sig.structure, sig.shape_key, env, policy, validator));
    if (look.runnable() && loaded) {
      out.plan = std::move(*loaded);
      out.config = EngineConfig{look.record->engine_id, look.record->knobs};
      out.source = "store";
      out.obtain_ms = ms_since(t0);
      return out;
    } else {
      out.reasons.push_back(std::string("store ") + lookup_outcome_name(look.outcome));
      for (auto& r : look.reasons) out.reasons.push_back(r);
    }
    if (policy.on_mismatch == MismatchPolicy::kRetune) {
      StatusOr<ObtainedPlan> tuned = tune_now(graph, sig, handle, *store, env, retune);
      if (tuned.is_ok()) {
        out.reasons.insert(out.reasons.end(), tuned->reasons.begin(), tuned->reasons.end());
        tuned->reasons = std::move(out.reasons);
        for (auto& r : tuned->reasons) KILN_LOG(kInfo, "graph '" << graph.name << "': " << r);
        tuned->obtain_ms = ms_since(t0);
        return tuned;
      }
      out.reasons.push_back("re-tune failed, running heuristics: " + tuned.status().message());
    } else if (policy.on_mismatch == MismatchPolicy::kHeuristicsAndQueue) {
      StatusOr<RetuneQueueEntry> queued = queue_retune(*store, graph, env, retune_reason(look));
      if (queued.is_ok())
        out.reasons.push_back("queued for re-tune (requested " + std::to_string(queued->request_count) +
                              (queued->request_count == 1 ? " time)" : " times)"));
      else out.reasons.push_back("not queued for re-tune: " + queued.status().message());
    }
    for (auto& r : out.reasons) KILN_LOG(kInfo, "graph '" << graph.name << "': " << r);
  }
  LowerTarget target;
  target.handle = handle;
  // cuDNN's own failure text ("No valid engine configs for ___") is said in Kiln's words (kiln/tune/plan_words.h).
  KILN_ASSIGN_OR_RETURN(out.plan, with_plan_words(LoweredGraph::create(graph, target), graph.name));
  if (pin) {
    KILN_RETURN_IF_ERROR(plan_failure_in_words(out.plan.build_config(*pin), graph.name));
    out.source = "pinned";
  } else {
    KILN_RETURN_IF_ERROR(plan_failure_in_words(out.plan.build_heuristic(), graph.name));
    out.source = "heuristics";
  }
  for (const std::string& w : out.plan.workarounds()) out.reasons.push_back("known cuDNN defect worked around: " + w);
  out.config = out.plan.config();
  out.obtain_ms = ms_since(t0);
  return out;
}

namespace {

std::string macs_text(double v) {
  std::ostringstream os;
  os.precision(3);
  os << v;
  return os.str();
}

// Why the host reference cannot take this graph, or "" when it can.
StatusOr<std::string> host_refusal(const Graph& graph, double cap) {
  KILN_ASSIGN_OR_RETURN(double macs, estimate_macs(graph));
  if (macs <= cap) return std::string();
  return "graph '" + graph.name + "' needs " + macs_text(macs) +
         " multiply-accumulates, over the host reference cap of " + macs_text(cap) +
         " (raise the cap with --host-max-macs, or use the device reference)";
}

// Elements in the graph's non-virtual tensors: what host-side inputs, reference and comparison cost.
int64_t graph_elements(const Graph& graph) {
  int64_t n = 0;
  for (size_t i = 0; i < graph.tensors.size(); ++i)
    if (!graph.tensors[i].by_value && !graph.is_virtual(static_cast<int>(i))) n += graph.tensors[i].element_count();
  return n;
}

StatusOr<CheckReport> check_against(const Graph& graph, const std::vector<HostTensor>& outputs,
                                    const std::map<int, HostTensor>& inputs, ReferenceKind kind, double host_cap,
                                    const CheckOptions& check) {
  ReferenceOutputs ref;
  if (kind == ReferenceKind::kHost) {
    HostReferenceOptions ho;
    ho.max_macs = host_cap;
    KILN_ASSIGN_OR_RETURN(ref, run_host_reference_with_magnitudes(graph, inputs, ho));
  } else {
    KILN_ASSIGN_OR_RETURN(ref, run_device_reference_with_magnitudes(graph, inputs));
  }
  return check_outputs(graph, outputs, ref, check);
}

}  // namespace

const char* reference_choice_name(ReferenceChoice c) {
  switch (c) {
    case ReferenceChoice::kAuto: return "auto";
    case ReferenceChoice::kHost: return "host";
    case ReferenceChoice::kDevice: return "device";
    case ReferenceChoice::kBoth: return "both";
  }
  return "?";
}

StatusOr<ReferenceChoice> parse_reference_choice(const std::string& name) {
  for (ReferenceChoice c :
       {ReferenceChoice::kAuto, ReferenceChoice::kHost, ReferenceChoice::kDevice, ReferenceChoice::kBoth})
    if (name == reference_choice_name(c)) return c;
  return invalid_argument("reference '" + name + "': expected one of auto, host, device, both");
}

Disposition RunReport::verdict() const {
  bool passed = false, refused = false;
  for (const auto& c : checks) {
    if (c.verdict == Disposition::kIncorrect || c.verdict == Disposition::kFailed) return c.verdict;
    passed = passed || c.verdict == Disposition::kPassed;
    refused = refused || c.verdict == Disposition::kNotSupported;
  }
  if (passed) return Disposition::kPassed;
  return refused ? Disposition::kNotSupported : Disposition::kNotVerified;
}

namespace {
// --save-outputs: <folder>/<output tensor name>.bin.
std::string output_file(const RunOptions& o, const Graph& graph, size_t i) {
  return o.save_outputs_dir + "/" + graph.tensors[graph.outputs[i]].name + ".bin";
}

StatusOr<RunReport> run_graph_unchecked(const Graph& graph, const RunOptions& o);
}  // namespace

StatusOr<RunReport> run_graph(const Graph& graph, const RunOptions& o) {
  return catch_exceptions("running graph '" + graph.name + "'", [&] { return run_graph_unchecked(graph, o); });
}

namespace {
StatusOr<RunReport> run_graph_unchecked(const Graph& graph, const RunOptions& o) {
  RunReport rep;
  if (o.verify && !(o.host_max_macs > 0))
    return invalid_argument("the host reference cap must be positive, got " + macs_text(o.host_max_macs));
  // Decided before the GPU is touched: whether the host reference can take the graph.
  std::string host_refused;
  if (o.verify && o.reference != ReferenceChoice::kDevice) {
    KILN_ASSIGN_OR_RETURN(host_refused, host_refusal(graph, o.host_max_macs));
    if (o.reference == ReferenceChoice::kHost && !host_refused.empty())
      return not_supported("--reference host: " + host_refused);
  }
  // Which references will run: auto takes the host reference only where it is cheap (within the MAC cap
  // and at most kHostAutoMaxElements elements in the graph's tensors), the device one otherwise.
  std::vector<ReferenceKind> kinds;
  if (o.verify) {
    switch (o.reference) {
      case ReferenceChoice::kAuto:
        kinds = {host_refused.empty() && graph_elements(graph) <= kHostAutoMaxElements ? ReferenceKind::kHost
                                                                                       : ReferenceKind::kDevice};
        break;
      case ReferenceChoice::kHost: kinds = {ReferenceKind::kHost}; break;
      case ReferenceChoice::kDevice: kinds = {ReferenceKind::kDevice}; break;
      case ReferenceChoice::kBoth: kinds = {ReferenceKind::kHost, ReferenceKind::kDevice}; break;
    }
  }
  const bool host_check =
      std::find(kinds.begin(), kinds.end(), ReferenceKind::kHost) != kinds.end() && host_refused.empty();
  // An output file that would be written over is refused before the run, not after it.
  if (!o.save_outputs_dir.empty())
    for (size_t i = 0; i < graph.outputs.size(); ++i) {
      FileWriteOptions fo;
      fo.overwrite = o.overwrite_outputs;
      fo.what = "output file";
      KILN_RETURN_IF_ERROR(check_destination(output_file(o, graph, i), fo));
    }
  KILN_ASSIGN_OR_RETURN(UniqueStream stream, make_stream());
  KILN_ASSIGN_OR_RETURN(UniqueCudnnHandle handle, make_cudnn_handle(stream.get()));
  std::unique_ptr<PlanStore> store;
  EnvFingerprint env = collect_environment().fingerprint;
  if (!o.store_path.empty()) {
    KILN_ASSIGN_OR_RETURN(store, PlanStore::open(o.store_path));
  }
  KILN_ASSIGN_OR_RETURN(std::optional<EngineConfig> pin, resolve_pin(graph, o.pin));
  // Inputs: from files (uploaded), or seeded random, generated on the device where the plan reads them;
  // the host gets a copy (the same values, make_random_inputs) only when the host reference needs one.
  std::map<int, HostTensor> inputs;
  GraphBuffers source;  // the graph's inputs on the device (and its outputs, for a single plan)
  if (!o.inputs_dir.empty()) {
    KILN_ASSIGN_OR_RETURN(inputs, read_graph_inputs(graph, o.inputs_dir));
    KILN_ASSIGN_OR_RETURN(source, allocate_graph_buffers(graph, inputs, 0));
  } else {
    KILN_ASSIGN_OR_RETURN(source, allocate_graph_buffers(graph, 0));
    KILN_RETURN_IF_ERROR(generate_inputs_on_device(graph, o.seed, source.pointers(), stream.get()));
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
    if (host_check) {
      KILN_ASSIGN_OR_RETURN(inputs, make_random_inputs(graph, o.seed));
    }
  }
  // A graph cuDNN cannot fuse whole runs as its fused segments, each obtained like a graph of its own.
  SegmentDecision seg;
  if (!pin) {
    KILN_ASSIGN_OR_RETURN(seg, segments_if_unfusable(graph, handle.get()));
  }
  std::optional<PlanChain> chain;
  std::map<int, void*> outputs;  // device pointers of the graph's outputs after the run
  if (!seg.segments.empty()) {
    rep.plan_source = "segments";
    rep.reasons.push_back("whole graph not fusable (" + seg.why + "): runs as " + std::to_string(seg.segments.size()) +
                          " fused segments");
    std::vector<LoweredGraph> plans;
    for (const GraphPart& part : seg.segments) {
      KILN_ASSIGN_OR_RETURN(ObtainedPlan sp,
                            obtain_plan(part.graph, handle.get(), store.get(), env, o.policy, std::nullopt, o.retune));
      rep.segments.push_back(part.graph.name + ": " + sp.config.identity() + " from " + sp.source);
      for (auto& r : sp.reasons) rep.reasons.push_back(part.graph.name + ": " + r);
      rep.obtain_ms += sp.obtain_ms;
      plans.push_back(std::move(sp.plan));
    }
    KILN_ASSIGN_OR_RETURN(PlanChain c, PlanChain::create(graph, std::move(seg.segments), std::move(plans), source));
    chain.emplace(std::move(c));
    rep.workspace_bytes = chain->workspace_bytes();
    auto t0 = Clock::now();
    KILN_RETURN_IF_ERROR(chain->run(handle.get()));
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
    rep.run_ms = ms_since(t0);
    outputs = chain->output_pointers();
  } else {
    KILN_ASSIGN_OR_RETURN(ObtainedPlan op, obtain_plan(graph, handle.get(), store.get(), env, o.policy, pin, o.retune));
    rep.plan_source = op.source;
    rep.reasons = op.reasons;
    rep.config = op.config;
    rep.workspace_bytes = op.plan.workspace_size();
    rep.obtain_ms = op.obtain_ms;
    KILN_ASSIGN_OR_RETURN(source.workspace,
                          DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(rep.workspace_bytes, 1))));
    auto t0 = Clock::now();
    KILN_RETURN_IF_ERROR(op.plan.execute(handle.get(), source.pointers(), source.workspace.data()));
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
    rep.run_ms = ms_since(t0);
    outputs = output_pointers(graph, source);
  }
  // The outputs travel to the host only when they are wanted there.
  if (!o.save_outputs_dir.empty() || host_check) {
    if (chain) {
      KILN_ASSIGN_OR_RETURN(rep.outputs, chain->download_outputs());
    } else {
      KILN_ASSIGN_OR_RETURN(rep.outputs, download_outputs(graph, source));
    }
  }

  if (!o.save_outputs_dir.empty())
    for (size_t i = 0; i < graph.outputs.size(); ++i)
      KILN_RETURN_IF_ERROR(rep.outputs[i].write_file(output_file(o, graph, i), o.overwrite_outputs));
  rep.reference_kind = "none";
  if (o.verify) {
    // The device reference and comparison stay on the device: from the inputs where the plan read them.
    auto device_check = [&]() -> StatusOr<CheckReport> {
      KILN_ASSIGN_OR_RETURN(DeviceReference ref, device_reference_on_device(graph, source.pointers()));
      KILN_ASSIGN_OR_RETURN(DeviceChecker checker, DeviceChecker::create(graph, o.check));
      return checker.check(outputs, ref, stream.get());
    };
    std::vector<std::string> ran;
    for (ReferenceKind kind : kinds) {
      RunReport::ReferenceCheck c;
      c.kind = kind;
      if (kind == ReferenceKind::kHost && !host_refused.empty()) {
        c.verdict = Disposition::kNotSupported;
        c.message = host_refused;
        rep.checks.push_back(std::move(c));
        continue;
      }
      StatusOr<CheckReport> cr = kind == ReferenceKind::kHost
                                     ? check_against(graph, rep.outputs, inputs, kind, o.host_max_macs, o.check)
                                     : device_check();
      if (!cr.is_ok() && o.reference == ReferenceChoice::kAuto && kind == ReferenceKind::kHost) {
        // As before --reference existed: a host reference that fails gives way to the device reference.
        KILN_LOG(kInfo, "graph '" << graph.name
                                  << "': host reference failed, using the device reference: " << cr.status().message());
        c.kind = ReferenceKind::kDevice;
        cr = device_check();
      }
      if (!cr.is_ok()) return cr.status().with_context(std::string(reference_kind_name(c.kind)) + " reference");
      c.verdict = cr->verdict;
      c.report = std::move(cr).value();
      if (!rep.check) rep.check = c.report;
      ran.push_back(reference_kind_name(c.kind));
      rep.checks.push_back(std::move(c));
    }
    if (!ran.empty()) {
      rep.reference_kind = ran[0];
      for (size_t i = 1; i < ran.size(); ++i) rep.reference_kind += "+" + ran[i];
    }
  }
  return rep;
}
}  // namespace

}  // namespace kiln
