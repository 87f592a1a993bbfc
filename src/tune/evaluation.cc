// prepare_evaluation: a graph's inputs and reference, made once on the device (tune/evaluation.h).
#include "tune/evaluation.h"

#include <chrono>

#include "kiln/log.h"
#include "kiln/reference.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

StatusOr<std::shared_ptr<GraphEvaluation>> prepare_evaluation(const Graph& graph, uint64_t seed, bool verify,
                                                              bool host_reference) {
  auto e = std::make_shared<GraphEvaluation>();
  e->graph = graph;
  e->seed = seed;
  auto t0 = Clock::now();
  KILN_ASSIGN_OR_RETURN(e->buffers, allocate_graph_buffers(graph, 0));
  KILN_RETURN_IF_ERROR(generate_inputs_on_device(graph, seed, e->buffers.pointers()));
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  e->inputs_ms = ms_since(t0);
  if (!verify) return e;
  t0 = Clock::now();
  StatusOr<DeviceReference> ref = internal_error("no reference attempted");
  if (host_reference) {
    // The host reference needs the inputs on the host: the same generator gives the same values.
    auto inputs = make_random_inputs(graph, seed);
    if (inputs.is_ok()) {
      auto host = run_host_reference_with_magnitudes(graph, *inputs);
      ref = host.is_ok() ? upload_reference(graph, *host) : StatusOr<DeviceReference>(host.status());
    } else {
      ref = inputs.status();
    }
  } else {
    ref = device_reference_on_device(graph, e->buffers.pointers());
  }
  e->reference_ms = ms_since(t0);
  if (!ref.is_ok()) {
    KILN_LOG(kWarn, "no reference for graph '" << graph.name << "': " << ref.status().message());
    return e;
  }
  e->reference = std::move(ref).value();
  e->reference_kind = host_reference ? "host" : "device";
  return e;
}

}  // namespace kiln
