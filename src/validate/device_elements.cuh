// Internal to the validate layer (nvcc only): reading and writing one element of a strided tensor in any
// Kiln dtype on the device, shared by the device reference (gathering inputs) and the device gate.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln::validate_internal {

constexpr int kMaxElementRank = 8;

// Logical dims and strides (in elements) of a tensor, by value for kernels.
struct TensorGeom {
  int rank = 0;
  int packed = 1;  // strides are row-major: the offset is the logical index
  int64_t count = 0;
  int64_t dims[kMaxElementRank] = {};
  int64_t strides[kMaxElementRank] = {};
};

inline StatusOr<TensorGeom> tensor_geom(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides,
                                        const std::string& what) {
  if (dims.size() > static_cast<size_t>(kMaxElementRank) || strides.size() != dims.size())
    return invalid_argument(what + ": rank " + std::to_string(dims.size()) + " with " + std::to_string(strides.size()) +
                            " strides (the device handles rank <= 8)");
  TensorGeom g;
  g.rank = static_cast<int>(dims.size());
  g.count = 1;
  int64_t expect = 1;
  for (int i = g.rank - 1; i >= 0; --i) {
    g.dims[i] = dims[static_cast<size_t>(i)];
    g.strides[i] = strides[static_cast<size_t>(i)];
    g.count *= g.dims[i];
    if (g.dims[i] != 1 && g.strides[i] != expect) g.packed = 0;
    expect *= g.dims[i];
  }
  return g;
}

__device__ inline int64_t element_offset(const TensorGeom& g, int64_t index) {
  if (g.packed) return index;
  int64_t off = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t n = g.dims[d];
    off += (index % n) * g.strides[d];
    index /= n;
  }
  return off;
}

__device__ inline double load_element(const void* p, DataType dt, int64_t off) {
  switch (dt) {
    case DataType::kFloat32: return static_cast<const float*>(p)[off];
    case DataType::kFloat16: return __half2float(static_cast<const __half*>(p)[off]);
    case DataType::kBFloat16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[off]);
    case DataType::kFp8E4M3:
      return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<const __nv_fp8_storage_t*>(p)[off], __NV_E4M3)));
    case DataType::kFp8E5M2:
      return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<const __nv_fp8_storage_t*>(p)[off], __NV_E5M2)));
    case DataType::kInt8: return static_cast<const int8_t*>(p)[off];
    case DataType::kInt32: return static_cast<const int32_t*>(p)[off];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(p)[off]);
  }
  return 0.0;
}

// Stores a value that is exactly a float (or an integer in range) in `dt`, rounding to nearest, ties to
// even (e4m3 saturating, e5m2 not), as the host's round_to_dtype does. Returns the stored value.
__device__ inline double store_element(void* p, DataType dt, int64_t off, float v) {
  switch (dt) {
    case DataType::kFloat32: static_cast<float*>(p)[off] = v; return v;
    case DataType::kFloat16: {
      const __half h = __float2half_rn(v);
      static_cast<__half*>(p)[off] = h;
      return __half2float(h);
    }
    case DataType::kBFloat16: {
      const __nv_bfloat16 h = __float2bfloat16_rn(v);
      static_cast<__nv_bfloat16*>(p)[off] = h;
      return __bfloat162float(h);
    }
    case DataType::kFp8E4M3: {
      const __nv_fp8_storage_t b = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
      static_cast<__nv_fp8_storage_t*>(p)[off] = b;
      return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E4M3)));
    }
    case DataType::kFp8E5M2: {
      const __nv_fp8_storage_t b = __nv_cvt_float_to_fp8(v, __NV_NOSAT, __NV_E5M2);
      static_cast<__nv_fp8_storage_t*>(p)[off] = b;
      return __half2float(__half(__nv_cvt_fp8_to_halfraw(b, __NV_E5M2)));
    }
    case DataType::kInt8: static_cast<int8_t*>(p)[off] = static_cast<int8_t>(v); return static_cast<int8_t>(v);
    case DataType::kInt32: static_cast<int32_t*>(p)[off] = static_cast<int32_t>(v); return static_cast<int32_t>(v);
    case DataType::kInt64:
      static_cast<int64_t*>(p)[off] = static_cast<int64_t>(v);
      return static_cast<double>(static_cast<int64_t>(v));
  }
  return 0.0;
}

}  // namespace kiln::validate_internal
