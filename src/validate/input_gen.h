// Internal to the validate layer: the counter-based generator of Kiln's random inputs, shared by the host
// (make_random_inputs) and the device (generate_inputs_on_device), which therefore produce the very same
// bits (docs/numerics.md "Random inputs").
//
// Element `index` of tensor `tensor` for seed `seed` is a pure function of the three: Philox4x32-10
// (Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011) with key
// (seed low, seed high) and counter (index/4 low, index/4 high, tensor, "KILN"), word index%4 of its
// output. No state, no sequence: any element can be drawn alone, on any thread, in any order.
#pragma once

#include <stdint.h>

#if defined(__CUDACC__)
#define KILN_GEN_HD __host__ __device__ inline
#else
#define KILN_GEN_HD inline
#endif

namespace kiln::validate_internal {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;
constexpr uint32_t kInputStreamTag = 0x4B494C4Eu;  // "KILN": the fourth counter word of input draws

KILN_GEN_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Philox4x32 with 10 rounds, exactly as Random123 defines it (its known-answer vectors pass).
KILN_GEN_HD void philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kPhiloxM0, c0, &hi0, &lo0);
    philox_mulhilo(kPhiloxM1, c2, &hi1, &lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// The 32 random bits of element `index` of tensor `tensor`.
KILN_GEN_HD uint32_t input_bits(uint64_t seed, uint32_t tensor, uint64_t index) {
  const uint64_t block = index >> 2;
  const uint32_t counter[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), tensor,
                               kInputStreamTag};
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  uint32_t out[4];
  philox4x32_10(counter, key, out);
  return out[index & 3];
}

// The value drawn from `bits` for a range [lo, hi) before rounding to the tensor's dtype. Floating point:
// lo + width * k * 2^-23 with k the top 23 bits, computed in float: exact (hence the same on every
// compiler and on the device) when width is a power of two and lo a multiple of width * 2^-23, which
// input_range_is_exact checks and every range Kiln draws from satisfies. Integers: ceil(lo) +
// floor(bits * n / 2^32) for the n = floor(hi) - ceil(lo) + 1 integers of the range.
KILN_GEN_HD double input_value(uint32_t bits, float lo, float width, bool integer, int64_t int_lo, uint32_t int_count) {
  if (integer)
    return static_cast<double>(int_lo + static_cast<int64_t>((static_cast<uint64_t>(bits) * int_count) >> 32));
  const float k = static_cast<float>(bits >> 9) * 0x1p-23f;  // exact: 23 bits
  return static_cast<double>(lo + width * k);                // exact by the range's precondition
}

}  // namespace kiln::validate_internal
