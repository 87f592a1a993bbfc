// A probe, not part of Kiln: does cuDNN serve a bf16 layer/RMS norm faster when the graph is built in the
// TRAINING forward phase (statistics written out) than in INFERENCE (what Kiln lowers today)?
// The suite measured Kiln's inference-phase norms at 20-27% of the copy bandwidth, one engine each.
// For each shape, norm and phase: every plan cuDNN offers (heuristics A + FALLBACK), built and timed with CUDA
// events (median of 20 samples of 20 back-to-back executions, after a warm-up), its output compared with the
// inference phase's first plan. Build on the GPU machine:
//   nvcc -std=c++17 -O2 -arch=sm_90 -I third_party/cudnn_frontend/include -I $CUDNN/include \
//        bench/probes/norm_phase_probe.cc -L $CUDNN/lib -l:libcudnn.so.9 -o /tmp/norm_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace fe = cudnn_frontend;

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

struct Bufs {
  void *x, *g, *b, *g16, *b16, *y, *y_ref, *mean, *rstd, *ws;
  size_t ws_bytes = 0;
};

static double time_plan(cudnnHandle_t h, fe::graph::Graph& gr, std::unordered_map<int64_t, void*>& pack, void* ws,
                        int64_t idx, cudaStream_t st) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 5; ++i)
    if (!gr.execute_plan_at_index(h, pack, ws, idx).is_good()) return -1;
  std::vector<float> v;
  for (int s = 0; s < 20; ++s) {
    CK(cudaEventRecord(a, st));
    for (int i = 0; i < 20; ++i) (void)gr.execute_plan_at_index(h, pack, ws, idx);
    CK(cudaEventRecord(b, st));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    v.push_back(ms / 20);
  }
  std::sort(v.begin(), v.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return v[v.size() / 2];
}

static bool g_bf16_params = false, g_3d = false;

static void run(cudnnHandle_t h, cudaStream_t st, int64_t t, int64_t d, bool rms, bool training, Bufs& B,
                bool write_ref) {
  fe::graph::Graph gr;
  gr.set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const auto pdt = g_bf16_params ? fe::DataType_t::BFLOAT16 : fe::DataType_t::FLOAT;
  std::vector<int64_t> xd{t, d, 1, 1}, xs{d, 1, d, d}, pd{1, d, 1, 1}, ps{d, 1, d, d};
  if (g_3d) xd = {1, t, d}, xs = {t * d, d, 1}, pd = {1, 1, d}, ps = {d, d, 1};
  auto x = gr.tensor(fe::graph::Tensor_attributes().set_name("x").set_uid(1).set_dim(xd).set_stride(xs));
  auto g =
      gr.tensor(fe::graph::Tensor_attributes().set_name("g").set_uid(2).set_dim(pd).set_stride(ps).set_data_type(pdt));
  auto eps = gr.tensor(1e-5f);
  auto phase = training ? fe::NormFwdPhase_t::TRAINING : fe::NormFwdPhase_t::INFERENCE;
  std::shared_ptr<fe::graph::Tensor_attributes> y, mean, rstd;
  if (rms) {
    auto o = gr.rmsnorm(x, g, fe::graph::Rmsnorm_attributes().set_forward_phase(phase).set_epsilon(eps));
    y = o[0];
    rstd = o[1];
  } else {
    auto bb = gr.tensor(
        fe::graph::Tensor_attributes().set_name("b").set_uid(3).set_dim(pd).set_stride(ps).set_data_type(pdt));
    auto o = gr.layernorm(x, g, bb, fe::graph::Layernorm_attributes().set_forward_phase(phase).set_epsilon(eps));
    y = o[0];
    mean = o[1];
    rstd = o[2];
  }
  y->set_output(true).set_uid(4);
  if (training) {
    rstd->set_output(true).set_uid(6).set_data_type(fe::DataType_t::FLOAT);
    if (mean) mean->set_output(true).set_uid(5).set_data_type(fe::DataType_t::FLOAT);
  }
  const char* what = rms ? "rms_norm" : "layer_norm";
  const char* ph = training ? "training" : "inference";
  if (!gr.validate().is_good() || !gr.build_operation_graph(h).is_good() ||
      !gr.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::B, fe::HeurMode_t::FALLBACK}).is_good() ||
      !gr.check_support(h).is_good()) {
    std::printf("%s %ldx%ld %s: not supported\n", what, (long)t, (long)d, ph);
    return;
  }
  (void)gr.build_plans(h, fe::BuildPlanPolicy_t::ALL);
  std::unordered_map<int64_t, void*> pack{{1, B.x}, {2, g_bf16_params ? B.g16 : B.g}, {4, write_ref ? B.y_ref : B.y}};
  if (!rms) pack[3] = g_bf16_params ? B.b16 : B.b;
  if (training) {
    pack[6] = B.rstd;
    if (!rms) pack[5] = B.mean;
  }
  double bytes = 2.0 * t * d * 2 + (rms ? 1 : 2) * d * 4 + (training ? (rms ? 1 : 2) * t * 4 : 0);
  int64_t n = gr.get_execution_plan_count();
  for (int64_t i = 0; i < n; ++i) {
    std::string name;
    gr.get_plan_name_at_index(i, name);
    int64_t ws = 0;
    if (!gr.get_workspace_size_plan_at_index(i, ws).is_good()) continue;
    if (static_cast<size_t>(ws) > B.ws_bytes) {
      std::printf("  %s: workspace %ld too large\n", name.c_str(), (long)ws);
      continue;
    }
    CK(cudaMemset(write_ref ? B.y_ref : B.y, 0xff, t * d * 2));
    double ms = time_plan(h, gr, pack, B.ws, i, st);
    if (ms < 0) {
      std::printf("%s %ldx%ld %s %s: execute failed\n", what, (long)t, (long)d, ph, name.c_str());
      continue;
    }
    CK(cudaDeviceSynchronize());
    double maxdiff = 0;
    if (!write_ref) {
      std::vector<__nv_bfloat16> a(t * d), r(t * d);
      CK(cudaMemcpy(a.data(), B.y, t * d * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(r.data(), B.y_ref, t * d * 2, cudaMemcpyDeviceToHost));
      for (int64_t k = 0; k < t * d; ++k) {
        double u = __bfloat162float(a[k]), w = __bfloat162float(r[k]);
        double dd = std::isnan(u) ? 1e30 : std::fabs(u - w);
        maxdiff = std::max(maxdiff, dd);
      }
    }
    std::printf("[params %s, %s] ", g_bf16_params ? "bf16" : "fp32", g_3d ? "3d {1,t,d}" : "4d {t,d,1,1}");
    std::printf("%s %ldx%ld %-9s plan %ld %-40s ws %8ld  %.4f ms  %.2f TB/s  max|y-y_inference0| %.3g\n", what, (long)t,
                (long)d, ph, (long)i, name.c_str(), (long)ws, ms, bytes / ms / 1e9, maxdiff);
    if (write_ref) break;  // the reference output: the inference phase's first plan
  }
}

