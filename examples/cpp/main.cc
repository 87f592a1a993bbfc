// kiln_example: an application that links Kiln (find_package(kiln), target kiln::kiln) and runs one
// graph through kiln::Planner on buffers it owns.
//
//   kiln_example SPEC.json [--store PLANS.db]
//
// Loads the spec, asks the Planner for a plan at the spec's own shape (from the store when it holds one,
// else cuDNN's heuristics), fills every input with values in [-1, 1), runs the plan and prints the first
// values of the first output and where the plan came from. Exit codes are Kiln's (kiln/core/exit_codes.h):
// 2 for a bad spec, usage or store path (a store that does not exist), 3 when there is no GPU to run on, 4 for a
// damaged store.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/exit_codes.h"
#include "kiln/runtime/planner.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/host_tensor.h"

namespace {

int fail(const char* what, const kiln::Status& s) {
  std::fprintf(stderr, "kiln_example: %s: %s\n", what, s.message().c_str());
  return kiln::exit_code_for(s);
}

int fail_cuda(const char* what, cudaError_t e) {
  std::fprintf(stderr, "kiln_example: %s: %s\n", what, cudaGetErrorString(e));
  return kiln::kExitEnvironment;
}

// The application owns its device memory; the plan only borrows it for one execute().
struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevicePtr = std::unique_ptr<void, CudaFree>;

}  // namespace

int main(int argc, char** argv) {
  std::string spec_path, store_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--store" && i + 1 < argc) {
      store_path = argv[++i];
    } else if (spec_path.empty() && arg[0] != '-') {
      spec_path = arg;
    } else {  // anything else: usage
      spec_path.clear();
      break;
    }
  }
  if (spec_path.empty()) {
    std::fprintf(stderr, "usage: kiln_example SPEC.json [--store PLANS.db]\n");
    return kiln::kExitBadInput;
  }

  kiln::StatusOr<kiln::Graph> graph = kiln::parse_spec_file(spec_path);
  if (!graph.is_ok()) return fail("bad spec", graph.status());

  // A service's preset: a read-only store ("": heuristics only), stopgaps promoted in the background.
  kiln::PlannerOptions options = kiln::PlannerOptions::serving(store_path);
  // create() makes the CUDA context, and cuDNN's once-per-process start-up runs beside it (prime_cudnn, on by
  // default). A service that makes its context or loads its weights first starts that earlier, after reading its
  // command line: kiln::start_priming_cudnn() (kiln/runtime/cudnn_primer.h, docs/runtime.md "Cold start").
  auto planner = kiln::Planner::create(options);
  if (!planner.is_ok()) return fail("cannot plan on this machine", planner.status());

  // prepare() once per graph (validation and signature); obtain() per shape, cheap on a hit.
  kiln::StatusOr<kiln::PreparedGraph> prepared = (*planner)->prepare(*graph);
  if (!prepared.is_ok()) return fail("prepare", prepared.status());
  kiln::StatusOr<kiln::Obtained> obtained = (*planner)->obtain(*prepared);
  if (!obtained.is_ok()) return fail("no plan", obtained.status());
  const kiln::ExecutablePlan& plan = *obtained->plan;
  const kiln::Graph& g = plan.graph();  // the graph at the obtained shape

  // One device buffer per graph input and output, bound by tensor name.
  std::vector<DevicePtr> owned;
  kiln::TensorBindings bindings;
  for (int t = 0; t < static_cast<int>(g.tensors.size()); ++t) {
    const kiln::TensorDesc& desc = g.tensors[t];
    if (g.is_virtual(t) || desc.by_value) continue;  // inside the plan, or a scalar the plan carries
    kiln::StatusOr<size_t> bytes = plan.tensor_bytes(desc.name);
    if (!bytes.is_ok()) return fail("tensor size", bytes.status());
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, *bytes); e != cudaSuccess) return fail_cuda("cudaMalloc", e);
    owned.emplace_back(p);
    if (g.is_graph_input(t)) {
      kiln::HostTensor host = kiln::HostTensor::zeros(g.dtype_of(t), desc.shape(), desc.strides);
      host.fill_uniform(/*seed=*/t);
      std::vector<uint8_t> raw = host.encode();
      if (cudaError_t e = cudaMemcpy(p, raw.data(), raw.size(), cudaMemcpyHostToDevice); e != cudaSuccess)
        return fail_cuda("cudaMemcpy", e);
    }
    bindings[desc.name] = {p, *bytes};
  }
  DevicePtr workspace;
  if (plan.workspace_bytes() > 0) {
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, plan.workspace_bytes()); e != cudaSuccess) return fail_cuda("cudaMalloc", e);
    workspace.reset(p);
  }

  cudaStream_t stream = nullptr;  // the default stream
  if (kiln::Status s = plan.execute(stream, bindings, workspace.get()); !s.is_ok()) return fail("execute", s);
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return fail_cuda("the plan's run", e);

  // Read the first output back and decode it from its dtype.
  const kiln::TensorDesc& out = g.tensors[g.outputs.at(0)];
  const kiln::TensorBinding& ob = bindings.at(out.name);
  std::vector<uint8_t> raw(ob.bytes);
  if (cudaError_t e = cudaMemcpy(raw.data(), ob.ptr, raw.size(), cudaMemcpyDeviceToHost); e != cudaSuccess)
    return fail_cuda("cudaMemcpy", e);
  auto y = kiln::HostTensor::decode(g.dtype_of(g.outputs[0]), out.shape(), raw.data(), raw.size(), out.strides);
  if (!y.is_ok()) return fail("decode", y.status());

  std::printf("plan: %s (source %s, engine %s, workspace %lld bytes)\n", g.name.c_str(),
              kiln::plan_source_name(obtained->source), plan.config().identity().c_str(),
              static_cast<long long>(plan.workspace_bytes()));
  if (!obtained->why.empty()) std::printf("  not from an earlier source: %s\n", obtained->why.c_str());
  std::printf("%s[0..]:", out.name.c_str());
  const std::vector<double> values = y->values();
  for (size_t i = 0; i < values.size() && i < 8; ++i) std::printf(" %.4g", values[i]);
  std::printf("\n");
  return kiln::kExitOk;
}
