// The shapes a service asks for, counted as they are served (kiln::Planner records every obtain()), so
// that the hot ones can be tuned offline (`kiln tune --shapes FILE`). Thread-safe and cheap: a call is a
// hash and an atomic increment on a sharded table.
//
// File format (JSON, docs/runtime.md "Recorded shapes"):
//   {"format": "kiln-shapes", "version": 1,
//    "shapes": [{"structure": "<32 hex>", "shape_key": "batch=24", "graph": "conv", "count": 120,
//                "sources": {"memory": 118, "bucket": 1, "heuristics": 1}}, ...]}
// sorted by count, most served first. "sources" counts which source served each call.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/runtime/bucket_policy.h"

namespace kiln {

struct RecordedShape {
  std::string structure;
  std::string shape_key;
  std::string graph;  // the graph's name when first seen
  int64_t count = 0;
  std::map<std::string, int64_t> sources;  // source name -> calls it served
};

class ShapeRecorder {
 public:
  ShapeRecorder();
  ~ShapeRecorder();
  // One served call for (structure, shape_key) by `source` ("memory", "store", "bucket", "heuristics").
  void record(const std::string& structure, const std::string& shape_key, const std::string& graph, const char* source);
  // Every shape seen, most served first (ties: structure, then shape key).
  std::vector<RecordedShape> snapshot() const;
  // The file above, written atomically; an existing file is replaced only with `overwrite`.
  Status write_file(const std::string& path, bool overwrite = false) const;

 private:
  struct Shard;
  static constexpr int kShards = 16;
  std::array<std::unique_ptr<Shard>, kShards> shards_;
};

std::string shapes_to_json(const std::vector<RecordedShape>& shapes);

// The most a recorded-shapes file or a replay trace may hold (about 500,000 shapes), before parsing.
constexpr int64_t kMaxShapesFileBytes = int64_t{64} << 20;
// Reads a recorded-shapes file; InvalidArgument naming the file and the entry and field that are wrong.
StatusOr<std::vector<RecordedShape>> read_shapes_file(const std::string& path);
StatusOr<std::vector<RecordedShape>> parse_shapes_json(const std::string& text, const std::string& where);

// What `kiln tune --shapes` tunes for one structure: its recorded shapes, hottest first (ties keep the
// file's order), each as its bucket's representative under `buckets` (exact: the shape itself), each
// representative once, at most `hottest` of them (0: all). InvalidArgument naming the shape key that does
// not parse.
StatusOr<std::vector<std::map<std::string, int64_t>>> shapes_to_tune(const std::vector<RecordedShape>& recorded,
                                                                     const std::string& structure,
                                                                     const BucketPolicy& buckets, int hottest = 0);

}  // namespace kiln
