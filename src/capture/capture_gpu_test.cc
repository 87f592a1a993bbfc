// CapturedSequence on the GPU: a Planner's conv + bias + ReLU captured and replayed, its output equal bit for
// bit to a stream launch and within the device reference's band; rebound to new buffers (updated in place,
// and re-instantiated when asked), outputs checked again; a chain of ten plans in one graph, every step's
// output checked; an update CUDA refuses (a node of another type) taken by re-instantiation; a step that
// fails under capture leaves the stream out of capture mode.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "gpu_test_util.h"
#include "kiln/capture/capture.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/runtime/planner.h"
#include "kiln/runtime/planner_jobs.h"
#include "kiln/runtime/retune.h"
#include "kiln/runtime/shape_recorder.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_check.h"

namespace kiln {
namespace {

// The caller's buffers for one plan: inputs filled with Kiln's values for `seed`, outputs poisoned.
struct Buffers {
  std::map<std::string, DeviceBuffer> owned;
  DeviceBuffer workspace;
  TensorBindings bindings;
  std::map<int, void*> inputs, outputs;
};

Buffers make_buffers(const ExecutablePlan& plan, uint64_t seed) {
  Buffers b;
  const Graph& g = plan.graph();
  std::map<int, void*> all;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const TensorDesc& d = g.tensors[i];
    auto bytes = plan.tensor_bytes(d.name);
    if (!bytes.is_ok()) continue;  // virtual or by value
    auto buf = DeviceBuffer::allocate(*bytes);
    EXPECT_TRUE(buf.is_ok());
    b.bindings[d.name] = TensorBinding{buf->data(), *bytes};
    all[static_cast<int>(i)] = buf->data();
    (g.is_graph_output(static_cast<int>(i)) ? b.outputs : b.inputs)[static_cast<int>(i)] = buf->data();
    if (g.is_graph_output(static_cast<int>(i))) {
      EXPECT_TRUE(buf->fill_bytes(0xFF).is_ok());
    }
    b.owned.emplace(d.name, std::move(buf).value());
  }
  EXPECT_TRUE(generate_inputs_on_device(g, seed, all).is_ok());
  auto ws = DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(plan.workspace_bytes(), 16)));
  EXPECT_TRUE(ws.is_ok());
  b.workspace = std::move(ws).value();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return b;
}

std::vector<uint8_t> download(const DeviceBuffer& b) {
  std::vector<uint8_t> h(b.size());
  EXPECT_TRUE(b.copy_to_host(h.data(), h.size()).is_ok());
  return h;
}

// The plan's outputs in `outputs` against the device reference of `inputs`.
void check_against_reference(const ExecutablePlan& plan, const std::map<int, void*>& inputs,
                             const std::map<int, void*>& outputs, const std::string& what) {
  SCOPED_TRACE(what);
  auto ref = device_reference_on_device(plan.graph(), inputs);
  ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
  auto checker = DeviceChecker::create(plan.graph());
  ASSERT_TRUE(checker.is_ok()) << checker.status().to_string();
  auto rep = checker->check(outputs, *ref);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  std::printf("[ capture ] %s: %s %s\n", what.c_str(), plan.config().identity().c_str(), rep->summary().c_str());
  EXPECT_EQ(rep->verdict, Disposition::kPassed) << rep->summary();
}

std::shared_ptr<const ExecutablePlan> obtain(Planner& planner, const std::string& spec) {
  auto g = parse_spec_string(spec, "capture.json");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  if (!g.is_ok()) return nullptr;
  auto got = planner.obtain(*g);
  EXPECT_TRUE(got.is_ok()) << got.status().to_string();
  return got.is_ok() ? got->plan : nullptr;
}

std::shared_ptr<const ExecutablePlan> obtain_file(Planner& planner, const std::string& path) {
  auto g = parse_spec_file(path);
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  if (!g.is_ok()) return nullptr;
  auto got = planner.obtain(*g);
  EXPECT_TRUE(got.is_ok()) << got.status().to_string();
  return got.is_ok() ? got->plan : nullptr;
}

