// Internal to the spec layer: each op family's attributes in a spec (src/spec/ops/<family>.cc: their keys,
// how they are read and written back), reached through one table indexed by OpFamilyId
// (spec_family(), src/spec/op_table.cc). Adding an op: docs/contributing.md "Adding an op or a pointwise
// mode".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln::spec_internal {

using ReadJson = nlohmann::json;           // what the parser reads
using WriteJson = nlohmann::ordered_json;  // what the writer writes

// The parser's readers (src/spec/spec.cc); `where` prefixes each message ("node 'c': attribute 'stride'").
Status type_error(const std::string& where, const char* expected, const ReadJson& j);
Status get_int(const ReadJson& j, const std::string& where, int64_t* out);
Status get_number(const ReadJson& j, const std::string& where, double* out);
Status get_int_list(const ReadJson& j, const std::string& where, std::vector<int64_t>* out);  // n or [n, ...]

struct SpecFamily {
  std::vector<std::string> attributes;  // the keys a node of the family may carry besides the common ones
  // Reads the family's attributes present in `node` (only keys of `attributes` are there) into n; `where`
  // names the node.
  Status (*parse)(const ReadJson& node, const std::string& where, Node* n);
  // Writes them back into `node` (docs/spec.md "Writing a graph back").
  void (*write)(const Node& n, WriteJson& node);
};

extern const SpecFamily kConvSpec;
extern const SpecFamily kMatmulSpec;
extern const SpecFamily kPointwiseSpec;
extern const SpecFamily kReductionSpec;
extern const SpecFamily kNormSpec;
extern const SpecFamily kSdpaSpec;

// The family of an op kind.
const SpecFamily& spec_family(OpKind kind);
// Whether `key` is an attribute of some family (a misplaced one is named as such).
bool is_op_attribute(const std::string& key);

}  // namespace kiln::spec_internal
