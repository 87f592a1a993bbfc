#include "kiln/runner.h"

#include <chrono>
#include <optional>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "kiln/device_io.h"
#include "kiln/fingerprint.h"
#include "kiln/log.h"
#include "kiln/plan_bridge.h"
#include "kiln/reference.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

StatusOr<std::map<int, HostTensor>> load_inputs(const Graph& g, const std::string& dir) {
  std::map<int, HostTensor> inputs;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    int idx = static_cast<int>(i);
    const TensorDesc& d = g.tensors[i];
    if (!g.is_graph_input(idx) || d.by_value) continue;
    std::string path = dir + "/" + d.name + ".bin";
    KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
    auto t = HostTensor::decode(g.dtype_of(idx), d.shape(), bytes.data(), bytes.size(), d.strides);
    if (!t.is_ok()) return t.status().with_context("input tensor '" + d.name + "' from '" + path + "'");
    inputs.emplace(idx, std::move(t).value());
  }
  return inputs;
}

}  // namespace

StatusOr<ObtainedPlan> obtain_plan(const Graph& graph, cudnnHandle_t handle, PlanStore* store,
                                   const EnvFingerprint& env, const EnvPolicy& policy,
                                   const std::optional<EngineConfig>& pin) {
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
      KILN_ASSIGN_OR_RETURN(out.config, config_of(look.record->engine_id, look.record->knobs));
      out.source = "store";
      out.obtain_ms = ms_since(t0);
      return out;
    } else {
      out.reasons.push_back(std::string("store ") + lookup_outcome_name(look.outcome));
      for (auto& r : look.reasons) out.reasons.push_back(r);
    }
    for (auto& r : out.reasons) KILN_LOG(kInfo, "graph '" << graph.name << "': " << r);
  }
  LowerTarget target;
  target.handle = handle;
  KILN_ASSIGN_OR_RETURN(out.plan, LoweredGraph::create(graph, target));
  if (pin) {
    KILN_RETURN_IF_ERROR(out.plan.build_config(*pin));
    out.source = "pinned";
  } else {
    KILN_RETURN_IF_ERROR(out.plan.build_heuristic());
    out.source = "heuristics";
  }
  out.config = out.plan.config();
  out.obtain_ms = ms_since(t0);
  return out;
}

StatusOr<RunReport> run_graph(const Graph& graph, const RunOptions& o) {
  RunReport rep;
  KILN_ASSIGN_OR_RETURN(UniqueStream stream, make_stream());
  KILN_ASSIGN_OR_RETURN(UniqueCudnnHandle handle, make_cudnn_handle(stream.get()));
  std::unique_ptr<PlanStore> store;
  EnvFingerprint env = collect_environment().fingerprint;
  if (!o.store_path.empty()) {
    KILN_ASSIGN_OR_RETURN(store, PlanStore::open(o.store_path));
  }
  KILN_ASSIGN_OR_RETURN(std::optional<EngineConfig> pin, resolve_pin(graph, o.pin));
  KILN_ASSIGN_OR_RETURN(ObtainedPlan op, obtain_plan(graph, handle.get(), store.get(), env, o.policy, pin));
  rep.plan_source = op.source;
  rep.reasons = op.reasons;
  rep.config = op.config;
  rep.workspace_bytes = op.plan.workspace_size();
  rep.obtain_ms = op.obtain_ms;

  std::map<int, HostTensor> inputs;
  if (o.inputs_dir.empty()) {
    KILN_ASSIGN_OR_RETURN(inputs, make_random_inputs(graph, o.seed));
  } else {
    KILN_ASSIGN_OR_RETURN(inputs, load_inputs(graph, o.inputs_dir));
  }
  KILN_ASSIGN_OR_RETURN(GraphBuffers buffers, allocate_graph_buffers(graph, inputs, rep.workspace_bytes));
  auto t0 = Clock::now();
  KILN_RETURN_IF_ERROR(op.plan.execute(handle.get(), buffers.pointers(), buffers.workspace.data()));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
  rep.run_ms = ms_since(t0);
  KILN_ASSIGN_OR_RETURN(rep.outputs, download_outputs(graph, buffers));

  if (!o.save_outputs_dir.empty()) {
    ::mkdir(o.save_outputs_dir.c_str(), 0755);
    for (size_t i = 0; i < graph.outputs.size(); ++i) {
      std::string path = o.save_outputs_dir + "/" + graph.tensors[graph.outputs[i]].name + ".bin";
      std::ofstream f(path, std::ios::binary | std::ios::trunc);
      auto bytes = rep.outputs[i].encode();
      f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      if (!f.good()) return unavailable("cannot write output '" + path + "'");
    }
  }
  rep.reference_kind = "none";
  if (o.verify) {
    std::vector<HostTensor> ref;
    auto host = run_host_reference(graph, inputs);
    if (host.is_ok()) {
      ref = std::move(host).value();
      rep.reference_kind = "host";
    } else {
      KILN_ASSIGN_OR_RETURN(ref, run_device_reference(graph, inputs));
      rep.reference_kind = "device";
    }
    KILN_ASSIGN_OR_RETURN(CheckReport cr, check_outputs(graph, rep.outputs, ref, o.check));
    rep.check = cr;
  }
  return rep;
}

}  // namespace kiln
