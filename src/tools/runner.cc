#include "kiln/tools/runner.h"

#include "kiln/store/store_path.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/core/atomic_file.h"
#include "kiln/core/log.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/runtime/planner.h"
#include "kiln/store/plan_store.h"
#include "kiln/validate/device_io.h"
#include "kiln/validate/device_check.h"
#include "kiln/validate/dropout_probe.h"
#include "kiln/validate/reference.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

}  // namespace

namespace {

// The Planner run_graph obtains its one plan from: the store (opened for writing, as kiln run always did: a
// miss is queued, a re-tune stored), no stopgaps (one shape, built at once), nothing recorded, no primer
// (one plan: its first use pays cuDNN's first-use work either way, and a primer thread would only delay exit).
PlannerOptions run_planner_options(const RunOptions& o) {
  PromotionTuning t;
  t.time_budget_s = o.retune.time_budget_s;
  t.top_k = o.retune.top_k;
  t.candidate_budget_ms = o.retune.candidate_budget_ms;
  t.seed = o.retune.seed;
  t.store = !o.store_path.empty();
  // The plan is checked before it runs with the gate the caller asked for.
  return PlannerOptions::tools(o.store_path)
      .with_policy(o.policy)
      .with_tuning(t)
      .with_first_use(FirstUse::kVerify, o.check);
}

}  // namespace

namespace {

std::string macs_text(double v) {
  std::ostringstream os;
  os.precision(3);
  os << v;
  return os.str();
}

// Why the host reference cannot take this graph, or "" when it can.
StatusOr<std::string> host_refusal(const Graph& graph, double cap) {
  if (has_dropout(graph))
    return "graph '" + graph.name + "' drops attention probabilities: its reference needs the mask the plan draws, " +
           "which Kiln probes on the device (--reference device; kiln/validate/dropout_probe.h)";
  KILN_ASSIGN_OR_RETURN(double macs, estimate_macs(graph));
  if (macs <= cap) return std::string();
  return "graph '" + graph.name + "' needs " + macs_text(macs) +
         " multiply-accumulates, over the host reference cap of " + macs_text(cap) +
         " (raise the cap with --host-max-macs, or use the device reference)";
}

// Elements in the graph's non-virtual tensors: what host-side inputs, reference and comparison cost.
int64_t graph_elements(const Graph& graph) {
  int64_t n = 0;
  for (size_t i = 0; i < graph.tensors.size(); ++i)
    if (!graph.tensors[i].by_value && !graph.is_virtual(static_cast<int>(i))) n += graph.tensors[i].element_count();
  return n;
}

StatusOr<CheckReport> check_against(const Graph& graph, const std::vector<HostTensor>& outputs,
                                    const std::map<int, HostTensor>& inputs, ReferenceKind kind, double host_cap,
                                    const CheckOptions& check) {
  ReferenceOutputs ref;
  if (kind == ReferenceKind::kHost) {
    HostReferenceOptions ho;
    ho.max_macs = host_cap;
    KILN_ASSIGN_OR_RETURN(ref, run_host_reference_with_magnitudes(graph, inputs, ho));
  } else {
    KILN_ASSIGN_OR_RETURN(ref, run_device_reference_with_magnitudes(graph, inputs));
  }
  return check_outputs(graph, outputs, ref, check);
}

}  // namespace

const char* reference_choice_name(ReferenceChoice c) { return enum_name(kReferenceChoiceNames, c); }

StatusOr<ReferenceChoice> parse_reference_choice(const std::string& name) {
  StatusOr<ReferenceChoice> choice = parse_enum(kReferenceChoiceNames, name, "reference");
  if (choice.is_ok()) return choice;
  std::string names;  // kiln run's own wording of the error, which its users and tests know
  for (const auto& row : kReferenceChoiceNames) names += std::string(names.empty() ? "" : ", ") + row.name;
  return invalid_argument("reference '" + name + "': expected one of " + names);
}

Disposition RunReport::verdict() const {
  bool passed = false, refused = false;
  for (const auto& c : checks) {
    if (c.verdict == Disposition::kIncorrect || c.verdict == Disposition::kFailed) return c.verdict;
    passed = passed || c.verdict == Disposition::kPassed;
    refused = refused || c.verdict == Disposition::kNotSupported;
  }
  if (passed) return Disposition::kPassed;
  return refused ? Disposition::kNotSupported : Disposition::kNotVerified;
}

