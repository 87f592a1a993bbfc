// kiln/store/graph_spec_entry.h: a stored graph spec (docs/store.md "Graph specs"). The graph behind a
// (structure_sig, shape_key), as spec JSON, kept beside its plans so that a plan can be re-run and checked
// (`kiln plans verify --deep`) without the original spec file. Opaque text to the store; the writer (runtime
// layer) guarantees the spec gives this signature and shape key.
#pragma once

#include <cstdint>
#include <string>
#include <optional>
#include <vector>
#include "kiln/core/status.h"

namespace kiln {

struct GraphSpecEntry {
  std::string structure_sig, shape_key;
  std::string graph_name;
  std::string spec_json;
  int64_t created_at = 0;
  std::string checksum;  // XXH3-128 hex over the key and the text (docs/store.md)
};
std::string compute_graph_spec_checksum(const GraphSpecEntry& e);

// The graph specs a store keeps by key (PlanStore implements it).
class GraphSpecTable {
 public:
  // Replaces the spec of the key. InvalidArgument: empty signature or spec; FailedPrecondition: read-only.
  virtual StatusOr<GraphSpecEntry> put_graph_spec(const std::string& structure_sig, const std::string& shape_key,
                                                  const std::string& graph_name, const std::string& spec_json) = 0;
  // The stored spec, or nullopt; a row whose checksum fails is logged, dropped (unless read-only), absent.
  virtual StatusOr<std::optional<GraphSpecEntry>> get_graph_spec(const std::string& structure_sig,
                                                                 const std::string& shape_key) = 0;
  virtual StatusOr<std::vector<GraphSpecEntry>> list_graph_specs() = 0;  // sound ones, by key

 protected:
  GraphSpecTable() = default;
  ~GraphSpecTable() = default;
};

}  // namespace kiln
