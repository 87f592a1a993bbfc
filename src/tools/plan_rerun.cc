// Two configurations of one graph re-run side by side on this GPU (kiln/tools/plan_rerun.h).
#include "kiln/tools/plan_rerun.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <vector>

#include "kiln/lower/lower.h"
#include "kiln/validate/device_io.h"
#include "kiln/validate/reference.h"

namespace kiln {
namespace {

// One side built and run once: its outputs, or why not.
struct Built {
  std::optional<LoweredGraph> plan;
  std::optional<GraphBuffers> buffers;
  std::vector<HostTensor> outputs;
};

Status build_and_run(const Graph& graph, const EngineConfig& config, const std::map<int, HostTensor>& inputs,
                     cudnnHandle_t handle, cudaStream_t stream, Built* b, RerunSide* side) {
  LowerTarget target;
  target.handle = handle;
  KILN_ASSIGN_OR_RETURN(LoweredGraph lg, LoweredGraph::create(graph, target));
  Status built = lg.build_config(config);
  if (!built.is_ok()) {
    side->why = "not offered by this cuDNN for this graph: " + built.message();
    return built;
  }
  KILN_ASSIGN_OR_RETURN(GraphBuffers buffers, allocate_graph_buffers(graph, inputs, lg.workspace_size()));
  if (cudnnSetStream(handle, stream) != CUDNN_STATUS_SUCCESS) return unavailable("cudnnSetStream failed");
  Status run = lg.execute(handle, buffers.pointers(), buffers.workspace.data());
  if (run.is_ok()) run = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (!run.is_ok()) {
    (void)cudaGetLastError();
    side->why = "did not run: " + run.message();
    return run;
  }
  KILN_ASSIGN_OR_RETURN(b->outputs, download_outputs(graph, buffers));
  b->plan.emplace(std::move(lg));
  b->buffers.emplace(std::move(buffers));
  side->ran = true;
  return Status::ok();
}

void check_side(const Graph& graph, const Built& b, const std::optional<ReferenceOutputs>& ref, ReferenceKind kind,
                const std::string& no_ref, const CheckOptions& options, RerunSide* side) {
  DeepCheckResult& r = side->check;
  r.reference_kind = kind;
  if (!ref) {
    r.verdict = Disposition::kNotVerified;
    r.message = "ran, but no reference: " + no_ref;
    return;
  }
  StatusOr<CheckReport> check = check_outputs(graph, b.outputs, *ref, options);
  if (!check.is_ok()) {
    r.verdict = Disposition::kFailed;
    r.message = "cannot compare with the reference: " + check.status().message();
    return;
  }
  r.take(*check);
}

// The two sides' outputs against each other (same inputs): the largest difference, and the worst output's nmse. A NaN
// difference is an infinite one (std::max would drop it); outputs that differ in number or size are reported as such.
void compare_sides(const Built& a, const Built& b, RerunResult* out) {
  if (a.outputs.size() != b.outputs.size()) {
    out->max_abs_between = out->nmse_between = INFINITY;
    out->note = std::to_string(a.outputs.size()) + " outputs against " + std::to_string(b.outputs.size());
    return;
  }
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const std::vector<double> x = a.outputs[i].values(), y = b.outputs[i].values();
    if (x.size() != y.size()) {
      out->max_abs_between = out->nmse_between = INFINITY;
      out->note = "output " + std::to_string(i) + ": " + std::to_string(x.size()) + " elements against " +
                  std::to_string(y.size());
      return;
    }
    double err = 0, norm = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      const double d = y[k] - x[k];
      out->max_abs_between = std::max(out->max_abs_between, std::isnan(d) ? INFINITY : std::fabs(d));
      err += d * d;
      norm += x[k] * x[k];
    }
    double nmse = norm > 0 ? err / norm : (err > 0 ? INFINITY : 0);
    if (std::isnan(nmse)) nmse = INFINITY;
    out->nmse_between = std::max(out->nmse_between, nmse);
  }
}

