// libFuzzer entry: arbitrary bytes as a spec. Parsing must never throw, crash or hang; a spec that parses
// must validate idempotently and yield a signature.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kiln/graph/graph.h"
#include "kiln/spec/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  kiln::StatusOr<kiln::Graph> g = kiln::parse_spec_string(text, "fuzz.json");
  if (!g.is_ok()) {
    if (g.status().message().rfind("fuzz.json", 0) != 0) std::abort();   // every message names the source
    if (g.status().code() == kiln::StatusCode::kInternal) std::abort();  // bad input is never an internal error
    return 0;
  }
  kiln::StatusOr<kiln::GraphSignature> sig = kiln::compute_signature(*g);
  if (!sig.is_ok() || sig->structure.size() != 32) std::abort();
  // Validation is idempotent: validating the validated graph again gives the same signature.
  kiln::Graph again = *g;
  if (!kiln::validate_graph(again).is_ok()) std::abort();
  kiln::StatusOr<kiln::GraphSignature> sig2 = kiln::compute_signature(again);
  if (!sig2.is_ok() || sig2->structure != sig->structure || sig2->shape_key != sig->shape_key) std::abort();
  return 0;
}
