#include "kiln/validate/host_tensor.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>

#include "kiln/core/atomic_file.h"

namespace kiln {
namespace {

// A binary floating-point format with `ebits` exponent bits and `mbits` stored mantissa bits.
// `ieee` formats reserve the all-ones exponent for inf/NaN; e4m3fn uses it for normal numbers except
// mantissa all-ones, which is NaN.
struct FloatFormat {
  int ebits;
  int mbits;
  bool ieee;
  bool saturate;      // overflow gives the largest finite value instead of inf
  uint32_t nan_bits;  // canonical positive NaN
};

constexpr FloatFormat kFp16{5, 10, true, false, 0x7E00};
constexpr FloatFormat kBf16{8, 7, true, false, 0x7FC0};
constexpr FloatFormat kE4M3{4, 3, false, true, 0x7F};
constexpr FloatFormat kE5M2{5, 2, true, false, 0x7E};

// Rounds a non-negative double holding an integral-or-fractional value to an integer, ties to even.
// Exact for the magnitudes used here (q < 2^(mbits+2)).
double round_half_even(double q) {
  double fl = std::floor(q);
  double frac = q - fl;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(fl, 2.0) != 0.0)) fl += 1.0;
  return fl;
}

uint32_t encode_float(double x, const FloatFormat& f) {
  const uint32_t sign = std::signbit(x) ? (1u << (f.ebits + f.mbits)) : 0u;
  if (std::isnan(x)) return sign | f.nan_bits;
  const int bias = (1 << (f.ebits - 1)) - 1;
  const uint32_t max_ef = f.ieee ? (1u << f.ebits) - 2 : (1u << f.ebits) - 1;
  const uint32_t max_mant_at_max_ef = f.ieee ? (1u << f.mbits) - 1 : (1u << f.mbits) - 2;
  const uint32_t max_finite = (max_ef << f.mbits) | max_mant_at_max_ef;
  const uint32_t inf_bits = f.ieee ? ((1u << f.ebits) - 1) << f.mbits : max_finite;
  const uint32_t overflow = f.saturate ? max_finite : inf_bits;
  double a = std::fabs(x);
  if (std::isinf(a)) return sign | overflow;
  if (a == 0.0) return sign;
  int k = 0;
  std::frexp(a, &k);  // a = m * 2^k, m in [0.5, 1)
  int e = k - 1;      // a in [2^e, 2^(e+1))
  const int emin = 1 - bias;
  if (e < emin) {
    // Subnormal: quantum 2^(emin - mbits). A result of 2^mbits is the smallest normal, whose bits are
    // exactly the integer (exponent field 1, mantissa 0).
    double m = round_half_even(std::ldexp(a, f.mbits - emin));
    return sign | static_cast<uint32_t>(m);
  }
  double m = round_half_even(std::ldexp(a, f.mbits - e));  // in [2^mbits, 2^(mbits+1)]
  if (m >= std::ldexp(1.0, f.mbits + 1)) {
    m = std::ldexp(1.0, f.mbits);
    ++e;
  }
  int64_t ef = static_cast<int64_t>(e) + bias;
  uint32_t mant = static_cast<uint32_t>(m) - (1u << f.mbits);
  if (ef > static_cast<int64_t>(max_ef) || (ef == static_cast<int64_t>(max_ef) && mant > max_mant_at_max_ef))
    return sign | overflow;
  return sign | (static_cast<uint32_t>(ef) << f.mbits) | mant;
}

