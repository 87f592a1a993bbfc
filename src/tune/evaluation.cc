// prepare_evaluation: a graph's inputs and reference, made once on the device (tune/evaluation.h).
#include "tune/evaluation.h"

#include <chrono>

#include "kiln/core/log.h"
#include "kiln/validate/dropout_probe.h"
#include "kiln/validate/reference.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

StatusOr<std::shared_ptr<GraphEvaluation>> prepare_evaluation(const Graph& graph, uint64_t seed, bool verify,
                                                              bool host_reference, const std::string& inputs_dir) {
  auto e = std::make_shared<GraphEvaluation>();
  e->graph = graph;
  e->seed = seed;
  e->inputs_dir = inputs_dir;
  auto t0 = Clock::now();
  std::map<int, HostTensor> recorded;
  if (inputs_dir.empty()) {
    e->inputs = "random seed " + std::to_string(seed);
    KILN_ASSIGN_OR_RETURN(e->buffers, allocate_graph_buffers(graph, 0));
    KILN_RETURN_IF_ERROR(generate_inputs_on_device(graph, seed, e->buffers.pointers()));
  } else {
    e->inputs = "files " + inputs_dir;
    KILN_ASSIGN_OR_RETURN(recorded, read_graph_inputs(graph, inputs_dir));
    KILN_ASSIGN_OR_RETURN(e->buffers, allocate_graph_buffers(graph, recorded, 0));
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  e->inputs_ms = ms_since(t0);
  if (!verify) return e;
  if (has_dropout(graph)) {  // the reference needs the mask each plan draws: made per plan (dropout_probe.h)
    e->per_plan_reference = true;
    e->reference_kind = ReferenceKind::kDevice;
    return e;
  }
  t0 = Clock::now();
  // The host reference needs the inputs on the host: the same generator gives the same values. It runs
  // when asked, or when the device reference cannot take the graph and the host's cost cap allows.
  auto host = [&]() -> StatusOr<DeviceReference> {
    std::map<int, HostTensor> inputs = recorded;
    if (inputs_dir.empty()) {
      KILN_ASSIGN_OR_RETURN(inputs, make_random_inputs(graph, seed));
    }
    KILN_ASSIGN_OR_RETURN(ReferenceOutputs r, run_host_reference_with_magnitudes(graph, inputs));
    return upload_reference(graph, r);
  };
  StatusOr<DeviceReference> ref = host_reference ? host() : device_reference_on_device(graph, e->buffers.pointers());
  ReferenceKind kind = host_reference ? ReferenceKind::kHost : ReferenceKind::kDevice;
  if (!ref.is_ok() && !host_reference) {
    KILN_LOG(kInfo,
             "graph '" << graph.name << "': device reference failed, trying the host one: " << ref.status().message());
    auto h = host();
    if (h.is_ok()) {
      ref = std::move(h);
      kind = ReferenceKind::kHost;
    }
  }
  e->reference_ms = ms_since(t0);
  if (!ref.is_ok()) {
    KILN_LOG(kWarn, "no reference for graph '" << graph.name << "': " << ref.status().message());
    return e;
  }
  e->reference = std::move(ref).value();
  e->reference_kind = kind;
  return e;
}

}  // namespace kiln
