// The numerics gate on the device (kiln/validate/device_check.h): the input generator of input_gen.h writing each
// graph input where the kernels read it, and the comparison of gate_math.h in one pass per output.
//
// The comparison: kernel 1 gives each block a contiguous range of logical indices; every thread folds its
// elements into GateSums, the block folds its threads' sums in a fixed tree, and writes one partial.
// Kernel 2 (one thread) joins the partials in block order and lists the first blocks that hold mismatches.
// Kernel 3 (one block) walks those blocks in index order and collects the first offenders, as the host
// comparison does. One copy brings the sums and offenders home.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "kiln/validate/device_check.h"
#include "validate/device_elements.cuh"
#include "validate/gate.h"
#include "validate/gate_math.h"
#include "validate/input_gen.h"
#include "validate/node_plan.h"
#include "validate/reference_common.h"

namespace kiln {
namespace {

using namespace validate_internal;

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;
// Each block folds its threads' sums in static shared memory (at most 48 KiB).
static_assert(kThreads * sizeof(kiln::validate_internal::GateSums) <= 48 * 1024, "GateSums outgrew shared memory");

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 1 << 20)));
}

// ---- inputs ------------------------------------------------------------------------------------------

struct GenParams {
  uint64_t seed = 0;
  uint32_t tensor = 0;
  float lo = 0, width = 0;
  int integer = 0;
  int64_t int_lo = 0;
  uint32_t int_count = 1;
  float fallback = 1;  // element 0's value when its draw rounds to 0
  DataType dtype = DataType::kFloat32;
};

__global__ void generate_kernel(GenParams p, TensorGeom g, void* __restrict__ out) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < g.count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t bits = input_bits(p.seed, p.tensor, static_cast<uint64_t>(idx));
    const double v = input_value(bits, p.lo, p.width, p.integer != 0, p.int_lo, p.int_count);
    const int64_t off = element_offset(g, idx);
    const double stored = store_element(out, p.dtype, off, static_cast<float>(v));
    if (idx == 0 && stored == 0.0) store_element(out, p.dtype, off, p.fallback);
  }
}

// ---- the comparison ---------------------------------------------------------------------------------

struct CheckParams {
  GateParams gate;
  TensorGeom geom;
  DataType dtype = DataType::kFloat32;
  int64_t chunk = 1;  // indices per block
  int blocks = 1;
};

// What one output's passes leave for the host.
struct CheckResult {
  GateSums sums;
  int first_blocks[kMaxOffenders];
  int n_first_blocks;
  GateOffender offenders[kMaxOffenders];
  int n_offenders;
};

__device__ void element(const CheckParams& p, const void* out, const double* ref, const double* mag,
                        const double* scale, int64_t idx, GateSums& g, GateOffender* off, int* n_off) {
  const double x = load_element(out, p.dtype, element_offset(p.geom, idx));
  gate_element(p.gate, x, ref[idx], mag ? mag[idx] : 0.0, scale ? scale[idx] : 0.0, idx, g, off, n_off);
}

