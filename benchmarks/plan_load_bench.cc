// Plan load vs build (issue: bake and ship). For each spec given: time building a plan from cuDNN's
// heuristics (lower + heuristics query + build), put it in a fresh store, then time loading it back
// (store lookup with fingerprint policy + checksum + frontend deserialize) in the same process, median of
// --reps. Then fill the store with N shapes of the first spec (its dynamic dimension swept 1..N) and time a
// start-up that loads every plan (one load_all query + deserialize each).
//   plan_load_bench [--reps 5] [--shapes 100] [--store PATH] SPEC...
// Prints one line per spec and a JSON summary on the last line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/cuda/cuda_handles.h"
#include "kiln/lower/environment.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/spec/spec.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}
static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
static int fail(const Status& s) {
  std::fprintf(stderr, "plan_load_bench: %s\n", s.to_string().c_str());
  return 1;
}

int main(int argc, char** argv) {
  int reps = 5, shapes = 100;
  std::string store_path = (std::filesystem::temp_directory_path() / "kiln_plan_load_bench.db").string();
  std::vector<std::string> specs;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--shapes") && i + 1 < argc) shapes = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--store") && i + 1 < argc) store_path = argv[++i];
    else specs.push_back(argv[i]);
  }
  if (specs.empty()) {
    std::fprintf(stderr, "usage: plan_load_bench [--reps N] [--shapes N] [--store PATH] SPEC...\n");
    return 2;
  }
  std::filesystem::remove(store_path);
  std::filesystem::remove(store_path + "-wal");
  std::filesystem::remove(store_path + "-shm");
  auto handle = make_cudnn_handle();
  if (!handle.is_ok()) return fail(handle.status());
  EnvFingerprint env = collect_environment().fingerprint;
  auto store = PlanStore::open(store_path);
  if (!store.is_ok()) return fail(store.status());
  nlohmann::json summary = nlohmann::json::array();
  for (const auto& spec : specs) {
    auto g = parse_spec_file(spec);
    if (!g.is_ok()) return fail(g.status());
    auto sig = compute_signature(*g);
    if (!sig.is_ok()) return fail(sig.status());
    std::vector<double> build_ms, load_ms;
    PlanRecord rec;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      LowerTarget t;
      t.handle = handle->get();
      auto lg = LoweredGraph::create(*g, t);
      if (!lg.is_ok()) return fail(lg.status());
      Status st = lg->build_heuristic();
      if (!st.is_ok()) {
        std::printf("%-20s build failed: %s\n", g->name.c_str(), st.message().substr(0, 120).c_str());
        break;
      }
      build_ms.push_back(ms_since(t0));
      if (r == 0) {
        auto rr = record_from_plan(*sig, env, *lg);
        if (!rr.is_ok()) return fail(rr.status());
        rec = *rr;
        auto put = (*store)->put(rec);
        if (!put.is_ok()) return fail(put.status());
      }
    }
    if (build_ms.empty()) continue;
    for (int r = 0; r < reps; ++r) {
      auto t0 = Clock::now();
      auto look = (*store)->get(sig->structure, sig->shape_key, env);
      if (!look.is_ok() || !look->runnable()) return fail(look.is_ok() ? internal_error("not a hit") : look.status());
      std::vector<uint8_t> bytes(look->record->plan_bytes.begin(), look->record->plan_bytes.end());
      auto lg = LoweredGraph::deserialize(*g, handle->get(), bytes);
      if (!lg.is_ok()) return fail(lg.status());
      load_ms.push_back(ms_since(t0));
    }
    double b = median(build_ms), l = median(load_ms);
    std::printf("%-20s build %8.2f ms  load %7.3f ms  build/load %7.1fx  (%zu B plan, %s)\n", g->name.c_str(), b, l,
                b / l, rec.plan_bytes.size(),
                rec.knobs.empty() ? ("eng" + std::to_string(rec.engine_id)).c_str()
                                  : ("eng" + std::to_string(rec.engine_id) + "+knobs").c_str());
    summary.push_back({{"graph", g->name},
                       {"build_ms_median", b},
                       {"load_ms_median", l},
                       {"build_over_load", b / l},
                       {"plan_bytes", rec.plan_bytes.size()},
                       {"reps", reps}});
  }
  // Start-up: N shapes of the first spec, loaded all at once.
  nlohmann::json startup;
  {
    auto g = parse_spec_file(specs[0]);
    if (!g.is_ok() || g->dynamic_dims.empty()) {
      std::printf("start-up test skipped: %s has no dynamic dimension\n", specs[0].c_str());
    } else {
      std::string sym = g->dynamic_dims.begin()->first;
      std::vector<Graph> graphs;
      auto tb = Clock::now();
      std::ifstream in(specs[0]);
      std::stringstream text;
      text << in.rdbuf();
      auto base = nlohmann::json::parse(text.str());
      for (int n = 1; n <= shapes; ++n) {
        base["dynamic"][sym] = n;  // the same spec at another value of its dynamic dimension
        auto parsed = parse_spec_string(base.dump(), specs[0]);
        if (!parsed.is_ok()) return fail(parsed.status());
        Graph gi = std::move(parsed).value();
        auto sig = compute_signature(gi);
        LowerTarget t;
        t.handle = handle->get();
        auto lg = LoweredGraph::create(gi, t);
        if (!lg.is_ok() || !lg->build_heuristic().is_ok()) continue;
        auto rr = record_from_plan(*sig, env, *lg);
        if (rr.is_ok()) (void)(*store)->put(*rr);
        graphs.push_back(gi);
      }
      double fill_ms = ms_since(tb);
      // A new store handle, as a fresh process would open it.
      store->reset();
      auto t0 = Clock::now();
      auto fresh = PlanStore::open(store_path);
      if (!fresh.is_ok()) return fail(fresh.status());
      auto all = (*fresh)->load_all(env);
      if (!all.is_ok()) return fail(all.status());
      double query_ms = ms_since(t0);
      size_t loaded = 0;
      for (const Graph& gi : graphs) {
        auto sig = compute_signature(gi);
        for (const auto& r : all->records) {
          if (r.structure_sig != sig->structure || r.shape_key != sig->shape_key) continue;
          std::vector<uint8_t> bytes(r.plan_bytes.begin(), r.plan_bytes.end());
          if (LoweredGraph::deserialize(gi, handle->get(), bytes).is_ok()) ++loaded;
          break;
        }
      }
      double total_ms = ms_since(t0);
      std::printf(
          "start-up: %zu of %zu plans loaded in %.1f ms (query %.1f ms, %.3f ms/plan); building them took %.0f ms\n",
          loaded, graphs.size(), total_ms, query_ms, total_ms / std::max<size_t>(1, loaded), fill_ms);
      startup = {{"plans", graphs.size()},
                 {"loaded", loaded},
                 {"load_all_ms", total_ms},
                 {"query_ms", query_ms},
                 {"build_all_ms", fill_ms}};
    }
  }
  std::printf(
      "%s\n",
      nlohmann::json{{"per_graph", summary}, {"startup", startup}, {"gpu", env.gpu_name}, {"cudnn", env.cudnn_version}}
          .dump()
          .c_str());
  return 0;
}
