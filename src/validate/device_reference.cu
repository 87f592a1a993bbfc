// The device reference: naive CUDA kernels in double precision (double accumulation, so that the
// reference's own error is negligible next to the fp32 kernels it judges, even for reductions of 10^5
// terms), one launch per node, operating on packed row-major double arrays (the host gathers strided
// inputs into that form and scatters outputs back through the graph's strides). Written for clarity, not
// speed: each kernel is the textbook loop. With magnitudes, each node is followed by its magnitude pass
// (reference_math.h), the same rules as the host reference's. The kernels of each op family are in
// src/validate/ops/<family>.cu; this file runs the graph and holds what the families share.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "kiln/validate/device_check.h"
#include "kiln/validate/reference.h"
#include "validate/device_elements.cuh"
#include "validate/ops/device_ops.cuh"
#include "validate/ops/reference_ops.h"
#include "validate/reference_common.h"
#include "validate/reference_math.h"

namespace kiln {
namespace {

using namespace validate_internal;

// ---- magnitude helpers ------------------------------------------------------------------------------

__global__ void scale_kernel(double* __restrict__ x, double f, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[idx] *= f;
}

__global__ void square_kernel(const double* __restrict__ x, double* __restrict__ y, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[idx] = x[idx] * x[idx];
}

// The scale of a contraction or sum from its sum of squared terms (reference_math.h): f sqrt(s + y^2).
__global__ void root_with_kernel(double* __restrict__ s, const double* __restrict__ y, double f, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    s[idx] = f * sqrt(s[idx] + y[idx] * y[idx]);
}

}  // namespace

namespace validate_internal {

Status fill_broadcast(BroadcastParams& p, const std::vector<int64_t>& dims, const std::vector<int64_t>& sa,
                      const std::vector<int64_t>& sb, const std::string& where) {
  if (dims.size() > static_cast<size_t>(kMaxRank))
    return not_supported(where + ": the device reference handles rank <= " + std::to_string(kMaxRank));
  p = BroadcastParams{};
  p.rank = static_cast<int>(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    p.dims[i] = dims[i];
    p.sa[i] = sa.empty() ? 0 : sa[i];
    p.sb[i] = sb.empty() ? 0 : sb[i];
  }
  return Status::ok();
}

void launch_scale(double* x, double f, int64_t n) { scale_kernel<<<grid_for(n), kThreads>>>(x, f, n); }

namespace {

__global__ void scaled_copy_kernel(const double* __restrict__ x, double* __restrict__ y, double f, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = x[i] * f;
}

// *out = max(*out, |x_i|) as bits: non-negative doubles order as their bit patterns (a NaN above every number).
__global__ void abs_max_kernel(const double* __restrict__ x, int64_t n, unsigned long long* out) {
  unsigned long long m = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const unsigned long long b = static_cast<unsigned long long>(__double_as_longlong(fabs(x[i])));
    m = b > m ? b : m;
  }
  atomicMax(out, m);
}

}  // namespace

void launch_scaled_copy(const double* x, double* y, double f, int64_t n) {
  scaled_copy_kernel<<<grid_for(n), kThreads>>>(x, y, f, n);
}

Status launch_largest_abs(const double* x, int64_t n, double* y) {
  if (cudaMemsetAsync(y, 0, sizeof(double)) != cudaSuccess) return internal_error("cudaMemsetAsync failed");
  abs_max_kernel<<<grid_for(n), kThreads>>>(x, n, reinterpret_cast<unsigned long long*>(y));
  return Status::ok();
}

void launch_root_with(double* s, const double* y, double f, int64_t n) {
  root_with_kernel<<<grid_for(n), kThreads>>>(s, y, f, n);
}

StatusOr<DeviceBuffer> squared(const DeviceOperand& op) {
  KILN_ASSIGN_OR_RETURN(DeviceBuffer b,
                        DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(1, op.count)) * sizeof(double)));
  square_kernel<<<grid_for(op.count), kThreads>>>(op.mag, b.as<double>(), op.count);
  return b;
}

