// kiln/tools/deep_verify.h: deep verification of stored plans (`kiln plans verify --deep`, `import --deep`).
// A record's plan is deserialized with cuDNN Frontend on this GPU, run once on seeded random inputs, and its
// outputs compared with a reference (host, else device). That needs the record's Kiln graph: it comes from
// spec files given by the caller, the store's graph specs, or its re-tune queue (GraphCatalog).
// docs/store.md "Deep verification".
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/cuda/cuda_handles.h"  // UniqueStream, UniqueCudnnHandle (and cudnnHandle_t)
#include "kiln/graph/graph.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"
#include "kiln/validate/numerics.h"
#include "kiln/validate/reference.h"

namespace kiln {

// Graphs by (structure signature, shape key).
class GraphCatalog {
 public:
  // A spec file (validated). It also serves the other shape keys of its structure: the spec is read again
  // with the dynamic dim values of the wanted shape key. Errors as parse_spec_file.
  Status add_spec_file(const std::string& path);
  // Spec text (e.g. from the store); `source` names it in reports. Errors as parse_spec_string.
  Status add_spec_text(const std::string& text, const std::string& source);
  // The store's graph specs and the graphs of its queued re-tunes (those that do not parse are logged and
  // skipped). Call before handing the catalog's users the store's mutex-holding calls (verify).
  Status add_store(PlanStore& store);

  // The graph of (structure, shape), or nullptr; `source` (when non-null) says where it came from.
  const Graph* find(const std::string& structure_sig, const std::string& shape_key, std::string* source = nullptr);
  size_t size() const { return exact_.size(); }

 private:
  struct Entry {
    Graph graph;
    std::string source;
  };
  struct Base {
    std::string text;  // spec text, re-read with other dynamic values
    std::string source;
  };
  void add(Graph graph, const std::string& structure, const std::string& shape, const std::string& source);
  std::map<std::pair<std::string, std::string>, Entry> exact_;
  std::multimap<std::string, Base> by_structure_;
  std::map<std::pair<std::string, std::string>, bool> tried_;  // respecializations that did not work
};

struct DeepCheckOptions {
  uint64_t seed = 1;   // random inputs (make_random_inputs)
  CheckOptions check;  // tolerances (as the tuner's numerics gate)
};

struct DeepCheckResult {
  Disposition verdict = Disposition::
      kNotVerified;  // Passed, Incorrect, Failed (refused by the frontend, or did not run), NotVerified (no reference)
  std::string message;  // why, or the per-output check summary
  ReferenceKind reference_kind = ReferenceKind::kNone;
  double max_abs = 0, max_rel = 0, nmse = 0;  // worst over the outputs
  bool problem() const { return verdict == Disposition::kIncorrect || verdict == Disposition::kFailed; }
  // The verdict, summary and worst errors of a comparison with the reference.
  void take(const CheckReport& report);
};

// Deserializes record.plan_bytes for `graph` on `handle`, runs it once on make_random_inputs(graph, seed) and
// compares the outputs with run_host_reference (run_device_reference when the host refuses). Never fails:
// every error is the result's verdict and message.
DeepCheckResult deep_check_plan(const Graph& graph, const PlanRecord& record, cudnnHandle_t handle,
                                const DeepCheckOptions& options = {});

// One record as deep verification saw it.
struct DeepVerifyRow {
  std::string structure_sig, shape_key, fingerprint_key;
  std::string plan;          // identity ("eng41_k2=4")
  bool checked = false;      // false: not deep-checked (no graph, or another environment); see reason
  DeepCheckResult result;    // when checked
  std::string reason;        // when not checked: "no graph (pass --spec)", "built for another environment: ..."
  std::string graph_source;  // where the graph came from
};

struct DeepVerifyOptions {
  DeepCheckOptions check;
  EnvPolicy policy;  // a record whose fingerprint fails it against this GPU is not run here
};

// Deep verification on this machine's GPU, as a PlanValidator for PlanStore::verify / import_bundle: the
// validator refuses (so that the store reports, and with --quarantine sets aside) a record whose plan the
// frontend refuses, fails to run, or gives Incorrect outputs; it accepts records it cannot check here, and
// rows() says which and why. The validator must be used by one thread at a time and never while holding
// the catalog's store busy (it does not call the store).
class DeepPlanVerifier {
 public:
  // Unavailable without a usable GPU.
  static StatusOr<std::unique_ptr<DeepPlanVerifier>> create(GraphCatalog catalog,
                                                            const DeepVerifyOptions& options = {});
  ~DeepPlanVerifier();

  PlanValidator validator();
  const std::vector<DeepVerifyRow>& rows() const { return rows_; }
  const EnvFingerprint& environment() const { return env_; }

 private:
  DeepPlanVerifier() = default;
  Status check(const PlanRecord& record);

  GraphCatalog catalog_;
  DeepVerifyOptions options_;
  EnvFingerprint env_;
  UniqueStream stream_;
  UniqueCudnnHandle handle_;
  std::vector<DeepVerifyRow> rows_;
};

}  // namespace kiln