namespace {
// --save-outputs: <folder>/<output tensor name>.bin.
std::string output_file(const RunOptions& o, const Graph& graph, size_t i) {
  return o.save_outputs_dir + "/" + graph.tensors[graph.outputs[i]].name + ".bin";
}

// Which references will run: auto takes the host reference only where it is cheap (within the MAC cap
// and at most kHostAutoMaxElements elements in the graph's tensors), the device one otherwise. `host_refused`:
// why the host reference cannot take the graph ("" when it can).
std::vector<ReferenceKind> references_to_run(const Graph& graph, const RunOptions& o, const std::string& host_refused) {
  if (!o.verify) return {};
  switch (o.reference) {
    case ReferenceChoice::kAuto:
      return {host_refused.empty() && graph_elements(graph) <= kHostAutoMaxElements ? ReferenceKind::kHost
                                                                                    : ReferenceKind::kDevice};
    case ReferenceChoice::kHost: return {ReferenceKind::kHost};
    case ReferenceChoice::kDevice: return {ReferenceKind::kDevice};
    case ReferenceChoice::kBoth: return {ReferenceKind::kHost, ReferenceKind::kDevice};
  }
  return {};
}

// --save-outputs: none of the files may exist unless --overwrite-outputs says so.
Status check_output_files(const Graph& graph, const RunOptions& o) {
  if (o.save_outputs_dir.empty()) return Status::ok();
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    FileWriteOptions fo;
    fo.overwrite = o.overwrite_outputs;
    fo.what = "output file";
    KILN_RETURN_IF_ERROR(check_destination(output_file(o, graph, i), fo));
  }
  return Status::ok();
}

// --store, before the GPU is asked: an existing store must read as one, a new one must be possible to make.
Status check_store_path(const RunOptions& o) {
  if (o.store_path.empty()) return Status::ok();
  StoreOpenOptions so;
  so.read_only = true;
  return check_store_destination(o.store_path, so);
}

// The plan the Planner gave, in the report: where it came from, why, its segments, and its notes (logged).
void report_plan(const Graph& graph, const Obtained& got, RunReport& rep) {
  const ExecutablePlan& plan = *got.plan;
  rep.plan_source = got.source;
  if (!got.why.empty()) rep.reasons.push_back(got.why);
  for (const std::string& n : plan.notes()) rep.reasons.push_back(n);
  for (const auto& part : plan.parts()) {
    for (const std::string& n : part->notes()) rep.reasons.push_back(part->graph().name + ": " + n);
    rep.segments.push_back(part->graph().name + ": " + part->identity() + " from " +
                           plan_source_name(part->built_from()));
  }
  if (plan.parts().empty()) rep.config = plan.config();
  rep.workspace_bytes = plan.workspace_bytes();
  rep.obtain_ms = got.obtain_ms;
  for (const std::string& r : rep.reasons) KILN_LOG(kInfo, "graph '" << graph.name << "': " << r);
}

StatusOr<RunReport> run_graph_unchecked(const Graph& graph, const RunOptions& o);
}  // namespace

StatusOr<RunReport> run_graph(const Graph& graph, const RunOptions& o) {
  return catch_exceptions("running graph '" + graph.name + "'", [&] { return run_graph_unchecked(graph, o); });
}

