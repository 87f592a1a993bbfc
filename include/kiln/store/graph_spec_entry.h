// kiln/store/graph_spec_entry.h: a stored graph spec (docs/store.md "Graph specs"). The graph behind a
// (structure_sig, shape_key), as spec JSON, kept beside its plans so that a plan can be re-run and checked
// (`kiln plans verify --deep`) without the original spec file. Opaque text to the store; the writer (runtime
// layer) guarantees the spec gives this signature and shape key.
#pragma once

#include <cstdint>
#include <string>

namespace kiln {

struct GraphSpecEntry {
  std::string structure_sig, shape_key;
  std::string graph_name;
  std::string spec_json;
  int64_t created_at = 0;
  std::string checksum;  // XXH3-128 hex over the key and the text (docs/store.md)
};
std::string compute_graph_spec_checksum(const GraphSpecEntry& e);

}  // namespace kiln
