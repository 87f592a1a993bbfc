// The convolution family's device reference: naive kernels in double precision (device_reference.cu
// says why), one thread per output element.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "validate/ops/device_ops.cuh"
#include "validate/ops/reference_ops.h"
#include "validate/reference_math.h"

namespace kiln::validate_internal {
namespace {

struct ConvParams {
  int64_t n, c, k, groups;
  int64_t in[3], filt[3], out[3], pad[3], stride[3], dil[3];
};

// Splits a flat index over [outer][mid][e[0]][e[1]][e[2]] (row-major) into its coordinates.
__device__ inline void unravel5(int64_t idx, int64_t mid, const int64_t (&e)[3], int64_t* outer, int64_t* m,
                                int64_t (&s)[3]) {
  s[2] = idx % e[2];
  idx /= e[2];
  s[1] = idx % e[1];
  idx /= e[1];
  s[0] = idx % e[0];
  idx /= e[0];
  *m = idx % mid;
  *outer = idx / mid;
}

__global__ void conv_fprop_kernel(ConvParams p, const double* __restrict__ x, const double* __restrict__ w,
                                  double* __restrict__ y) {
  const int64_t total = p.n * p.k * p.out[0] * p.out[1] * p.out[2];
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t n, k, o[3];
    unravel5(idx, p.k, p.out, &n, &k, o);
    const int64_t o0 = o[0], o1 = o[1], o2 = o[2];
    const int64_t grp = k / kg;
    double acc = 0.0;
    for (int64_t ci = 0; ci < cg; ++ci) {
      const int64_t ch = grp * cg + ci;
      for (int64_t f0 = 0; f0 < p.filt[0]; ++f0) {
        const int64_t i0 = o0 * p.stride[0] - p.pad[0] + f0 * p.dil[0];
        if (i0 < 0 || i0 >= p.in[0]) continue;
        for (int64_t f1 = 0; f1 < p.filt[1]; ++f1) {
          const int64_t i1 = o1 * p.stride[1] - p.pad[1] + f1 * p.dil[1];
          if (i1 < 0 || i1 >= p.in[1]) continue;
          for (int64_t f2 = 0; f2 < p.filt[2]; ++f2) {
            const int64_t i2 = o2 * p.stride[2] - p.pad[2] + f2 * p.dil[2];
            if (i2 < 0 || i2 >= p.in[2]) continue;
            acc += x[(((n * p.c + ch) * p.in[0] + i0) * p.in[1] + i1) * p.in[2] + i2] *
                   w[(((k * cg + ci) * p.filt[0] + f0) * p.filt[1] + f1) * p.filt[2] + f2];
          }
        }
      }
    }
    y[idx] = acc;
  }
}

// Gather form: each dx element sums the dy elements whose window covers it.
__global__ void conv_dgrad_kernel(ConvParams p, const double* __restrict__ dy, const double* __restrict__ w,
                                  double* __restrict__ dx) {
  const int64_t total = p.n * p.c * p.in[0] * p.in[1] * p.in[2];
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t n, ch, i[3];
    unravel5(idx, p.c, p.in, &n, &ch, i);
    const int64_t i0 = i[0], i1 = i[1], i2 = i[2];
    const int64_t grp = ch / cg, ci = ch % cg;
    double acc = 0.0;
    for (int64_t k = grp * kg; k < (grp + 1) * kg; ++k)
      for (int64_t f0 = 0; f0 < p.filt[0]; ++f0) {
        const int64_t t0 = i0 + p.pad[0] - f0 * p.dil[0];
        if (t0 < 0 || t0 % p.stride[0] != 0 || t0 / p.stride[0] >= p.out[0]) continue;
        const int64_t o0 = t0 / p.stride[0];
        for (int64_t f1 = 0; f1 < p.filt[1]; ++f1) {
          const int64_t t1 = i1 + p.pad[1] - f1 * p.dil[1];
          if (t1 < 0 || t1 % p.stride[1] != 0 || t1 / p.stride[1] >= p.out[1]) continue;
          const int64_t o1 = t1 / p.stride[1];
          for (int64_t f2 = 0; f2 < p.filt[2]; ++f2) {
            const int64_t t2 = i2 + p.pad[2] - f2 * p.dil[2];
            if (t2 < 0 || t2 % p.stride[2] != 0 || t2 / p.stride[2] >= p.out[2]) continue;
            const int64_t o2 = t2 / p.stride[2];
            acc += dy[(((n * p.k + k) * p.out[0] + o0) * p.out[1] + o1) * p.out[2] + o2] *
                   w[(((k * cg + ci) * p.filt[0] + f0) * p.filt[1] + f1) * p.filt[2] + f2];
          }
        }
      }
    dx[idx] = acc;
  }
}