namespace {
StatusOr<RunReport> run_graph_unchecked(const Graph& graph, const RunOptions& o) {
  RunReport rep;
  if (o.verify && !(o.host_max_macs > 0))
    return invalid_argument("the host reference cap must be positive, got " + macs_text(o.host_max_macs));
  // Decided before the GPU is touched: whether the host reference can take the graph.
  std::string host_refused;
  if (o.verify && o.reference != ReferenceChoice::kDevice) {
    KILN_ASSIGN_OR_RETURN(host_refused, host_refusal(graph, o.host_max_macs));
    if (o.reference == ReferenceChoice::kHost && !host_refused.empty())
      return not_supported("--reference host: " + host_refused);
  }
  const std::vector<ReferenceKind> kinds = references_to_run(graph, o, host_refused);
  const bool host_check =
      std::find(kinds.begin(), kinds.end(), ReferenceKind::kHost) != kinds.end() && host_refused.empty();
  // An output file that would be written over is refused before the run, not after it.
  KILN_RETURN_IF_ERROR(check_output_files(graph, o));
  KILN_ASSIGN_OR_RETURN(std::optional<EngineConfig> pin, resolve_pin(graph, o.pin));
  // What the caller named is checked before the GPU is asked: inputs, the store, the re-tune budget.
  if (!o.inputs_dir.empty()) KILN_RETURN_IF_ERROR(check_graph_input_files(graph, o.inputs_dir));
  if (!std::isfinite(o.retune.time_budget_s) || o.retune.time_budget_s < 0)
    return invalid_argument("the re-tune budget (--retune-budget) must be a finite number of seconds >= 0 (0: none)");
  KILN_RETURN_IF_ERROR(check_store_path(o));
  // The stream first: without a usable GPU, its error says so plainly (and names kiln doctor).
  KILN_ASSIGN_OR_RETURN(UniqueStream stream, make_stream());
  // The plan: one Planner call (kiln/runtime/planner.h), as any application obtains one.
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Planner> planner, Planner::create(run_planner_options(o)));
  // Inputs: from files (uploaded), or seeded random, generated on the device where the plan reads them;
  // the host gets a copy (the same values, make_random_inputs) only when the host reference needs one.
  std::map<int, HostTensor> inputs;
  GraphBuffers source;  // the graph's inputs and outputs on the device
  if (!o.inputs_dir.empty()) {
    KILN_ASSIGN_OR_RETURN(inputs, read_graph_inputs(graph, o.inputs_dir));
    KILN_ASSIGN_OR_RETURN(source, allocate_graph_buffers(graph, inputs, 0));
  } else {
    KILN_ASSIGN_OR_RETURN(source, allocate_graph_buffers(graph, 0));
    KILN_RETURN_IF_ERROR(generate_inputs_on_device(graph, o.seed, source.pointers(), stream.get()));
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
    if (host_check) {
      KILN_ASSIGN_OR_RETURN(inputs, make_random_inputs(graph, o.seed));
    }
  }
  KILN_ASSIGN_OR_RETURN(PreparedGraph pg, planner->prepare(graph));
  KILN_ASSIGN_OR_RETURN(Obtained got, pin ? planner->obtain_pinned(pg, *pin) : planner->obtain(pg));
  const ExecutablePlan& plan = *got.plan;
  report_plan(graph, got, rep);
  // On the graph's own buffers, bound by name.
  TensorBindings bindings;
  for (const auto& [t, ptr] : source.pointers()) {
    const std::string& name = graph.tensors[static_cast<size_t>(t)].name;
    if (plan.tensor_bytes(name).is_ok()) bindings[name] = TensorBinding{ptr, source.tensors.at(t).size()};
  }
  KILN_ASSIGN_OR_RETURN(source.workspace,
                        DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(rep.workspace_bytes, 16))));
  auto t0 = Clock::now();
  KILN_RETURN_IF_ERROR(plan.execute(stream.get(), bindings, source.workspace.data()));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));
  rep.run_ms = ms_since(t0);
  const std::map<int, void*> outputs = output_pointers(graph, source);
  // The outputs travel to the host only when they are wanted there.
  if (!o.save_outputs_dir.empty() || host_check) {
    KILN_ASSIGN_OR_RETURN(rep.outputs, download_outputs(graph, source));
  }

  if (!o.save_outputs_dir.empty())
    for (size_t i = 0; i < graph.outputs.size(); ++i)
      KILN_RETURN_IF_ERROR(rep.outputs[i].write_file(output_file(o, graph, i), o.overwrite_outputs));
  if (o.verify) {
    // The device reference and comparison stay on the device: from the inputs where the plan read them.
    auto device_check = [&]() -> StatusOr<CheckReport> {
      KILN_ASSIGN_OR_RETURN(DeviceChecker checker, DeviceChecker::create(graph, o.check));
      if (!has_dropout(graph)) {
        KILN_ASSIGN_OR_RETURN(DeviceReference ref, device_reference_on_device(graph, source.pointers()));
        return checker.check(outputs, ref, stream.get());
      }
      // Dropout: the mask the plan draws is probed (the outputs are written over), then the plan runs again on the
      // same inputs, seed and offset, and is checked against the reference made with that mask.
      const auto run = [&] { return plan.execute(stream.get(), bindings, source.workspace.data()); };
      return check_dropout_plan(graph, source.pointers(), run, checker, stream.get());
    };
    for (ReferenceKind kind : kinds) {
      RunReport::ReferenceCheck c;
      c.kind = kind;
      if (kind == ReferenceKind::kHost && !host_refused.empty()) {
        c.verdict = Disposition::kNotSupported;
        c.message = host_refused;
        rep.checks.push_back(std::move(c));
        continue;
      }
      StatusOr<CheckReport> cr = kind == ReferenceKind::kHost
                                     ? check_against(graph, rep.outputs, inputs, kind, o.host_max_macs, o.check)
                                     : device_check();
      if (!cr.is_ok() && o.reference == ReferenceChoice::kAuto && kind == ReferenceKind::kHost) {
        // As before --reference existed: a host reference that fails gives way to the device reference.
        KILN_LOG(kInfo, "graph '" << graph.name
                                  << "': host reference failed, using the device reference: " << cr.status().message());
        c.kind = ReferenceKind::kDevice;
        cr = device_check();
      }
      if (!cr.is_ok()) return cr.status().with_context(std::string(reference_kind_name(c.kind)) + " reference");
      c.verdict = cr->verdict;
      c.report = std::move(cr).value();
      if (!rep.check) rep.check = c.report;
      rep.references_run.push_back(c.kind);
      rep.checks.push_back(std::move(c));
    }
  }
  return rep;
}
}  // namespace

}  // namespace kiln