double decode_float(uint32_t bits, const FloatFormat& f) {
  const int bias = (1 << (f.ebits - 1)) - 1;
  const bool neg = (bits >> (f.ebits + f.mbits)) & 1u;
  const uint32_t ef = (bits >> f.mbits) & ((1u << f.ebits) - 1);
  const uint32_t mant = bits & ((1u << f.mbits) - 1);
  const uint32_t all_ones = (1u << f.ebits) - 1;
  double v;
  if (f.ieee && ef == all_ones) {
    v = mant == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (!f.ieee && ef == all_ones && mant == (1u << f.mbits) - 1) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (ef == 0) {
    v = std::ldexp(static_cast<double>(mant), 1 - bias - f.mbits);
  } else {
    v = std::ldexp(static_cast<double>(mant | (1u << f.mbits)), static_cast<int>(ef) - bias - f.mbits);
  }
  return neg ? -v : v;
}

double round_int(double x, double lo, double hi) {
  if (std::isnan(x)) return 0.0;
  if (x <= lo) return lo;
  if (x >= hi) return hi;
  double r = std::nearbyint(x);  // the default rounding mode: to nearest, ties to even
  return r;
}

template <typename T>
void put(std::vector<uint8_t>& out, size_t i, T v) {
  std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
}
template <typename T>
T get(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

namespace {

// Fast path of encode_float for an IEEE-like format with `ebits` exponent and `mbits` stored mantissa bits,
// for results in its normal range: round the double's own significand to nearest, ties to even, in its bit
// pattern (a carry into the exponent is the correct result). Returns false (use encode_float) for zero,
// subnormal results, overflow, infinities and NaN; exactly encode_float's result otherwise.
bool encode_normal_fast(double x, int ebits, int mbits, uint32_t* out) {
  const int bias = (1 << (ebits - 1)) - 1, emin = 1 - bias, emax = bias;
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  const uint32_t sign = static_cast<uint32_t>(b >> 63);
  uint64_t mag = b & 0x7FFFFFFFFFFFFFFFull;
  const int e = static_cast<int>(mag >> 52) - 1023;
  if (e < emin || e > emax) return false;  // also zero, subnormal doubles, inf and NaN
  const int drop = 52 - mbits;
  mag += ((uint64_t{1} << (drop - 1)) - 1) + ((mag >> drop) & 1);
  mag &= ~((uint64_t{1} << drop) - 1);
  const int re = static_cast<int>(mag >> 52) - 1023;
  if (re > emax) return false;  // rounded up past the largest finite value
  const uint32_t mant = static_cast<uint32_t>((mag >> drop) & ((uint64_t{1} << mbits) - 1));
  *out = (sign << (ebits + mbits)) | (static_cast<uint32_t>(re + bias) << mbits) | mant;
  return true;
}

uint16_t fp16_encode(double x) {
  uint32_t r;
  if (encode_normal_fast(x, 5, 10, &r)) return static_cast<uint16_t>(r);
  return static_cast<uint16_t>(encode_float(x, kFp16));
}

uint16_t bf16_encode(double x) {
  uint32_t r;
  if (encode_normal_fast(x, 8, 7, &r)) return static_cast<uint16_t>(r);
  return static_cast<uint16_t>(encode_float(x, kBf16));
}

// Every fp16 value, decoded once.
const std::vector<double>& fp16_table() {
  static const std::vector<double> table = [] {
    std::vector<double> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = decode_float(i, kFp16);
    return t;
  }();
  return table;
}

}  // namespace

uint16_t fp16_from_double(double x) { return fp16_encode(x); }
double fp16_to_double(uint16_t bits) { return fp16_table()[bits]; }
uint16_t bf16_from_double(double x) { return bf16_encode(x); }
double bf16_to_double(uint16_t bits) {
  // bf16 is the top half of an fp32 pattern: exact, NaN payloads kept as NaN.
  const uint32_t f = static_cast<uint32_t>(bits) << 16;
  float v;
  std::memcpy(&v, &f, sizeof v);
  return static_cast<double>(v);
}
uint8_t fp8_e4m3_from_double(double x) { return static_cast<uint8_t>(encode_float(x, kE4M3)); }
double fp8_e4m3_to_double(uint8_t bits) { return decode_float(bits, kE4M3); }
uint8_t fp8_e5m2_from_double(double x) { return static_cast<uint8_t>(encode_float(x, kE5M2)); }
double fp8_e5m2_to_double(uint8_t bits) { return decode_float(bits, kE5M2); }

double round_to_dtype(double x, DataType t) {
  switch (t) {
    case DataType::kFloat32: return static_cast<double>(static_cast<float>(x));
    case DataType::kFloat16: return fp16_to_double(fp16_from_double(x));
    case DataType::kBFloat16: return bf16_to_double(bf16_from_double(x));
    case DataType::kFp8E4M3: return fp8_e4m3_to_double(fp8_e4m3_from_double(x));
    case DataType::kFp8E5M2: return fp8_e5m2_to_double(fp8_e5m2_from_double(x));
    case DataType::kInt8: return round_int(x, -128.0, 127.0);
    case DataType::kInt32: return round_int(x, -2147483648.0, 2147483647.0);
    // Doubles above 2^63 - 1024 are not representable as int64; clamp to the largest double below 2^63.
    case DataType::kInt64: return round_int(x, -9223372036854775808.0, 9223372036854774784.0);
  }
  return x;
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * std::max<int64_t>(dims[i], 1);
  return s;
}

// ---- Rng ------------------------------------------------------------------------------------------

Rng::Rng(uint64_t seed) {
  uint64_t z = seed;
  for (auto& s : s_) {  // splitmix64
    z += 0x9E3779B97F4A7C15ull;
    uint64_t t = z;
    t = (t ^ (t >> 30)) * 0xBF58476D1CE4E5B9ull;
    t = (t ^ (t >> 27)) * 0x94D049BB133111EBull;
    s = t ^ (t >> 31);
  }
}

uint64_t Rng::next_u64() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

// ---- HostTensor -----------------------------------------------------------------------------------

HostTensor HostTensor::zeros(DataType dtype, std::vector<int64_t> dims, std::vector<int64_t> strides) {
  HostTensor t;
  t.dtype = dtype;
  if (strides.empty()) strides = row_major_strides(dims);
  t.dims = std::move(dims);
  t.strides = std::move(strides);
  t.storage.assign(static_cast<size_t>(t.storage_span()), 0.0);
  return t;
}

HostTensor HostTensor::from_values(DataType dtype, std::vector<int64_t> dims, const std::vector<double>& values,
                                   std::vector<int64_t> strides) {
  HostTensor t = zeros(dtype, std::move(dims), std::move(strides));
  t.set_values(values);
  return t;
}

int64_t HostTensor::element_count() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t HostTensor::storage_span() const {
  int64_t span = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] <= 0) return 0;
    span += (dims[i] - 1) * strides[i];
  }
  return span;
}

