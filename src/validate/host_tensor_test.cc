#include "kiln/validate/host_tensor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "kiln/validate/reference.h"

namespace kiln {
namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp16_from_double(1.0), 0x3C00);
  EXPECT_EQ(fp16_from_double(-2.0), 0xC000);
  EXPECT_EQ(fp16_from_double(0.0), 0x0000);
  EXPECT_EQ(fp16_from_double(-0.0), 0x8000);
  EXPECT_EQ(fp16_from_double(65504.0), 0x7BFF);
  EXPECT_EQ(fp16_from_double(1.0 / 3.0), 0x3555);
  EXPECT_EQ(fp16_from_double(kInf), 0x7C00);
  EXPECT_EQ(fp16_from_double(-kInf), 0xFC00);
  // 65520 is halfway between 65504 (odd mantissa) and 65536 (overflow): ties to even -> inf.
  EXPECT_EQ(fp16_from_double(65520.0), 0x7C00);
  EXPECT_EQ(fp16_from_double(65519.99), 0x7BFF);
  EXPECT_DOUBLE_EQ(fp16_to_double(0x7BFF), 65504.0);
  EXPECT_DOUBLE_EQ(fp16_to_double(0x3C00), 1.0);
}

TEST(Fp16, Subnormals) {
  EXPECT_EQ(fp16_from_double(std::ldexp(1.0, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(fp16_from_double(std::ldexp(1.0, -25)), 0x0000);     // tie to even -> 0
  EXPECT_EQ(fp16_from_double(std::ldexp(3.0, -25)), 0x0002);     // 1.5 ulp: tie to even -> 2
  EXPECT_EQ(fp16_from_double(std::ldexp(1023.0, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(fp16_from_double(std::ldexp(1.0, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(fp16_from_double(std::ldexp(1023.5, -24)), 0x0400);  // rounds up into the normals
  EXPECT_DOUBLE_EQ(fp16_to_double(0x0001), std::ldexp(1.0, -24));
  EXPECT_DOUBLE_EQ(fp16_to_double(0x8001), -std::ldexp(1.0, -24));
}

TEST(Fp16, NaN) {
  const uint16_t b = fp16_from_double(kNaN);
  EXPECT_EQ(b & 0x7C00, 0x7C00);
  EXPECT_NE(b & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(fp16_to_double(0x7E00)));
  EXPECT_TRUE(std::isnan(fp16_to_double(0x7C01)));
  EXPECT_TRUE(std::isinf(fp16_to_double(0x7C00)));
}

TEST(Fp16, RoundTripAllBits) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const double v = fp16_to_double(static_cast<uint16_t>(b));
    if (std::isnan(v)) continue;
    ASSERT_EQ(fp16_from_double(v), b) << "bits " << b;
  }
}

// The encoders round every double to the nearest value of the format, ties to even (a property test
// over random doubles of every magnitude, tie points and the overflow threshold included): whatever
// fast path the encoder takes, its result is the nearest one.
TEST(RoundToDtype, Fp16AndBf16AreNearestEvenForAnyDouble) {
  Rng rng(17);
  struct Format {
    DataType dtype;
    int mbits;
    double max_finite;
  };
  for (const Format& f :
       {Format{DataType::kFloat16, 10, 65504.0}, Format{DataType::kBFloat16, 7, 3.3895313892515355e38}}) {
    for (int i = 0; i < 400000; ++i) {
      const int e = static_cast<int>(rng.next_u64() % 300) - 150;  // far below subnormals to past overflow
      double x = std::ldexp(1.0 + rng.uniform(), e) * ((rng.next_u64() & 1) ? -1.0 : 1.0);
      if (i % 4 == 1) {  // a tie point: a representable value plus half a spacing
        const double r = round_to_dtype(x, f.dtype);
        if (std::isfinite(r) && r != 0.0) {
          int k;
          std::frexp(r, &k);
          x = r + std::ldexp(0.5, k - 1 - f.mbits);
        }
      }
      const double r = round_to_dtype(x, f.dtype);
      if (std::fabs(x) >= f.max_finite + std::ldexp(0.5, std::ilogb(f.max_finite) - f.mbits)) {
        EXPECT_TRUE(std::isinf(r)) << x;
        continue;
      }
      ASSERT_TRUE(std::isfinite(r)) << x;
      // The neighbours of r in the format, through its bits.
      const uint16_t bits = f.dtype == DataType::kFloat16 ? fp16_from_double(r) : bf16_from_double(r);
      auto dec = [&](uint16_t b) { return f.dtype == DataType::kFloat16 ? fp16_to_double(b) : bf16_to_double(b); };
      EXPECT_EQ(dec(bits), r);
      const double err = std::fabs(x - r);
      for (int d : {-1, 1}) {
        const uint16_t nb = static_cast<uint16_t>(bits + d);
        const double n = dec(nb);
        if (!std::isfinite(n) || (std::signbit(n) != std::signbit(r) && r != 0.0)) continue;
        const double nerr = std::fabs(x - n);
        EXPECT_LE(err, nerr) << "x=" << x << " r=" << r << " neighbour=" << n;
        if (err == nerr) {
          EXPECT_EQ(bits & 1, 0) << "tie not to even: x=" << x;
        }
      }
    }
  }
}

TEST(Bf16, RoundToNearestEven) {
  EXPECT_EQ(bf16_from_double(1.0), 0x3F80);
  EXPECT_EQ(bf16_from_double(-1.0), 0xBF80);
  // 1 + 2^-8 is halfway between 1.0 (even) and 1 + 2^-7 (odd): -> 1.0
  EXPECT_EQ(bf16_from_double(1.0 + std::ldexp(1.0, -8)), 0x3F80);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): -> 0x3F82
  EXPECT_EQ(bf16_from_double(1.0 + 3 * std::ldexp(1.0, -8)), 0x3F82);
  // Just above a tie rounds up.
  EXPECT_EQ(bf16_from_double(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -20)), 0x3F81);
  EXPECT_EQ(bf16_from_double(3.0e38), 0x7F62);
  EXPECT_EQ(bf16_from_double(kInf), 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_to_double(bf16_from_double(kNaN))));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const double v = bf16_to_double(static_cast<uint16_t>(b));
    if (std::isnan(v)) continue;
    ASSERT_EQ(bf16_from_double(v), b) << "bits " << b;
  }
}

TEST(Fp8E4M3, SaturatesAt448) {
  EXPECT_EQ(fp8_e4m3_from_double(1.0), 0x38);
  EXPECT_EQ(fp8_e4m3_from_double(448.0), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_double(464.0), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_double(1000.0), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_double(kInf), 0x7E);
  EXPECT_EQ(fp8_e4m3_from_double(-1000.0), 0xFE);
  EXPECT_EQ(fp8_e4m3_from_double(std::ldexp(1.0, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(fp8_e4m3_from_double(kNaN) & 0x7F, 0x7F);
  EXPECT_DOUBLE_EQ(fp8_e4m3_to_double(0x7E), 448.0);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_double(0x7F)));
  EXPECT_DOUBLE_EQ(fp8_e4m3_to_double(0x78), 256.0);  // exponent all ones is a normal number
  for (uint32_t b = 0; b < 0x100; ++b) {
    const double v = fp8_e4m3_to_double(static_cast<uint8_t>(b));
    if (std::isnan(v)) continue;
    ASSERT_EQ(fp8_e4m3_from_double(v), b) << "bits " << b;
  }
}

TEST(Fp8E5M2, KnownValues) {
  EXPECT_EQ(fp8_e5m2_from_double(1.0), 0x3C);
  EXPECT_EQ(fp8_e5m2_from_double(57344.0), 0x7B);
  EXPECT_EQ(fp8_e5m2_from_double(1e6), 0x7C);  // inf
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_double(0x7C)));
  EXPECT_TRUE(std::isnan(fp8_e5m2_to_double(0x7E)));
  EXPECT_EQ(fp8_e5m2_from_double(std::ldexp(1.0, -16)), 0x01);
  for (uint32_t b = 0; b < 0x100; ++b) {
    const double v = fp8_e5m2_to_double(static_cast<uint8_t>(b));
    if (std::isnan(v)) continue;
    ASSERT_EQ(fp8_e5m2_from_double(v), b) << "bits " << b;
  }
}

TEST(RoundToDtype, IntegersSaturateAndTieToEven) {
  EXPECT_EQ(round_to_dtype(200.0, DataType::kInt8), 127.0);
  EXPECT_EQ(round_to_dtype(-200.0, DataType::kInt8), -128.0);
  EXPECT_EQ(round_to_dtype(2.5, DataType::kInt8), 2.0);
  EXPECT_EQ(round_to_dtype(3.5, DataType::kInt32), 4.0);
  EXPECT_EQ(round_to_dtype(kNaN, DataType::kInt32), 0.0);
  EXPECT_EQ(round_to_dtype(1.0 + std::ldexp(1.0, -30), DataType::kFloat32), 1.0);
}

TEST(Rng, DeterministicAndInRange) {
  Rng a(42), b(42), c(43);
  const uint64_t first = a.next_u64();
  EXPECT_EQ(first, b.next_u64());
  EXPECT_NE(first, c.next_u64());
  for (int i = 0; i < 1000; ++i) {
    const double u = a.uniform(-1.0, 1.0);
    ASSERT_GE(u, -1.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(Rng, PinnedSequence) {
  // Pins the generator: a change here changes every stored random input.
  Rng r(0);
  EXPECT_EQ(r.next_u64(), 0x99EC5F36CB75F2B4ull);
}

TEST(HostTensor, StridedValuesAndEncodeDecode) {
  // NCHW dims [1, 2, 2, 3] stored NHWC.
  std::vector<int64_t> dims{1, 2, 2, 3};
  std::vector<int64_t> nhwc{12, 1, 6, 2};
  std::vector<double> vals(12);
  for (int i = 0; i < 12; ++i) vals[i] = i;
  HostTensor t = HostTensor::from_values(DataType::kFloat16, dims, vals, nhwc);
  EXPECT_EQ(t.storage_span(), 12);
  EXPECT_EQ(t.at({0, 1, 0, 0}), 6.0);
  EXPECT_EQ(t.storage[1], 6.0);  // channel is the fastest axis in memory
  EXPECT_EQ(t.values(), vals);
  auto bytes = t.encode();
  ASSERT_EQ(bytes.size(), 24u);
  EXPECT_EQ(bytes[2], 0x00);
  EXPECT_EQ(bytes[3], 0x46);  // fp16 6.0 = 0x4600, little-endian
  auto back = HostTensor::decode(DataType::kFloat16, dims, bytes.data(), bytes.size(), nhwc);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(back->values(), vals);
  auto bad = HostTensor::decode(DataType::kFloat16, dims, bytes.data(), bytes.size() - 1, nhwc);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

TEST(HostTensor, FileRoundTrip) {
  HostTensor t = HostTensor::zeros(DataType::kBFloat16, {3, 5});
  t.fill_uniform(7);
  const std::string path = ::testing::TempDir() + "kiln_host_tensor_test_" + std::to_string(::getpid()) + ".bin";
  std::remove(path.c_str());
  ASSERT_TRUE(t.write_file(path).is_ok());
  // An existing file is refused unless asked for, and left as it was.
  Status again = t.write_file(path);
  EXPECT_EQ(again.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.message().find("already exists"), std::string::npos) << again.message();
  ASSERT_TRUE(t.write_file(path, /*overwrite=*/true).is_ok());
  auto r = HostTensor::read_file(path, DataType::kBFloat16, {3, 5});
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->values(), t.values());
  auto wrong = HostTensor::read_file(path, DataType::kFloat32, {3, 5});
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(HostTensor::read_file(path + ".missing", DataType::kFloat32, {1}).status().code(), StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST(HostTensor, FillIsDeterministicRoundedAndNotZero) {
  for (DataType dt : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kFp8E4M3,
                      DataType::kFp8E5M2, DataType::kInt8, DataType::kInt32}) {
    HostTensor a = HostTensor::zeros(dt, {4, 8}), b = HostTensor::zeros(dt, {4, 8});
    a.fill_uniform(99);
    b.fill_uniform(99);
    EXPECT_EQ(a.values(), b.values()) << dtype_name(dt);
    bool nonzero = false;
    for (double v : a.values()) {
      EXPECT_EQ(v, round_to_dtype(v, dt));
      EXPECT_GE(v, -1.0);
      EXPECT_LE(v, 1.0);
      nonzero |= v != 0.0;
    }
    EXPECT_TRUE(nonzero) << dtype_name(dt);
  }
  // A range that rounds to zero everywhere still yields a nonzero tensor.
  HostTensor z = HostTensor::zeros(DataType::kFp8E4M3, {4});
  z.fill_uniform(1, -1e-9, 1e-9);
  EXPECT_NE(z.values()[0], 0.0);
}

// Regression: host tensor code threw std::length_error (aborting the process) for a stride of 2^63-1.
// Sizes from the caller are computed with overflow checks before anything is allocated.
TEST(HostTensor, DecodeChecksSizesBeforeAllocating_Stride2Pow63) {
  const uint8_t bytes[64] = {};
  auto t = HostTensor::decode(DataType::kFloat32, {4, 4}, bytes, sizeof bytes, {INT64_MAX, 1});
  ASSERT_FALSE(t.is_ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("more than 2^63"), std::string::npos) << t.status().message();
  auto size = HostTensor::checked_byte_size(DataType::kFloat16, {int64_t{1} << 31, int64_t{1} << 31, 4});
  EXPECT_EQ(size.status().code(), StatusCode::kInvalidArgument);
  auto fine = HostTensor::checked_byte_size(DataType::kFloat32, {2, 3}, {8, 2});
  ASSERT_TRUE(fine.is_ok());
  EXPECT_EQ(*fine, (1 + 8 + 4) * 4);
  EXPECT_EQ(*HostTensor::checked_byte_size(DataType::kFloat16, {2, 3}), 12);
}

// A valid graph whose inputs do not fit in this host's memory: a Status (Unavailable), not an abort.
TEST(HostTensor, InputsTooLargeForTheHostAreAStatusNotAnAbort) {
  Graph g;
  g.name = "huge";
  TensorDesc x;
  x.name = "x";
  x.dims = {Dim{(int64_t{1} << 31) - 1, ""}, Dim{int64_t{1} << 30, ""}};  // 2^61 fp16 elements: valid
  g.tensors.push_back(x);
  TensorDesc y;
  y.name = "y";
  g.tensors.push_back(y);
  Node n;
  n.name = "r";
  n.pointwise.mode = PointwiseMode::kRelu;
  n.inputs = {0};
  n.outputs = {1};
  g.nodes.push_back(n);
  g.outputs = {1};
  ASSERT_TRUE(validate_graph(g).is_ok());
  auto inputs = make_random_inputs(g, 1);
  ASSERT_FALSE(inputs.is_ok());
  EXPECT_EQ(inputs.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(inputs.status().message().find("graph 'huge': making random inputs: out of host memory"), std::string::npos)
      << inputs.status().message();
}

}  // namespace
}  // namespace kiln
