// kiln/validate/host_tensor.h: a tensor held on the host for reference math, and exact conversions between
// double and the raw bytes of every Kiln dtype.
//
// Values are kept as doubles; encode()/decode() turn them into/from the bytes the GPU reads and writes.
// Every conversion here is written out by hand (no <cuda_fp16.h> on the host) so that the host tier
// needs no CUDA headers and gives the same bits on every compiler.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln {

// ---- Scalar conversions ---------------------------------------------------------------------------
// All float encoders round to nearest, ties to even, from the double given (a single rounding).
// fp16 (IEEE binary16): overflow gives +-inf, NaN gives 0x7E00 (sign kept).
uint16_t fp16_from_double(double x);
double fp16_to_double(uint16_t bits);
// bf16: overflow gives +-inf, NaN gives 0x7FC0 (sign kept).
uint16_t bf16_from_double(double x);
double bf16_to_double(uint16_t bits);
// fp8 e4m3 ("fn": no infinities, S.1111.111 is NaN). Saturating: anything beyond +-448, including
// +-inf, becomes +-448. NaN gives 0x7F (sign kept).
uint8_t fp8_e4m3_from_double(double x);
double fp8_e4m3_to_double(uint8_t bits);
// fp8 e5m2 (IEEE-like, has infinities). Not saturating: beyond +-57344 (after rounding) gives +-inf,
// matching __nv_cvt_float_to_fp8(..., __NV_NOSAT, __NV_E5M2). NaN gives 0x7E (sign kept).
uint8_t fp8_e5m2_from_double(double x);
double fp8_e5m2_to_double(uint8_t bits);

// Rounds `x` to the nearest value representable in `t` (as the GPU would store it).
// Integers round half to even and saturate to the type's range; NaN becomes 0.
double round_to_dtype(double x, DataType t);

// Bytes per element and the short name of a dtype: dtype_size() and dtype_name() in kiln/graph/graph.h.

// Row-major (C order) strides for `dims`, in elements.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& dims);

// ---- Deterministic random numbers ----------------------------------------------------------------
// xoshiro256** seeded through splitmix64: the same seed gives the same sequence on every platform and
// standard library (std::uniform_*_distribution does not).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double uniform();                      // [0, 1), 53 random bits
  double uniform(double lo, double hi);  // [lo, hi)

 private:
  uint64_t s_[4];
};

// ---- HostTensor -----------------------------------------------------------------------------------
// `dims` are logical (for convolutions N, C, spatial... whatever the memory layout); `strides` (in
// elements) place element [i0, i1, ...] at storage offset sum(i_k * strides_k). `storage` holds the
// whole strided span (storage_span() values), so strides such as NHWC are represented exactly and
// encode() yields exactly the buffer a kernel reads. Values in storage are expected to be
// representable in `dtype` (see round_in_place()).
struct HostTensor {
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> dims;
  std::vector<int64_t> strides;
  std::vector<double> storage;

  // A zero-filled tensor; empty `strides` means row-major.
  static HostTensor zeros(DataType dtype, std::vector<int64_t> dims, std::vector<int64_t> strides = {});
  // A tensor with the given logical values (row-major order), stored with `strides`.
  // Values are rounded to `dtype`. Precondition: values.size() == product(dims).
  static HostTensor from_values(DataType dtype, std::vector<int64_t> dims, const std::vector<double>& values,
                                std::vector<int64_t> strides = {});

  int64_t element_count() const;  // product of dims
  int64_t storage_span() const;   // 1 + sum((dim - 1) * stride); 0 when a dim is 0
  size_t byte_size() const { return static_cast<size_t>(storage_span()) * dtype_size(dtype); }
  int64_t offset(const std::vector<int64_t>& index) const;
  double at(const std::vector<int64_t>& index) const { return storage[static_cast<size_t>(offset(index))]; }
  void set(const std::vector<int64_t>& index, double v) { storage[static_cast<size_t>(offset(index))] = v; }

  // Logical values in row-major order (reads through the strides).
  std::vector<double> values() const;
  // Overwrites the logical values (row-major order), rounding each to `dtype`.
  void set_values(const std::vector<double>& values);
  // Rounds every stored value to `dtype`.
  void round_in_place();

  // Fills with uniform values in [lo, hi) from `seed`, rounded to dtype. Integer dtypes draw integers
  // in [ceil(lo), floor(hi)]. Never leaves the tensor all zeros: if every draw rounded to zero, the
  // first element becomes 1.
  void fill_uniform(uint64_t seed, double lo = -1.0, double hi = 1.0);

  // Raw little-endian bytes of the whole storage span in `dtype`.
  std::vector<uint8_t> encode() const;
  // The inverse: a tensor of `dtype`/`dims`/`strides` (row-major when empty) from raw bytes; the byte
  // count must equal the storage span times the element size.
  static StatusOr<HostTensor> decode(DataType dtype, std::vector<int64_t> dims, const void* bytes, size_t size,
                                     std::vector<int64_t> strides = {});

  // Raw binary files: exactly encode()'s bytes, no header (dtype and shape travel separately). Written
  // atomically (kiln/core/atomic_file.h); an existing file is refused (InvalidArgument) unless `overwrite`.
  Status write_file(const std::string& path, bool overwrite = false) const;
  static StatusOr<HostTensor> read_file(const std::string& path, DataType dtype, std::vector<int64_t> dims,
                                        std::vector<int64_t> strides = {});

  // Bytes of the strided span of a tensor of these dims and strides (row-major when empty), computed
  // with overflow checks: InvalidArgument when it does not fit in int64 (nothing is allocated).
  // decode/read_file check sizes with it first; the Status-returning members never throw.
  static StatusOr<int64_t> checked_byte_size(DataType dtype, const std::vector<int64_t>& dims,
                                             const std::vector<int64_t>& strides = {});

  // "fp16[2,3,4] strides [12,4,1]"
  std::string describe() const;

 private:
  static HostTensor decode_unchecked(DataType dtype, std::vector<int64_t> dims, const void* bytes,
                                     std::vector<int64_t> strides);
  Status write_file_unchecked(const std::string& path, bool overwrite) const;
  static StatusOr<HostTensor> read_file_unchecked(const std::string& path, DataType dtype, std::vector<int64_t> dims,
                                                  std::vector<int64_t> strides);
};

}  // namespace kiln
