// JSON spec parser (docs/spec.md). nlohmann::json may throw: every call into it happens inside
// parse_spec_string's try block, and typed access goes through the checked getters below.
#include "kiln/spec/spec.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "kiln/core/read_file.h"
#include "kiln/graph/limits.h"
#include "spec/op_table.h"
#include "spec/ops/spec_ops.h"

namespace kiln {
namespace {

// std::map-backed: nlohmann's ordered_json finds keys by a linear scan, so a spec with many tensors took
// quadratic time to parse. Declaration order (which Graph::tensors keeps) is recorded by KeyScan instead.
using Json = nlohmann::json;

// One linear pass over the text before the DOM is built (nlohmann's callback parser, used before, scans
// the enclosing array at every object end: quadratic in the number of nodes). Finds the first key an
// object repeats (nlohmann keeps the last silently; a spec that repeats one is ambiguous) and records the
// order of the top-level "tensors" object's keys.
class KeyScan : public nlohmann::json_sax<Json> {
 public:
  std::string duplicate, duplicate_in;
  std::vector<std::string> tensor_order;
  // Set when the scan stopped: a tensor's 'dims' or 'strides' past the rank limit, refused before the document
  // is built (a 31M-entry dims array took 14.5 s and 3.5 GB to build before its refusal).
  std::string refusal;

  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool start_object(std::size_t) override {
    if (!value()) return false;
    const bool tensors = objects_.size() == 1 && containers_ == 1 && last_key_ == "tensors";
    objects_.push_back(Object{objects_.empty() ? std::string("spec") : last_key_, {}, tensors});
    ++containers_;
    arrays_.push_back(nullptr);
    return true;
  }
  bool key(string_t& k) override {
    last_key_ = k;
    if (objects_.empty()) return true;
    Object& o = objects_.back();
    if (!o.keys.insert(k).second && duplicate.empty()) {
      duplicate = k;
      duplicate_in = o.name;
    }
    if (o.tensors) tensor_order.push_back(k);
    return true;
  }
  bool end_object() override {
    if (!objects_.empty()) objects_.pop_back();
    --containers_;
    if (!arrays_.empty()) arrays_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (!value()) return false;
    ++containers_;
    // A tensor's dims or strides: an array directly in an object of the top-level "tensors" object.
    const bool ranked = objects_.size() == 3 && objects_[1].tensors && arrays_.size() == 3 && !arrays_.back() &&
                        (last_key_ == "dims" || last_key_ == "strides");
    arrays_.push_back(ranked ? std::make_unique<RankedArray>(RankedArray{objects_.back().name, last_key_, 0})
                             : nullptr);
    return true;
  }
  bool end_array() override {
    --containers_;
    if (!arrays_.empty() && arrays_.back() && arrays_.back()->entries > limits::kMaxRank) {
      const RankedArray& a = *arrays_.back();
      refusal = "tensor '" + a.tensor + "': attribute '" + a.attribute + "': " + std::to_string(a.entries) +
                " entries, over the rank limit of " + std::to_string(limits::kMaxRank) + " (docs/spec.md \"Limits\")";
      return false;
    }
    if (!arrays_.empty()) arrays_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  struct Object {
    std::string name;
    std::set<std::string> keys;
    bool tensors;  // the top-level "tensors" object
  };
  struct RankedArray {
    std::string tensor, attribute;
    size_t entries;
  };
  // Counts an entry of the enclosing container (a ranked array's length is all that is kept of it).
  bool value() {
    if (!arrays_.empty() && arrays_.back()) ++arrays_.back()->entries;
    return true;
  }
  std::vector<Object> objects_;
  std::vector<std::unique_ptr<RankedArray>> arrays_;  // per open container: set for a ranked array, else null
  int containers_ = 0;                                // open objects and arrays
  std::string last_key_;
};

const char* json_type(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::number_float: return "a number with a fraction";
    default: return "a number";
  }
}

// A whole number past 64 bits (2^64) reaches the parser as a double, its last digits lost: what it was read as
// ("about -1.8446744073709552e+19"), to be called out of range rather than "a number with a fraction"; "" for
// anything else.
std::string whole_past_int64(const Json& j) {
  if (!j.is_number_float()) return "";
  const double d = j.get<double>();
  if (!std::isfinite(d) || std::floor(d) != d || std::fabs(d) < 0x1p63) return "";
  char text[64];
  std::snprintf(text, sizeof text, "about %.17g", d);
  return text;
}

// Every integer out of int64's range is refused in these words, however the parser read it.
Status int64_range_error(const std::string& where, const std::string& value) {
  return invalid_argument(where + ": " + value + " is out of range (an integer here is from " +
                          std::to_string(std::numeric_limits<int64_t>::min()) + " to " +
                          std::to_string(std::numeric_limits<int64_t>::max()) + ")");
}

}  // namespace

namespace spec_internal {

// `where` prefixes each message ("tensor 'x': attribute 'dims'").
Status type_error(const std::string& where, const char* expected, const Json& j) {
  return invalid_argument(where + ": expected " + expected + ", got " + json_type(j));
}

Status get_int(const Json& j, const std::string& where, int64_t* out) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return int64_range_error(where, std::to_string(u));
    *out = static_cast<int64_t>(u);
    return Status::ok();
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return Status::ok();
  }
  if (!whole_past_int64(j).empty()) return int64_range_error(where, whole_past_int64(j));
  return type_error(where, "an integer", j);
}

