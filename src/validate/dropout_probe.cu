// The dropout probe on the device (kiln/validate/dropout_probe.h): v replaced by one-hot blocks, the plan run once
// per block, and each output element read as one probability's kept-or-dropped bit.
#include "kiln/validate/dropout_probe.h"

#include <cuda_runtime_api.h>

#include "kiln/validate/device_io.h"
#include "validate/device_elements.cuh"
#include "validate/node_plan.h"
#include "validate/ops/device_ops.cuh"
#include "validate/ops/sdpa_math.h"

namespace kiln {
namespace validate_internal {
namespace {

constexpr int64_t kMaxMaskEntries = int64_t{1} << 31;

// v [B, Hk, Skv, Dv] for block `block`: value row j holds a 1 in column c where j = block * Dv + c, else 0.
__global__ void one_hot_kernel(TensorGeom vg, DataType dt, void* v, int64_t block) {
  const int64_t dv = vg.dims[3], skv = vg.dims[2];
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < vg.count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = idx % dv, j = (idx / dv) % skv;
    store_element(v, dt, element_offset(vg, idx), j == block * dv + c ? 1.0f : 0.0f);
  }
}

// Entry b's length from an int32 [B, 1, 1, 1] tensor (null: `extent`), clamped as the references clamp it.
__device__ inline int64_t length_of(const void* t, TensorGeom g, int64_t b, int64_t extent) {
  if (!t) return extent;
  return sdpa_length(load_element(t, DataType::kInt32, element_offset(g, b)), extent);
}

// The keys each query row attends to: the band, and with a padding mask each entry's lengths.
struct ProbeBand {
  SdpaBand band;
  const void* seq_len_q;
  const void* seq_len_kv;
  TensorGeom len_q, len_kv;
};
__device__ inline bool attends(const ProbeBand& p, int64_t b, int64_t i, int64_t j, int64_t sq, int64_t skv) {
  int64_t first = 0, last = 0;
  sdpa_keys(p.band, i, length_of(p.seq_len_q, p.len_q, b, sq), length_of(p.seq_len_kv, p.len_kv, b, skv), &first,
            &last);
  return j >= first && j < last;
}
// Adds a thread's counts of attended and dropped probabilities to the probe's.
__device__ inline void add_counts(unsigned long long attended, unsigned long long dropped, unsigned long long* counts) {
  if (attended) atomicAdd(&counts[0], attended);
  if (dropped) atomicAdd(&counts[1], dropped);
}

struct ProbeGeom {
  TensorGeom o;  // [B, H, Sq, Dv]
  DataType o_dtype;
  int64_t skv;
  ProbeBand keys;
};

// o of block `block`'s run: each element is key j = block * Dv + c's weight in query row (b, h, i); nonzero is kept.
// Counts the attended keys (within the band and the lengths) and those of them dropped.
__global__ void read_mask_kernel(ProbeGeom p, const void* o, int64_t block, int8_t* keep, unsigned long long* counts) {
  const int64_t dv = p.o.dims[3], sq = p.o.dims[2], h = p.o.dims[1];
  unsigned long long attended = 0, dropped = 0;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < p.o.count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = idx % dv, row = idx / dv;
    const int64_t j = block * dv + c;
    if (j >= p.skv) continue;
    const bool kept = load_element(o, p.o_dtype, element_offset(p.o, idx)) != 0.0;
    keep[row * p.skv + j] = kept ? 1 : 0;
    if (attends(p.keys, row / (sq * h), row % sq, j, sq, p.skv)) {
      ++attended;
      if (!kept) ++dropped;
    }
  }
  add_counts(attended, dropped, counts);
}

// The backward pass's probe: do [B, H, Sq, Dv] for block `block` of query rows and group member `member`: row i of
// head h holds a 1 in column c where i = block * Dv + c and h is member `member` of its key head's group, else 0. Then
// dv[b, hk, j, c] = sum over the group's heads and rows of P dropped-and-scaled times do: query row block * Dv + c of
// head hk * group + member's weight for key j.
__global__ void one_hot_rows_kernel(TensorGeom g, DataType dt, void* dout, int64_t block, int64_t group,
                                    int64_t member) {
  const int64_t dv = g.dims[3], sq = g.dims[2], h = g.dims[1];
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < g.count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = idx % dv, i = (idx / dv) % sq, head = (idx / (dv * sq)) % h;
    store_element(dout, dt, element_offset(g, idx), i == block * dv + c && head % group == member ? 1.0f : 0.0f);
  }
}

