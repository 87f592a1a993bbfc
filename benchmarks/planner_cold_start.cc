// Where a new process's time goes before a stored plan runs (issue 12, item 8: a stored plan ready to
// execute within 10 ms of the library being loaded). Run it in a new process per measurement:
//
//   planner_cold_start --store S --spec F [--then F2] [--mode parts|planner] [--prime | --no-prime]
//                      [--context-first] [--prime-early] [--preload] [--app-work-ms N] [--json]
//
// --prime (parts): pay cuDNN's first-use work ahead (kiln/runtime/cudnn_primer.h), deviceless, as the first step,
// before the CUDA context: the deserialize after it shows what is left. --no-prime (planner): a Planner
// that does not prime (PlannerOptions::prime_cudnn false), to compare with the default, which primes on a
// thread while the context is made.
//
// --mode parts (default) times each step with Kiln's own building blocks, in the order the Planner takes
// them: the first CUDA call (context creation), environment fingerprint, first cuDNN handle, store open,
// store lookup, plan deserialize, buffers, first execute + sync, second execute + sync. --mode planner
// times the same path through kiln::Planner (create, prepare, obtain, first execute). Times are from
// main()'s first line (the program links Kiln statically: that is when the library is loaded), in ms.
// --context-first (planner): the application makes its CUDA context (cudaFree(0)) before Kiln does anything, as a
// service that already holds its weights on the GPU has; the steps after it are then what Kiln's own start costs.
// --prime-early (planner): kiln::start_priming_cudnn() on main()'s first line, as such an application would call it
// at its own start (kiln/runtime/cudnn_primer.h), before its context and the Planner.
// --preload (planner): the spec in PlannerOptions::preload, so that create() starts loading and warming its stored
// plans on threads of its own (issue 37: a stored plan ready soon after create, its first run warm).
// Needs a GPU and a store holding a plan for the spec at its own shape (kiln tune SPEC --store S).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/exit_codes.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/cuda/device.h"
#include "kiln/cuda/nvml.h"
#include "kiln/lower/environment.h"
#include "kiln/runtime/cudnn_primer.h"
#include "kiln/runtime/plan_bridge.h"
#include "kiln/runtime/planner.h"
#include "kiln/spec/spec.h"
#include "kiln/store/plan_store.h"
#include "kiln/validate/host_tensor.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

Clock::time_point g_start;
constexpr const char* kUsage =
    "usage: planner_cold_start --store S --spec F [--then F2] [--mode parts|planner] "
    "[--prime (parts) | --no-prime (planner)] [--context-first (planner)] [--prime-early (planner)] "
    "[--preload (planner)] [--app-work-ms N (planner)] [--json]\n";
struct Step {
  std::string name;
  double at_ms, took_ms;
};
std::vector<Step> g_steps;

template <typename F>
auto step(const char* name, F&& f) -> decltype(f()) {
  const auto t0 = Clock::now();
  auto r = f();
  const auto t1 = Clock::now();
  g_steps.push_back({name, std::chrono::duration<double, std::milli>(t1 - g_start).count(),
                     std::chrono::duration<double, std::milli>(t1 - t0).count()});
  return r;
}

// Kiln's exit code for the failure (kiln/core/exit_codes.h: 2 bad input, 3 no GPU, 4 a damaged store, ...).
int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "planner_cold_start: %s: %s\n", what.c_str(), s.to_string().c_str());
  return exit_code_for(s);
}

// Buffers for every bound tensor of a plan, zeroed.
struct Buffers {
  std::vector<DeviceBuffer> owned;
  TensorBindings bindings;
  std::map<int, void*> by_index;
  DeviceBuffer workspace;
};

Status make_buffers(const Graph& g, int64_t ws, Buffers* b) {
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const TensorDesc& d = g.tensors[i];
    if (d.by_value || g.is_virtual(static_cast<int>(i))) continue;
    KILN_ASSIGN_OR_RETURN(int64_t bytes,
                          HostTensor::checked_byte_size(g.dtype_of(static_cast<int>(i)), d.shape(), d.strides));
    KILN_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::allocate(static_cast<size_t>(bytes)));
    KILN_RETURN_IF_ERROR(buf.fill_bytes(0));
    b->bindings[d.name] = TensorBinding{buf.data(), static_cast<size_t>(bytes)};
    b->by_index[static_cast<int>(i)] = buf.data();
    b->owned.push_back(std::move(buf));
  }
  KILN_ASSIGN_OR_RETURN(b->workspace, DeviceBuffer::allocate(static_cast<size_t>(std::max<int64_t>(ws, 16))));
  return Status::ok();
}

}  // namespace