Status get_number(const Json& j, const std::string& where, double* out) {
  if (!j.is_number()) return type_error(where, "a number", j);
  *out = j.get<double>();
  if (!std::isfinite(*out)) return invalid_argument(where + ": must be finite");
  return Status::ok();
}

// An integer or an array of integers.
Status get_int_list(const Json& j, const std::string& where, std::vector<int64_t>* out) {
  out->clear();
  if (!j.is_array()) {
    int64_t v;
    if (!j.is_number()) return type_error(where, "an integer or an array of integers", j);
    KILN_RETURN_IF_ERROR(get_int(j, where, &v));
    out->push_back(v);
    return Status::ok();
  }
  for (size_t i = 0; i < j.size(); ++i) {
    int64_t v;
    KILN_RETURN_IF_ERROR(get_int(j[i], where + "[" + std::to_string(i) + "]", &v));
    out->push_back(v);
  }
  return Status::ok();
}

}  // namespace spec_internal

namespace {

using spec_internal::get_int;
using spec_internal::get_int_list;
using spec_internal::get_number;
using spec_internal::type_error;

Status get_string(const Json& j, const std::string& where, std::string* out) {
  if (!j.is_string()) return type_error(where, "a string", j);
  *out = j.get<std::string>();
  return Status::ok();
}

Status get_dtype(const Json& j, const std::string& where, DataType* out) {
  std::string s;
  KILN_RETURN_IF_ERROR(get_string(j, where, &s));
  StatusOr<DataType> t = parse_dtype(s);
  if (!t.is_ok()) return invalid_argument(where + ": " + t.status().message());
  *out = *t;
  return Status::ok();
}

Status check_keys(const Json& obj, const std::string& where, const std::set<std::string>& allowed) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!allowed.count(it.key())) {
      std::string list;
      for (const std::string& k : allowed) list += (list.empty() ? "" : ", ") + k;
      return invalid_argument(where + ": unknown key '" + it.key() + "' (expected one of: " + list + ")");
    }
  return Status::ok();
}