__global__ void stats_kernel(CheckParams p, const void* __restrict__ out, const double* __restrict__ ref,
                             const double* __restrict__ mag, const double* __restrict__ scale,
                             GateSums* __restrict__ partials) {
  // Raw storage: a __shared__ array may not have a constructor.
  __shared__ __align__(16) unsigned char raw[kThreads * sizeof(GateSums)];
  GateSums* shared = reinterpret_cast<GateSums*>(raw);
  const int64_t begin = blockIdx.x * p.chunk;
  const int64_t end = p.geom.count < begin + p.chunk ? p.geom.count : begin + p.chunk;
  GateSums g;
  int full = kMaxOffenders;  // no offenders in this pass
  for (int64_t idx = begin + threadIdx.x; idx < end; idx += blockDim.x)
    element(p, out, ref, mag, scale, idx, g, nullptr, &full);
  shared[threadIdx.x] = g;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) gate_merge(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

__global__ void merge_kernel(const GateSums* __restrict__ partials, int blocks, CheckResult* __restrict__ result) {
  GateSums total;
  int n = 0;
  int64_t seen = 0;
  for (int b = 0; b < blocks; ++b) {
    gate_merge(total, partials[b]);
    if (partials[b].mismatch_count > 0 && seen < kMaxOffenders) {
      result->first_blocks[n++] = b;
      seen += partials[b].mismatch_count;
    }
  }
  result->sums = total;
  result->n_first_blocks = n;
  result->n_offenders = 0;
}

// One block: the listed blocks' ranges in index order, kThreads elements at a time; a mismatch takes the
// slot of its rank among the tile's mismatches (warp ballots), so offenders come out in index order.
__global__ void offenders_kernel(CheckParams p, const void* __restrict__ out, const double* __restrict__ ref,
                                 const double* __restrict__ mag, const double* __restrict__ scale,
                                 CheckResult* __restrict__ result) {
  constexpr int kWarps = kThreads / 32;
  __shared__ int warp_counts[kWarps];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int taken = 0;  // the same in every thread
  for (int i = 0; i < result->n_first_blocks && taken < kMaxOffenders; ++i) {
    const int64_t begin = result->first_blocks[i] * p.chunk;
    const int64_t end = p.geom.count < begin + p.chunk ? p.geom.count : begin + p.chunk;
    for (int64_t base = begin; base < end && taken < kMaxOffenders; base += blockDim.x) {
      const int64_t idx = base + threadIdx.x;
      GateSums g;
      GateOffender mine;
      int n = 0;
      if (idx < end) element(p, out, ref, mag, scale, idx, g, &mine, &n);
      const unsigned ballot = __ballot_sync(0xffffffffu, n != 0);
      if (lane == 0) warp_counts[warp] = __popc(ballot);
      __syncthreads();
      int before = 0, total = 0;
      for (int w = 0; w < kWarps; ++w) {
        if (w < warp) before += warp_counts[w];
        total += warp_counts[w];
      }
      const int rank = taken + before + __popc(ballot & ((1u << lane) - 1u));
      if (n && rank < kMaxOffenders) result->offenders[rank] = mine;
      taken = taken + total < kMaxOffenders ? taken + total : kMaxOffenders;
      __syncthreads();  // warp_counts is rewritten by the next tile
    }
  }
  if (threadIdx.x == 0) result->n_offenders = taken;
}

}  // namespace

