// Stable hashes (kiln/core/hash.h): a store key or checksum written by one build must be the one another
// build computes, so the values are pinned here. The empty input's are XXH3's published reference values;
// the others were computed once with the same XXH3 and fixed, so that a change of function, seed or byte
// order (or a switch to std::hash) fails here instead of silently missing every stored plan.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "kiln/core/hash.h"

namespace kiln {
namespace {

TEST(StableHash, ReferenceValuesOfXxh3) {
  EXPECT_EQ(stable_hash64(""), 0x2d06800538d394c2ull);
  EXPECT_EQ(stable_hash128_hex(""), "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(stable_hash64("kiln"), 0x5c14e8865e2aa02aull);
  EXPECT_EQ(stable_hash128_hex("kiln"), "29e4f6aff37a6f975bfb178850627e51");
  std::string big(1000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31);
  EXPECT_EQ(stable_hash64(big), 0x2a7a65d13a1450ebull);
  EXPECT_EQ(stable_hash128_hex(big), "62b179b903bc3a072a7a65d13a1450eb");
}

// The bytes are hashed by length, not up to the first NUL (signatures and plan blobs hold zeros).
TEST(StableHash, EveryByteCountsIncludingZeros) {
  const std::string_view with_nul("a\0b", 3);
  EXPECT_EQ(stable_hash64(with_nul), 0xd5a06cd078125351ull);
  EXPECT_NE(stable_hash64(with_nul), stable_hash64("a"));
  EXPECT_NE(stable_hash64(std::string(8, '\0')), stable_hash64(std::string(9, '\0')));
  EXPECT_NE(stable_hash128_hex(with_nul), stable_hash128_hex("a"));
}

TEST(StableHash, Hash128IsThirtyTwoLowercaseHexDigits) {
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    const std::string h = stable_hash128_hex("graph " + std::to_string(i));
    ASSERT_EQ(h.size(), 32u) << h;
    for (char c : h) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << h;
    seen.insert(h);
  }
  EXPECT_EQ(seen.size(), 200u);  // no collision among near-identical inputs
}

TEST(Hex64, SixteenLowercaseDigitsZeroPadded) {
  EXPECT_EQ(hex64(0), "0000000000000000");
  EXPECT_EQ(hex64(0xdeadbeef), "00000000deadbeef");
  EXPECT_EQ(hex64(0x0123456789abcdefull), "0123456789abcdef");
  EXPECT_EQ(hex64(UINT64_MAX), "ffffffffffffffff");
  EXPECT_EQ(hex64(stable_hash64("kiln")), "5c14e8865e2aa02a");
}

}  // namespace
}  // namespace kiln