// Times both sides in alternation, `rounds` times each; each side's figures are its rounds' median.
void time_sides(Built* a, Built* b, cudnnHandle_t handle, const RerunOptions& o, RerunResult* out) {
  std::vector<Measurement> ma, mb;
  auto launch_of = [&](Built* s) {
    return [s, handle](cudaStream_t stream) -> Status {
      if (cudnnSetStream(handle, stream) != CUDNN_STATUS_SUCCESS) return unavailable("cudnnSetStream failed");
      return s->plan->execute(handle, s->buffers->pointers(), s->buffers->workspace.data());
    };
  };
  // Rounds alternate the order (from, to, then to, from, ...): whichever runs second meets a warmer GPU.
  for (int r = 0; r < std::max(2, o.rounds); ++r) {
    Built* const order[2] = {r % 2 == 0 ? a : b, r % 2 == 0 ? b : a};
    for (Built* s : order) {
      RerunSide& side = s == a ? out->from : out->to;
      StatusOr<Measurement> m = measure(launch_of(s), o.measure);
      if (!m.is_ok()) {
        side.why = "ran once, but could not be timed: " + m.status().message();
        continue;
      }
      if (m->throttled) side.throttled = true;
      (s == a ? ma : mb).push_back(std::move(m).value());
    }
  }
  auto summarize = [](std::vector<Measurement>& ms, RerunSide* side) {
    if (ms.empty()) return;
    std::sort(ms.begin(), ms.end(),
              [](const Measurement& x, const Measurement& y) { return x.stats.median_ms < y.stats.median_ms; });
    const Measurement& mid = ms[ms.size() / 2];
    side->median_ms = mid.stats.median_ms;
    side->min_ms = mid.stats.min_ms;
    side->rel_error = mid.stats.rel_error;
    for (const Measurement& m : ms) side->samples += static_cast<int>(m.stats.samples);
  };
  summarize(ma, &out->from);
  summarize(mb, &out->to);
  if (out->from.median_ms > 0 && out->to.median_ms > 0) out->time_ratio = out->to.median_ms / out->from.median_ms;
}

}  // namespace

RerunResult rerun_configs(const Graph& graph, const EngineConfig& from, const EngineConfig& to, cudnnHandle_t handle,
                          cudaStream_t stream, const RerunOptions& options) {
  RerunResult out;
  out.from.config = from.identity();
  out.to.config = to.identity();
  StatusOr<std::map<int, HostTensor>> inputs = make_random_inputs(graph, options.check.seed);
  if (!inputs.is_ok()) {
    out.from.why = out.to.why = "no inputs: " + inputs.status().message();
    return out;
  }
  Built a, b;
  Status sa = build_and_run(graph, from, *inputs, handle, stream, &a, &out.from);
  if (!sa.is_ok() && out.from.why.empty()) out.from.why = sa.message();
  Status sb = build_and_run(graph, to, *inputs, handle, stream, &b, &out.to);
  if (!sb.is_ok() && out.to.why.empty()) out.to.why = sb.message();
  // The reference once, for both: the host's, else the device's.
  std::optional<ReferenceOutputs> ref;
  ReferenceKind kind = ReferenceKind::kNone;
  std::string no_ref;
  if (out.from.ran || out.to.ran) {
    StatusOr<ReferenceOutputs> host = run_host_reference_with_magnitudes(graph, *inputs);
    if (host.is_ok()) {
      ref = std::move(host).value();
      kind = ReferenceKind::kHost;
    } else {
      StatusOr<ReferenceOutputs> dev = run_device_reference_with_magnitudes(graph, *inputs);
      if (dev.is_ok()) {
        ref = std::move(dev).value();
        kind = ReferenceKind::kDevice;
      } else {
        no_ref = host.status().message() + "; " + dev.status().message();
      }
    }
  }
  if (out.from.ran) check_side(graph, a, ref, kind, no_ref, options.check.check, &out.from);
  if (out.to.ran) check_side(graph, b, ref, kind, no_ref, options.check.check, &out.to);
  if (!out.both_ran()) return out;
  compare_sides(a, b, &out);
  MeasureOptions m = options.measure;
  if (m.stream == nullptr) m.stream = stream;
  RerunOptions timed = options;
  timed.measure = m;
  time_sides(&a, &b, handle, timed, &out);
  return out;
}

}  // namespace kiln
