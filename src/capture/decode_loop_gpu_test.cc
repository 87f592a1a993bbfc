// A decode loop from one CUDA graph (issue 36): a paged-KV decode step (one query per sequence, a bottom-right causal
// diagonal, a padding mask, GQA) captured once by CapturedSequence and replayed 100 times. Between replays the loop
// updates, in place on the device, what a serving engine updates: each sequence's key count (seq_len_kv), its page
// table (a new cache block when it crosses a block boundary, taken from a shuffled free list, so tables have holes
// and blocks out of order) and the new query. Every step's output is checked against the device reference of that
// step's inputs, and the graph is never captured or instantiated again.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kiln/capture/capture.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/runtime/planner.h"
#include "kiln/spec/builder.h"
#include "kiln/validate/device_check.h"

namespace kiln {
namespace {

constexpr int64_t kBatch = 4, kHeads = 8, kKvHeads = 2, kDim = 64, kBlock = 16, kPages = 16, kBlocks = 80;
constexpr int kSteps = 100;

Graph decode_graph() {
  GraphBuilder b("paged_decode_loop");
  b.io_dtype(DataType::kBFloat16);
  SdpaAttrs a;
  a.causal = true;
  a.alignment = DiagonalAlignment::kBottomRight;
  a.padding = a.paged = true;
  const auto i32 = [&](const char* n, std::vector<DimArg> d) {
    return b.tensor(n, d, Layout::kRowMajor, DataType::kInt32);
  };
  TensorRef q = b.tensor("q", {kBatch, kHeads, 1, kDim});
  TensorRef k = b.tensor("k_cache", {kBlocks, kKvHeads, kBlock, kDim});
  TensorRef v = b.tensor("v_cache", {kBlocks, kKvHeads, kBlock, kDim});
  b.output(b.sdpa("attn", q, k, v, a, "o", std::nullopt, i32("seq_len_q", {kBatch, 1, 1, 1}),
                  i32("seq_len_kv", {kBatch, 1, 1, 1}), i32("page_table_k", {kBatch, 1, kPages, 1}),
                  i32("page_table_v", {kBatch, 1, kPages, 1})));
  auto g = b.build();
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  return g.is_ok() ? *g : Graph{};
}

// The loop on the plan the Planner builds for the graph (`pin` empty: cuDNN's, by its heuristics) or on `pin`.
void replay_decode_loop(const std::string& pin) {
  PlannerOptions o;
  o.new_shapes = NewShapes::kBuildNow;
  auto planner = Planner::create(o);
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  auto prepared = (*planner)->prepare(decode_graph());
  ASSERT_TRUE(prepared.is_ok()) << prepared.status().to_string();
  const auto obtain = [&]() -> StatusOr<Obtained> {
    if (pin.empty()) return (*planner)->obtain(*prepared);
    KILN_ASSIGN_OR_RETURN(EngineConfig config, EngineConfig::parse(pin));
    return (*planner)->obtain_pinned(*prepared, config);
  };
  auto got = obtain();
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  std::shared_ptr<const ExecutablePlan> plan = got->plan;
  std::printf("[ decode ] plan %s from %s\n", plan->config().identity().c_str(), plan_source_name(got->source));

  // The caller's buffers: the caches and the query drawn by Kiln's generator, the rest written by the loop.
  const Graph& pg = plan->graph();
  std::map<std::string, DeviceBuffer> owned;
  std::map<int, void*> all, inputs, outputs;
  TensorBindings bindings;
  for (size_t i = 0; i < pg.tensors.size(); ++i) {
    auto bytes = plan->tensor_bytes(pg.tensors[i].name);
    if (!bytes.is_ok()) continue;
    auto buf = DeviceBuffer::allocate(*bytes);
    ASSERT_TRUE(buf.is_ok());
    bindings[pg.tensors[i].name] = TensorBinding{buf->data(), *bytes};
    all[static_cast<int>(i)] = buf->data();
    (pg.is_graph_output(static_cast<int>(i)) ? outputs : inputs)[static_cast<int>(i)] = buf->data();
    owned.emplace(pg.tensors[i].name, std::move(buf).value());
  }
  ASSERT_TRUE(generate_inputs_on_device(pg, 11, all).is_ok());
  auto ws = DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(plan->workspace_bytes(), 16)));
  ASSERT_TRUE(ws.is_ok());
  auto stream = make_stream();
  ASSERT_TRUE(stream.is_ok());
  cudaStream_t s = stream->get();

