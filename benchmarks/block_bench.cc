// One transformer block as a chain of Kiln graphs (issue 15): every step's plan from a kiln::Planner (the
// store's tuned plan when --store holds one, else cuDNN's heuristics), the steps bound to shared device
// buffers (views at element offsets: attention reads Q, K and V inside the QKV projection's output), and
// the block timed launched on the stream (ExecutablePlan::execute per step) and replayed from one CUDA
// graph (CapturedSequence).
//
//   block_bench --block FILE [--store S] [--wall-iters N] [--out FILE]
//
// FILE (written by bench/suite/kiln_side.py from bench/suite/shapes.py's block_specs):
//   {"name": "...", "buffers": {"x": ELEMENTS, ..., "ln1_g": ELEMENTS},
//    "steps": [{"spec_file": "path.json", "bind": {"tensor": ["buffer", ELEMENT_OFFSET]}}]}
// Buffers are bf16 unless their name ends in "_f32"; each is filled with uniform random values (weights
// scaled by 1/sqrt(fan-in), norm scales 1, norm biases 0), never zeros (a GEMM over zeros draws less power
// and runs faster than on real data).
// The graph is timed before the stream launches, and each measurement's SM clocks are kept (a sustained
// GEMM-heavy block can run into the GPU's power cap: NVML's sw_power_cap, a lower clock).
// Times (ms per block): gpu = kiln::Timer's median (L2 flushed before each sample, the stream held by a
// spinning kernel while the sample is enqueued, so host launch cost is hidden; docs/measure.md), and wall =
// host wall time per call of a loop of --wall-iters calls, synchronised at the end. Needs a GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/capture/capture.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/measure/measure.h"
#include "kiln/runtime/planner.h"
#include "kiln/spec/spec.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "block_bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  return 1;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