Status contraction_magnitude(DeviceValueFn value, const Node& node, const NodePlan& p,
                             const std::vector<DeviceOperand>& op, const double* y, double* by, int64_t y_count,
                             bool scale_pass, const std::string& where) {
  const double f = contraction_factor(op[0].carries, op[1].carries);
  if (scale_pass) {
    KILN_ASSIGN_OR_RETURN(DeviceBuffer a2, squared(op[0]));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer b2, squared(op[1]));
    KILN_RETURN_IF_ERROR(value(node, p, {a2.as<double>(), b2.as<double>()}, by, y_count, where));
    launch_root_with(by, y, f, y_count);
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));  // before a2 and b2 are freed
    return Status::ok();
  }
  KILN_RETURN_IF_ERROR(value(node, p, {op[0].mag, op[1].mag}, by, y_count, where));
  if (f != 1.0) launch_scale(by, f, y_count);
  return Status::ok();
}

}  // namespace validate_internal

namespace {

// ---- rounding of stored intermediates ---------------------------------------------------------------

// Rounds to the stored dtype from double in a single rounding (round to nearest, ties to even), as the
// host's round_to_dtype does; integers saturate.
__global__ void round_kernel(DataType dt, double* __restrict__ x, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = x[idx];
    double r = v;
    switch (dt) {
      case DataType::kFloat32: r = static_cast<double>(__double2float_rn(v)); break;
      case DataType::kFloat16: r = static_cast<double>(__half2float(__double2half(v))); break;
      case DataType::kBFloat16: r = static_cast<double>(__bfloat162float(__double2bfloat16(v))); break;
      case DataType::kFp8E4M3:
        r = static_cast<double>(__half2float(
            __half(__nv_cvt_fp8_to_halfraw(__nv_cvt_double_to_fp8(v, __NV_SATFINITE, __NV_E4M3), __NV_E4M3))));
        break;
      case DataType::kFp8E5M2:
        r = static_cast<double>(
            __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_cvt_double_to_fp8(v, __NV_NOSAT, __NV_E5M2), __NV_E5M2))));
        break;
      case DataType::kInt8: r = isnan(v) ? 0.0 : fmin(fmax(rint(v), -128.0), 127.0); break;
      case DataType::kInt32: r = isnan(v) ? 0.0 : fmin(fmax(rint(v), -2147483648.0), 2147483647.0); break;
      case DataType::kInt64: r = isnan(v) ? 0.0 : rint(v); break;
    }
    x[idx] = r;
  }
}

// ---- host side --------------------------------------------------------------------------------------

Status check_launch(const Graph& g, int node) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda_status(err, "kernel launch").with_context(node_label(g, node));
  return Status::ok();
}

StatusOr<DeviceBuffer> upload(const std::vector<double>& v) {
  KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(std::max<size_t>(1, v.size()) * sizeof(double)));
  if (!v.empty()) KILN_RETURN_IF_ERROR(buf.copy_from_host(v.data(), v.size() * sizeof(double)));
  return buf;
}

StatusOr<std::vector<double>> download(const DeviceBuffer& b, int64_t count) {
  std::vector<double> v(static_cast<size_t>(count));
  if (count > 0) KILN_RETURN_IF_ERROR(b.copy_to_host(v.data(), v.size() * sizeof(double)));
  return v;
}

// The value of one node into y (y_count elements), before rounding to the stored dtype, by its family
// (src/validate/ops/<family>.cu).
Status run_node(const Graph& g, const NodePlan& p, const std::vector<const double*>& in, double* y, int64_t y_count) {
  const Node& node = g.nodes[static_cast<size_t>(p.node)];
  KILN_RETURN_IF_ERROR(reference_family(p.op).device_value(node, p, in, y, y_count, node_label(g, p.node)));
  return check_launch(g, p.node);
}

// The magnitude of one node into `by` (reference_math.h; the host reference applies the same rules), or
// with `scale_pass` its scale: the same rules but for contractions and sums, which take the root of the
// same contraction of squared operands plus y^2. `y` is the node's rounded value.
Status run_node_magnitude(const Graph& g, const NodePlan& p, const std::vector<DeviceOperand>& op, const double* y,
                          double* by, int64_t y_count, bool scale_pass) {
  const Node& node = g.nodes[static_cast<size_t>(p.node)];
  const std::string where = node_label(g, p.node) + (scale_pass ? " (scale pass)" : " (magnitude pass)");
  KILN_RETURN_IF_ERROR(reference_family(p.op).device_magnitude(node, p, op, y, by, y_count, scale_pass, where));
  return check_launch(g, p.node);
}

