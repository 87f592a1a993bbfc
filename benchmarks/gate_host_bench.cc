// Host-side cost of the numerics gate at realistic sizes (issue 11): what the tuner used to pay on the
// host for every candidate (download + decode + compare + bound evaluation), and what input generation
// costs on the host (once per graph, when the host reference needs the inputs).
//
//   gate_host_bench [--elements N] [--dtype bf16|fp16|fp32] [--repeat R]
//
// Prints one line per phase: "<phase> <elements> <wall ms> <cpu ms>" (cpu: all threads of the process, so
// that a busy machine does not hide the work). No GPU needed: the output bytes are synthesised.
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kiln/validate/host_tensor.h"
#include "kiln/validate/numerics.h"
#include "kiln/validate/reference.h"

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }
double cpu_ms() { return 1000.0 * static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

kiln::Graph identity_graph(int64_t rows, int64_t cols, kiln::DataType dt) {
  kiln::Graph g;
  g.name = "bench_identity";
  g.io_dtype = dt;
  g.intermediate_dtype = kiln::DataType::kFloat32;
  g.compute_dtype = kiln::DataType::kFloat32;
  kiln::TensorDesc x, y;
  x.name = "x";
  x.dims = {kiln::Dim{rows, ""}, kiln::Dim{cols, ""}};
  x.strides = {cols, 1};
  y = x;
  y.name = "y";
  g.tensors = {x, y};
  kiln::Node n;
  n.name = "id";
  n.op = kiln::OpKind::kPointwise;
  n.pointwise.mode = kiln::PointwiseMode::kIdentity;
  n.inputs = {0};
  n.outputs = {1};
  g.nodes = {n};
  g.outputs = {1};
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t elements = int64_t{1} << 26;  // 64M, the output of an 8192 x 8192 matmul
  std::string dtype = "bf16";
  int repeat = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--elements")) elements = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dtype")) dtype = argv[i + 1];
    else if (!std::strcmp(argv[i], "--repeat")) repeat = std::atoi(argv[i + 1]);
  }
  auto dt = kiln::parse_dtype(dtype);
  if (!dt.is_ok() || elements < 1024) {
    std::fprintf(stderr, "usage: gate_host_bench [--elements N>=1024] [--dtype bf16|fp16|fp32] [--repeat R]\n");
    return 2;
  }
  const int64_t cols = 1024, rows = elements / cols;
  elements = rows * cols;
  kiln::Graph g = identity_graph(rows, cols, *dt);

  for (int r = 0; r < repeat; ++r) {
    auto t0 = Clock::now();
    double c0 = cpu_ms();
    auto in = kiln::make_random_inputs(g, 1 + static_cast<uint64_t>(r));
    if (!in.is_ok()) {
      std::fprintf(stderr, "%s\n", in.status().to_string().c_str());
      return 1;
    }
    std::printf("generate_inputs_host %lld %.1f %.1f\n", static_cast<long long>(elements), ms_since(t0), cpu_ms() - c0);

    // What the reference would hold: values (the inputs, through an identity) and magnitudes.
    kiln::ReferenceOutputs ref;
    ref.values.push_back(in->at(0));
    ref.values[0].dtype = *dt;
    ref.magnitudes.push_back(in->at(0));
    ref.magnitudes[0].dtype = kiln::DataType::kFloat32;
    for (double& v : ref.magnitudes[0].storage) v = v < 0 ? -v : v;
    ref.scales = ref.magnitudes;  // the expected-error model's S (an identity of inputs: S = |x|)

    // The bytes a candidate leaves on the device, as download_outputs fetches them.
    const std::vector<uint8_t> bytes = ref.values[0].encode();
    t0 = Clock::now();
    c0 = cpu_ms();
    auto out = kiln::HostTensor::decode(*dt, {rows, cols}, bytes.data(), bytes.size());
    if (!out.is_ok()) {
      std::fprintf(stderr, "%s\n", out.status().to_string().c_str());
      return 1;
    }
    std::printf("decode_output %lld %.1f %.1f\n", static_cast<long long>(elements), ms_since(t0), cpu_ms() - c0);

    t0 = Clock::now();
    c0 = cpu_ms();
    auto rep = kiln::check_outputs(g, {*out}, ref);
    if (!rep.is_ok()) {
      std::fprintf(stderr, "%s\n", rep.status().to_string().c_str());
      return 1;
    }
    std::printf("check_outputs %lld %.1f %.1f\n", static_cast<long long>(elements), ms_since(t0), cpu_ms() - c0);
    std::printf("verdict %s\n", rep->summary().c_str());
  }
  return 0;
}
