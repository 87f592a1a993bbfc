#include "tune/reference_choice.h"

#include "kiln/log.h"

namespace kiln::tune_internal {

std::optional<ReferenceOutputs> compute_reference(const Graph& graph, const std::map<int, HostTensor>& inputs,
                                                  std::string* kind) {
  auto host = run_host_reference_with_magnitudes(graph, inputs);
  if (host.is_ok()) {
    *kind = "host";
    return std::move(host).value();
  }
  auto dev = run_device_reference_with_magnitudes(graph, inputs);
  if (dev.is_ok()) {
    *kind = "device";
    return std::move(dev).value();
  }
  KILN_LOG(kWarn, "no reference for graph '" << graph.name << "': " << dev.status().message());
  *kind = "none";
  return std::nullopt;
}

}  // namespace kiln::tune_internal