int main() {
  cudnnHandle_t h;
  if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) return 1;
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudnnSetStream(h, st);
  std::printf("cudnn %zu\n", cudnnGetVersion());
  const int64_t shapes[][2] = {{16384, 8192}, {65536, 1024}, {2048, 4096}};
  for (auto& s : shapes) {
    int64_t t = s[0], d = s[1];
    Bufs B;
    B.ws_bytes = 256 << 20;
    CK(cudaMalloc(&B.x, t * d * 2));
    CK(cudaMalloc(&B.y, t * d * 2));
    CK(cudaMalloc(&B.y_ref, t * d * 2));
    CK(cudaMalloc(&B.g, d * 4));
    CK(cudaMalloc(&B.b, d * 4));
    CK(cudaMalloc(&B.g16, d * 2));
    CK(cudaMalloc(&B.b16, d * 2));
    CK(cudaMalloc(&B.mean, t * 4));
    CK(cudaMalloc(&B.rstd, t * 4));
    CK(cudaMalloc(&B.ws, B.ws_bytes));
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-2, 2);
    std::vector<__nv_bfloat16> hx(t * d);
    for (auto& v : hx) v = __float2bfloat16(u(rng));
    std::vector<float> hg(d), hb(d);
    for (auto& v : hg) v = 1 + 0.1f * u(rng);
    for (auto& v : hb) v = 0.1f * u(rng);
    CK(cudaMemcpy(B.x, hx.data(), t * d * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(B.g, hg.data(), d * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(B.b, hb.data(), d * 4, cudaMemcpyHostToDevice));
    std::vector<__nv_bfloat16> hg16(d), hb16(d);
    for (int64_t k = 0; k < d; ++k) hg16[k] = __float2bfloat16(hg[k]), hb16[k] = __float2bfloat16(hb[k]);
    CK(cudaMemcpy(B.g16, hg16.data(), d * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(B.b16, hb16.data(), d * 2, cudaMemcpyHostToDevice));
    for (bool rms : {false, true}) {
      g_bf16_params = false, g_3d = false;
      run(h, st, t, d, rms, false, B, true);  // the reference output
      for (int v = 0; v < 4; ++v) {
        g_bf16_params = v & 1, g_3d = v & 2;
        run(h, st, t, d, rms, false, B, false);
        if (v == 0) run(h, st, t, d, rms, true, B, false);
      }
    }
    for (void* p : {B.g16, B.b16, B.x, B.y, B.y_ref, B.g, B.b, B.mean, B.rstd, B.ws}) CK(cudaFree(p));
  }
  cudnnDestroy(h);
  return 0;
}