Status parse_tensor(const std::string& name, const Json& j, TensorDesc* t) {
  std::string where = "tensor '" + name + "'";
  if (!j.is_object()) return type_error(where, "an object", j);
  KILN_RETURN_IF_ERROR(check_keys(j, where, {"dims", "layout", "strides", "dtype", "value"}));
  t->name = name;
  if (j.contains("dims")) {
    const Json& d = j["dims"];
    std::string dw = where + ": attribute 'dims'";
    if (!d.is_array()) return type_error(dw, "an array of integers and dynamic dim names", d);
    if (d.empty()) return invalid_argument(dw + ": must not be empty");
    for (size_t i = 0; i < d.size(); ++i) {
      std::string iw = dw + "[" + std::to_string(i) + "]";
      Dim dim;
      if (d[i].is_string()) {
        dim.symbol = d[i].get<std::string>();
        if (dim.symbol.empty()) return invalid_argument(iw + ": empty dynamic dim name");
      } else if (d[i].is_number()) {
        if (const std::string big = whole_past_int64(d[i]); !big.empty())
          return invalid_argument(iw + ": " + big + " is out of range (a dim is at most " +
                                  std::to_string(limits::kMaxExtent) + ", docs/spec.md \"Limits\")");
        KILN_RETURN_IF_ERROR(get_int(d[i], iw, &dim.value));
      } else {
        return type_error(iw, "an integer or a dynamic dim name", d[i]);
      }
      t->dims.push_back(dim);
    }
  }
  if (j.contains("layout") && j.contains("strides"))
    return invalid_argument(where + ": give 'layout' or 'strides', not both");
  if (j.contains("layout")) {
    std::string s;
    KILN_RETURN_IF_ERROR(get_string(j["layout"], where + ": attribute 'layout'", &s));
    StatusOr<Layout> layout = parse_layout(s);  // "explicit" is what strides give, never a spec's word
    if (!layout.is_ok() || *layout == Layout::kExplicit)
      return invalid_argument(where + ": attribute 'layout': unknown layout '" + s +
                              "' (expected row_major, NCHW or NHWC)");
    t->layout = *layout;
  }
  if (j.contains("strides")) {
    const Json& s = j["strides"];
    if (!s.is_array()) return type_error(where + ": attribute 'strides'", "an array of integers", s);
    KILN_RETURN_IF_ERROR(get_int_list(s, where + ": attribute 'strides'", &t->strides));
    t->layout = Layout::kExplicit;
  }
  if (j.contains("dtype")) {
    DataType dt;
    KILN_RETURN_IF_ERROR(get_dtype(j["dtype"], where + ": attribute 'dtype'", &dt));
    t->dtype = dt;
  }
  if (j.contains("value")) {
    KILN_RETURN_IF_ERROR(get_number(j["value"], where + ": attribute 'value'", &t->value));
    t->by_value = true;
  }
  return Status::ok();
}

// Looks a tensor up by name, creating it (dims to be inferred) when `create` is set.
int tensor_index(Graph& g, std::map<std::string, int>& index, const std::string& name, bool create) {
  auto it = index.find(name);
  if (it != index.end()) return it->second;
  if (!create) return -1;
  TensorDesc t;
  t.name = name;
  g.tensors.push_back(t);
  index[name] = static_cast<int>(g.tensors.size()) - 1;
  return index[name];
}

Status parse_node_attrs(const Json& j, const std::string& where, Node* n) {
  const spec_internal::SpecFamily& family = spec_internal::spec_family(n->op);
  std::set<std::string> allowed = {"name", "op", "inputs", "outputs", "compute_dtype"};
  allowed.insert(family.attributes.begin(), family.attributes.end());
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!allowed.count(it.key())) {
      const bool known = spec_internal::is_op_attribute(it.key());
      return invalid_argument(
          where + ": " +
          (known ? "attribute '" + it.key() + "' does not apply to this op" : "unknown key '" + it.key() + "'"));
    }
  if (j.contains("compute_dtype")) {
    DataType dt;
    KILN_RETURN_IF_ERROR(get_dtype(j["compute_dtype"], where + ": attribute 'compute_dtype'", &dt));
    n->compute_dtype = dt;
  }
  return family.parse(j, where, n);
}

Status parse_names(const Json& j, const std::string& where, std::vector<std::string>* out) {
  if (!j.is_array()) return type_error(where, "an array of tensor names", j);
  for (size_t i = 0; i < j.size(); ++i) {
    std::string s;
    KILN_RETURN_IF_ERROR(get_string(j[i], where + "[" + std::to_string(i) + "]", &s));
    out->push_back(s);
  }
  return Status::ok();
}