__global__ void abs_kernel(const double* __restrict__ x, double* __restrict__ y, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[idx] = fabs(x[idx]);
}

__global__ void fill_kernel(double* __restrict__ y, double v, int64_t n) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[idx] = v;
}

// A tensor in its dtype through its strides -> packed row-major doubles.
__global__ void gather_kernel(TensorGeom g, DataType dt, const void* __restrict__ x, double* __restrict__ y) {
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < g.count;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[idx] = load_element(x, dt, element_offset(g, idx));
}

Status require_device() {
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return unavailable(std::string("device reference needs a CUDA device: ") +
                       (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices"));
  }
  return Status::ok();
}

StatusOr<DeviceBuffer> copy_of(const DeviceBuffer& b) {
  KILN_ASSIGN_OR_RETURN(DeviceBuffer c, DeviceBuffer::allocate(b.size()));
  KILN_CUDA_RETURN_IF_ERROR(cudaMemcpy(c.data(), b.data(), b.size(), cudaMemcpyDeviceToDevice));
  return c;
}

// The reference on packed double inputs already on the device (`buffers`: one per graph input that a node
// reads or the graph outputs, rounded to its dtype). Every output's values (and magnitudes and scales)
// stay on the device.
StatusOr<DeviceReference> evaluate_packed(const Graph& g, std::map<int, DeviceBuffer> buffers, bool with_magnitudes) {
  KILN_ASSIGN_OR_RETURN(PreparedGraph prep, prepare_graph(g));
  const GraphRoles roles(g);
  // A graph input's magnitude and scale are both |x|: one buffer serves both (a node's output has its own two), so
  // an input costs two doubles an element, not three (a paged decode's caches are most of its memory).
  std::map<int, DeviceBuffer> mag_buffers, scale_buffers;
  if (with_magnitudes)
    for (const auto& [t, b] : buffers) {
      const int64_t count = product(tensor_dims(g, t));
      KILN_ASSIGN_OR_RETURN(DeviceBuffer mb, DeviceBuffer::allocate(b.size()));
      abs_kernel<<<grid_for(count), kThreads>>>(b.as<double>(), mb.as<double>(), count);
      KILN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
      mag_buffers.emplace(t, std::move(mb));
    }
  const auto scale_of = [&](int t) {
    auto it = scale_buffers.find(t);
    return it != scale_buffers.end() ? it->second.as<double>() : mag_buffers.at(t).as<double>();
  };
  for (const NodePlan& p : prep.plans) {
    const Node& node = g.nodes[static_cast<size_t>(p.node)];
    std::vector<const double*> in;
    std::vector<DeviceOperand> op, sop;
    for (int t : node.inputs) {
      auto it = buffers.find(t);
      if (it == buffers.end()) return internal_error(node_label(g, p.node) + ": input not computed");
      in.push_back(it->second.as<double>());
      if (with_magnitudes) {
        const bool carries = roles.producer(t) >= 0;
        const int64_t count = product(tensor_dims(g, t));
        op.push_back(DeviceOperand{it->second.as<double>(), mag_buffers.at(t).as<double>(), carries, count});
        sop.push_back(DeviceOperand{it->second.as<double>(), scale_of(t), carries, count});
      }
    }
    const int out = node.outputs[static_cast<size_t>(p.output)];
    const int64_t count = product(tensor_dims(g, out));
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, count)) * sizeof(double);
    KILN_ASSIGN_OR_RETURN(DeviceBuffer y, DeviceBuffer::allocate(bytes));
    KILN_RETURN_IF_ERROR(run_node(g, p, in, y.as<double>(), count));
    round_kernel<<<grid_for(count), kThreads>>>(roles.dtype_of(out), y.as<double>(), count);
    KILN_RETURN_IF_ERROR(check_launch(g, p.node));
    if (with_magnitudes) {
      KILN_ASSIGN_OR_RETURN(DeviceBuffer by, DeviceBuffer::allocate(bytes));
      KILN_RETURN_IF_ERROR(run_node_magnitude(g, p, op, y.as<double>(), by.as<double>(), count, false));
      KILN_ASSIGN_OR_RETURN(DeviceBuffer bs, DeviceBuffer::allocate(bytes));
      KILN_RETURN_IF_ERROR(run_node_magnitude(g, p, sop, y.as<double>(), bs.as<double>(), count, true));
      mag_buffers[out] = std::move(by);
      scale_buffers[out] = std::move(bs);
    }
    buffers[out] = std::move(y);
  }
  KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  DeviceReference r;
  r.kind = ReferenceKind::kDevice;
  for (int t : g.outputs) {
    DeviceReference::Output o;
    o.count = product(tensor_dims(g, t));
    auto take = [&](std::map<int, DeviceBuffer>& m, DeviceBuffer* dst) -> Status {
      auto it = m.find(t);
      if (it == m.end() || it->second.data() == nullptr)
        return internal_error("output '" + g.tensors[static_cast<size_t>(t)].name + "' was not computed");
      *dst = std::move(it->second);
      return Status::ok();
    };
    // An output listed twice takes a copy; otherwise its buffers move into the result.
    bool repeated = false;
    for (size_t i = 0; i < r.outputs.size(); ++i)
      if (g.outputs[i] == t) {
        KILN_ASSIGN_OR_RETURN(o.values, copy_of(r.outputs[i].values));
        if (with_magnitudes) {
          KILN_ASSIGN_OR_RETURN(o.magnitudes, copy_of(r.outputs[i].magnitudes));
          KILN_ASSIGN_OR_RETURN(o.scales, copy_of(r.outputs[i].scales));
        }
        repeated = true;
        break;
      }
    if (!repeated) {
      KILN_RETURN_IF_ERROR(take(buffers, &o.values));
      if (with_magnitudes) {
        // A graph input that is also an output shares its magnitude buffer with its scales: copied first.
        if (scale_buffers.count(t) != 0) {
          KILN_RETURN_IF_ERROR(take(scale_buffers, &o.scales));
        } else if (mag_buffers.count(t) != 0) {
          KILN_ASSIGN_OR_RETURN(o.scales, copy_of(mag_buffers.at(t)));
        }
        KILN_RETURN_IF_ERROR(take(mag_buffers, &o.magnitudes));
        if (o.scales.data() == nullptr)
          return internal_error("output '" + g.tensors[static_cast<size_t>(t)].name + "' has no scales");
      }
    }
    r.outputs.push_back(std::move(o));
  }
  return r;
}

