// prime_cudnn (kiln/runtime/cudnn_primer.h): a deviceless mode-A heuristics query for a tiny graph, once per process.
#include "kiln/runtime/cudnn_primer.h"

#include <chrono>
#include <mutex>

#include "kiln/cuda/device.h"
#include "kiln/lower/lower.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

// Small enough to cost nothing to lower; a precompiled-engine convolution with an epilogue, like the
// graphs Kiln serves.
constexpr const char* kPrimerSpec = R"({
  "name": "kiln_cudnn_primer", "io_dtype": "fp16", "intermediate_dtype": "fp32", "compute_dtype": "fp32",
  "tensors": {"x": {"dims": [2, 8, 8, 8], "layout": "NHWC"}, "w": {"dims": [16, 8, 3, 3], "layout": "NHWC"},
              "bias": {"dims": [1, 16, 1, 1], "layout": "NHWC"}, "y": {"layout": "NHWC"}},
  "nodes": [{"name": "conv", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["c"],
             "padding": [1, 1], "stride": [1, 1], "dilation": [1, 1]},
            {"name": "bias", "op": "bias_add", "inputs": ["c", "bias"], "outputs": ["b"]},
            {"name": "relu", "op": "relu", "inputs": ["b"], "outputs": ["y"]}],
  "outputs": ["y"]})";

Status prime_once() {
  (void)preload_cudnn_libraries();
  KILN_ASSIGN_OR_RETURN(DeviceProfile profile, builtin_h200_profile());
  KILN_ASSIGN_OR_RETURN(Graph g, parse_spec_string(kPrimerSpec, "the cuDNN primer's graph"));
  LowerTarget target;
  target.profile = &profile;
  KILN_ASSIGN_OR_RETURN(LoweredGraph lg, LoweredGraph::create(g, target));
  // Mode A's query is enough (and cheaper than building its first plan: 105 against 125-137 ms on a
  // machine without a GPU); a FALLBACK-mode build is not.
  KILN_ASSIGN_OR_RETURN(std::vector<CandidateInfo> offered, lg.list_candidates({HeuristicMode::kA}));
  if (offered.empty()) return not_supported("cuDNN's heuristics offered the primer's graph nothing");
  return Status::ok();
}

}  // namespace

PrimeReport prime_cudnn() {
  static std::once_flag once;
  static Status status;
  PrimeReport r;
  std::call_once(once, [&] {
    const auto t0 = std::chrono::steady_clock::now();
    status = catch_exceptions("priming cuDNN", [] { return prime_once(); });
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.first = true;
  });
  r.status = status;
  return r;
}

}  // namespace kiln