// Static plans (never a dynamic-shape stopgap, which the Planner would later promote under the sequence).
PlannerOptions static_options() {
  PlannerOptions o;
  o.new_shapes = NewShapes::kBuildNow;
  return o;
}

const std::string kConvSpec = std::string(KILN_SOURCE_DIR) + "/examples/small/conv_bias_relu.json";

// The conv's output through a stream launch, on `b`.
std::vector<uint8_t> stream_launched(const ExecutablePlan& plan, Buffers& b, cudaStream_t stream) {
  EXPECT_TRUE(b.owned.at("y").fill_bytes(0xFF, stream).is_ok());
  Status st = plan.execute(stream, b.bindings, b.workspace.data());
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return download(b.owned.at("y"));
}

TEST(CaptureGpu, OnePlanReplaysBitForBitAsAStreamLaunchAndRebindsInPlace) {
  KILN_REQUIRE_GPU();
  auto planner = Planner::create(static_options());
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  auto plan = obtain_file(**planner, kConvSpec);
  ASSERT_TRUE(plan);
  auto stream = make_stream();
  ASSERT_TRUE(stream.is_ok());
  cudaStream_t s = stream->get();

  Buffers a = make_buffers(*plan, 42), b = make_buffers(*plan, 7);
  const std::vector<uint8_t> want_a = stream_launched(*plan, a, s), want_b = stream_launched(*plan, b, s);
  ASSERT_NE(want_a, want_b);  // the two seeds give two outputs

  auto seq = CapturedSequence::create(**planner, {{plan, a.bindings, a.workspace.data()}});
  ASSERT_TRUE(seq.is_ok()) << seq.status().to_string();
  ASSERT_TRUE((*seq)->uses_graphs());
  Status st = (*seq)->capture(s);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  cudaStreamCaptureStatus cs;
  ASSERT_EQ(cudaStreamIsCapturing(s, &cs), cudaSuccess);
  EXPECT_EQ(cs, cudaStreamCaptureStatusNone);
  ASSERT_TRUE(a.owned.at("y").fill_bytes(0xFF, s).is_ok());  // what the warm-up wrote is gone
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*seq)->replay(s).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(download(a.owned.at("y")), want_a);
  check_against_reference(*plan, a.inputs, a.outputs, "replayed");

  // New buffers: updated in place; the old output is no longer written.
  st = (*seq)->rebind({{plan, b.bindings, b.workspace.data()}}, s);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  CaptureStats stats = (*seq)->stats();
  EXPECT_EQ(stats.updates, 1) << stats.text();
  EXPECT_EQ(stats.reinstantiations, 0) << stats.text();
  ASSERT_TRUE(a.owned.at("y").fill_bytes(0xFF, s).is_ok());
  ASSERT_TRUE(b.owned.at("y").fill_bytes(0xFF, s).is_ok());
  ASSERT_TRUE((*seq)->replay(s).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(download(b.owned.at("y")), want_b);
  EXPECT_EQ(download(a.owned.at("y")), std::vector<uint8_t>(want_a.size(), 0xFF));
  check_against_reference(*plan, b.inputs, b.outputs, "updated in place");

  stats = (*seq)->stats();
  EXPECT_EQ(stats.captures, 2);
  EXPECT_EQ(stats.instantiations, 1);
  EXPECT_EQ(stats.replays, 4);
  std::printf("[ capture ] %s\n", stats.text().c_str());
  const PlannerStats ps = (*planner)->stats();
  EXPECT_EQ(ps.graph_captures, 2);
  EXPECT_EQ(ps.graph_replays, 4);
  EXPECT_EQ(ps.graph_updates, 1);
  std::printf("[ capture ] planner: %s\n", ps.text().c_str());
}