// The spec's "pin": an engine configuration identity, as kiln tune prints it.
Status parse_pin(const Json& j, std::string* pin) {
  KILN_RETURN_IF_ERROR(get_string(j, "spec: key 'pin'", pin));
  // std::regex recurses per character: a long pin would exhaust the stack before it is refused.
  if (pin->size() > limits::kMaxNameBytes)
    return invalid_argument("spec: key 'pin': " + std::to_string(pin->size()) + " bytes, over the limit of " +
                            std::to_string(limits::kMaxNameBytes) + " (docs/spec.md \"Limits\")");
  // cuDNN's engines, cuBLASLt's algorithms and Kiln's kernels (kiln/core/engine_config.h).
  static const std::regex kIdentity("eng[0-9]+(_k[0-9]+=-?[0-9]+)*|(blt|knl)[0-9]+(_[a-z]+=-?[0-9]+)*");
  if (!std::regex_match(*pin, kIdentity))
    return invalid_argument("spec: key 'pin': '" + *pin +
                            "' is not an engine configuration identity (e.g. \"eng41_k2=4_k13=0\", "
                            "\"blt66_splitk=1_tile=18\", as kiln tune prints it)");
  return Status::ok();
}

// The spec's "dynamic": an object of dynamic dim name: value.
Status parse_dynamic_dims(const Json& d, std::map<std::string, int64_t>* dims) {
  if (!d.is_object()) return type_error("spec: key 'dynamic'", "an object of name: value", d);
  for (auto it = d.begin(); it != d.end(); ++it) {
    int64_t v;
    KILN_RETURN_IF_ERROR(get_int(it.value(), "dynamic dim '" + it.key() + "'", &v));
    if (it.key().empty()) return invalid_argument("spec: key 'dynamic': empty dynamic dim name");
    (*dims)[it.key()] = v;
  }
  return Status::ok();
}