StatusOr<ReferenceOutputs> download_outputs_of(const Graph& g, const DeviceReference& ref) {
  if (ref.outputs.size() != g.outputs.size())
    return invalid_argument("device reference of graph '" + g.name + "': " + std::to_string(ref.outputs.size()) +
                            " outputs for the graph's " + std::to_string(g.outputs.size()));
  std::map<int, std::vector<double>> values, mags, scales;
  const bool with_magnitudes = ref.has_magnitudes();
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    const int t = g.outputs[i];
    const DeviceReference::Output& o = ref.outputs[i];
    if (o.count != product(tensor_dims(g, t)))
      return invalid_argument("device reference of graph '" + g.name + "': output '" +
                              g.tensors[static_cast<size_t>(t)].name + "' has the wrong size");
    KILN_ASSIGN_OR_RETURN(values[t], download(o.values, o.count));
    if (with_magnitudes) {
      KILN_ASSIGN_OR_RETURN(mags[t], download(o.magnitudes, o.count));
      KILN_ASSIGN_OR_RETURN(scales[t], download(o.scales, o.count));
    }
  }
  ReferenceOutputs r;
  r.kind = ref.kind;
  KILN_ASSIGN_OR_RETURN(r.values, make_outputs(g, values));
  if (with_magnitudes) {
    KILN_ASSIGN_OR_RETURN(r.magnitudes, make_magnitude_outputs(g, mags));
    KILN_ASSIGN_OR_RETURN(r.scales, make_magnitude_outputs(g, scales));
  }
  return r;
}

