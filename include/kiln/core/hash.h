// kiln/core/hash.h: stable hashes for signatures, store keys and checksums.
// XXH3 is defined by its specification, so a hash is the same on every build, compiler and machine
// (never std::hash, which is not).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln {

// 64-bit XXH3 of the bytes.
uint64_t stable_hash64(std::string_view bytes);
// 128-bit XXH3 of the bytes as 32 lowercase hex digits (high word first).
std::string stable_hash128_hex(std::string_view bytes);
// 16 lowercase hex digits.
std::string hex64(uint64_t value);

}  // namespace kiln