int64_t HostTensor::offset(const std::vector<int64_t>& index) const {
  int64_t o = 0;
  for (size_t i = 0; i < index.size(); ++i) o += index[i] * strides[i];
  return o;
}

namespace {
// Calls f(logical_row_major_position, storage_offset) for every element.
template <typename F>
void for_each_element(const HostTensor& t, F&& f) {
  const int64_t n = t.element_count();
  if (n <= 0) return;
  const size_t r = t.dims.size();
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  for (int64_t pos = 0; pos < n; ++pos) {
    f(pos, off);
    for (size_t k = r; k-- > 0;) {
      if (++idx[k] < t.dims[k]) {
        off += t.strides[k];
        break;
      }
      off -= (t.dims[k] - 1) * t.strides[k];
      idx[k] = 0;
    }
  }
}
}  // namespace

std::vector<double> HostTensor::values() const {
  std::vector<double> v(static_cast<size_t>(std::max<int64_t>(element_count(), 0)));
  for_each_element(*this, [&](int64_t pos, int64_t off) { v[pos] = storage[off]; });
  return v;
}

void HostTensor::set_values(const std::vector<double>& values) {
  for_each_element(*this, [&](int64_t pos, int64_t off) { storage[off] = round_to_dtype(values[pos], dtype); });
}

void HostTensor::round_in_place() {
  for (double& v : storage) v = round_to_dtype(v, dtype);
}

void HostTensor::fill_uniform(uint64_t seed, double lo, double hi) {
  Rng rng(seed);
  const bool is_int = dtype == DataType::kInt8 || dtype == DataType::kInt32 || dtype == DataType::kInt64;
  std::vector<double> v(static_cast<size_t>(std::max<int64_t>(element_count(), 0)));
  bool any_nonzero = false;
  for (double& x : v) {
    if (is_int) {
      double ilo = std::ceil(lo), ihi = std::floor(hi);
      double span = std::max(ihi - ilo + 1.0, 1.0);
      x = ilo + std::floor(rng.uniform() * span);
    } else {
      x = rng.uniform(lo, hi);
    }
    x = round_to_dtype(x, dtype);
    any_nonzero |= x != 0.0;
  }
  if (!any_nonzero && !v.empty()) v[0] = round_to_dtype(1.0, dtype);
  set_values(v);
}

std::vector<uint8_t> HostTensor::encode() const {
  const size_t n = storage.size();
  std::vector<uint8_t> out(n * dtype_size(dtype));
  for (size_t i = 0; i < n; ++i) {
    const double x = storage[i];
    switch (dtype) {
      case DataType::kFloat32: put<float>(out, i, static_cast<float>(x)); break;
      case DataType::kFloat16: put<uint16_t>(out, i, fp16_from_double(x)); break;
      case DataType::kBFloat16: put<uint16_t>(out, i, bf16_from_double(x)); break;
      case DataType::kFp8E4M3: put<uint8_t>(out, i, fp8_e4m3_from_double(x)); break;
      case DataType::kFp8E5M2: put<uint8_t>(out, i, fp8_e5m2_from_double(x)); break;
      case DataType::kInt8: put<int8_t>(out, i, static_cast<int8_t>(round_to_dtype(x, dtype))); break;
      case DataType::kInt32: put<int32_t>(out, i, static_cast<int32_t>(round_to_dtype(x, dtype))); break;
      case DataType::kInt64: put<int64_t>(out, i, static_cast<int64_t>(round_to_dtype(x, dtype))); break;
    }
  }
  return out;
}

