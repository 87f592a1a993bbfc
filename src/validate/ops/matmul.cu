// The matmul family's device reference: a tiled kernel in double precision.
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

struct MatmulParams {
  int nb;  // batch rank
  int64_t batch[kMaxRank], a_batch[kMaxRank], b_batch[kMaxRank];
  int64_t m, n, k, batch_count;
};

constexpr int kTile = 16;

__global__ void matmul_kernel(MatmulParams p, const double* __restrict__ a, const double* __restrict__ b,
                              double* __restrict__ c) {
  __shared__ double as[kTile][kTile];
  __shared__ double bs[kTile][kTile + 1];
  const int64_t row = blockIdx.y * static_cast<int64_t>(kTile) + threadIdx.y;
  const int64_t col = blockIdx.x * static_cast<int64_t>(kTile) + threadIdx.x;
  for (int64_t bi = blockIdx.z; bi < p.batch_count; bi += gridDim.z) {
    int64_t ao = 0, bo = 0, rem = bi;
    for (int d = p.nb - 1; d >= 0; --d) {
      const int64_t i = rem % p.batch[d];
      rem /= p.batch[d];
      ao += i * p.a_batch[d];
      bo += i * p.b_batch[d];
    }
    double acc = 0.0;
    for (int64_t k0 = 0; k0 < p.k; k0 += kTile) {
      const int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
      as[threadIdx.y][threadIdx.x] = (row < p.m && ka < p.k) ? a[ao + row * p.k + ka] : 0.0;
      bs[threadIdx.y][threadIdx.x] = (kb < p.k && col < p.n) ? b[bo + kb * p.n + col] : 0.0;
      __syncthreads();
      for (int kk = 0; kk < kTile; ++kk) acc += as[threadIdx.y][kk] * bs[kk][threadIdx.x];
      __syncthreads();
    }
    if (row < p.m && col < p.n) c[bi * p.m * p.n + row * p.n + col] = acc;
  }
}

}  // namespace

Status matmul_device_value(const Node&, const NodePlan& p, const std::vector<const double*>& in, double* y, int64_t,
                           const std::string& where) {
  if (p.mm.batch.size() > static_cast<size_t>(kMaxRank)) return not_supported(where + ": too many batch dims");
  MatmulParams mp{};
  mp.nb = static_cast<int>(p.mm.batch.size());
  for (size_t i = 0; i < p.mm.batch.size(); ++i) {
    mp.batch[i] = p.mm.batch[i];
    mp.a_batch[i] = p.mm.a_batch[i];
    mp.b_batch[i] = p.mm.b_batch[i];
  }
  mp.m = p.mm.m;
  mp.n = p.mm.n;
  mp.k = p.mm.k;
  mp.batch_count = p.mm.batch_count();
  const int64_t gx = (mp.n + kTile - 1) / kTile, gy = (mp.m + kTile - 1) / kTile;
  if (gx > 0x7FFFFFFF || gy > 65535) return not_supported(where + ": matrix too large for the device reference grid");
  dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy),
            static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(mp.batch_count, 1), 65535)));
  matmul_kernel<<<grid, dim3(kTile, kTile)>>>(mp, in[0], in[1], y);
  return Status::ok();
}

Status matmul_device_magnitude(const Node& node, const NodePlan& p, const std::vector<DeviceOperand>& op,
                               const double* y, double* by, int64_t y_count, bool scale_pass,
                               const std::string& where) {
  return contraction_magnitude(matmul_device_value, node, p, op, y, by, y_count, scale_pass, where);
}

}  // namespace kiln::validate_internal