struct BackwardProbeGeom {
  TensorGeom dv;  // [B, Hk, Skv, Dv]
  DataType dv_dtype;
  int64_t h, sq, group;
  ProbeBand keys;
};

// dv of the run for (`block`, `member`): each element is one query row's weight for key j (one_hot_rows_kernel).
__global__ void read_mask_backward_kernel(BackwardProbeGeom p, const void* dv, int64_t block, int64_t member,
                                          int8_t* keep, unsigned long long* counts) {
  const int64_t width = p.dv.dims[3], skv = p.dv.dims[2], hk = p.dv.dims[1];
  unsigned long long attended = 0, dropped = 0;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < p.dv.count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = idx % width, j = (idx / width) % skv, kv_head = (idx / (width * skv)) % hk,
                  b = idx / (width * skv * hk);
    const int64_t i = block * width + c;
    if (i >= p.sq) continue;
    const int64_t head = kv_head * p.group + member;
    const bool kept = load_element(dv, p.dv_dtype, element_offset(p.dv, idx)) != 0.0;
    keep[((b * p.h + head) * p.sq + i) * skv + j] = kept ? 1 : 0;
    if (attends(p.keys, b, i, j, p.sq, skv)) {
      ++attended;
      if (!kept) ++dropped;
    }
  }
  add_counts(attended, dropped, counts);
}

StatusOr<TensorGeom> geom_of(const Graph& g, int t) {
  return tensor_geom(tensor_dims(g, t), tensor_strides(g, t), tensor_label(g, t));
}

// What a probe replaces (v, or a backward pass's do), reads (o, or dv) and how many runs it makes.
struct ProbeRoles {
  int replaced, read;
};

// The lengths and band of node `n` (the keys each query row attends to), for either probe.
Status set_band(const Graph& g, const Node& n, const std::function<void*(int)>& pointer, ProbeBand& p) {
  p.band.right = n.sdpa.effective_right_bound().value_or(-1);
  const SdpaInputs x = sdpa_inputs(n);
  if (x.seq_len_q < 0) return Status::ok();
  p.band.padding = 1;
  p.seq_len_q = pointer(n.inputs[static_cast<size_t>(x.seq_len_q)]);
  p.seq_len_kv = pointer(n.inputs[static_cast<size_t>(x.seq_len_kv)]);
  KILN_ASSIGN_OR_RETURN(p.len_q, geom_of(g, n.inputs[static_cast<size_t>(x.seq_len_q)]));
  KILN_ASSIGN_OR_RETURN(p.len_kv, geom_of(g, n.inputs[static_cast<size_t>(x.seq_len_kv)]));
  return Status::ok();
}

