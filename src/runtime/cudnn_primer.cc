// prime_cudnn (kiln/runtime/cudnn_primer.h): a deviceless build of a tiny graph with a precompiled engine pinned (else
// mode A's heuristics query for it), once per process.
#include "kiln/runtime/cudnn_primer.h"

#include <chrono>
#include <mutex>
#include <system_error>

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

Status prime_once(std::string* how) {
  *how = "its set-up (the built-in H200 profile and graph)";  // until a way to prime is tried
  (void)preload_cudnn_libraries();
  KILN_ASSIGN_OR_RETURN(DeviceProfile profile, builtin_h200_profile());
  KILN_ASSIGN_OR_RETURN(Graph g, parse_spec_string(kPrimerSpec, "the cuDNN primer's graph"));
  LowerTarget target;
  target.profile = &profile;
  KILN_ASSIGN_OR_RETURN(LoweredGraph lg, LoweredGraph::create(g, target));
  // The engine pinned, its knobs cuDNN's defaults: no heuristics (72-81 ms on a machine without a GPU, against
  // 139-150 ms for mode A's query below).
  const Status pinned = lg.build_config(EngineConfig{kPrimerEngine, {}});
  if (pinned.is_ok()) {
    *how = "engine " + std::to_string(kPrimerEngine) + " pinned";
    return Status::ok();
  }
  *how = "mode A's query (engine " + std::to_string(kPrimerEngine) + " did not build: " + pinned.message() + ")";
  // Mode A's query pays it too (and is cheaper than building its first plan); a FALLBACK-mode build does not.
  KILN_ASSIGN_OR_RETURN(LoweredGraph again, LoweredGraph::create(g, target));
  KILN_ASSIGN_OR_RETURN(std::vector<CandidateInfo> offered, again.list_candidates({HeuristicMode::kA}));
  if (offered.empty()) return not_supported("cuDNN's heuristics offered the primer's graph nothing");
  return Status::ok();
}

}  // namespace

PrimeReport prime_cudnn() {
  static std::once_flag once;
  static Status status;
  static std::string how;
  PrimeReport r;
  std::call_once(once, [&] {
    const auto t0 = std::chrono::steady_clock::now();
    status = catch_exceptions("priming cuDNN", [] { return prime_once(&how); });
    r.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    r.first = true;
  });
  r.status = status;
  r.how = how;
  return r;
}

PrimerThread& PrimerThread::operator=(PrimerThread&& other) noexcept {
  if (this != &other) {
    join();
    thread_ = std::move(other.thread_);
  }
  return *this;
}

PrimerThread::~PrimerThread() { join(); }

void PrimerThread::join() {
  if (thread_.joinable()) thread_.join();
}

PrimerThread start_priming_cudnn() {
  try {
    return PrimerThread(std::thread([] { (void)prime_cudnn(); }));
  } catch (const std::system_error&) {  // no thread: the first plan pays
    return PrimerThread();
  }
}

}  // namespace kiln