__global__ void conv_wgrad_kernel(ConvParams p, const double* __restrict__ x, const double* __restrict__ dy,
                                  double* __restrict__ dw) {
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  const int64_t total = p.k * cg * p.filt[0] * p.filt[1] * p.filt[2];
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t k, ci, f[3];
    unravel5(idx, cg, p.filt, &k, &ci, f);
    const int64_t f0 = f[0], f1 = f[1], f2 = f[2];
    const int64_t ch = (k / kg) * cg + ci;
    double acc = 0.0;
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t o0 = 0; o0 < p.out[0]; ++o0) {
        const int64_t i0 = o0 * p.stride[0] - p.pad[0] + f0 * p.dil[0];
        if (i0 < 0 || i0 >= p.in[0]) continue;
        for (int64_t o1 = 0; o1 < p.out[1]; ++o1) {
          const int64_t i1 = o1 * p.stride[1] - p.pad[1] + f1 * p.dil[1];
          if (i1 < 0 || i1 >= p.in[1]) continue;
          for (int64_t o2 = 0; o2 < p.out[2]; ++o2) {
            const int64_t i2 = o2 * p.stride[2] - p.pad[2] + f2 * p.dil[2];
            if (i2 < 0 || i2 >= p.in[2]) continue;
            acc += x[(((n * p.c + ch) * p.in[0] + i0) * p.in[1] + i1) * p.in[2] + i2] *
                   dy[(((n * p.k + k) * p.out[0] + o0) * p.out[1] + o1) * p.out[2] + o2];
          }
        }
      }
    dw[idx] = acc;
  }
}

ConvParams conv_params(const ConvGeom& c) {
  ConvParams p{};
  p.n = c.n;
  p.c = c.c;
  p.k = c.k;
  p.groups = c.groups;
  for (int i = 0; i < 3; ++i) {
    p.in[i] = c.in[i];
    p.filt[i] = c.filt[i];
    p.out[i] = c.out[i];
    p.pad[i] = c.pad[i];
    p.stride[i] = c.stride[i];
    p.dil[i] = c.dil[i];
  }
  return p;
}

}  // namespace

Status conv_device_value(const Node&, const NodePlan& p, const std::vector<const double*>& in, double* y,
                         int64_t y_count, const std::string&) {
  switch (p.op) {
    case OpKind::kConvFprop:
      conv_fprop_kernel<<<grid_for(y_count), kThreads>>>(conv_params(p.conv), in[0], in[1], y);
      break;
    case OpKind::kConvDgrad:
      conv_dgrad_kernel<<<grid_for(y_count), kThreads>>>(conv_params(p.conv), in[0], in[1], y);
      break;
    default: conv_wgrad_kernel<<<grid_for(y_count), kThreads>>>(conv_params(p.conv), in[0], in[1], y); break;
  }
  return Status::ok();
}

Status conv_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op, const double* y,
                             double* by, int64_t y_count, bool scale_pass, const std::string& where) {
  return contraction_magnitude(conv_device_value, node, p, op, y, by, y_count, scale_pass, where);
}

}  // namespace kiln::validate_internal