// One dropout node's probe: `mask` receives its bits. The forward pass replaces v and reads o, one run per block
// of Dv keys; the backward pass replaces do and reads dv, one run per block of Dv query rows and member of a key
// head's group.
Status probe_node(const Graph& g, int node, const std::map<int, void*>& buffers, const std::function<Status()>& run,
                  cudaStream_t stream, DeviceBuffer& mask, DropoutNodeProbe& out) {
  const Node& n = g.nodes[static_cast<size_t>(node)];
  const std::string where = node_label(g, node);
  const GraphRoles roles(g);
  const bool backward = n.op == OpKind::kSdpaBackward;
  const ProbeRoles r = backward ? ProbeRoles{n.inputs[4], n.outputs[2]} : ProbeRoles{n.inputs[2], n.outputs[0]};
  if (!roles.is_graph_input(r.replaced) || !roles.is_graph_output(r.read))
    return not_supported(where + ": the dropout probe replaces " + (backward ? "do and reads dv" : "v and reads o") +
                         ", so " + tensor_label(g, r.replaced) + " must be a graph input and " +
                         tensor_label(g, r.read) + " a graph output");
  const std::function<void*(int)> pointer = [&](int t) -> void* {
    auto it = buffers.find(t);
    return it == buffers.end() ? nullptr : it->second;
  };
  void* replaced = pointer(r.replaced);
  void* read = pointer(r.read);
  if (!replaced || !read)
    return invalid_argument(where + ": the dropout probe has no buffer of " + tensor_label(g, r.replaced) + " or " +
                            tensor_label(g, r.read));
  KILN_ASSIGN_OR_RETURN(TensorGeom rg, geom_of(g, r.replaced));
  KILN_ASSIGN_OR_RETURN(TensorGeom og, geom_of(g, r.read));
  const std::vector<int64_t> q = tensor_dims(g, n.inputs[0]), k = tensor_dims(g, n.inputs[1]);
  const int64_t b = q[0], h = q[1], sq = q[2], skv = k[2], hk = k[1], width = rg.dims[3], group = h / hk;
  const int64_t entries = b * h * sq * skv;
  if (entries > kMaxMaskEntries)
    return not_supported(where + ": the dropout probe checks up to " + std::to_string(kMaxMaskEntries) +
                         " probabilities (B H Sq Skv); this shape has " + std::to_string(entries));
  ProbeGeom fwd{};
  BackwardProbeGeom bwd{};
  if (backward) {
    bwd.dv = og;
    bwd.dv_dtype = roles.dtype_of(r.read);
    bwd.h = h;
    bwd.sq = sq;
    bwd.group = group;
    KILN_RETURN_IF_ERROR(set_band(g, n, pointer, bwd.keys));
  } else {
    fwd.o = og;
    fwd.o_dtype = roles.dtype_of(r.read);
    fwd.skv = skv;
    KILN_RETURN_IF_ERROR(set_band(g, n, pointer, fwd.keys));
  }
  KILN_ASSIGN_OR_RETURN(DeviceBuffer saved, allocate_tensor_buffer(g, r.replaced));
  KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(saved.data(), replaced, saved.size(), cudaMemcpyDeviceToDevice, stream));
  KILN_ASSIGN_OR_RETURN(mask, DeviceBuffer::allocate(static_cast<size_t>(entries)));
  KILN_ASSIGN_OR_RETURN(DeviceBuffer counts, DeviceBuffer::allocate(2 * sizeof(unsigned long long)));
  KILN_RETURN_IF_ERROR(counts.fill_bytes(0, stream));
  const int64_t blocks = ((backward ? sq : skv) + width - 1) / width, members = backward ? group : 1;
  const DataType dt = roles.dtype_of(r.replaced);
  const auto probe_runs = [&]() -> Status {
    for (int64_t blk = 0; blk < blocks; ++blk)
      for (int64_t m = 0; m < members; ++m) {
        if (backward) one_hot_rows_kernel<<<grid_for(rg.count), kThreads, 0, stream>>>(rg, dt, replaced, blk, group, m);
        else one_hot_kernel<<<grid_for(rg.count), kThreads, 0, stream>>>(rg, dt, replaced, blk);
        KILN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
        KILN_RETURN_IF_ERROR(run());
        if (backward)
          read_mask_backward_kernel<<<grid_for(og.count), kThreads, 0, stream>>>(bwd, read, blk, m, mask.as<int8_t>(),
                                                                                 counts.as<unsigned long long>());
        else
          read_mask_kernel<<<grid_for(og.count), kThreads, 0, stream>>>(fwd, read, blk, mask.as<int8_t>(),
                                                                        counts.as<unsigned long long>());
        KILN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
        ++out.runs;
      }
    return Status::ok();
  };
  const Status st = probe_runs();
  // The replaced tensor restored whatever happened: the caller's next run reads it.
  const Status restored = cuda_status(
      cudaMemcpyAsync(replaced, saved.data(), saved.size(), cudaMemcpyDeviceToDevice, stream), "restoring the input");
  KILN_RETURN_IF_ERROR(st.with_context(where + ": dropout probe"));
  KILN_RETURN_IF_ERROR(restored);
  unsigned long long host[2] = {0, 0};
  KILN_RETURN_IF_ERROR(counts.copy_to_host(host, sizeof host, stream));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  out.node = node;
  out.dropout = n.sdpa.dropout;
  out.attended = static_cast<int64_t>(host[0]);
  out.dropped = static_cast<int64_t>(host[1]);
  return Status::ok();
}

}  // namespace
}  // namespace validate_internal

StatusOr<DropoutProbe> probe_dropout(const Graph& graph, const std::map<int, void*>& buffers,
                                     const std::function<Status()>& run, cudaStream_t stream) {
  DropoutProbe probe;
  std::map<int, int> mask_of;
  probe.reference_graph = dropout_reference_graph(graph, &mask_of);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!(graph.nodes[i].sdpa.dropout > 0)) continue;
    const int node = static_cast<int>(i);
    if (!mask_of.count(node))
      return not_supported(validate_internal::node_label(graph, node) +
                           ": the dropout probe takes sdpa's forward and backward passes only");
    DropoutNodeProbe p;
    p.mask_tensor = mask_of.at(node);
    DeviceBuffer mask;
    KILN_RETURN_IF_ERROR(validate_internal::probe_node(graph, node, buffers, run, stream, mask, p));
    probe.masks.emplace(p.mask_tensor, std::move(mask));
    probe.nodes.push_back(p);
  }
  return probe;
}

}  // namespace kiln
