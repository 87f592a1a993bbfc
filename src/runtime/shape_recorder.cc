#include "kiln/runtime/shape_recorder.h"

#include "kiln/core/read_file.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <sys/stat.h>
#include <set>
#include <unordered_map>

#include "kiln/core/atomic_file.h"
#include "kiln/graph/limits.h"
#include "kiln/runtime/bucket_policy.h"
#include "kiln/runtime/plan_types.h"

namespace kiln {

namespace {
// The served counts of each PlanSource, by its name (kPlanSourceNames, in its order).
constexpr int kSources = kPlanSourceCount;

int source_index(const char* s) {
  for (int i = 0; i < kSources; ++i)
    if (std::string(s) == kPlanSourceNames[i].name) return i;
  return -1;
}

struct Counts {
  std::string graph;
  std::atomic<int64_t> count{0};
  std::atomic<int64_t> by_source[kSources] = {};
  std::atomic<int64_t> other{0};  // a source name not in the list (kept, never lost)
};
}  // namespace

// A shard: readers (the common case, a shape already seen) take the shared lock and increment atomics.
struct ShapeRecorder::Shard {
  mutable std::shared_mutex mu;
  std::unordered_map<std::string, std::unique_ptr<Counts>> map;  // key: structure + '|' + shape_key
};

ShapeRecorder::ShapeRecorder() {
  for (auto& s : shards_) s = std::make_unique<Shard>();
}
ShapeRecorder::~ShapeRecorder() = default;

void ShapeRecorder::record(const std::string& structure, const std::string& shape_key, const std::string& graph,
                           const char* source) {
  const std::string key = structure + "|" + shape_key;
  Shard& sh = *shards_[std::hash<std::string>{}(key) % kShards];
  Counts* c = nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(sh.mu);
    auto it = sh.map.find(key);
    if (it != sh.map.end()) c = it->second.get();
  }
  if (!c) {
    std::unique_lock<std::shared_mutex> lock(sh.mu);
    auto& slot = sh.map[key];
    if (!slot) {
      slot = std::make_unique<Counts>();
      slot->graph = graph;
    }
    c = slot.get();
  }
  c->count.fetch_add(1, std::memory_order_relaxed);
  const int i = source_index(source);
  if (i >= 0) c->by_source[i].fetch_add(1, std::memory_order_relaxed);
  else c->other.fetch_add(1, std::memory_order_relaxed);
}

std::vector<RecordedShape> ShapeRecorder::snapshot() const {
  std::vector<RecordedShape> out;
  for (const auto& sh : shards_) {
    std::shared_lock<std::shared_mutex> lock(sh->mu);
    for (const auto& [key, c] : sh->map) {
      RecordedShape r;
      const size_t bar = key.find('|');
      r.structure = key.substr(0, bar);
      r.shape_key = key.substr(bar + 1);
      r.graph = c->graph;
      r.count = c->count.load(std::memory_order_relaxed);
      for (int i = 0; i < kSources; ++i) {
        const int64_t n = c->by_source[i].load(std::memory_order_relaxed);
        if (n > 0) r.sources[kPlanSourceNames[i].name] = n;
      }
      const int64_t other = c->other.load(std::memory_order_relaxed);
      if (other > 0) r.sources["other"] = other;
      out.push_back(std::move(r));
    }
  }
  std::sort(out.begin(), out.end(), [](const RecordedShape& a, const RecordedShape& b) {
    if (a.count != b.count) return a.count > b.count;
    if (a.structure != b.structure) return a.structure < b.structure;
    return a.shape_key < b.shape_key;
  });
  return out;
}

std::string shapes_to_json(const std::vector<RecordedShape>& shapes) {
  nlohmann::json j;
  j["format"] = "kiln-shapes";
  j["version"] = 1;
  j["shapes"] = nlohmann::json::array();
  for (const RecordedShape& r : shapes) {
    nlohmann::json e;
    e["structure"] = r.structure;
    e["shape_key"] = r.shape_key;
    e["graph"] = r.graph;
    e["count"] = r.count;
    e["sources"] = r.sources;
    j["shapes"].push_back(std::move(e));
  }
  return j.dump(2) + "\n";
}

Status ShapeRecorder::write_file(const std::string& path, bool overwrite) const {
  FileWriteOptions o;
  o.overwrite = overwrite;
  o.what = "recorded-shapes file";
  const std::string text = shapes_to_json(snapshot());
  return write_file_atomically(path, std::string_view(text), o);
}