StatusOr<ReferenceOutputs> evaluate_on_device(const Graph& g, const std::map<int, HostTensor>& inputs,
                                              bool with_magnitudes) {
  KILN_RETURN_IF_ERROR(require_device());
  KILN_ASSIGN_OR_RETURN(auto values, load_inputs(g, inputs));
  std::map<int, DeviceBuffer> buffers;
  for (const auto& [t, v] : values) {
    KILN_ASSIGN_OR_RETURN(DeviceBuffer b, upload(v));
    buffers.emplace(t, std::move(b));
  }
  KILN_ASSIGN_OR_RETURN(DeviceReference ref, evaluate_packed(g, std::move(buffers), with_magnitudes));
  return download_outputs_of(g, ref);
}

}  // namespace

StatusOr<std::vector<HostTensor>> run_device_reference(const Graph& g, const std::map<int, HostTensor>& inputs) {
  return catch_exceptions("graph '" + g.name + "': device reference", [&]() -> StatusOr<std::vector<HostTensor>> {
    KILN_ASSIGN_OR_RETURN(ReferenceOutputs r, evaluate_on_device(g, inputs, false));
    return std::move(r.values);
  });
}

StatusOr<ReferenceOutputs> run_device_reference_with_magnitudes(const Graph& g,
                                                                const std::map<int, HostTensor>& inputs) {
  return catch_exceptions("graph '" + g.name + "': device reference",
                          [&] { return evaluate_on_device(g, inputs, true); });
}

size_t DeviceReference::bytes() const {
  size_t n = 0;
  for (const Output& o : outputs) n += o.values.size() + o.magnitudes.size() + o.scales.size();
  return n;
}

StatusOr<DeviceReference> device_reference_on_device(const Graph& g, const std::map<int, void*>& inputs) {
  KILN_RETURN_IF_ERROR(require_device());
  const GraphRoles roles(g);
  std::map<int, DeviceBuffer> buffers;
  for (int t : loaded_inputs(g, roles)) {
    const TensorDesc& desc = g.tensors[static_cast<size_t>(t)];
    const int64_t count = product(tensor_dims(g, t));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer b,
                          DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(1, count)) * sizeof(double)));
    auto it = inputs.find(t);
    if (it != inputs.end() && it->second != nullptr) {
      KILN_ASSIGN_OR_RETURN(TensorGeom geom,
                            tensor_geom(tensor_dims(g, t), tensor_strides(g, t), "input '" + desc.name + "'"));
      gather_kernel<<<grid_for(count), kThreads>>>(geom, roles.dtype_of(t), it->second, b.as<double>());
    } else if (desc.by_value) {
      fill_kernel<<<grid_for(count), kThreads>>>(b.as<double>(), desc.value, count);
      round_kernel<<<grid_for(count), kThreads>>>(roles.dtype_of(t), b.as<double>(), count);
    } else {
      return invalid_argument("input '" + desc.name + "' (tensor " + std::to_string(t) + ") has no device buffer");
    }
    KILN_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    buffers.emplace(t, std::move(b));
  }
  return evaluate_packed(g, std::move(buffers), true);
}

StatusOr<DeviceReference> upload_reference(const Graph& g, const ReferenceOutputs& reference) {
  if (reference.values.size() != g.outputs.size())
    return invalid_argument("reference of graph '" + g.name + "': " + std::to_string(reference.values.size()) +
                            " outputs for the graph's " + std::to_string(g.outputs.size()));
  const bool with_magnitudes = !reference.magnitudes.empty() && !reference.scales.empty();
  DeviceReference r;
  r.kind = reference.kind;
  for (size_t i = 0; i < g.outputs.size(); ++i) {
    DeviceReference::Output o;
    o.count = reference.values[i].element_count();
    KILN_ASSIGN_OR_RETURN(o.values, upload(reference.values[i].values()));
    if (with_magnitudes) {
      KILN_ASSIGN_OR_RETURN(o.magnitudes, upload(reference.magnitudes[i].values()));
      KILN_ASSIGN_OR_RETURN(o.scales, upload(reference.scales[i].values()));
    }
    r.outputs.push_back(std::move(o));
  }
  return r;
}

StatusOr<ReferenceOutputs> download_reference(const Graph& g, const DeviceReference& reference) {
  return download_outputs_of(g, reference);
}

}  // namespace kiln