StatusOr<int64_t> HostTensor::checked_byte_size(DataType dtype, const std::vector<int64_t>& dims,
                                                const std::vector<int64_t>& strides) {
  if (!strides.empty() && strides.size() != dims.size())
    return invalid_argument(std::to_string(strides.size()) + " strides for " + std::to_string(dims.size()) + " dims");
  const std::vector<int64_t> s = strides.empty() ? std::vector<int64_t>() : strides;
  int64_t span = 1, row = 1;  // row: the row-major stride of the current dim, when none are given
  for (size_t i = dims.size(); i-- > 0;) {
    if (dims[i] <= 0) return int64_t{0};
    const int64_t stride = s.empty() ? row : s[i];
    int64_t reach = 0;
    if (stride < 0 || __builtin_mul_overflow(dims[i] - 1, stride, &reach) ||
        __builtin_add_overflow(span, reach, &span) || (s.empty() && __builtin_mul_overflow(row, dims[i], &row)))
      return invalid_argument("a tensor of these dims and strides spans more than 2^63 elements");
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(span, static_cast<int64_t>(dtype_size(dtype)), &bytes))
    return invalid_argument("a tensor of these dims and strides spans more than 2^63 bytes");
  return bytes;
}

StatusOr<HostTensor> HostTensor::decode(DataType dtype, std::vector<int64_t> dims, const void* bytes, size_t size,
                                        std::vector<int64_t> strides) {
  // Sizes are checked before anything is allocated; what allocation remains is caught.
  StatusOr<int64_t> need = checked_byte_size(dtype, dims, strides);
  if (!need.is_ok()) return need.status().with_context("decode");
  if (static_cast<uint64_t>(*need) != size)
    return invalid_argument("decode: " + std::string(dtype_name(dtype)) + " tensor needs " + std::to_string(*need) +
                            " bytes, got " + std::to_string(size));
  return catch_exceptions("decode", [&]() -> StatusOr<HostTensor> {
    return decode_unchecked(dtype, std::move(dims), bytes, std::move(strides));
  });
}

HostTensor HostTensor::decode_unchecked(DataType dtype, std::vector<int64_t> dims, const void* bytes,
                                        std::vector<int64_t> strides) {
  HostTensor t = zeros(dtype, std::move(dims), std::move(strides));
  const auto* p = static_cast<const uint8_t*>(bytes);
  for (size_t i = 0; i < t.storage.size(); ++i) {
    double& x = t.storage[i];
    switch (dtype) {
      case DataType::kFloat32: x = get<float>(p, i); break;
      case DataType::kFloat16: x = fp16_to_double(get<uint16_t>(p, i)); break;
      case DataType::kBFloat16: x = bf16_to_double(get<uint16_t>(p, i)); break;
      case DataType::kFp8E4M3: x = fp8_e4m3_to_double(get<uint8_t>(p, i)); break;
      case DataType::kFp8E5M2: x = fp8_e5m2_to_double(get<uint8_t>(p, i)); break;
      case DataType::kInt8: x = get<int8_t>(p, i); break;
      case DataType::kInt32: x = get<int32_t>(p, i); break;
      case DataType::kInt64: x = static_cast<double>(get<int64_t>(p, i)); break;
    }
  }
  return t;
}

Status HostTensor::write_file(const std::string& path, bool overwrite) const {
  return catch_exceptions("writing '" + path + "'", [&] { return write_file_unchecked(path, overwrite); });
}

Status HostTensor::write_file_unchecked(const std::string& path, bool overwrite) const {
  std::vector<uint8_t> bytes = encode();
  FileWriteOptions o;
  o.overwrite = overwrite;
  o.what = "tensor file";
  return write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), o);
}

StatusOr<HostTensor> HostTensor::read_file(const std::string& path, DataType dtype, std::vector<int64_t> dims,
                                           std::vector<int64_t> strides) {
  return catch_exceptions("reading '" + path + "'",
                          [&] { return read_file_unchecked(path, dtype, std::move(dims), std::move(strides)); });
}

StatusOr<HostTensor> HostTensor::read_file_unchecked(const std::string& path, DataType dtype, std::vector<int64_t> dims,
                                                     std::vector<int64_t> strides) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return not_found("cannot open '" + path + "': " + std::strerror(errno));
  std::vector<uint8_t> bytes;
  uint8_t buf[1 << 16];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof(buf), f.get())) > 0) bytes.insert(bytes.end(), buf, buf + got);
  if (std::ferror(f.get())) return internal_error("cannot read '" + path + "'");
  auto t = decode(dtype, std::move(dims), bytes.data(), bytes.size(), std::move(strides));
  if (!t.is_ok()) return t.status().with_context("'" + path + "'");
  return t;
}

std::string HostTensor::describe() const {
  std::ostringstream os;
  os << dtype_name(dtype) << "[";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? "," : "") << dims[i];
  os << "] strides [";
  for (size_t i = 0; i < strides.size(); ++i) os << (i ? "," : "") << strides[i];
  os << "]";
  return os.str();
}

}  // namespace kiln
