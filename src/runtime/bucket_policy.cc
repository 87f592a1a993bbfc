#include "kiln/runtime/bucket_policy.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

#include "kiln/graph/limits.h"

namespace kiln {
namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// A positive integer written in full, or nullopt.
bool parse_positive(const std::string& text, int64_t* v) {
  if (text.empty() || text.size() > 18) return false;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  *v = std::strtoll(text.c_str(), nullptr, 10);
  return *v >= 1;
}

StatusOr<BucketRule> parse_rule(const std::string& text, const std::string& where) {
  BucketRule r;
  if (text == "exact") return r;
  if (text == "pow2") {
    r.kind = BucketRule::Kind::kPow2;
    return r;
  }
  const std::string prefix = "ranges:";
  if (text.compare(0, prefix.size(), prefix) != 0)
    return invalid_argument(where + ": unknown bucket rule '" + text + "' (expected exact, pow2 or ranges:A-B,...)");
  r.kind = BucketRule::Kind::kRanges;
  for (const std::string& part : split(text.substr(prefix.size()), ',')) {
    const std::string p = trim(part);
    const size_t dash = p.find('-');
    int64_t lo = 0, hi = 0;
    if (dash == std::string::npos || !parse_positive(p.substr(0, dash), &lo) ||
        !parse_positive(p.substr(dash + 1), &hi))
      return invalid_argument(where + ": range '" + p + "' is not A-B with integers 1 <= A <= B");
    if (lo > hi) return invalid_argument(where + ": range '" + p + "' is empty (A > B)");
    r.ranges.emplace_back(lo, hi);
  }
  std::sort(r.ranges.begin(), r.ranges.end());
  for (size_t i = 1; i < r.ranges.size(); ++i)
    if (r.ranges[i].first <= r.ranges[i - 1].second)
      return invalid_argument(where + ": ranges " + std::to_string(r.ranges[i - 1].first) + "-" +
                              std::to_string(r.ranges[i - 1].second) + " and " + std::to_string(r.ranges[i].first) +
                              "-" + std::to_string(r.ranges[i].second) + " overlap");
  return r;
}

}  // namespace

std::string BucketRule::text() const {
  switch (kind) {
    case Kind::kExact: return "exact";
    case Kind::kPow2: return "pow2";
    case Kind::kRanges: {
      std::string s = "ranges:";
      for (size_t i = 0; i < ranges.size(); ++i)
        s += (i ? "," : "") + std::to_string(ranges[i].first) + "-" + std::to_string(ranges[i].second);
      return s;
    }
  }
  return "exact";
}

StatusOr<BucketPolicy> BucketPolicy::parse(const std::string& text) {
  BucketPolicy p;
  std::set<std::string> seen;
  for (const std::string& raw : split(text, ';')) {
    const std::string item = trim(raw);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return invalid_argument("bucket policy: '" + item + "' is not SYMBOL=RULE");
    const std::string symbol = trim(item.substr(0, eq));
    const std::string where = "bucket policy: '" + symbol + "'";
    if (!seen.insert(symbol).second) return invalid_argument(where + " is given twice");
    KILN_ASSIGN_OR_RETURN(BucketRule rule, parse_rule(trim(item.substr(eq + 1)), where));
    if (symbol == "*") p.set_default(std::move(rule));
    else p.set(symbol, std::move(rule));
  }
  return p;
}

const BucketRule& BucketPolicy::rule_for(const std::string& symbol) const {
  auto it = rules_.find(symbol);
  return it == rules_.end() ? default_ : it->second;
}

StatusOr<Bucket> BucketPolicy::bucket_of(const std::string& symbol, int64_t value) const {
  if (value < 1) return invalid_argument("dynamic dim '" + symbol + "' = " + std::to_string(value) + ": must be >= 1");
  const BucketRule& r = rule_for(symbol);
  Bucket b{value, value, value};
  switch (r.kind) {
    case BucketRule::Kind::kExact: break;
    case BucketRule::Kind::kPow2: {
      int64_t hi = 1;
      while (hi < value && hi <= (int64_t{1} << 61)) hi <<= 1;
      if (hi < value) break;  // beyond 2^62: its own bucket
      b.lo = hi == 1 ? 1 : hi / 2 + 1;
      // The last bucket ends at the largest extent a dim may have (2^31 - 1, not 2^31).
      b.hi = std::min(hi, std::max(value, limits::kMaxExtent));
      b.representative = b.hi;
      break;
    }
    case BucketRule::Kind::kRanges:
      for (const auto& [lo, hi] : r.ranges)
        if (lo <= value && value <= hi) {
          b = Bucket{lo, hi, hi};
          break;
        }
      break;
  }
  return b;
}

bool BucketPolicy::same_bucket(const std::map<std::string, int64_t>& a, const std::map<std::string, int64_t>& b) const {
  if (a.size() != b.size()) return false;
  for (const auto& [sym, va] : a) {
    auto it = b.find(sym);
    if (it == b.end()) return false;
    auto ba = bucket_of(sym, va), bb = bucket_of(sym, it->second);
    if (!ba.is_ok() || !bb.is_ok() || !(*ba == *bb)) return false;
  }
  return true;
}

std::map<std::string, int64_t> BucketPolicy::representative(const std::map<std::string, int64_t>& shape) const {
  std::map<std::string, int64_t> out;
  for (const auto& [sym, v] : shape) {
    auto b = bucket_of(sym, v);
    out[sym] = b.is_ok() ? b->representative : v;
  }
  return out;
}

std::string BucketPolicy::bucket_key(const std::map<std::string, int64_t>& shape) const {
  std::string s;
  for (const auto& [sym, v] : shape) {
    auto b = bucket_of(sym, v);
    s += (s.empty() ? "" : ",") + sym + "=";
    if (!b.is_ok() || b->lo == b->hi) s += std::to_string(v);
    else s += std::to_string(b->lo) + "-" + std::to_string(b->hi);
  }
  return s;
}

std::string BucketPolicy::text() const {
  std::string s;
  for (const auto& [sym, r] : rules_) s += (s.empty() ? "" : ";") + sym + "=" + r.text();
  return s + (s.empty() ? "" : ";") + "*=" + default_.text();
}

StatusOr<std::map<std::string, int64_t>> parse_shape_key(const std::string& key) {
  std::map<std::string, int64_t> out;
  if (key.empty()) return out;
  for (const std::string& part : split(key, ',')) {
    const size_t eq = part.find('=');
    int64_t v = 0;
    if (eq == std::string::npos || eq == 0 || !parse_positive(part.substr(eq + 1), &v))
      return invalid_argument("shape key '" + key + "': '" + part + "' is not SYMBOL=VALUE with VALUE >= 1");
    if (!out.emplace(part.substr(0, eq), v).second)
      return invalid_argument("shape key '" + key + "': '" + part.substr(0, eq) + "' is given twice");
  }
  return out;
}

std::string shape_key_text(const std::map<std::string, int64_t>& shape) {
  std::string s;
  for (const auto& [sym, v] : shape) s += (s.empty() ? "" : ",") + sym + "=" + std::to_string(v);
  return s;
}

}  // namespace kiln