// Uniform values in [-scale, scale] (or the constant `fill` when scale is 0), bf16 or fp32.
Status fill_random(DeviceBuffer* buf, size_t elements, bool f32, float scale, float fill, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&s] {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return static_cast<float>((s >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
  };
  if (f32) {
    std::vector<float> h(elements);
    for (float& v : h) v = scale > 0 ? scale * next() : fill;
    return buf->copy_from_host(h.data(), elements * sizeof(float));
  }
  std::vector<uint16_t> h(elements);
  for (uint16_t& v : h) v = to_bf16(scale > 0 ? scale * next() : fill);
  return buf->copy_from_host(h.data(), elements * sizeof(uint16_t));
}

struct Timing {
  double gpu_ms = 0, wall_ms = 0;
  size_t samples = 0;
  nlohmann::json clocks;
};

StatusOr<Timing> time_block(Timer& timer, cudaStream_t stream, int wall_iters, const LaunchFn& launch) {
  MeasureOptions mo;
  mo.stream = stream;
  KILN_ASSIGN_OR_RETURN(Measurement m, timer.measure(launch, mo));
  Timing t;
  t.gpu_ms = m.median_ms();
  t.samples = m.stats.samples;
  t.clocks = m.meta();
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const auto t0 = Clock::now();
  for (int i = 0; i < wall_iters; ++i) KILN_RETURN_IF_ERROR(launch(stream));
  KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  t.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / wall_iters;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  std::string block_file, store, out;
  int wall_iters = 200;
  const char* usage = "usage: block_bench --block FILE [--store S] [--wall-iters N] [--out FILE]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--block" && more) block_file = argv[++i];
    else if (a == "--store" && more) store = argv[++i];
    else if (a == "--wall-iters" && more) wall_iters = std::atoi(argv[++i]);
    else if (a == "--out" && more) out = argv[++i];
    else {
      std::fprintf(stderr, "%s", usage);
      return 2;
    }
  }
  if (block_file.empty() || wall_iters < 1) {
    std::fprintf(stderr, "%s--block is required, --wall-iters >= 1\n", usage);
    return 2;
  }
  nlohmann::json desc;
  {
    std::ifstream f(block_file);
    desc = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (desc.is_discarded() || !desc.is_object() || !desc.contains("buffers") || !desc.contains("steps")) {
      std::fprintf(stderr, "block_bench: %s: not a block description (JSON with buffers and steps)\n",
                   block_file.c_str());
      return 2;
    }
  }

  PlannerOptions po;
  po.store_path = store;
  po.handles = 1;
  po.new_shapes = NewShapes::kBuildNow;  // static plans only: the store's tuned one, else heuristics
  auto planner = Planner::create(po);
  if (!planner.is_ok()) return fail("Planner::create", planner.status());
  auto stream = make_stream();
  if (!stream.is_ok()) return fail("stream", stream.status());

  // Buffers, filled.
  std::map<std::string, DeviceBuffer> buffers;
  std::map<std::string, size_t> elements;
  uint64_t seed = 1;
  for (auto& [name, n] : desc["buffers"].items()) {
    const bool f32 = ends_with(name, "_f32");
    const size_t count = n.get<size_t>();
    auto buf = DeviceBuffer::allocate(count * (f32 ? 4 : 2));
    if (!buf.is_ok()) return fail("allocate " + name, buf.status());
    // Weights: 1/sqrt(fan-in) with fan-in = elements / out features is not known here; the QKV, out and MLP
    // weights all have fan-in 4096 or 16384, so 0.02 keeps activations of order 1. Norm scale 1, bias 0.
    float scale = 1.0f, fill = 0.0f;
    if (name.rfind("w", 0) == 0 || name == "b1") scale = 0.02f;
    // Norm parameters (fp32 "*_f32", or in the activations' dtype: "ln1_g", "ln1_b", ...): scale 1, bias 0.
    const bool norm_param = name.rfind("ln", 0) == 0;
    if (f32 || norm_param) scale = 0.0f, fill = (ends_with(name, "_g_f32") || ends_with(name, "_g")) ? 1.0f : 0.0f;
    Status st = fill_random(&*buf, count, f32, scale, fill, seed++);
    if (!st.is_ok()) return fail("fill " + name, st);
    elements[name] = count;
    buffers.emplace(name, std::move(*buf));
  }

  // Plans and bindings.
  std::vector<CaptureStep> steps;
  nlohmann::json step_rows = nlohmann::json::array();
  int64_t max_ws = 16;
  std::vector<std::shared_ptr<const ExecutablePlan>> plans;
  for (const auto& s : desc["steps"]) {
    const std::string spec = s.value("spec_file", "");
    auto g = parse_spec_file(spec);
    if (!g.is_ok()) return fail("spec " + spec, g.status());
    const auto t0 = Clock::now();
    auto p = (*planner)->obtain(*g);
    if (!p.is_ok()) return fail("obtain " + spec, p.status());
    const double obtain_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    plans.push_back(p->plan);
    max_ws = std::max(max_ws, p->plan->workspace_bytes());
    TensorBindings tb;
    for (auto& [tensor, where] : s["bind"].items()) {
      const std::string buf = where.at(0).get<std::string>();
      const size_t offset = where.at(1).get<size_t>();
      if (!buffers.count(buf) || offset >= elements[buf]) {
        std::fprintf(stderr, "block_bench: %s: tensor '%s' bound to unknown buffer '%s' or offset %zu past it\n",
                     spec.c_str(), tensor.c_str(), buf.c_str(), offset);
        return 2;
      }
      const size_t esize = ends_with(buf, "_f32") ? 4 : 2;
      char* base = static_cast<char*>(buffers.at(buf).data()) + offset * esize;
      auto need = p->plan->tensor_bytes(tensor);
      if (!need.is_ok()) return fail(spec + ": tensor " + tensor, need.status());
      const size_t have = (elements[buf] - offset) * esize;
      if (*need > have) {
        std::fprintf(stderr, "block_bench: %s: tensor '%s' needs %zu bytes, buffer '%s' has %zu from offset %zu\n",
                     spec.c_str(), tensor.c_str(), *need, buf.c_str(), have, offset);
        return 2;
      }
      tb[tensor] = TensorBinding{base, *need};
    }
    steps.push_back({p->plan, tb, nullptr});
    step_rows.push_back({{"spec", spec},
                         {"graph", g->name},
                         {"plan", p->plan->identity()},
                         {"plan_source", plan_source_name(p->plan->built_from())},
                         {"obtain_ms", obtain_ms},
                         {"workspace_bytes", p->plan->workspace_bytes()}});
  }
  auto ws = DeviceBuffer::allocate(static_cast<size_t>(max_ws));
  if (!ws.is_ok()) return fail("workspace", ws.status());
  for (CaptureStep& s : steps) s.workspace = ws->data();  // steps run in order on one stream: one workspace

  auto timer = Timer::create();
  if (!timer.is_ok()) return fail("timer", timer.status());
  const cudaStream_t st = stream->get();

  // Each step alone (stream launches), then the block on the stream and from one CUDA graph.
  for (size_t i = 0; i < steps.size(); ++i) {
    const CaptureStep& s = steps[i];
    auto t = time_block(*timer, st, 20, [&s](cudaStream_t x) { return s.plan->execute(x, s.tensors, s.workspace); });
    if (!t.is_ok()) return fail("step " + step_rows[i]["graph"].get<std::string>(), t.status());
    step_rows[i]["gpu_ms"] = t->gpu_ms;
  }
  CaptureOptions co;
  co.cuda_graphs = true;
  auto seq = CapturedSequence::create(**planner, steps, co);
  if (!seq.is_ok()) return fail("CapturedSequence::create", seq.status());
  Status cs = (*seq)->capture(st);
  if (!cs.is_ok()) return fail("capture", cs);
  auto graph_t = time_block(*timer, st, wall_iters, [&](cudaStream_t x) { return (*seq)->replay(x); });
  if (!graph_t.is_ok()) return fail("block from the CUDA graph", graph_t.status());

  auto stream_t = time_block(*timer, st, wall_iters, [&](cudaStream_t x) -> Status {
    for (const CaptureStep& s : steps) KILN_RETURN_IF_ERROR(s.plan->execute(x, s.tensors, s.workspace));
    return Status::ok();
  });
  if (!stream_t.is_ok()) return fail("block on the stream", stream_t.status());
  double sum_steps = 0;
  for (const auto& r : step_rows) sum_steps += r["gpu_ms"].get<double>();
  std::printf("block_bench %s: %zu steps\n", desc.value("name", block_file).c_str(), steps.size());
  for (const auto& r : step_rows)
    std::printf("  %-28s %-40s %-10s %9.4f ms\n", r["graph"].get<std::string>().c_str(),
                r["plan"].get<std::string>().c_str(), r["plan_source"].get<std::string>().c_str(),
                r["gpu_ms"].get<double>());
  std::printf("  sum of steps timed alone: %.4f ms\n", sum_steps);
  auto mhz = [](const Timing& t) { return t.clocks.value("clocks", nlohmann::json::object()).value("min_sm_mhz", 0); };
  std::printf("  block, one CUDA graph:  gpu %.4f ms, wall %.4f ms per call (min SM clock %d MHz)\n", graph_t->gpu_ms,
              graph_t->wall_ms, mhz(*graph_t));
  std::printf("  block, stream launches: gpu %.4f ms, wall %.4f ms per call (min SM clock %d MHz)\n", stream_t->gpu_ms,
              stream_t->wall_ms, mhz(*stream_t));

  if (!out.empty()) {
    nlohmann::json j;
    j["benchmark"] = "block_bench";
    j["method"] = "Plans from kiln::Planner (store when given, else heuristics), bound to shared buffers filled with "
                  "uniform random data. gpu_ms: kiln::Timer median (L2 flushed before each sample, stream held by a "
                  "spinning kernel while the sample is enqueued); wall_ms: host wall time per call over --wall-iters "
                  "calls, synchronised at the end. stream = ExecutablePlan::execute per step; graph = one "
                  "CapturedSequence::replay.";
    j["block"] = desc.value("name", block_file);
    j["steps"] = step_rows;
    j["sum_of_steps_ms"] = sum_steps;
    j["stream_ms"] = stream_t->gpu_ms;
    j["stream_wall_ms"] = stream_t->wall_ms;
    j["graph_ms"] = graph_t->gpu_ms;
    j["graph_wall_ms"] = graph_t->wall_ms;
    j["graph_clocks"] = graph_t->clocks;
    j["stream_clocks"] = stream_t->clocks;
    j["capture_stats"] = (*seq)->stats().text();
    std::vector<std::string> args(argv, argv + argc);
    j["meta"] = environment_meta(args);
    std::ofstream f(out);
    f << j.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "block_bench: cannot write %s\n", out.c_str());
      return 3;
    }
  }
  return 0;
}