StatusOr<std::vector<RecordedShape>> parse_shapes_json(const std::string& text, const std::string& where) {
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return invalid_argument(where + ": not JSON");
  if (!j.is_object() || !j.contains("format") || !j["format"].is_string() ||
      j["format"].get<std::string>() != "kiln-shapes")
    return invalid_argument(where + ": not a recorded-shapes file (\"format\" is not \"kiln-shapes\")");
  if (!j.contains("version") || !j["version"].is_number_integer())
    return invalid_argument(where + ": \"version\" is missing or not an integer");
  if (j["version"].get<int64_t>() != 1)
    return invalid_argument(where + ": version " + j["version"].dump() + " (this Kiln reads version 1)");
  if (!j.contains("shapes") || !j["shapes"].is_array()) return invalid_argument(where + ": \"shapes\" is not a list");
  std::vector<RecordedShape> out;
  for (size_t i = 0; i < j["shapes"].size(); ++i) {
    const auto& e = j["shapes"][i];
    const std::string at = where + ": shapes[" + std::to_string(i) + "]";
    if (!e.is_object()) return invalid_argument(at + " is not an object");
    RecordedShape r;
    for (const char* f : {"structure", "shape_key"})
      if (!e.contains(f) || !e[f].is_string())
        return invalid_argument(at + ": \"" + f + "\" is missing or not a string");
    r.structure = e["structure"].get<std::string>();
    if (r.structure.size() != 32 || r.structure.find_first_not_of("0123456789abcdef") != std::string::npos)
      return invalid_argument(at + ": \"structure\" '" + r.structure + "' is not 32 lowercase hex digits");
    r.shape_key = e["shape_key"].get<std::string>();
    auto shape = parse_shape_key(r.shape_key);
    if (!shape.is_ok()) return invalid_argument(at + ": \"shape_key\": " + shape.status().message());
    for (const auto& [sym, v] : *shape)
      if (v > limits::kMaxExtent)
        return invalid_argument(at + ": \"shape_key\": '" + sym + "' = " + std::to_string(v) +
                                " is over the limit of " + std::to_string(limits::kMaxExtent));
    if (e.contains("graph")) {
      if (!e["graph"].is_string()) return invalid_argument(at + ": \"graph\" is not a string");
      r.graph = e["graph"].get<std::string>();
    }
    if (!e.contains("count") || !e["count"].is_number_integer() || e["count"].get<int64_t>() < 0)
      return invalid_argument(at + ": \"count\" is missing or not a non-negative integer");
    r.count = e["count"].get<int64_t>();
    if (e.contains("sources")) {
      if (!e["sources"].is_object()) return invalid_argument(at + ": \"sources\" is not an object");
      for (const auto& [name, n] : e["sources"].items()) {
        if (!n.is_number_integer() || n.get<int64_t>() < 0)
          return invalid_argument(at + ": sources \"" + name + "\" is not a non-negative integer");
        r.sources[name] = n.get<int64_t>();
      }
    }
    out.push_back(std::move(r));
  }
  return out;
}

StatusOr<std::vector<RecordedShape>> read_shapes_file(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text, read_file(path, {"recorded-shapes file", kMaxShapesFileBytes}));
  return parse_shapes_json(text, "recorded-shapes file '" + path + "'");
}

StatusOr<std::vector<std::map<std::string, int64_t>>> shapes_to_tune(const std::vector<RecordedShape>& recorded,
                                                                     const std::string& structure,
                                                                     const BucketPolicy& buckets, int hottest) {
  std::vector<const RecordedShape*> hot;
  for (const RecordedShape& r : recorded)
    if (r.structure == structure) hot.push_back(&r);
  std::stable_sort(hot.begin(), hot.end(),
                   [](const RecordedShape* a, const RecordedShape* b) { return a->count > b->count; });
  std::vector<std::map<std::string, int64_t>> out;
  std::set<std::map<std::string, int64_t>> seen;
  for (const RecordedShape* r : hot) {
    if (hottest > 0 && static_cast<int>(out.size()) >= hottest) break;
    KILN_ASSIGN_OR_RETURN(auto shape, parse_shape_key(r->shape_key));
    auto rep = buckets.representative(shape);
    if (seen.insert(rep).second) out.push_back(std::move(rep));
  }
  return out;
}

}  // namespace kiln
