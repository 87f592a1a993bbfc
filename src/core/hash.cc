#include "kiln/core/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

namespace kiln {

uint64_t stable_hash64(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string hex64(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

std::string stable_hash128_hex(std::string_view bytes) {
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return hex64(h.high64) + hex64(h.low64);
}

}  // namespace kiln
