// Device tier: per-op coverage. Every case of op_coverage_cases.h (every op, mode and dtype) runs through
// run_graph on the GPU with heuristics' plan and is verified against BOTH the host reference and the
// device reference. One line per case:
//
//   OPCOV <case> <dtype> <verdict> max_abs=... max_rel=... nmse=... host=<verdict> device=<verdict> plan=<engine>(heuristics) t=<s>
//   OPCOV <case> <dtype> NotSupported max_abs=- max_rel=- nmse=- cudnn: <cuDNN's message>
//
// The errors are the worst over the case's outputs against the host reference (the device reference's
// verdict follows). plan= is the engine configuration, or segments[...] when cuDNN could not fuse the
// graph whole and run_graph ran it as fused segments (then a "fused" case did not run fused). A case that is not Passed prints its check summaries under its line. At the end:
// one OPCOV-CORE line per core group (the case that passed it, or MISSING) and an OPCOV-SUMMARY line.
// The test fails on any Incorrect or Failed case and on a core group without a Passed case (see the
// comment in op_coverage_cases.h for which cases may be NotSupported and why).
//
// Environment: KILN_OPCOV_THREADS (default 8) cases run at once, each on its own stream and cuDNN handle
// (plan building, which compiles kernels at run time, dominates); KILN_OPCOV_FILTER=substring runs only
// the cases whose "<case> <dtype>" contains it (core groups without a selected case are then not checked).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "gpu_test_util.h"
#include "kiln/runtime/planner.h"
#include "kiln/tools/runner.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/device_check.h"
#include "kiln/validate/device_io.h"
#include "kiln/validate/dropout_probe.h"
#include "runtime/op_coverage_cases.h"

namespace kiln {
namespace {

struct Outcome {
  Disposition verdict = Disposition::kNotVerified;
  Disposition host = Disposition::kNotVerified, device = Disposition::kNotVerified;
  double max_abs = 0, max_rel = 0, nmse = 0;
  bool measured = false;
  std::string plan, message, details;
  double seconds = 0;
};

std::string one_line(std::string s, size_t limit = 400) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  if (s.size() > limit) s = s.substr(0, limit) + "...";
  return s;
}

Outcome run_case(const opcov::OpCase& c) {
  Outcome out;
  const auto t0 = std::chrono::steady_clock::now();
  if (!c.kiln_rejects.empty()) {
    out.verdict = Disposition::kNotSupported;
    out.message = "kiln: " + (c.graph.is_ok() ? std::string("accepted?!") : c.graph.status().message());
    if (c.graph.is_ok()) out.verdict = Disposition::kFailed;  // the case list is out of date
    return out;
  }
  if (!c.graph.is_ok()) {
    out.verdict = Disposition::kFailed;
    out.message = "graph: " + c.graph.status().to_string();
    return out;
  }
  RunOptions o;
  o.verify = true;
  o.reference = ReferenceChoice::kBoth;
  o.seed = 1;
  o.check.allow_tf32 = c.allow_tf32;
  StatusOr<RunReport> rep = run_graph(*c.graph, o);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!rep.is_ok()) {
    // cuDNN refusing the graph (no engine, unsupported) is NotSupported; anything else did not run as it should.
    out.verdict = rep.status().code() == StatusCode::kNotSupported ? Disposition::kNotSupported : Disposition::kFailed;
    out.message = (out.verdict == Disposition::kNotSupported ? "cudnn: " : "error: ") + rep.status().to_string();
    return out;
  }
  // A graph cuDNN cannot fuse whole runs as fused segments (run_graph): say so, so that a "fused" case
  // that ran unfused is visible.
  if (rep->plan_source == PlanSource::kSegments) {
    out.plan = "segments[";
    for (size_t i = 0; i < rep->segments.size(); ++i) out.plan += (i ? "; " : "") + rep->segments[i];
    out.plan += "]";
  } else {
    out.plan = rep->config.identity() + "(" + plan_source_name(rep->plan_source) + ")";
  }
  out.verdict = rep->verdict();
  for (const auto& chk : rep->checks) {
    (chk.kind == ReferenceKind::kHost ? out.host : out.device) = chk.verdict;
    if (!chk.report) {
      out.details += std::string("    ") + reference_kind_name(chk.kind) + " reference: " + chk.message + "\n";
      continue;
    }
    if (chk.kind == ReferenceKind::kHost) {
      out.measured = true;
      for (const auto& oc : chk.report->outputs) {
        out.max_abs = std::max(out.max_abs, oc.error.max_abs);
        out.max_rel = std::max(out.max_rel, oc.error.max_rel);
        out.nmse = std::max(out.nmse, oc.error.nmse);
      }
    }
    if (chk.verdict != Disposition::kPassed) {
      std::string s = chk.report->summary();
      out.details += std::string("    against the ") + reference_kind_name(chk.kind) + " reference:\n";
      size_t start = 0;
      while (start < s.size()) {
        size_t end = s.find('\n', start);
        if (end == std::string::npos) end = s.size();
        out.details += "      " + s.substr(start, end - start) + "\n";
        start = end + 1;
      }
    }
  }
  return out;
}

