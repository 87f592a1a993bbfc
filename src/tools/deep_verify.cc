// Deep verification of stored plans: graphs from spec files and the store, each plan run once on this GPU
// and checked against a reference (docs/store.md "Deep verification").
#include "kiln/tools/deep_verify.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/core/log.h"
#include "kiln/core/read_file.h"
#include "kiln/graph/limits.h"
#include "kiln/lower/environment.h"
#include "kiln/lower/lower.h"
#include "kiln/tune/tune_policy.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_io.h"
#include "kiln/validate/reference.h"

namespace kiln {
namespace {

std::string key_name(const std::string& sig, const std::string& shape) {
  return sig.substr(0, 12) + (shape.empty() ? "" : "/" + shape);
}

// "batch=8,seq=128" -> {batch: 8, seq: 128}; false when it does not read that way.
bool parse_shape_key(const std::string& key, std::map<std::string, int64_t>* out) {
  out->clear();
  if (key.empty()) return true;
  std::stringstream ss(key);
  std::string part;
  while (std::getline(ss, part, ',')) {
    size_t eq = part.rfind('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == part.size()) return false;
    char* end = nullptr;
    long long v = std::strtoll(part.c_str() + eq + 1, &end, 10);
    if (*end != '\0') return false;
    (*out)[part.substr(0, eq)] = v;
  }
  return true;
}

}  // namespace

// ---- GraphCatalog -----------------------------------------------------------------------------------

void GraphCatalog::add(Graph graph, const std::string& structure, const std::string& shape, const std::string& source) {
  exact_.emplace(std::make_pair(structure, shape), Entry{std::move(graph), source});
}

Status GraphCatalog::add_spec_text(const std::string& text, const std::string& source) {
  KILN_ASSIGN_OR_RETURN(Graph g, parse_spec_string(text, source));
  KILN_ASSIGN_OR_RETURN(GraphSignature sig, compute_signature(g));
  by_structure_.emplace(sig.structure, Base{text, source});
  add(std::move(g), sig.structure, sig.shape_key, source);
  return Status::ok();
}

Status GraphCatalog::add_spec_file(const std::string& path) {
  auto text = read_file(path, {"spec file", limits::kMaxSpecBytes});
  if (!text.is_ok() && text.status().code() == StatusCode::kNotFound)
    return not_found(path + ": cannot open spec file");
  KILN_RETURN_IF_ERROR(text.status());
  return add_spec_text(*text, path);
}

Status GraphCatalog::add_store(PlanStore& store) {
  KILN_ASSIGN_OR_RETURN(std::vector<GraphSpecEntry> specs, store.list_graph_specs());
  for (const GraphSpecEntry& s : specs) {
    std::string source = "store graph spec '" + s.graph_name + "'";
    Status st = add_spec_text(s.spec_json, source);
    if (!st.is_ok())
      KILN_LOG(kWarn, "plan store " << store.path() << ": graph spec " << key_name(s.structure_sig, s.shape_key)
                                    << " skipped: " << st.message());
  }
  KILN_ASSIGN_OR_RETURN(std::vector<RetuneQueueEntry> queue, store.list_retune_queue());
  for (const RetuneQueueEntry& q : queue) {
    if (exact_.count({q.structure_sig, q.shape_key})) continue;
    std::string source = "re-tune queue graph '" + q.graph_name + "'";
    Status st = add_spec_text(q.spec_json, source);
    if (!st.is_ok())
      KILN_LOG(kWarn, "plan store " << store.path() << ": queued graph " << key_name(q.structure_sig, q.shape_key)
                                    << " skipped: " << st.message());
  }
  return Status::ok();
}

const Graph* GraphCatalog::find(const std::string& structure_sig, const std::string& shape_key, std::string* source) {
  auto key = std::make_pair(structure_sig, shape_key);
  auto it = exact_.find(key);
  if (it == exact_.end() && !tried_.count(key)) {
    tried_[key] = true;
    // Another shape of a known structure: the spec read again with this shape key's dynamic values.
    std::map<std::string, int64_t> dims;
    if (parse_shape_key(shape_key, &dims)) {
      auto range = by_structure_.equal_range(structure_sig);
      for (auto b = range.first; b != range.second && it == exact_.end(); ++b) {
        nlohmann::ordered_json doc = nlohmann::ordered_json::parse(b->second.text, nullptr, false);
        if (!doc.is_object() || !doc.contains("dynamic") || !doc["dynamic"].is_object()) continue;
        bool same_symbols = doc["dynamic"].size() == dims.size();
        for (const auto& [sym, v] : dims) same_symbols = same_symbols && doc["dynamic"].contains(sym);
        if (!same_symbols) continue;
        for (const auto& [sym, v] : dims) doc["dynamic"][sym] = v;
        std::string text = doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        StatusOr<Graph> g = parse_spec_string(text, b->second.source);
        if (!g.is_ok()) continue;
        StatusOr<GraphSignature> sig = compute_signature(*g);
        if (!sig.is_ok() || sig->structure != structure_sig || sig->shape_key != shape_key) continue;
        add(std::move(g).value(), structure_sig, shape_key, b->second.source + " (with " + shape_key + ")");
        it = exact_.find(key);
      }
    }
  }
  if (it == exact_.end()) return nullptr;
  if (source) *source = it->second.source;
  return &it->second.graph;
}

// ---- deep_check_plan --------------------------------------------------------------------------------

DeepCheckResult deep_check_plan(const Graph& graph, const PlanRecord& record, cudnnHandle_t handle,
                                const DeepCheckOptions& options) {
  DeepCheckResult out;
  out.reference_kind = ReferenceKind::kNone;
  auto fail = [&](const std::string& why) {
    out.verdict = Disposition::kFailed;
    out.message = why;
    cudaGetLastError();  // a failed launch must not be reported again by the next record's calls
    return out;
  };
  std::vector<uint8_t> bytes(record.plan_bytes.begin(), record.plan_bytes.end());
  StatusOr<LoweredGraph> plan = LoweredGraph::deserialize(graph, handle, bytes);
  if (!plan.is_ok()) return fail("cuDNN Frontend refuses the plan: " + plan.status().message());
  StatusOr<std::map<int, HostTensor>> inputs = make_random_inputs(graph, options.seed);
  if (!inputs.is_ok()) return fail("no inputs: " + inputs.status().message());
  StatusOr<GraphBuffers> buffers = allocate_graph_buffers(graph, *inputs, plan->workspace_size());
  if (!buffers.is_ok()) return fail("cannot allocate its buffers: " + buffers.status().message());
  Status run = plan->execute(handle, buffers->pointers(), buffers->workspace.data());
  if (run.is_ok()) run = cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (!run.is_ok()) return fail("the plan did not run: " + run.message());
  StatusOr<std::vector<HostTensor>> outs = download_outputs(graph, *buffers);
  if (!outs.is_ok()) return fail("cannot read its outputs back: " + outs.status().message());

  // The same reference and accumulation bound the tuner's numerics gate uses (kiln/validate/numerics.h).
  ReferenceOutputs ref;
  StatusOr<ReferenceOutputs> host = run_host_reference_with_magnitudes(graph, *inputs);
  if (host.is_ok()) {
    ref = std::move(host).value();
    out.reference_kind = ReferenceKind::kHost;
  } else {
    StatusOr<ReferenceOutputs> dev = run_device_reference_with_magnitudes(graph, *inputs);
    if (!dev.is_ok()) {
      out.verdict = Disposition::kNotVerified;
      out.message = "ran, but no reference: " + host.status().message() + "; " + dev.status().message();
      return out;
    }
    ref = std::move(dev).value();
    out.reference_kind = ReferenceKind::kDevice;
  }
  StatusOr<CheckReport> check = check_outputs(graph, *outs, ref, options.check);
  if (!check.is_ok()) return fail("cannot compare with the reference: " + check.status().message());
  out.take(*check);
  return out;
}

void DeepCheckResult::take(const CheckReport& report) {
  verdict = report.verdict;
  message = report.summary();
  for (const OutputCheck& o : report.outputs) {
    max_abs = std::max(max_abs, o.error.max_abs);
    max_rel = std::max(max_rel, o.error.max_rel);
    nmse = std::max(nmse, o.error.nmse);
  }
}

// ---- DeepPlanVerifier -------------------------------------------------------------------------------

DeepPlanVerifier::~DeepPlanVerifier() = default;

StatusOr<std::unique_ptr<DeepPlanVerifier>> DeepPlanVerifier::create(GraphCatalog catalog,
                                                                     const DeepVerifyOptions& options) {
  EnvReport env = collect_environment(0);
  if (!env.device_status.is_ok())
    return unavailable("deep verification runs each plan on this machine's GPU, and there is none: " +
                       env.device_status.message());
  std::unique_ptr<DeepPlanVerifier> v(new DeepPlanVerifier());
  v->catalog_ = std::move(catalog);
  v->options_ = options;
  v->env_ = env.fingerprint;
  KILN_ASSIGN_OR_RETURN(v->stream_, make_stream());
  KILN_ASSIGN_OR_RETURN(v->handle_, make_cudnn_handle(v->stream_.get()));
  return v;
}

PlanValidator DeepPlanVerifier::validator() {
  return [this](const PlanRecord& r) { return check(r); };
}

Status DeepPlanVerifier::check(const PlanRecord& r) {
  DeepVerifyRow row;
  row.structure_sig = r.structure_sig;
  row.shape_key = r.shape_key;
  row.fingerprint_key = r.fingerprint_key();
  row.plan = plan_identity(r.engine_id, r.knobs);
  FingerprintCheck fc = check_fingerprint(r.fingerprint, env_, options_.policy);
  const Graph* graph = catalog_.find(r.structure_sig, r.shape_key, &row.graph_source);
  if (!fc.pass) {
    std::string why;
    for (const auto& s : fc.reasons) why += (why.empty() ? "" : "; ") + s;
    row.reason = "built for another environment: " + why;
  } else if (!graph) {
    row.reason = "no graph (pass --spec)";
  } else {
    row.checked = true;
    row.result = deep_check_plan(*graph, r, handle_.get(), options_.check);
  }
  Status verdict = Status::ok();
  if (row.checked && row.result.problem())
    verdict = check_failed(std::string(disposition_name(row.result.verdict)) + ": " + row.result.message);
  rows_.push_back(std::move(row));
  return verdict;
}

}  // namespace kiln