Status generate_inputs_on_device(const Graph& graph, uint64_t seed, const std::map<int, void*>& buffers,
                                 cudaStream_t stream) {
  KILN_ASSIGN_OR_RETURN(std::vector<InputDraw> draws, input_draws(graph));
  for (const InputDraw& d : draws) {
    if (d.by_value) continue;
    const TensorDesc& desc = graph.tensors[static_cast<size_t>(d.tensor)];
    auto it = buffers.find(d.tensor);
    if (it == buffers.end() || it->second == nullptr)
      return invalid_argument("input '" + desc.name + "' has no device buffer to generate into");
    KILN_ASSIGN_OR_RETURN(TensorGeom geom, tensor_geom(tensor_dims(graph, d.tensor), tensor_strides(graph, d.tensor),
                                                       "input '" + desc.name + "'"));
    GenParams p;
    p.seed = seed;
    p.tensor = static_cast<uint32_t>(d.tensor);
    p.lo = static_cast<float>(d.lo);
    p.width = static_cast<float>(d.hi - d.lo);
    p.dtype = d.dtype;
    p.integer = d.dtype == DataType::kInt8 || d.dtype == DataType::kInt32 || d.dtype == DataType::kInt64;
    p.int_lo = static_cast<int64_t>(std::ceil(d.lo));
    p.int_count = static_cast<uint32_t>(std::max<int64_t>(1, static_cast<int64_t>(std::floor(d.hi)) - p.int_lo + 1));
    p.fallback = static_cast<float>(input_nonzero_fallback(d.lo, d.hi));
    if (geom.count == 0) continue;
    generate_kernel<<<grid_for(geom.count), kThreads, 0, stream>>>(p, geom, it->second);
    KILN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  // Ragged attention's offsets follow from the lengths (reference_common.h ragged_offsets), computed on the host
  // from the same draws and written over the offsets' own; the stream waits for the copy (the host data is local).
  KILN_ASSIGN_OR_RETURN(auto offsets, ragged_offsets(graph, seed));
  for (const auto& [t, values] : offsets) {
    auto it = buffers.find(t);
    if (it == buffers.end() || it->second == nullptr) continue;
    HostTensor h = HostTensor::zeros(DataType::kInt32, tensor_dims(graph, t), tensor_strides(graph, t));
    h.set_values(values);
    const std::vector<uint8_t> bytes = h.encode();
    KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(it->second, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream));
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  return Status::ok();
}

struct DeviceChecker::State {
  Graph graph;
  CheckOptions options;
  std::vector<OutputGate> gates;  // planned with magnitudes and scales
  std::vector<CheckParams> params;
  DeviceBuffer partials;          // kMaxBlocks GateSums per output
  DeviceBuffer results;           // one CheckResult per output
  std::vector<CheckResult> host;  // their copies
};

DeviceChecker::DeviceChecker(std::unique_ptr<State> state) : state_(std::move(state)) {}
DeviceChecker::DeviceChecker(DeviceChecker&&) noexcept = default;
DeviceChecker& DeviceChecker::operator=(DeviceChecker&&) noexcept = default;
DeviceChecker::~DeviceChecker() = default;

StatusOr<DeviceChecker> DeviceChecker::create(const Graph& graph, const CheckOptions& options) {
  auto s = std::make_unique<State>();
  s->graph = graph;
  s->options = options;
  KILN_ASSIGN_OR_RETURN(s->gates, plan_output_gates(graph, true, true, options));
  for (size_t i = 0; i < s->gates.size(); ++i) {
    const int t = graph.outputs[i];
    CheckParams p;
    p.gate = s->gates[i].params;
    p.dtype = s->gates[i].check.dtype;
    KILN_ASSIGN_OR_RETURN(p.geom, tensor_geom(tensor_dims(graph, t), tensor_strides(graph, t),
                                              "output '" + s->gates[i].check.name + "'"));
    // Enough blocks to fill the GPU, each a contiguous range of at least one element per thread.
    const int64_t blocks =
        std::max<int64_t>(1, std::min<int64_t>(kMaxBlocks, (p.geom.count + kThreads - 1) / kThreads));
    p.chunk = std::max<int64_t>(1, (p.geom.count + blocks - 1) / blocks);
    p.blocks = static_cast<int>(std::max<int64_t>(1, (p.geom.count + p.chunk - 1) / p.chunk));
    s->params.push_back(p);
  }
  const size_t n = std::max<size_t>(1, s->gates.size());
  KILN_ASSIGN_OR_RETURN(s->partials, DeviceBuffer::allocate(n * kMaxBlocks * sizeof(GateSums)));
  KILN_ASSIGN_OR_RETURN(s->results, DeviceBuffer::allocate(n * sizeof(CheckResult)));
  s->host.resize(n);
  return DeviceChecker(std::move(s));
}

StatusOr<CheckReport> DeviceChecker::check(const std::map<int, void*>& outputs, const DeviceReference& reference,
                                           cudaStream_t stream) {
  State& s = *state_;
  if (reference.outputs.size() != s.gates.size() || !reference.has_magnitudes())
    return invalid_argument("device check of graph '" + s.graph.name + "': the reference has " +
                            std::to_string(reference.outputs.size()) + " outputs" +
                            (reference.has_magnitudes() ? "" : " without magnitudes") + ", the graph " +
                            std::to_string(s.gates.size()));
  auto* partials = s.partials.as<GateSums>();
  auto* results = s.results.as<CheckResult>();
  for (size_t i = 0; i < s.gates.size(); ++i) {
    const int t = s.graph.outputs[i];
    auto it = outputs.find(t);
    if (it == outputs.end() || it->second == nullptr)
      return invalid_argument("device check: output '" + s.gates[i].check.name + "' has no device buffer");
    const DeviceReference::Output& r = reference.outputs[i];
    const CheckParams& p = s.params[i];
    if (r.count != p.geom.count)
      return invalid_argument("device check: the reference of output '" + s.gates[i].check.name + "' has " +
                              std::to_string(r.count) + " elements, the graph " + std::to_string(p.geom.count));
    const double* mag = r.magnitudes.as<double>();
    const double* scale = r.scales.as<double>();
    stats_kernel<<<p.blocks, kThreads, 0, stream>>>(p, it->second, r.values.as<double>(), mag, scale,
                                                    partials + i * kMaxBlocks);
    merge_kernel<<<1, 1, 0, stream>>>(partials + i * kMaxBlocks, p.blocks, results + i);
    offenders_kernel<<<1, kThreads, 0, stream>>>(p, it->second, r.values.as<double>(), mag, scale, results + i);
    KILN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  KILN_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(s.host.data(), results, s.gates.size() * sizeof(CheckResult), cudaMemcpyDeviceToHost, stream));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  CheckReport report;
  report.verdict = Disposition::kPassed;
  for (size_t i = 0; i < s.gates.size(); ++i) {
    OutputGate gate = s.gates[i];
    const CheckResult& h = s.host[i];
    std::vector<GateOffender> offenders(h.offenders, h.offenders + std::min(h.n_offenders, kMaxOffenders));
    finish_output(gate, measures_from_sums(h.sums, offenders, gate.check.tolerance, gate.with_bound),
                  s.options.allow_tf32, report);
  }
  return report;
}

}  // namespace kiln