TEST(CaptureGpu, RebindReinstantiatesWhenAskedAndTheOutputIsRight) {
  KILN_REQUIRE_GPU();
  auto planner = Planner::create(static_options());
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  auto plan = obtain_file(**planner, kConvSpec);
  ASSERT_TRUE(plan);
  auto stream = make_stream();
  ASSERT_TRUE(stream.is_ok());
  cudaStream_t s = stream->get();
  Buffers a = make_buffers(*plan, 42), b = make_buffers(*plan, 7);
  const std::vector<uint8_t> want_b = stream_launched(*plan, b, s);
  CaptureOptions o;
  o.update_in_place = false;
  auto seq = CapturedSequence::create(**planner, {{plan, a.bindings, a.workspace.data()}}, o);
  ASSERT_TRUE(seq.is_ok()) << seq.status().to_string();
  ASSERT_TRUE((*seq)->replay(s).is_ok());  // captures first
  Status st = (*seq)->rebind({{plan, b.bindings, b.workspace.data()}}, s);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  ASSERT_TRUE(b.owned.at("y").fill_bytes(0xFF, s).is_ok());
  ASSERT_TRUE((*seq)->replay(s).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(download(b.owned.at("y")), want_b);
  const CaptureStats stats = (*seq)->stats();
  EXPECT_EQ(stats.updates, 0) << stats.text();
  EXPECT_EQ(stats.update_refusals, 0) << stats.text();
  EXPECT_EQ(stats.reinstantiations, 1) << stats.text();
  EXPECT_EQ(stats.instantiations, 2) << stats.text();
}

// y = x + b, chained: step i reads the output of step i-1.
const std::string kBiasSpec = R"({
  "name": "bias_chain", "io_dtype": "fp16",
  "tensors": {"x": {"dims": [1, 32, 256]}, "b": {"dims": [1, 1, 256]}},
  "nodes": [{"name": "add", "op": "bias_add", "inputs": ["x", "b"], "outputs": ["y"]}],
  "outputs": ["y"]})";

int index_of(const Graph& g, const std::string& name) {
  for (size_t i = 0; i < g.tensors.size(); ++i)
    if (g.tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

TEST(CaptureGpu, AChainOfTenPlansInOneGraphEveryOutputChecked) {
  KILN_REQUIRE_GPU();
  auto planner = Planner::create(static_options());
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  auto plan = obtain(**planner, kBiasSpec);
  ASSERT_TRUE(plan);
  const Graph& g = plan->graph();
  const int xi = index_of(g, "x"), bi = index_of(g, "b"), yi = index_of(g, "y");
  ASSERT_TRUE(xi >= 0 && bi >= 0 && yi >= 0);
  auto stream = make_stream();
  ASSERT_TRUE(stream.is_ok());
  cudaStream_t s = stream->get();
  constexpr int kSteps = 10;
  Buffers first = make_buffers(*plan, 42);  // x and b seeded
  const size_t bytes = *plan->tensor_bytes("x");
  std::vector<DeviceBuffer> outs;
  for (int i = 0; i < kSteps; ++i) {
    auto o = DeviceBuffer::allocate(bytes);
    ASSERT_TRUE(o.is_ok());
    outs.push_back(std::move(o).value());
  }
  std::vector<CaptureStep> steps;
  for (int i = 0; i < kSteps; ++i) {
    void* in = i == 0 ? first.bindings.at("x").ptr : outs[static_cast<size_t>(i - 1)].data();
    void* out = outs[static_cast<size_t>(i)].data();
    steps.push_back(
        {plan, {{"x", {in, bytes}}, {"b", first.bindings.at("b")}, {"y", {out, bytes}}}, first.workspace.data()});
  }
  // Stream launches first: what each step gives.
  for (const CaptureStep& st : steps) ASSERT_TRUE(st.plan->execute(s, st.tensors, st.workspace).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  std::vector<std::vector<uint8_t>> want;
  for (const DeviceBuffer& o : outs) want.push_back(download(o));

  CaptureOptions opt;
  opt.warm_up = false;  // the replay alone writes the outputs
  auto seq = CapturedSequence::create(**planner, steps, opt);
  ASSERT_TRUE(seq.is_ok()) << seq.status().to_string();
  for (DeviceBuffer& o : outs) ASSERT_TRUE(o.fill_bytes(0xFF, s).is_ok());
  ASSERT_TRUE((*seq)->capture(s).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(download(outs.back()), std::vector<uint8_t>(bytes, 0xFF));  // captured, not run
  Status st = (*seq)->replay(s);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  for (int i = 0; i < kSteps; ++i) {
    EXPECT_EQ(download(outs[static_cast<size_t>(i)]), want[static_cast<size_t>(i)]) << "step " << i;
    void* in = i == 0 ? first.bindings.at("x").ptr : outs[static_cast<size_t>(i - 1)].data();
    check_against_reference(*plan, {{xi, in}, {bi, first.bindings.at("b").ptr}},
                            {{yi, outs[static_cast<size_t>(i)].data()}}, "chain step " + std::to_string(i));
  }
  const CaptureStats stats = (*seq)->stats();
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.replays, 1);
  std::printf("[ capture ] chain of %d: %s\n", kSteps, stats.text().c_str());
}

// A plan whose work is a copy x -> y, or (with a workspace bound) a memset of y: a rebind that changes the
// workspace changes the node's type, an update CUDA refuses. Under capture it can also misbehave on purpose.
class CopyExecutor : public PlanExecutor {
 public:
  CopyExecutor(int x, int y, size_t bytes, bool* sync_under_capture)
      : x_(x), y_(y), bytes_(bytes), sync_under_capture_(sync_under_capture) {}
  Status run(cudaStream_t stream, const std::map<int, void*>& p, void* workspace) const override {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    KILN_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &cs));
    if (*sync_under_capture_ && cs != cudaStreamCaptureStatusNone)
      KILN_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // not allowed under capture
    if (workspace) KILN_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p.at(y_), 0x11, bytes_, stream));
    else KILN_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p.at(y_), p.at(x_), bytes_, cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  }

 private:
  int x_, y_;
  size_t bytes_;
  bool* sync_under_capture_;
};