int main(int argc, char** argv) {
  g_start = Clock::now();
  std::string store_path, spec, spec2, mode = "parts";
  bool json = false, prime = false, no_prime = false, context_first = false, prime_early = false, preload = false;
  int app_work_ms = 0;
  PrimerThread early;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--prime-early") {
      early = step("start_priming_cudnn (returns at once)", [] { return start_priming_cudnn(); });
      prime_early = true;
    }
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--store" && i + 1 < argc) store_path = argv[++i];
    else if (a == "--spec" && i + 1 < argc) spec = argv[++i];
    else if (a == "--then" && i + 1 < argc) spec2 = argv[++i];
    else if (a == "--mode" && i + 1 < argc) mode = argv[++i];
    else if (a == "--json") json = true;
    else if (a == "--prime") prime = true;
    else if (a == "--no-prime") no_prime = true;
    else if (a == "--context-first") context_first = true;
    else if (a == "--preload") preload = true;
    else if (a == "--app-work-ms" && i + 1 < argc) app_work_ms = std::atoi(argv[++i]);
    else if (a == "--prime-early") continue;
    else {
      std::fputs(kUsage, stderr);
      return 2;
    }
  }
  if (store_path.empty() || spec.empty() || (mode != "parts" && mode != "planner") || (prime && mode != "parts") ||
      (no_prime && mode != "planner") || (context_first && mode != "planner") || (prime_early && mode != "planner") ||
      (preload && mode != "planner")) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  auto graph = parse_spec_file(spec);
  if (!graph.is_ok()) return fail("spec", graph.status());
  if (mode == "planner") {
    PlannerOptions o;
    o.store_path = store_path;
    o.handles = 1;
    o.prime_cudnn = !no_prime;
    // --preload: the spec listed in PlannerOptions::preload, so create() starts loading (and warming) its stored
    // plans; the obtain right after create then waits for what is left of that load.
    if (preload) o.with_preload({*graph});
    if (const char* t = std::getenv("KILN_PRELOAD_THREADS")) o.preload_threads = std::atoi(t);  // 1..64
    if (context_first) {
      Status st = step("the application's CUDA context (cudaFree(0))", [] {
        KILN_CUDA_RETURN_IF_ERROR(cudaFree(nullptr));
        return Status::ok();
      });
      if (!st.is_ok()) return fail("cuda", st);
    }
    auto planner = step("Planner::create", [&] { return Planner::create(o); });
    if (!planner.is_ok()) return fail("Planner::create", planner.status());
    // --app-work-ms N: the application's own start between create and its first obtain (its weights, its other
    // graphs), as a sleep: what a preload has to load in.
    if (app_work_ms > 0)
      step("the application's own work (sleep)", [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(app_work_ms));
        return 0;
      });
    auto pg = step("prepare", [&] { return (*planner)->prepare(*graph); });
    if (!pg.is_ok()) return fail("prepare", pg.status());
    auto got = step("obtain", [&] { return (*planner)->obtain(*pg); });
    if (!got.is_ok()) return fail("obtain", got.status());
    // Preloaded: held by create()'s load (kMemory, having waited for it or not); an obtain that came before the load
    // took its key loads it itself (kStore).
    if (got->source != PlanSource::kStore && !(preload && got->source == PlanSource::kMemory))
      return fail("obtain", failed_precondition("served from " + std::string(plan_source_name(got->source)) +
                                                ", not the store: " + got->why));
    Buffers b;
    Status st = step("buffers", [&] { return make_buffers(got->plan->graph(), got->plan->workspace_bytes(), &b); });
    if (!st.is_ok()) return fail("buffers", st);
    for (const char* name : {"first execute + sync", "second execute + sync"}) {
      st = step(name, [&] {
        KILN_RETURN_IF_ERROR(got->plan->execute(nullptr, b.bindings, b.workspace.data()));
        KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
        return Status::ok();
      });
      if (!st.is_ok()) return fail(name, st);
    }
    if (preload) {
      auto rep = (*planner)->wait_for_preload();
      if (!rep.is_ok()) return fail("preload", rep.status());
      std::printf("  (preload: %d loaded, %d warmed, %d failed%s%s, %.3f ms; obtain from %s%s%s)\n", rep->loaded,
                  rep->warmed, rep->failed, rep->last_failure.empty() ? "" : ": ", rep->last_failure.c_str(), rep->ms,
                  plan_source_name(got->source), got->why.empty() ? "" : ": ", got->why.c_str());
    }
  } else {
    if (prime) {
      PrimeReport r = step("cuDNN primed (deviceless)", [] { return prime_cudnn(); });
      if (!r.status.is_ok()) return fail("prime", r.status);
      std::printf("  (primed by %s)\n", r.how.c_str());
    }
    Status st = step("CUDA context (cudaFree(0))", [] {
      KILN_CUDA_RETURN_IF_ERROR(cudaFree(nullptr));
      return Status::ok();
    });
    if (!st.is_ok()) return fail("cuda", st);
    EnvReport env = step("environment fingerprint", [] { return collect_environment(); });
    std::printf("  (driver release '%s' from /proc; NVML says '%s')\n", env.fingerprint.driver_release.c_str(),
                nvml_driver_release().c_str());
    if (!env.device_status.is_ok()) return fail("environment", env.device_status);
    auto handle = step("cuDNN handle", [] { return make_cudnn_handle(); });
    // What Planner::create overlaps with the CUDA context: cuDNN's sub-libraries, loaded ahead of the plan.
    const int preloaded = step("cuDNN sub-libraries (dlopen)", [] { return preload_cudnn_libraries(); });
    std::printf("  (%d cuDNN sub-libraries loaded ahead)\n", preloaded);
    if (!handle.is_ok()) return fail("handle", handle.status());
    StoreOpenOptions so;
    so.read_only = true;
    auto store = step("store open", [&] { return PlanStore::open(store_path, so); });
    if (!store.is_ok()) return fail("store open", store.status());
    auto sig = step("signature", [&] { return compute_signature(*graph); });
    if (!sig.is_ok()) return fail("signature", sig.status());
    auto look = step("store lookup", [&] { return (*store)->get(sig->structure, sig->shape_key, env.fingerprint); });
    if (!look.is_ok()) return fail("store lookup", look.status());
    if (!look->runnable())
      return fail("store lookup", not_found(std::string("no runnable record: ") + lookup_outcome_name(look->outcome)));
    std::vector<uint8_t> bytes(look->record->plan_bytes.begin(), look->record->plan_bytes.end());
    auto plan = step("deserialize", [&] { return LoweredGraph::deserialize(*graph, handle->get(), bytes); });
    if (!plan.is_ok()) return fail("deserialize", plan.status());
    // The same bytes again: what a deserialize costs once cuDNN's first-use work is done (the rest of
    // the first one is that work).
    auto again = step("deserialize again", [&] { return LoweredGraph::deserialize(*graph, handle->get(), bytes); });
    if (!again.is_ok()) return fail("deserialize again", again.status());
    // --then F2: a second graph's stored plan (another engine), deserialized first after the first one's:
    // whether cuDNN's first-use work is paid once per process or once per engine.
    if (!spec2.empty()) {
      auto g2 = parse_spec_file(spec2);
      if (!g2.is_ok()) return fail("--then spec", g2.status());
      auto sig2 = compute_signature(*g2);
      if (!sig2.is_ok()) return fail("--then signature", sig2.status());
      auto look2 = (*store)->get(sig2->structure, sig2->shape_key, env.fingerprint);
      if (!look2.is_ok() || !look2->runnable())
        return fail("--then store lookup", not_found("no runnable record for " + spec2));
      std::vector<uint8_t> bytes2(look2->record->plan_bytes.begin(), look2->record->plan_bytes.end());
      std::printf("  (--then %s: engine %lld)\n", spec2.c_str(), static_cast<long long>(look2->record->engine_id));
      auto p2 =
          step("deserialize a second graph", [&] { return LoweredGraph::deserialize(*g2, handle->get(), bytes2); });
      if (!p2.is_ok()) return fail("deserialize a second graph", p2.status());
      auto p2b = step("second graph again", [&] { return LoweredGraph::deserialize(*g2, handle->get(), bytes2); });
      if (!p2b.is_ok()) return fail("second graph again", p2b.status());
    }
    Buffers b;
    st = step("buffers", [&] { return make_buffers(*graph, plan->workspace_size(), &b); });
    if (!st.is_ok()) return fail("buffers", st);
    for (const char* name : {"first execute + sync", "second execute + sync"}) {
      st = step(name, [&] {
        KILN_RETURN_IF_ERROR(plan->execute(handle->get(), b.by_index, b.workspace.data()));
        KILN_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
        return Status::ok();
      });
      if (!st.is_ok()) return fail(name, st);
    }
  }
  if (json) {
    std::printf("{\"mode\": \"%s\", \"spec\": \"%s\", \"steps\": [", mode.c_str(), spec.c_str());
    for (size_t i = 0; i < g_steps.size(); ++i)
      std::printf("%s{\"step\": \"%s\", \"took_ms\": %.3f, \"at_ms\": %.3f}", i ? ", " : "", g_steps[i].name.c_str(),
                  g_steps[i].took_ms, g_steps[i].at_ms);
    std::printf("]}\n");
    return 0;
  }
  std::printf("planner_cold_start %s %s (ms from main)\n", mode.c_str(), spec.c_str());
  // main()'s first line on the monotonic clock, to line these steps up with libkiln_api_trace.so's driver calls.
  std::printf("  (main at monotonic %.3f ms)\n",
              std::chrono::duration<double, std::milli>(g_start.time_since_epoch()).count());
  for (const Step& s : g_steps) std::printf("  %-28s took %9.3f   at %9.3f\n", s.name.c_str(), s.took_ms, s.at_ms);
  return 0;
}
