// EngineConfig, plan_identity and the knobs' text forms (kiln/core/engine_config.h).
#include "kiln/core/engine_config.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

namespace kiln {

std::string knobs_to_text(const Knobs& knobs) {
  std::string out;
  for (const auto& [name, value] : knobs) {
    if (!out.empty()) out += ';';
    out += name + "=" + std::to_string(value);
  }
  return out;
}

StatusOr<Knobs> knobs_from_text(const std::string& text) {
  Knobs out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(';', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return invalid_argument("knob '" + item + "' is not name=value");
    std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    char* tail = nullptr;
    errno = 0;
    long long v = std::strtoll(value.c_str(), &tail, 10);
    if (value.empty() || *tail != '\0' || errno != 0)
      return invalid_argument("knob '" + item + "' has no integer value");
    if (!out.emplace(name, static_cast<int64_t>(v)).second) return invalid_argument("knob '" + name + "' given twice");
    pos = end + 1;
  }
  if (!text.empty() && text.back() == ';') return invalid_argument("knob text ends with ';'");
  return out;
}

namespace {

// N for "kN", -1 for any other name.
long knob_number(const std::string& name) {
  if (name.size() < 2 || name[0] != 'k' || name[1] < '0' || name[1] > '9') return -1;
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(name.c_str() + 1, &end, 10);
  return *end || errno != 0 || n > INT_MAX ? -1 : n;
}

}  // namespace

std::string plan_identity(int64_t engine_id, const Knobs& knobs) {
  std::vector<std::pair<std::string, int64_t>> sorted(knobs.begin(), knobs.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    long na = knob_number(a.first), nb = knob_number(b.first);
    if ((na < 0) != (nb < 0)) return na >= 0;
    return na >= 0 ? na < nb : a.first < b.first;
  });
  std::string s = is_kiln_kernel_engine(engine_id) ? "knl" + std::to_string(engine_id - kKilnKernelEngineBase)
                  : is_cublaslt_engine(engine_id)  ? "blt" + std::to_string(engine_id - kCublasLtEngineBase)
                                                   : "eng" + std::to_string(engine_id);
  for (const auto& [k, v] : sorted) s += "_" + k + "=" + std::to_string(v);
  return s;
}

StatusOr<int> knob_type_of(const std::string& name) {
  long n = knob_number(name);
  if (n < 0) return invalid_argument("knob name '" + name + "' is not kN (N a cuDNN backend knob type)");
  return static_cast<int>(n);
}

namespace {

// A decimal integer written one way only (an optional '-', no '+', space or leading zero), in int64's range.
std::optional<int64_t> canonical_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end || errno == ERANGE || std::to_string(v) != text) return std::nullopt;
  return static_cast<int64_t>(v);
}

// "<prefix><N>_<name>=<value>...": a cuBLASLt algorithm's ("blt", kCublasLtEngineBase) or a Kiln kernel's ("knl",
// kKilnKernelEngineBase) identity.
StatusOr<EngineConfig> parse_named_identity(const std::string& id, int64_t base, const char* example) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("engine configuration '" + id + "': " + why + " (expected e.g. " + example + ")");
  };
  EngineConfig c;
  size_t pos = 3;
  bool first = true;
  while (pos <= id.size()) {  // the parts between '_', the first the number
    const size_t cut = std::min(id.find('_', pos), id.size());
    const std::string part = id.substr(pos, cut - pos);
    pos = cut + 1;
    if (first) {
      const std::optional<int64_t> n = canonical_number(part);
      if (!n || *n < 0) return bad("'" + part + "' is not a number");
      // Each family has 2^20 ids (kiln/core/engine_config.h): past them the id would name another family.
      if (*n >= (int64_t{1} << 20)) return bad("number '" + part + "' is out of range");
      c.engine_id = base + *n;
      first = false;
      continue;
    }
    const auto eq = part.find('=');
    const std::string name = eq == std::string::npos ? part : part.substr(0, eq);
    if (eq == std::string::npos || name.empty() ||
        !std::all_of(name.begin(), name.end(), [](char ch) { return ch >= 'a' && ch <= 'z'; }))
      return bad("knob '" + part + "' is not name=VALUE (a name of lowercase letters)");
    const std::optional<int64_t> value = canonical_number(part.substr(eq + 1));
    if (!value) return bad("knob value in '" + part + "' is not a number (in range, written one way)");
    if (!c.knobs.emplace(name, *value).second) return bad("knob '" + name + "' given twice");
  }
  if (first) return bad("no number");
  return c;
}

}  // namespace

StatusOr<EngineConfig> EngineConfig::parse(const std::string& id) {
  if (id.rfind("blt", 0) == 0) return parse_named_identity(id, kCublasLtEngineBase, "blt66_splitk=1_tile=18");
  if (id.rfind("knl", 0) == 0) return parse_named_identity(id, kKilnKernelEngineBase, "knl1_blocks=4_threads=256");
  EngineConfig c;
  auto bad = [&](const std::string& why) {
    return invalid_argument("engine configuration '" + id + "': " + why + " (expected e.g. eng12_k2=1_k3=0)");
  };
  if (id.rfind("eng", 0) != 0) return bad("must start with 'eng'");
  std::stringstream ss(id.substr(3));
  std::string part;
  bool first = true;
  while (std::getline(ss, part, '_')) {
    char* end = nullptr;
    if (first) {
      errno = 0;
      c.engine_id = std::strtoll(part.c_str(), &end, 10);
      if (part.empty() || *end || c.engine_id < 0) return bad("engine id '" + part + "' is not a number");
      if (errno == ERANGE) return bad("engine id '" + part + "' is out of range");
      if (c.engine_id >= kCublasLtEngineBase)  // one text per configuration: "blt<N>", "knl<N>" past cuDNN's range
        return bad("engine id '" + part +
                   "' is past cuDNN's range (cuBLASLt's algorithms are blt<N>, Kiln's kernels knl<N>)");
      first = false;
      continue;
    }
    auto eq = part.find('=');
    if (part.size() < 3 || part[0] != 'k' || eq == std::string::npos)
      return bad("knob '" + part + "' is not kTYPE=VALUE");
    // strtol leaves `end` pointing into its argument: keep each substring alive while *end is read.
    const std::string type_text = part.substr(1, eq - 1);
    errno = 0;
    long type = std::strtol(type_text.c_str(), &end, 10);
    if (*end || type_text.empty() || type < 0 || type > INT_MAX || errno == ERANGE)
      return bad("knob type in '" + part + "' is not a number");
    const std::string value_text = part.substr(eq + 1);
    errno = 0;
    long long value = std::strtoll(value_text.c_str(), &end, 10);
    if (*end || value_text.empty()) return bad("knob value in '" + part + "' is not a number");
    if (errno == ERANGE) return bad("knob value in '" + part + "' is out of range");
    c.knobs["k" + std::to_string(static_cast<int>(type))] = value;
  }
  if (first) return bad("no engine id");
  return c;
}

}  // namespace kiln