  // Each sequence starts with its own number of keys, on blocks from a shuffled free list; table entries past its
  // last block point at block 0 (holes: never read, since keys past seq_len_kv are masked).
  std::mt19937 rng(5);
  std::vector<int32_t> free_blocks(kBlocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  std::vector<int32_t> len = {1, 17, 40, 96};  // + 100 steps stays within kPages * kBlock = 256
  std::vector<int32_t> table(kBatch * kPages, 0), ones(kBatch, 1);
  size_t next_free = 0;
  auto grow = [&](int b) {  // blocks for sequence b's keys 0..len[b]-1
    for (int64_t p = 0; p * kBlock < len[static_cast<size_t>(b)]; ++p)
      if (table[static_cast<size_t>(b * kPages + p)] == 0 && next_free < free_blocks.size())
        table[static_cast<size_t>(b * kPages + p)] = free_blocks[next_free++];
  };
  // Block 0 stands for "no block": keep it off the free list so that a hole is told from a page.
  free_blocks.erase(std::remove(free_blocks.begin(), free_blocks.end(), 0), free_blocks.end());
  for (int b = 0; b < kBatch; ++b) grow(b);
  auto upload = [&](const char* name, const void* src, size_t bytes) {
    ASSERT_EQ(cudaMemcpyAsync(owned.at(name).data(), src, bytes, cudaMemcpyHostToDevice, s), cudaSuccess);
  };
  upload("seq_len_q", ones.data(), ones.size() * 4);
  upload("seq_len_kv", len.data(), len.size() * 4);
  upload("page_table_k", table.data(), table.size() * 4);
  upload("page_table_v", table.data(), table.size() * 4);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);

  auto seq = CapturedSequence::create(**planner, {{plan, bindings, ws->data()}});
  ASSERT_TRUE(seq.is_ok()) << seq.status().to_string();
  ASSERT_TRUE((*seq)->uses_graphs());
  ASSERT_TRUE((*seq)->capture(s).is_ok());
  auto checker = DeviceChecker::create(pg);
  ASSERT_TRUE(checker.is_ok()) << checker.status().to_string();

  const size_t q_bytes = owned.at("q").size();
  std::vector<DeviceBuffer> scratch;  // one per graph input, for the generator's draws of new queries
  std::map<int, void*> scratch_ptrs;
  for (const auto& [t, p] : inputs) {
    auto buf = DeviceBuffer::allocate(owned.at(pg.tensors[static_cast<size_t>(t)].name).size());
    ASSERT_TRUE(buf.is_ok());
    scratch_ptrs[t] = buf->data();
    scratch.push_back(std::move(buf).value());
  }
  void* const scratch_q = scratch_ptrs.at(pg.find_tensor("q"));
  int block_crossings = 0;
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    if (step > 0) {  // the next token: one more key per sequence, a new block where it crosses into one
      for (int b = 0; b < kBatch; ++b) {
        if (len[static_cast<size_t>(b)] % kBlock == 0) ++block_crossings;
        ++len[static_cast<size_t>(b)];
        grow(b);
      }
      upload("seq_len_kv", len.data(), len.size() * 4);
      upload("page_table_k", table.data(), table.size() * 4);
      upload("page_table_v", table.data(), table.size() * 4);
      // A new query: the generator's values for another seed (drawn into scratch buffers), into the same buffer.
      ASSERT_TRUE(generate_inputs_on_device(pg, 100 + static_cast<uint64_t>(step), scratch_ptrs, s).is_ok());
      ASSERT_EQ(cudaMemcpyAsync(owned.at("q").data(), scratch_q, q_bytes, cudaMemcpyDeviceToDevice, s), cudaSuccess);
    }
    ASSERT_TRUE(owned.at("o").fill_bytes(0xFF, s).is_ok());
    Status st = (*seq)->replay(s);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    auto ref = device_reference_on_device(pg, inputs);
    ASSERT_TRUE(ref.is_ok()) << ref.status().to_string();
    auto rep = checker->check(outputs, *ref);
    ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
    ASSERT_EQ(rep->verdict, Disposition::kPassed) << rep->summary();
    if (step == 0 || step == kSteps - 1) std::printf("[ decode ] step %d: %s\n", step, rep->summary().c_str());
  }
  const CaptureStats stats = (*seq)->stats();
  std::printf("[ decode ] %d steps, %d block crossings, keys per sequence now %d %d %d %d; %s\n", kSteps,
              block_crossings, len[0], len[1], len[2], len[3], stats.text().c_str());
  EXPECT_GE(block_crossings, 4 * 5) << "the loop should cross block boundaries in every sequence";
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.instantiations, 1);
  EXPECT_EQ(stats.replays, kSteps);
  EXPECT_EQ(stats.reinstantiations, 0);
}

TEST(DecodeLoopGpu, OneGraphReplaysAHundredStepsWithPageTablesUpdatedInPlace) {
  KILN_REQUIRE_GPU();
  replay_decode_loop("");
}

// The same loop on Kiln's own decode kernel in its staged form (knl4): with four splits of 64 keys (the merge launch
// captured after the splits') and with one split that writes o itself.
TEST(DecodeLoopGpu, KilnsStagedDecodeKernelReplaysTheSameLoop) {
  KILN_REQUIRE_GPU();
  for (const char* pin : {"knl4_chunk=64_stages=2", "knl4_chunk=256_stages=3"}) {
    SCOPED_TRACE(pin);
    replay_decode_loop(pin);
  }
}

}  // namespace
}  // namespace kiln
