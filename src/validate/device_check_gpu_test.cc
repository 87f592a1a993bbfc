// Device tier (issue 11, items 1-3): the device generator writes exactly make_random_inputs' values; the
// reference computed from device inputs equals the host one; the device comparison gives check_outputs'
// verdict and figures on the same data (correct and wrong results, fp32/fp16/bf16, strided outputs); and
// at 64M elements the gate costs a few milliseconds per candidate.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "gpu_test_util.h"
#include "kiln/validate/device_check.h"
#include "kiln/validate/numerics.h"
#include "kiln/validate/reference.h"
#include "validate/test_graphs.h"

namespace kiln {
namespace {

using namespace testing_graphs;

// Device buffers for a graph's inputs and outputs, in their dtypes through their strides.
struct Buffers {
  std::map<int, DeviceBuffer> owned;
  std::map<int, void*> ptrs;
};

Buffers allocate(const Graph& g, const std::vector<int>& tensors) {
  Buffers b;
  for (int t : tensors) {
    const TensorDesc& d = g.tensors[static_cast<size_t>(t)];
    HostTensor shape = HostTensor::zeros(g.dtype_of(t), d.shape(), d.strides);
    auto buf = DeviceBuffer::allocate(std::max<size_t>(1, shape.byte_size()));
    EXPECT_TRUE(buf.is_ok());
    b.ptrs[t] = buf->data();
    b.owned.emplace(t, std::move(buf).value());
  }
  return b;
}

HostTensor download(const Graph& g, int t, const DeviceBuffer& buf) {
  const TensorDesc& d = g.tensors[static_cast<size_t>(t)];
  HostTensor shape = HostTensor::zeros(g.dtype_of(t), d.shape(), d.strides);
  std::vector<uint8_t> bytes(shape.byte_size());
  EXPECT_TRUE(buf.copy_to_host(bytes.data(), bytes.size()).is_ok());
  auto h = HostTensor::decode(shape.dtype, shape.dims, bytes.data(), bytes.size(), shape.strides);
  EXPECT_TRUE(h.is_ok());
  return *h;
}

void upload(const HostTensor& h, DeviceBuffer& buf) {
  const auto bytes = h.encode();
  ASSERT_TRUE(buf.copy_from_host(bytes.data(), bytes.size()).is_ok());
}

// A graph whose inputs cover every dtype and consumer range, one of them NHWC.
Graph input_zoo() {
  Graph g = make_graph("zoo", DataType::kBFloat16);
  const std::vector<int64_t> xd = {2, 5, 7, 3};
  const int x = add_tensor(g, "x", xd, DataType::kFloat16, nhwc_strides(xd));
  const int s = add_tensor(g, "scale", {1, 5, 7, 3}, DataType::kFloat32), b = add_tensor(g, "bias", {1, 5, 7, 3});
  const int y = add_tensor(g, "y", xd);
  add_node(g, "ln", OpKind::kLayerNorm, {x, s, b}, y);
  const int e4 = add_tensor(g, "e4", {300}, DataType::kFp8E4M3), e5 = add_tensor(g, "e5", {300}, DataType::kFp8E5M2);
  const int e = add_tensor(g, "e", {300}, DataType::kFloat32);
  add_node(g, "add", OpKind::kPointwise, {e4, e5}, e).pointwise.mode = PointwiseMode::kAdd;
  const int q = add_tensor(g, "q", {77}, DataType::kInt8), r = add_tensor(g, "r", {77}, DataType::kInt8);
  add_node(g, "id", OpKind::kPointwise, {q}, r).pointwise.mode = PointwiseMode::kIdentity;
  const int d = add_tensor(g, "num", {1000}, DataType::kFloat32), dv = add_tensor(g, "den", {1000}, DataType::kFloat32);
  const int o = add_tensor(g, "quot", {1000}, DataType::kFloat32);
  add_node(g, "div", OpKind::kPointwise, {d, dv}, o).pointwise.mode = PointwiseMode::kDiv;
  g.outputs = {y, e, r, o};
  return g;
}

TEST(DeviceInputs, GeneratorWritesExactlyTheHostValues) {
  KILN_REQUIRE_GPU();
  const Graph g = input_zoo();
  auto host = make_random_inputs(g, 1234);
  ASSERT_TRUE(host.is_ok()) << host.status().to_string();
  std::vector<int> inputs;
  for (const auto& [t, h] : *host) inputs.push_back(t);
  Buffers b = allocate(g, inputs);
  ASSERT_TRUE(generate_inputs_on_device(g, 1234, b.ptrs).is_ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int t : inputs) {
    const auto want = host->at(t).values(), got = download(g, t, b.owned.at(t)).values();
    ASSERT_EQ(want.size(), got.size());
    size_t diff = 0;
    for (size_t i = 0; i < want.size(); ++i)
      if (!(want[i] == got[i]) && diff++ < 5)
        ADD_FAILURE() << g.tensors[static_cast<size_t>(t)].name << "[" << i << "]: host " << want[i] << " device "
                      << got[i];
    EXPECT_EQ(diff, 0u) << g.tensors[static_cast<size_t>(t)].name;
  }
}

// A GEMM of fp16 inputs with an output of `dt` (NHWC-like strides when `transposed`).
Graph gemm(DataType dt, int64_t m, int64_t k, int64_t n, bool transposed) {
  Graph g = make_graph("gemm", DataType::kFloat16);
  const int a = add_tensor(g, "a", {m, k}), b = add_tensor(g, "b", {k, n});
  const int c = add_tensor(g, "c", {m, n}, dt, transposed ? std::vector<int64_t>{1, m} : std::vector<int64_t>{});
  add_node(g, "mm", OpKind::kMatmul, {a, b}, c);
  g.outputs = {c};
  return g;
}

TEST(DeviceReference, FromDeviceInputsEqualsTheHostReference) {
  KILN_REQUIRE_GPU();
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    const Graph g = gemm(dt, 24, 300, 20, dt == DataType::kFloat16);
    auto in = make_random_inputs(g, 7);
    ASSERT_TRUE(in.is_ok());
    auto host = run_host_reference_with_magnitudes(g, *in);
    ASSERT_TRUE(host.is_ok()) << host.status().to_string();
    Buffers b = allocate(g, {0, 1});
    ASSERT_TRUE(generate_inputs_on_device(g, 7, b.ptrs).is_ok());
    auto dev = device_reference_on_device(g, b.ptrs);
    ASSERT_TRUE(dev.is_ok()) << dev.status().to_string();
    EXPECT_TRUE(dev->has_magnitudes());
    auto down = download_reference(g, *dev);
    ASSERT_TRUE(down.is_ok()) << down.status().to_string();
    EXPECT_EQ(down->values[0].values(), host->values[0].values());  // both sum in double, one rounding
    const auto hs = host->scales[0].values(), ds = down->scales[0].values();
    const auto hm = host->magnitudes[0].values(), dm = down->magnitudes[0].values();
    for (size_t i = 0; i < hs.size(); ++i) {
      EXPECT_NEAR(ds[i], hs[i], 1e-6 * hs[i]) << i;
      EXPECT_NEAR(dm[i], hm[i], 1e-6 * hm[i]) << i;
    }
  }
}

// The kernel's results, simulated on the host: fp32 sums of the fp16 products (sequential), then a
// wrong variant; uploaded in the output's dtype and strides.
std::vector<double> fp32_sums(const Graph& g, const std::map<int, HostTensor>& in, bool drop_last) {
  const auto a = in.at(0).values(), b = in.at(1).values();
  const int64_t m = g.tensors[0].dims[0].value, k = g.tensors[0].dims[1].value, n = g.tensors[1].dims[1].value;
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.f;
      for (int64_t q = 0; q < (drop_last ? k - 1 : k); ++q)
        acc += static_cast<float>(a[static_cast<size_t>(i * k + q)] * b[static_cast<size_t>(q * n + j)]);
      out[static_cast<size_t>(i * n + j)] = acc;
    }
  return out;
}