Status parse_document(const Json& doc, const std::vector<std::string>& tensor_order, Graph* g) {
  if (!doc.is_object()) return type_error("spec", "an object", doc);
  KILN_RETURN_IF_ERROR(check_keys(doc, "spec",
                                  {"name", "description", "io_dtype", "intermediate_dtype", "compute_dtype", "dynamic",
                                   "tensors", "nodes", "outputs", "pin"}));
  for (const char* k : {"tensors", "nodes", "outputs"})
    if (!doc.contains(k)) return invalid_argument(std::string("spec: missing key '") + k + "'");
  if (doc.contains("name")) KILN_RETURN_IF_ERROR(get_string(doc["name"], "spec: key 'name'", &g->name));
  if (doc.contains("description")) {
    std::string unused;
    KILN_RETURN_IF_ERROR(get_string(doc["description"], "spec: key 'description'", &unused));
  }
  if (doc.contains("pin")) KILN_RETURN_IF_ERROR(parse_pin(doc["pin"], &g->pin));
  if (doc.contains("io_dtype")) KILN_RETURN_IF_ERROR(get_dtype(doc["io_dtype"], "spec: key 'io_dtype'", &g->io_dtype));
  if (doc.contains("intermediate_dtype"))
    KILN_RETURN_IF_ERROR(
        get_dtype(doc["intermediate_dtype"], "spec: key 'intermediate_dtype'", &g->intermediate_dtype));
  if (doc.contains("compute_dtype"))
    KILN_RETURN_IF_ERROR(get_dtype(doc["compute_dtype"], "spec: key 'compute_dtype'", &g->compute_dtype));
  if (doc.contains("dynamic")) KILN_RETURN_IF_ERROR(parse_dynamic_dims(doc["dynamic"], &g->dynamic_dims));

  std::map<std::string, int> index;
  const Json& tensors = doc["tensors"];
  if (!tensors.is_object()) return type_error("spec: key 'tensors'", "an object of name: tensor", tensors);
  // Counted before anything is built from them (validate_graph checks the graph's totals again).
  if (static_cast<int64_t>(tensors.size()) > limits::kMaxTensors)
    return invalid_argument("spec: key 'tensors': " + std::to_string(tensors.size()) + " tensors, over the limit of " +
                            std::to_string(limits::kMaxTensors) + " (docs/spec.md \"Limits\")");
  if (doc["nodes"].is_array() && static_cast<int64_t>(doc["nodes"].size()) > limits::kMaxNodes)
    return invalid_argument("spec: key 'nodes': " + std::to_string(doc["nodes"].size()) + " nodes, over the limit of " +
                            std::to_string(limits::kMaxNodes) + " (docs/spec.md \"Limits\")");
  // Declaration order (from KeyScan; the object itself is sorted by name).
  std::vector<std::string> names = tensor_order;
  if (names.size() != tensors.size()) {
    names.clear();
    for (auto it = tensors.begin(); it != tensors.end(); ++it) names.push_back(it.key());
  }
  for (const std::string& name : names) {
    auto it = tensors.find(name);
    if (it == tensors.end()) return internal_error("spec: key 'tensors': tensor '" + name + "' went missing");
    if (name.empty()) return invalid_argument("spec: key 'tensors': empty tensor name");
    TensorDesc t;
    KILN_RETURN_IF_ERROR(parse_tensor(name, it.value(), &t));
    g->tensors.push_back(t);
    index[name] = static_cast<int>(g->tensors.size()) - 1;
  }

  const Json& nodes = doc["nodes"];
  if (!nodes.is_array()) return type_error("spec: key 'nodes'", "an array of nodes", nodes);
  // First pass: names, ops and outputs (so that a node may read a tensor written by a later one).
  std::vector<std::vector<std::string>> inputs(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Json& j = nodes[i];
    std::string where = "nodes[" + std::to_string(i) + "]";
    if (!j.is_object()) return type_error(where, "an object", j);
    Node n;
    n.name = where;
    if (j.contains("name")) {
      KILN_RETURN_IF_ERROR(get_string(j["name"], where + ": key 'name'", &n.name));
      if (n.name.empty()) return invalid_argument(where + ": key 'name': must not be empty");
      where = "node '" + n.name + "'";
    }
    if (!j.contains("op")) return invalid_argument(where + ": missing key 'op'");
    std::string op;
    KILN_RETURN_IF_ERROR(get_string(j["op"], where + ": key 'op'", &op));
    const spec_internal::OpInfo* info = spec_internal::find_op(op);
    if (!info) return invalid_argument(where + ": unknown op '" + op + "' (see docs/spec.md for the op table)");
    n.op = info->kind;
    n.pointwise.mode = info->pointwise;
    n.reduction.mode = info->reduction;
    where += " (" + std::string(info->name) + ")";
    KILN_RETURN_IF_ERROR(parse_node_attrs(j, where, &n));
    if (!j.contains("inputs")) return invalid_argument(where + ": missing key 'inputs'");
    if (!j.contains("outputs")) return invalid_argument(where + ": missing key 'outputs'");
    KILN_RETURN_IF_ERROR(parse_names(j["inputs"], where + ": key 'inputs'", &inputs[i]));
    std::vector<std::string> outs;
    KILN_RETURN_IF_ERROR(parse_names(j["outputs"], where + ": key 'outputs'", &outs));
    for (const std::string& o : outs) {
      if (o.empty()) return invalid_argument(where + ": key 'outputs': empty tensor name");
      n.outputs.push_back(tensor_index(*g, index, o, /*create=*/true));
    }
    g->nodes.push_back(n);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& n = g->nodes[i];
    for (const std::string& in : inputs[i]) {
      int t = tensor_index(*g, index, in, /*create=*/false);
      if (t < 0)
        return invalid_argument("node '" + n.name + "' (" +
                                spec_internal::find_op(nodes[i]["op"].get<std::string>())->name + "): input '" + in +
                                "' is not a declared tensor or a node output");
      n.inputs.push_back(t);
    }
  }

  std::vector<std::string> outs;
  KILN_RETURN_IF_ERROR(parse_names(doc["outputs"], "spec: key 'outputs'", &outs));
  if (outs.empty())
    return invalid_argument("spec: key 'outputs': the graph has no outputs (list the tensors the caller reads back)");
  for (const std::string& o : outs) {
    int t = tensor_index(*g, index, o, /*create=*/false);
    if (t < 0) return invalid_argument("output '" + o + "' is not a declared tensor or a node output");
    g->outputs.push_back(t);
  }
  return Status::ok();
}

}  // namespace

