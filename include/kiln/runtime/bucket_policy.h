// Bucket policy for dynamic dims (docs/runtime.md "Buckets"): which shapes share a tuned plan. Each
// dynamic dim (a spec's "dynamic" symbol: batch, seq, ...) has a rule:
//   exact          every value is its own bucket (the default)
//   pow2           (2^(k-1), 2^k]: 1 | 2 | 3-4 | 5-8 | ...; the representative (what is tuned) is 2^k
//   ranges:A-B,... explicit closed ranges; the representative is the range's upper end; a value outside
//                  every range is its own bucket (exact)
// A shape's bucket is the tuple of its dims' buckets; two shapes share a bucket when every dim does.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/core/status.h"

namespace kiln {

struct BucketRule {
  enum class Kind { kExact, kPow2, kRanges };
  Kind kind = Kind::kExact;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // kRanges: closed, ascending, disjoint, lo >= 1
  std::string text() const;                         // "exact", "pow2", "ranges:1-64,65-512"
};

// One dim's bucket: the closed range [lo, hi] holding the value, and its representative.
struct Bucket {
  int64_t lo = 0, hi = 0, representative = 0;
  bool operator==(const Bucket& o) const { return lo == o.lo && hi == o.hi; }
  bool contains(int64_t v) const { return lo <= v && v <= hi; }
};

class BucketPolicy {
 public:
  // "batch=pow2;seq=ranges:1-64,65-512;*=exact" ("*" sets the rule of every other symbol). Empty text: all
  // exact. InvalidArgument naming the part that is wrong (unknown rule, overlapping or empty ranges, a
  // symbol given twice).
  static StatusOr<BucketPolicy> parse(const std::string& text);

  void set(const std::string& symbol, BucketRule rule) { rules_[symbol] = std::move(rule); }
  void set_default(BucketRule rule) { default_ = std::move(rule); }
  const BucketRule& rule_for(const std::string& symbol) const;

  // The bucket of `value` (>= 1) for `symbol`. InvalidArgument for a value below 1.
  StatusOr<Bucket> bucket_of(const std::string& symbol, int64_t value) const;
  // Whether two shapes (symbol -> value, the same symbols) fall in one bucket.
  bool same_bucket(const std::map<std::string, int64_t>& a, const std::map<std::string, int64_t>& b) const;
  // The representative shape of `shape`'s bucket (what offline tuning should tune for it).
  std::map<std::string, int64_t> representative(const std::map<std::string, int64_t>& shape) const;
  // "batch=5-8,seq=128" (a dim's range, or its value when exact).
  std::string bucket_key(const std::map<std::string, int64_t>& shape) const;
  std::string text() const;
  // The symbols given a rule of their own ("*" is the default, not a symbol).
  std::vector<std::string> symbols() const {
    std::vector<std::string> out;
    for (const auto& r : rules_) out.push_back(r.first);
    return out;
  }

 private:
  std::map<std::string, BucketRule> rules_;
  BucketRule default_;
};

// A shape key ("batch=8,seq=128", GraphSignature::shape_key) as symbol -> value; InvalidArgument when it
// does not parse. "" is the empty shape.
StatusOr<std::map<std::string, int64_t>> parse_shape_key(const std::string& key);
std::string shape_key_text(const std::map<std::string, int64_t>& shape);

}  // namespace kiln