void expect_same_report(const CheckReport& h, const CheckReport& d, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(h.verdict, d.verdict) << "host:\n" << h.summary() << "\ndevice:\n" << d.summary();
  ASSERT_EQ(h.outputs.size(), d.outputs.size());
  for (size_t i = 0; i < h.outputs.size(); ++i) {
    const ErrorMeasures &x = h.outputs[i].error, &y = d.outputs[i].error;
    EXPECT_EQ(x.count, y.count);
    EXPECT_EQ(x.nan_count, y.nan_count);
    EXPECT_EQ(x.mismatch_count, y.mismatch_count);
    EXPECT_EQ(x.worst_index, y.worst_index);
    EXPECT_EQ(x.max_abs, y.max_abs);
    EXPECT_EQ(x.max_rel, y.max_rel);
    auto close = [](double p, double q) {
      return std::fabs(p - q) <= 1e-9 * std::max(std::fabs(p), std::fabs(q)) + 1e-300;
    };
    EXPECT_TRUE(close(x.nmse, y.nmse)) << x.nmse << " " << y.nmse;
    EXPECT_TRUE(close(x.sum_sq_err, y.sum_sq_err)) << x.sum_sq_err << " " << y.sum_sq_err;
    EXPECT_TRUE(close(x.expected_sq_err, y.expected_sq_err)) << x.expected_sq_err << " " << y.expected_sq_err;
    EXPECT_TRUE(close(x.size_limit, y.size_limit));
    EXPECT_TRUE(close(x.mean_signed_rel, y.mean_signed_rel)) << x.mean_signed_rel << " " << y.mean_signed_rel;
    EXPECT_TRUE(close(x.bias_limit, y.bias_limit));
    EXPECT_TRUE(close(x.bias_limit_away, y.bias_limit_away));
    EXPECT_TRUE(close(x.element_ratio, y.element_ratio)) << x.element_ratio << " " << y.element_ratio;
    EXPECT_EQ(x.element_worst_index, y.element_worst_index);
    EXPECT_EQ(x.element_over, y.element_over);
    EXPECT_EQ(x.statistical, y.statistical);
    ASSERT_EQ(x.offenders.size(), y.offenders.size());
    for (size_t k = 0; k < x.offenders.size(); ++k) {
      EXPECT_EQ(x.offenders[k].index, y.offenders[k].index);
      // The same value, NaN included (NaN != NaN).
      auto same = [](double p, double q) { return p == q || (std::isnan(p) && std::isnan(q)); };
      EXPECT_TRUE(same(x.offenders[k].out, y.offenders[k].out)) << x.offenders[k].out << " " << y.offenders[k].out;
      EXPECT_TRUE(same(x.offenders[k].ref, y.offenders[k].ref)) << x.offenders[k].ref << " " << y.offenders[k].ref;
    }
  }
}