struct CopyPlan {
  bool sync_under_capture = false;
  std::shared_ptr<const ExecutablePlan> plan;
  size_t bytes = 0;
  CopyPlan() {
    auto g = parse_spec_string(R"({"name": "copy", "io_dtype": "fp16", "tensors": {"x": {"dims": [4, 256]}},
      "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})",
                               "copy.json");
    EXPECT_TRUE(g.is_ok()) << g.status().to_string();
    auto sig = compute_signature(*g);
    EXPECT_TRUE(sig.is_ok()) << sig.status().to_string();
    bytes = 4 * 256 * 2;
    plan = std::make_shared<ExecutablePlan>(
        *g, *sig, EngineConfig{0, {}}, 0, PlanSource::kHeuristics,
        std::make_unique<CopyExecutor>(index_of(*g, "x"), index_of(*g, "y"), bytes, &sync_under_capture));
  }
};

TEST(CaptureGpu, ARefusedUpdateIsReinstantiatedAndSaidSo) {
  KILN_REQUIRE_GPU();
  auto planner = Planner::create(static_options());
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  CopyPlan cp;
  auto stream = make_stream();
  ASSERT_TRUE(stream.is_ok());
  cudaStream_t s = stream->get();
  auto x = DeviceBuffer::allocate(cp.bytes), y = DeviceBuffer::allocate(cp.bytes), ws = DeviceBuffer::allocate(16);
  ASSERT_TRUE(x.is_ok() && y.is_ok() && ws.is_ok());
  ASSERT_TRUE(x->fill_bytes(0x3C, s).is_ok());
  const TensorBindings t = {{"x", {x->data(), cp.bytes}}, {"y", {y->data(), cp.bytes}}};
  auto seq = CapturedSequence::create(**planner, {{cp.plan, t, nullptr}});
  ASSERT_TRUE(seq.is_ok()) << seq.status().to_string();
  ASSERT_TRUE((*seq)->replay(s).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(download(*y), std::vector<uint8_t>(cp.bytes, 0x3C));
  Status st = (*seq)->rebind({{cp.plan, t, ws->data()}}, s);  // a memset node where a copy was
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  ASSERT_TRUE((*seq)->replay(s).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(download(*y), std::vector<uint8_t>(cp.bytes, 0x11));
  const CaptureStats stats = (*seq)->stats();
  EXPECT_EQ(stats.update_refusals, 1) << stats.text();
  EXPECT_EQ(stats.reinstantiations, 1) << stats.text();
  EXPECT_EQ(stats.updates, 0) << stats.text();
  EXPECT_FALSE(stats.last_refusal.empty());
  std::printf("[ capture ] %s\n", stats.text().c_str());
}

TEST(CaptureGpu, AStepThatFailsUnderCaptureLeavesTheStreamOutOfCapture) {
  KILN_REQUIRE_GPU();
  auto planner = Planner::create(static_options());
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  CopyPlan cp;
  auto stream = make_stream();
  ASSERT_TRUE(stream.is_ok());
  cudaStream_t s = stream->get();
  auto x = DeviceBuffer::allocate(cp.bytes), y = DeviceBuffer::allocate(cp.bytes);
  ASSERT_TRUE(x.is_ok() && y.is_ok());
  ASSERT_TRUE(x->fill_bytes(0x22, s).is_ok());
  const TensorBindings t = {{"x", {x->data(), cp.bytes}}, {"y", {y->data(), cp.bytes}}};
  auto seq = CapturedSequence::create(**planner, {{cp.plan, t, nullptr}, {cp.plan, t, nullptr}});
  ASSERT_TRUE(seq.is_ok()) << seq.status().to_string();
  cp.sync_under_capture = true;
  Status st = (*seq)->capture(s);
  EXPECT_FALSE(st.is_ok());
  std::printf("[ capture ] the failed capture: %s\n", st.to_string().c_str());
  EXPECT_NE(st.message().find("step 0"), std::string::npos) << st.to_string();
  cudaStreamCaptureStatus cs;
  ASSERT_EQ(cudaStreamIsCapturing(s, &cs), cudaSuccess);
  EXPECT_EQ(cs, cudaStreamCaptureStatusNone);
  EXPECT_FALSE((*seq)->captured());
  EXPECT_EQ((*seq)->stats().captures, 0);
  // The stream works, and so does the sequence once the step behaves.
  cp.sync_under_capture = false;
  ASSERT_TRUE(y->fill_bytes(0, s).is_ok());
  st = (*seq)->replay(s);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(download(*y), std::vector<uint8_t>(cp.bytes, 0x22));
  EXPECT_EQ((*seq)->stats().captures, 1);
}

TEST(CaptureGpu, GraphsOffRunsTheSameOnTheStream) {
  KILN_REQUIRE_GPU();
  PlannerOptions o = static_options();
  o.cuda_graphs = false;
  auto planner = Planner::create(o);
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  auto plan = obtain_file(**planner, kConvSpec);
  ASSERT_TRUE(plan);
  auto stream = make_stream();
  ASSERT_TRUE(stream.is_ok());
  Buffers a = make_buffers(*plan, 42);
  const std::vector<uint8_t> want = stream_launched(*plan, a, stream->get());
  ASSERT_TRUE(a.owned.at("y").fill_bytes(0xFF, stream->get()).is_ok());
  auto seq = CapturedSequence::create(**planner, {{plan, a.bindings, a.workspace.data()}});
  ASSERT_TRUE(seq.is_ok());
  EXPECT_FALSE((*seq)->uses_graphs());
  ASSERT_TRUE((*seq)->replay(stream->get()).is_ok());
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  EXPECT_EQ(download(a.owned.at("y")), want);
  EXPECT_EQ((*seq)->stats().text(), "graphs off: 1 stream run");
}

}  // namespace
}  // namespace kiln