std::string format_line(const opcov::OpCase& c, const Outcome& r) {
  char nums[160];
  if (r.measured)
    std::snprintf(nums, sizeof(nums), "max_abs=%.2e max_rel=%.2e nmse=%.2e", r.max_abs, r.max_rel, r.nmse);
  else std::snprintf(nums, sizeof(nums), "max_abs=- max_rel=- nmse=-");
  std::string line = "OPCOV " + c.name + " " + c.dtype + " " + disposition_name(r.verdict) + " " + nums;
  if (r.verdict != Disposition::kNotSupported && !(r.verdict == Disposition::kFailed && !r.message.empty())) {
    char tail[64];
    std::snprintf(tail, sizeof(tail), " t=%.2fs", r.seconds);
    line += std::string(" host=") + disposition_name(r.host) + " device=" + disposition_name(r.device) +
            " plan=" + r.plan + tail;
    if (c.allow_tf32) line += " tf32-allowed";
  }
  if (!r.message.empty()) line += " " + one_line(r.message);
  return line;
}

TEST(OpCoverage, EveryOpModeAndDtypeOnTheGpu) {
  KILN_REQUIRE_GPU();
  const std::vector<opcov::OpCase> all = opcov::op_coverage_cases();
  const char* filter = std::getenv("KILN_OPCOV_FILTER");
  std::vector<const opcov::OpCase*> cases;
  for (const auto& c : all)
    if (!filter || (c.name + " " + c.dtype).find(filter) != std::string::npos) cases.push_back(&c);
  int threads = 8;
  if (const char* t = std::getenv("KILN_OPCOV_THREADS")) threads = std::max(1, std::atoi(t));
  std::printf(
      "OPCOV running %zu of %zu cases on %d threads (case dtype verdict errors-vs-host host device plan time)\n",
      cases.size(), all.size(), threads);
  std::fflush(stdout);

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Outcome> results(cases.size());
  std::atomic<size_t> next{0};
  std::mutex print_mu;
  auto worker = [&] {
    for (size_t i = next++; i < cases.size(); i = next++) {
      results[i] = run_case(*cases[i]);
      std::lock_guard<std::mutex> lock(print_mu);
      std::printf("%s\n%s", format_line(*cases[i], results[i]).c_str(), results[i].details.c_str());
      std::fflush(stdout);
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  int passed = 0, not_supported = 0;
  std::vector<std::string> bad;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Disposition v = results[i].verdict;
    if (v == Disposition::kPassed) ++passed;
    else if (v == Disposition::kNotSupported) ++not_supported;
    else bad.push_back(cases[i]->name + " " + cases[i]->dtype + " " + disposition_name(v));
  }
  std::vector<std::string> missing;
  for (const std::string& group : opcov::core_groups(all)) {
    std::string passed_by, seen;
    bool selected = false;
    for (size_t i = 0; i < cases.size(); ++i) {
      if (cases[i]->core_group != group) continue;
      selected = true;
      seen += std::string(seen.empty() ? "" : ", ") + cases[i]->name + " " + disposition_name(results[i].verdict);
      if (results[i].verdict == Disposition::kPassed && passed_by.empty())
        passed_by = cases[i]->name + " " + cases[i]->dtype;
    }
    if (!selected) continue;
    std::printf("OPCOV-CORE %s: %s\n", group.c_str(),
                passed_by.empty() ? ("MISSING (" + seen + ")").c_str() : ("Passed by " + passed_by).c_str());
    if (passed_by.empty()) missing.push_back(group + " (" + seen + ")");
  }
  std::printf("OPCOV-SUMMARY cases=%zu passed=%d not_supported=%d incorrect_or_failed=%zu core_groups_missing=%zu "
              "wall=%.1fs\n",
              cases.size(), passed, not_supported, bad.size(), missing.size(), wall);
  std::fflush(stdout);
  std::string bad_list, missing_list;
  for (const auto& b : bad) bad_list += "\n  " + b;
  for (const auto& m : missing) missing_list += "\n  " + m;
  EXPECT_TRUE(bad.empty()) << "cases Incorrect or Failed (see their OPCOV lines):" << bad_list;
  EXPECT_TRUE(missing.empty()) << "core groups without a Passed case:" << missing_list;
}

// Regression for the H200 report of issue 3: examples/conv_wgrad.json (fp16 x/dy, fp32 dw, K = 100352) was
// Incorrect against the device reference (then fp32 sequential accumulation) under the K/64 rule. Now the
// device reference accumulates in double and dw is judged by the accumulation bound. The host reference
// is over its cost cap (3.7e9 MACs): with --reference both it must say so, as NotSupported.
TEST(OpCoverage, ConvWgradExampleK100352PassesTheAccumulationBound) {
  KILN_REQUIRE_GPU();
  auto g = parse_spec_file(std::string(KILN_SOURCE_DIR) + "/examples/conv_wgrad.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  RunOptions o;
  o.verify = true;
  o.reference = ReferenceChoice::kBoth;
  o.seed = 1;
  auto rep = run_graph(*g, o);
  ASSERT_TRUE(rep.is_ok()) << rep.status().to_string();
  ASSERT_EQ(rep->checks.size(), 2u);
  std::printf("[ conv_wgrad ] plan %s\n", rep->config.identity().c_str());
  for (const auto& c : rep->checks)
    std::printf("[ conv_wgrad ] %s reference: %s %s\n", reference_kind_name(c.kind), disposition_name(c.verdict),
                c.report ? c.report->summary().c_str() : c.message.c_str());
  EXPECT_EQ(rep->checks[0].kind, ReferenceKind::kHost);
  EXPECT_EQ(rep->checks[0].verdict, Disposition::kNotSupported);
  EXPECT_NE(rep->checks[0].message.find("over the host reference cap"), std::string::npos) << rep->checks[0].message;
  EXPECT_EQ(rep->checks[1].kind, ReferenceKind::kDevice);
  EXPECT_EQ(rep->checks[1].verdict, Disposition::kPassed);
  EXPECT_EQ(rep->verdict(), Disposition::kPassed);
  EXPECT_EQ(rep->references_run, std::vector<ReferenceKind>{ReferenceKind::kDevice});
}

// Dropout (kiln/validate/dropout_probe.h) on cuDNN's plans: the mask follows the seed and offset (one mask for one
// pair: a second run writes the same o; another offset another o), the probe of the dropout plan passes, and the
// probe of a plan that does not drop (the same attention without dropout, on the same buffers) is Incorrect: a
// reference given its all-kept mask would have matched it, so this check is what catches it.
TEST(DropoutGpu, TheMaskFollowsSeedAndOffsetAndAPlanThatDoesNotDropIsCaught) {
  KILN_REQUIRE_GPU();
  StatusOr<Graph> drop =
      opcov::detail::sdpa_dropout_graph("drop", opcov::detail::band(true, std::nullopt), 0.2, 64, 64).build();
  StatusOr<Graph> plain =
      opcov::detail::sdpa_band_graph("plain", opcov::detail::band(true, std::nullopt), 64, 64).build();
  ASSERT_TRUE(drop.is_ok()) << drop.status().to_string();
  ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
  StatusOr<std::unique_ptr<Planner>> planner = Planner::create(PlannerOptions::tools());
  ASSERT_TRUE(planner.is_ok()) << planner.status().to_string();
  StatusOr<UniqueStream> stream = make_stream();
  ASSERT_TRUE(stream.is_ok());
  StatusOr<GraphBuffers> buffers = allocate_graph_buffers(*drop, 0);
  ASSERT_TRUE(buffers.is_ok()) << buffers.status().to_string();
  ASSERT_TRUE(generate_inputs_on_device(*drop, 1, buffers->pointers(), stream->get()).is_ok());
  StatusOr<DeviceBuffer> ws = DeviceBuffer::allocate(size_t{256} << 20);
  ASSERT_TRUE(ws.is_ok());
  // Each plan on the dropout graph's buffers, bound by name.
  auto runner = [&](const Graph& g) -> std::function<Status()> {
    StatusOr<Obtained> got = (*planner)->obtain(g);
    EXPECT_TRUE(got.is_ok()) << got.status().to_string();
    if (!got.is_ok()) return [s = got.status()] { return s; };
    auto plan = got->plan;
    TensorBindings bindings;
    for (const auto& [t, ptr] : buffers->pointers()) {
      const std::string& name = drop->tensors[static_cast<size_t>(t)].name;
      if (plan->tensor_bytes(name).is_ok()) bindings[name] = TensorBinding{ptr, buffers->tensors.at(t).size()};
    }
    return [&, plan, bindings] {
      KILN_RETURN_IF_ERROR(plan->execute(stream->get(), bindings, ws->data()));
      return cuda_status(cudaStreamSynchronize(stream->get()), "sync");
    };
  };
  const int o = drop->find_tensor("o"), offset = drop->find_tensor("offset");
  auto output = [&] {
    std::vector<uint16_t> host(buffers->tensors.at(o).size() / 2);
    EXPECT_TRUE(buffers->tensors.at(o).copy_to_host(host.data(), host.size() * 2).is_ok());
    return host;
  };
  const std::function<Status()> dropping = runner(*drop);
  ASSERT_TRUE(dropping().is_ok());
  const std::vector<uint16_t> first = output();
  ASSERT_TRUE(dropping().is_ok());
  EXPECT_EQ(output(), first) << "one seed and offset, one mask";
  const int64_t next_offset = 12345;
  ASSERT_TRUE(buffers->tensors.at(offset).copy_from_host(&next_offset, sizeof next_offset).is_ok());
  ASSERT_TRUE(dropping().is_ok());
  EXPECT_NE(output(), first) << "another offset, another mask";

  StatusOr<DropoutProbe> probe = probe_dropout(*drop, buffers->pointers(), dropping, stream->get());
  ASSERT_TRUE(probe.is_ok()) << probe.status().to_string();
  ASSERT_EQ(probe->nodes.size(), 1u);
  const DropoutNodeProbe& p = probe->nodes[0];
  std::printf("[ dropout ] cuDNN's plan: %s\n", p.summary("attn").c_str());
  EXPECT_EQ(p.runs, 1);                        // Skv 64 over Dv 64: one block
  EXPECT_EQ(p.attended, 2 * 2 * 64 * 65 / 2);  // causal rows of 2 entries x 2 heads
  EXPECT_EQ(p.verdict(), Disposition::kPassed) << p.summary("attn");

  // The backward pass draws the forward's mask from the same seed and offset (what training needs of cuDNN): its
  // probe (through dv) reads the same bits wherever a row attends.
  StatusOr<Graph> grad = opcov::detail::sdpa_backward_graph("grad", opcov::detail::band(true, std::nullopt), 64, 64, 2,
                                                            2, {}, DataType::kBFloat16, 0.2)
                             .build();
  ASSERT_TRUE(grad.is_ok()) << grad.status().to_string();
  {
    StatusOr<GraphBuffers> gb = allocate_graph_buffers(*grad, 0);
    ASSERT_TRUE(gb.is_ok()) << gb.status().to_string();
    ASSERT_TRUE(generate_inputs_on_device(*grad, 2, gb->pointers(), stream->get()).is_ok());
    ASSERT_TRUE(cudaStreamSynchronize(stream->get()) == cudaSuccess);
    for (const char* name : {"seed", "offset"}) {
      int64_t value = 0;
      ASSERT_TRUE(buffers->tensors.at(drop->find_tensor(name)).copy_to_host(&value, sizeof value).is_ok());
      ASSERT_TRUE(gb->tensors.at(grad->find_tensor(name)).copy_from_host(&value, sizeof value).is_ok());
    }
    StatusOr<Obtained> got = (*planner)->obtain(*grad);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    auto plan = got->plan;
    const std::map<int, void*> ptrs = gb->pointers();
    auto run_grad = [&] {
      KILN_RETURN_IF_ERROR(plan->run_unchecked(stream->get(), ptrs, ws->data()));
      return cuda_status(cudaStreamSynchronize(stream->get()), "sync");
    };
    StatusOr<DropoutProbe> bp = probe_dropout(*grad, ptrs, run_grad, stream->get());
    ASSERT_TRUE(bp.is_ok()) << bp.status().to_string();
    ASSERT_EQ(bp->nodes.size(), 1u);
    std::printf("[ dropout ] cuDNN's backward plan: %s\n", bp->nodes[0].summary("grad").c_str());
    EXPECT_EQ(bp->nodes[0].verdict(), Disposition::kPassed) << bp->nodes[0].summary("grad");
    EXPECT_EQ(bp->nodes[0].runs, 1);  // Sq 64 over Dv 64, one head per key head
    const size_t n = size_t{2} * 2 * 64 * 64;
    std::vector<int8_t> fwd_mask(n), bwd_mask(n);
    ASSERT_TRUE(probe->masks.begin()->second.copy_to_host(fwd_mask.data(), n).is_ok());
    ASSERT_TRUE(bp->masks.begin()->second.copy_to_host(bwd_mask.data(), n).is_ok());
    int64_t differ = 0, compared = 0;
    for (size_t e = 0; e < n; ++e) {
      const size_t i = (e / 64) % 64, j = e % 64;
      if (j > i) continue;  // causal: not attended
      ++compared;
      differ += fwd_mask[e] != bwd_mask[e];
    }
    std::printf("[ dropout ] forward and backward masks: %lld of %lld attended bits differ\n",
                static_cast<long long>(differ), static_cast<long long>(compared));
    EXPECT_EQ(differ, 0);
  }

  StatusOr<DropoutProbe> ignored = probe_dropout(*drop, buffers->pointers(), runner(*plain), stream->get());
  ASSERT_TRUE(ignored.is_ok()) << ignored.status().to_string();
  std::printf("[ dropout ] a plan without dropout: %s\n", ignored->nodes[0].summary("attn").c_str());
  EXPECT_EQ(ignored->nodes[0].dropped, 0);
  EXPECT_EQ(ignored->nodes[0].verdict(), Disposition::kIncorrect);
}

}  // namespace
}  // namespace kiln