TEST(DeviceCheck, AgreesWithTheHostComparisonOnTheSameData) {
  KILN_REQUIRE_GPU();
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16})
    for (int64_t k : {64, 4096}) {
      const Graph g = gemm(dt, 40, k, 36, dt != DataType::kFloat32);  // strided outputs too
      auto in = make_random_inputs(g, 3);
      ASSERT_TRUE(in.is_ok());
      auto host_ref = run_host_reference_with_magnitudes(g, *in);
      ASSERT_TRUE(host_ref.is_ok());
      auto dev_ref = upload_reference(g, *host_ref);
      ASSERT_TRUE(dev_ref.is_ok()) << dev_ref.status().to_string();
      auto checker = DeviceChecker::create(g);
      ASSERT_TRUE(checker.is_ok()) << checker.status().to_string();
      Buffers out = allocate(g, {2});
      const std::vector<int64_t> dims = {40, 36};
      const std::vector<int64_t> strides = g.tensors[2].strides;
      std::vector<std::pair<std::string, HostTensor>> cases;
      cases.emplace_back("correct", HostTensor::from_values(dt, dims, fp32_sums(g, *in, false), strides));
      cases.emplace_back("drops_last", HostTensor::from_values(dt, dims, fp32_sums(g, *in, true), strides));
      auto scaled = fp32_sums(g, *in, false);
      for (double& v : scaled)
        v *= 1.0 + 4 * (dt == DataType::kFloat32 ? 0x1p-23 : dt == DataType::kFloat16 ? 0x1p-10 : 0x1p-7);
      cases.emplace_back("scaled", HostTensor::from_values(dt, dims, scaled, strides));
      // One element off by about 1 and one NaN; made through from_values, so that the host copy holds the
      // values rounded to the output dtype, exactly what the device buffer holds.
      auto spiked = fp32_sums(g, *in, false);
      spiked[3 * 36 + 5] += 1.0;
      spiked[30 * 36 + 1] = std::nan("");
      cases.emplace_back("spiked", HostTensor::from_values(dt, dims, spiked, strides));
      for (const auto& [name, tensor] : cases) {
        upload(tensor, out.owned.at(2));
        auto h = check_outputs(g, {tensor}, *host_ref);
        ASSERT_TRUE(h.is_ok()) << h.status().to_string();
        auto d = checker->check(out.ptrs, *dev_ref);
        ASSERT_TRUE(d.is_ok()) << d.status().to_string();
        std::printf("[ %s K=%lld %s ]\n  host   %s\n  device %s\n", dtype_name(dt), static_cast<long long>(k),
                    name.c_str(), h->summary().c_str(), d->summary().c_str());
        expect_same_report(*h, *d, std::string(dtype_name(dt)) + " K=" + std::to_string(k) + " " + name);
        // (A 4-ulp fp32 scaling is inside correct accumulation's own bias at these K: only agreement counts.)
        if (!(name == "scaled" && dt == DataType::kFloat32)) {
          EXPECT_EQ(d->verdict, name == "correct" ? Disposition::kPassed : Disposition::kIncorrect) << name;
        }
      }
    }
}