const std::vector<std::string>& spec_op_names() {
  static const std::vector<std::string> names = [] {
    size_t count = 0;
    const spec_internal::OpInfo* ops = spec_internal::op_table(&count);
    std::vector<std::string> v;
    for (size_t i = 0; i < count; ++i) v.push_back(ops[i].name);
    return v;
  }();
  return names;
}

StatusOr<Graph> parse_spec_string(const std::string& text, const std::string& source_name,
                                  const ValidateOptions& options) {
  if (static_cast<int64_t>(text.size()) > limits::kMaxSpecBytes)
    return invalid_argument(source_name + ": " + std::to_string(text.size()) + " bytes, over the limit of " +
                            std::to_string(limits::kMaxSpecBytes) + " bytes for a spec (docs/spec.md \"Limits\")");
  // JSON has no NUL outside a string's \u0000, and the parser would stop at one and take what came before it as
  // the whole spec (found by a hostile trial: a file with "\0junk" after the document was accepted).
  if (const size_t nul = text.find('\0'); nul != std::string::npos)
    return invalid_argument(source_name + ": a NUL byte at byte " + std::to_string(nul) + ": not JSON text");
  try {
    Json doc;
    KeyScan scan;
    // A text the scan cannot read is malformed: the DOM parse below reports where, as it always did.
    const bool scanned = Json::sax_parse(text, &scan);
    if (!scan.refusal.empty()) return invalid_argument(source_name + ": " + scan.refusal);
    try {
      doc = Json::parse(text);
    } catch (const Json::parse_error& e) {
      return invalid_argument(source_name + ": malformed JSON at byte " + std::to_string(e.byte) + ": " + e.what());
    } catch (const Json::exception& e) {  // e.g. out_of_range.406: a number literal that overflows a double
      return invalid_argument(source_name + ": malformed JSON: " + e.what());
    }
    if (!scanned) return invalid_argument(source_name + ": malformed JSON");
    if (!scan.duplicate.empty())
      return invalid_argument(source_name + ": duplicate key '" + scan.duplicate + "' in '" + scan.duplicate_in +
                              "' (a JSON object must not repeat a key)");
    Graph g;
    Status s = parse_document(doc, scan.tensor_order, &g);
    if (!s.is_ok()) return s.with_context(source_name);
    s = validate_graph(g, options);
    if (!s.is_ok()) return s.with_context(source_name);
    return g;
  } catch (const std::exception& e) {
    return internal_error(source_name + ": unexpected error while reading the spec: " + e.what());
  }
}

StatusOr<Graph> parse_spec_file(const std::string& path, const ValidateOptions& options) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    return invalid_argument(path + ": is a folder, not a spec file");
  // Refused by its size before it is read (a spec past the limit is not worth the memory).
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > limits::kMaxSpecBytes)
    return invalid_argument(path + ": " + std::to_string(st.st_size) + " bytes, over the limit of " +
                            std::to_string(limits::kMaxSpecBytes) + " bytes for a spec (docs/spec.md \"Limits\")");
  // Read in pieces, never past the limit: a device or a pipe the shell opens (/dev/zero, <(cat spec.json))
  // reports no size. A FIFO on disk is refused by read_file: it would wait for a writer.
  ReadFileOptions ro{"spec file", limits::kMaxSpecBytes, /*regular_only=*/false};
  auto read = read_file(path, ro);
  if (!read.is_ok()) {
    if (is_over_read_limit(read.status()))
      return invalid_argument(path + ": more than " + std::to_string(limits::kMaxSpecBytes) +
                              " bytes, over the limit for a spec (docs/spec.md \"Limits\")");
    if (read.status().code() == StatusCode::kNotFound) return not_found(path + ": cannot open spec file");
    return read.status();
  }
  return parse_spec_string(*read, path, options);
}

}  // namespace kiln