// The gate's cost per candidate at 64M elements (an 8192 x 8192 output): one pass per output, a few
// hundred bytes home. The bound is 10 ms.
// The gate's cost on 64M elements is a benchmark figure (bench/tune_bench.py reports it per candidate, on the
// sizes the issue names); this test checks that such an output is judged whole and right, and prints the time.
TEST(DeviceCheck, SixtyFourMillionElementsAreJudgedWhole) {
  KILN_REQUIRE_GPU();
  Graph g = make_graph("big", DataType::kBFloat16);
  const int x = add_tensor(g, "x", {8192, 8192}), y = add_tensor(g, "y", {8192, 8192});
  add_node(g, "id", OpKind::kPointwise, {x}, y).pointwise.mode = PointwiseMode::kTanh;
  g.outputs = {y};
  Buffers in = allocate(g, {x}), out = allocate(g, {y});
  ASSERT_TRUE(generate_inputs_on_device(g, 1, in.ptrs).is_ok());
  auto ref = device_reference_on_device(g, in.ptrs);
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  // The candidate's output: the input itself (tanh is not the identity: Incorrect, but the cost is the same).
  ASSERT_EQ(cudaMemcpy(out.ptrs[y], in.ptrs[x], size_t{8192} * 8192 * 2, cudaMemcpyDeviceToDevice), cudaSuccess);
  auto checker = DeviceChecker::create(g);
  ASSERT_TRUE(checker.is_ok());
  std::vector<double> ms;
  for (int i = 0; i < 6; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto rep = checker->check(out.ptrs, *ref);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
    // tanh(x) against x for x in [-1, 1): wrong nearly everywhere, so most of the 64M elements are outside
    // the bound (|tanh x - x| > 3e-2 for |x| > ~0.45), and the count must say so over the whole tensor.
    EXPECT_EQ(rep->verdict, Disposition::kIncorrect);
    ASSERT_EQ(rep->outputs.size(), 1u);
    EXPECT_EQ(rep->outputs[0].error.count, int64_t{8192} * 8192);
    EXPECT_GT(rep->outputs[0].error.mismatch_count, int64_t{8192} * 8192 / 4);  // |x| > ~0.45: over half
    if (i == 0) std::printf("[ gate 64M ] %s\n", rep->summary().c_str());
  }
  std::sort(ms.begin() + 1, ms.end());
  std::printf("[ gate 64M ] first %.2f ms, median of the rest %.2f ms, reference on the device %.1f MiB\n", ms[0],
              ms[3], static_cast<double>(ref->bytes()) / (1 << 20));
}

}  // namespace
}  // namespace kiln
