// Where a stored plan's deserialize goes inside cuDNN (issue 37, item 4: a stored runtime-compiled plan ready
// <= 10 ms after Planner::create). planner_cold_start times the deserialize as one step (17-20 ms for an RMS
// norm's runtime-compiled plan, the same again on a second call, no driver call over 0.1 ms in it); this splits it
// and samples it, with no profiler on the machine:
//
//   plan_deserialize_profile --store S --spec F [--reps N] [--sample-us U] [--dump FILE] [--overlap]
//
// After one untimed deserialize (cuDNN's first-use work), each of N rounds times, in ms:
//   kiln         LoweredGraph::deserialize, as the Planner loads a plan
//   parse        the blob's UBJSON parse
//   fe_nowarm    cuDNN Frontend's Graph::deserialize with run_warmup=false
//   fe_warmup    the Frontend's warmup alone (a throwaway stream capture of one execute)
//   set_json     cudnnBackendSetAttribute(EXECUTION_PLAN_JSON_REPRESENTATION) on a new plan descriptor
//   finalize     cudnnBackendFinalize of that descriptor (the plan rebuilt from its JSON)
// Then the finalize loop again under a sampler: a POSIX timer signals this thread every U us (wall clock) and the
// handler keeps the interrupted instruction and a few return addresses; each is named by dladdr as library +
// nearest exported symbol (cuDNN exports few: an offset into a library is what is left). Printed: self samples by
// library and by symbol, and inclusive samples by library (a library anywhere in the sampled stack).
// Then the backend's load on 1, 2, 4 and 8 threads at once (a handle each): whether loads of several plans can run
// side by side. --dump FILE: the backend JSON written to FILE, to read offline.
// --overlap: a new process's start instead: cuDNN's sub-libraries loaded one by one (timed), all but the
// precompiled engines' first, and then that one on a thread while this thread deserializes the plan: whether a
// stored plan's load can run beside the largest library's load.
// Needs a GPU, cuDNN Frontend 1.32 or later (it calls the Frontend's deserialize without warmup and its warmup) and a
// store holding a plan for the spec at its own shape (kiln tune SPEC --store S). x86-64 Linux (the sampler reads RIP).
#include <cudnn.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <cudnn_frontend.h>

#include "kiln/core/exit_codes.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/cuda/device.h"
#include "kiln/lower/environment.h"
#include "kiln/lower/lower.h"
#include "kiln/store/plan_lookup.h"
#include "kiln/spec/spec.h"
#include "kiln/store/plan_store.h"

using namespace kiln;
namespace fe = cudnn_frontend;
using Clock = std::chrono::steady_clock;

#if CUDNN_FRONTEND_VERSION < 13200
int main() {
  std::fputs("plan_deserialize_profile needs cuDNN Frontend 1.32 or later\n", stderr);
  return 5;
}
#else
namespace {

constexpr int kFrames = 12;
constexpr int kMaxSamples = 1 << 16;
struct Sample {
  int depth;
  void* pc[kFrames];
};
Sample g_samples[kMaxSamples];
std::atomic<int> g_count{0};
std::atomic<bool> g_on{false};

// The timer's signal: keeps the interrupted instruction and the return addresses above it. backtrace() is not
// async-signal-safe; it was called once outside the handler first (Sampler), so it does not load the unwinder here,
// which is enough for a profiling tool that samples only its own loop.
void on_tick(int, siginfo_t*, void* ctx) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  const int saved_errno = errno;
  const int i = g_count.fetch_add(1, std::memory_order_relaxed);
  if (i >= kMaxSamples) return;
  Sample& s = g_samples[i];
  auto* uc = static_cast<ucontext_t*>(ctx);
  s.pc[0] = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
  // Frames 0-2 are this handler, the kernel's trampoline and the interrupted instruction again.
  void* frames[kFrames + 2];
  const int n = backtrace(frames, kFrames + 2);
  s.depth = 1;
  for (int f = 3; f < n && s.depth < kFrames; ++f) s.pc[s.depth++] = frames[f];
  errno = saved_errno;
}

struct Sampler {
  timer_t timer{};
  bool made = false;
  explicit Sampler(int interval_us) {
    void* warm[4];
    (void)backtrace(warm, 4);  // loads the unwinder outside the handler
    struct sigaction sa {};
    sa.sa_sigaction = on_tick;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, nullptr);
    struct sigevent sev {};
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
    made = timer_create(CLOCK_MONOTONIC, &sev, &timer) == 0;
    if (!made) return;
    struct itimerspec its {};
    its.it_interval.tv_sec = interval_us / 1000000;
    its.it_interval.tv_nsec = (interval_us % 1000000) * 1000L;
    its.it_value = its.it_interval;
    if (timer_settime(timer, 0, &its, nullptr) != 0) {
      timer_delete(timer);
      made = false;
    }
  }
  ~Sampler() {
    if (made) timer_delete(timer);
    signal(SIGPROF, SIG_DFL);
  }
};

std::string lib_of(void* pc, std::string* sym) {
  Dl_info info{};
  if (dladdr(pc, &info) == 0 || info.dli_fname == nullptr) {
    *sym = "?";
    return "?";
  }
  std::string lib = info.dli_fname;
  const size_t slash = lib.rfind('/');
  if (slash != std::string::npos) lib = lib.substr(slash + 1);
  char buf[256];
  const auto base = reinterpret_cast<uintptr_t>(info.dli_fbase);
  if (info.dli_sname != nullptr) {
    std::snprintf(buf, sizeof buf, "%s:%s", lib.c_str(), info.dli_sname);
  } else {  // no exported symbol: the library's 64 KiB page of the address
    std::snprintf(buf, sizeof buf, "%s:+0x%lx", lib.c_str(),
                  static_cast<unsigned long>((reinterpret_cast<uintptr_t>(pc) - base) & ~uintptr_t{0xffff}));
  }
  *sym = buf;
  return lib;
}

void print_top(const char* title, const std::map<std::string, int>& counts, int total, int top) {
  std::vector<std::pair<int, std::string>> v;
  for (const auto& [k, n] : counts) v.push_back({n, k});
  std::sort(v.rbegin(), v.rend());
  std::printf("  %s (of %d samples)\n", title, total);
  for (int i = 0; i < static_cast<int>(v.size()) && i < top; ++i)
    std::printf("    %6.1f%%  %5d  %s\n", 100.0 * v[i].first / std::max(total, 1), v[i].first, v[i].second.c_str());
}

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "plan_deserialize_profile: %s: %s\n", what.c_str(), s.to_string().c_str());
  return exit_code_for(s);
}

// One plan descriptor from the backend JSON: the set_json and finalize times (ms), and cuDNN's status.
struct BackendTimes {
  double set_json = 0, finalize = 0;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
};
BackendTimes backend_load(cudnnHandle_t handle, const std::string& json) {
  BackendTimes t;
  cudnnBackendDescriptor_t d = nullptr;
  if ((t.status = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &d)) != CUDNN_STATUS_SUCCESS)
    return t;
  auto t0 = Clock::now();
  t.status = cudnnBackendSetAttribute(d, CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                      static_cast<int64_t>(json.size()), json.data());
  t.set_json = ms_since(t0);
  if (t.status == CUDNN_STATUS_SUCCESS)
    t.status = cudnnBackendSetAttribute(d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  if (t.status == CUDNN_STATUS_SUCCESS) {
    t0 = Clock::now();
    t.status = cudnnBackendFinalize(d);
    t.finalize = ms_since(t0);
  }
  cudnnBackendDestroyDescriptor(d);
  return t;
}

// --overlap: the sub-libraries but the precompiled engines' loaded one by one, then that one on a thread while the
// plan deserializes here.
int run_overlap(const Graph& graph, cudnnHandle_t handle, const std::vector<uint8_t>& bytes, double handle_ms) {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&cudnnGetVersion), &info) || !info.dli_fname)
    return fail("overlap", not_found("where libcudnn is"));
  std::string dir = info.dli_fname;
  dir = dir.substr(0, dir.rfind('/'));
  std::printf("  cuDNN handle %.3f ms\n", handle_ms);
  for (const char* name : {"libcudnn_graph", "libcudnn_heuristic", "libcudnn_engines_runtime_compiled"}) {
    auto t0 = Clock::now();
    void* h = dlopen((dir + "/" + name + ".so.9").c_str(), RTLD_LAZY | RTLD_GLOBAL);
    std::printf("  dlopen %-36s %8.3f ms%s\n", name, ms_since(t0), h ? "" : " (failed)");
  }
  double lib_ms = 0, lib_end = 0;
  const auto start = Clock::now();
  std::thread lib([&] {
    auto t0 = Clock::now();
    void* h = dlopen((dir + "/libcudnn_engines_precompiled.so.9").c_str(), RTLD_LAZY | RTLD_GLOBAL);
    lib_ms = ms_since(t0);
    lib_end = ms_since(start);
    if (h == nullptr) lib_ms = -1;
  });
  auto t0 = Clock::now();
  auto plan = LoweredGraph::deserialize(graph, handle, bytes);
  const double deser_ms = ms_since(t0);
  lib.join();
  if (!plan.is_ok()) return fail("deserialize", plan.status());
  std::printf("  beside each other: dlopen libcudnn_engines_precompiled %.3f ms (ended at %.3f), deserialize %.3f ms;"
              " both done at %.3f ms\n",
              lib_ms, lib_end, deser_ms, ms_since(start));
  t0 = Clock::now();
  auto again = LoweredGraph::deserialize(graph, handle, bytes);
  if (!again.is_ok()) return fail("deserialize again", again.status());
  std::printf("  deserialize again (alone) %.3f ms\n", ms_since(t0));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string store_path, spec;
  int reps = 10, sample_us = 50;
  std::string dump;
  bool overlap = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--store" && i + 1 < argc) store_path = argv[++i];
    else if (a == "--spec" && i + 1 < argc) spec = argv[++i];
    else if (a == "--reps" && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--sample-us" && i + 1 < argc) sample_us = std::max(10, std::atoi(argv[++i]));
    else if (a == "--dump" && i + 1 < argc) dump = argv[++i];
    else if (a == "--overlap") overlap = true;
    else {
      std::fputs("usage: plan_deserialize_profile --store S --spec F [--reps N] [--sample-us U] [--dump FILE] "
                 "[--overlap]\n",
                 stderr);
      return 2;
    }
  }
  if (store_path.empty() || spec.empty()) return fail("arguments", invalid_argument("--store and --spec are needed"));
  auto graph = parse_spec_file(spec);
  if (!graph.is_ok()) return fail("spec", graph.status());
  if (cudaFree(nullptr) != cudaSuccess) return fail("cuda", unavailable("no CUDA device"));
  EnvReport env = collect_environment();
  if (!env.device_status.is_ok()) return fail("environment", env.device_status);
  auto t_start = Clock::now();
  auto handle = make_cudnn_handle();
  if (!handle.is_ok()) return fail("handle", handle.status());
  const double handle_ms = ms_since(t_start);
  if (!overlap) (void)preload_cudnn_libraries();
  StoreOpenOptions so;
  so.read_only = true;
  auto store = PlanStore::open(store_path, so);
  if (!store.is_ok()) return fail("store open", store.status());
  auto sig = compute_signature(*graph);
  if (!sig.is_ok()) return fail("signature", sig.status());
  auto look = (*store)->get(sig->structure, sig->shape_key, env.fingerprint);
  if (!look.is_ok()) return fail("store lookup", look.status());
  if (!look->runnable()) return fail("store lookup", not_found(lookup_outcome_name(look->outcome)));
  const std::vector<uint8_t> bytes(look->record->plan_bytes.begin(), look->record->plan_bytes.end());
  std::printf("plan_deserialize_profile %s: engine %lld, blob %zu bytes\n", spec.c_str(),
              static_cast<long long>(look->record->engine_id), bytes.size());

  if (overlap) return run_overlap(*graph, handle->get(), bytes, handle_ms);

  auto t0 = Clock::now();
  auto first = LoweredGraph::deserialize(*graph, handle->get(), bytes);
  if (!first.is_ok()) return fail("deserialize", first.status());
  std::printf("  first deserialize (cuDNN's first use): %.3f ms\n", ms_since(t0));

  const nlohmann::json j = nlohmann::json::from_ubjson(bytes);
  if (!j.contains("cudnn_backend_data") || !j["cudnn_backend_data"].is_string())
    return fail("blob", corruption("no cudnn_backend_data string in the blob"));
  const std::string backend_json = j["cudnn_backend_data"].get<std::string>();
  std::printf("  backend JSON %zu bytes\n", backend_json.size());
  if (!dump.empty()) {
    FILE* f = std::fopen(dump.c_str(), "wb");
    const bool written =
        f != nullptr && std::fwrite(backend_json.data(), 1, backend_json.size(), f) == backend_json.size();
    if ((f != nullptr && std::fclose(f) != 0) || !written) return fail("dump", unavailable("cannot write " + dump));
  }

  std::map<std::string, std::vector<double>> times;
  for (int r = 0; r < reps; ++r) {
    t0 = Clock::now();
    auto lg = LoweredGraph::deserialize(*graph, handle->get(), bytes);
    times["kiln"].push_back(ms_since(t0));
    if (!lg.is_ok()) return fail("deserialize", lg.status());
    t0 = Clock::now();
    nlohmann::json parsed = nlohmann::json::from_ubjson(bytes);
    times["parse"].push_back(ms_since(t0));
    fe::graph::Graph g;
    t0 = Clock::now();
    fe::error_t e = g.deserialize(handle->get(), parsed, /*enforce_precompiled=*/true, /*run_warmup=*/false);
    times["fe_nowarm"].push_back(ms_since(t0));
    if (!e.is_good()) return fail("fe deserialize", internal_error(e.err_msg));
    t0 = Clock::now();
    e = g.warmup(handle->get());
    times["fe_warmup"].push_back(ms_since(t0));
    if (!e.is_good()) return fail("fe warmup", internal_error(e.err_msg));
    BackendTimes b = backend_load(handle->get(), backend_json);
    if (b.status != CUDNN_STATUS_SUCCESS)
      return fail("backend load", internal_error(std::string("cuDNN status ") + cudnnGetErrorString(b.status)));
    times["set_json"].push_back(b.set_json);
    times["finalize"].push_back(b.finalize);
  }
  std::printf("  medians over %d rounds (ms):", reps);
  for (const char* k : {"kiln", "parse", "fe_nowarm", "fe_warmup", "set_json", "finalize"})
    std::printf(" %s %.3f", k, median(times[k]));
  std::printf("\n");

  // The backend's load on 1 thread, then on 2, 4 and 8 at once (a handle each).
  for (int threads : {1, 2, 4, 8}) {
    std::vector<UniqueCudnnHandle> handles;
    for (int t = 0; t < threads; ++t) {
      auto h = make_cudnn_handle();
      if (!h.is_ok()) return fail("handle", h.status());
      handles.push_back(std::move(h).value());
    }
    std::vector<double> walls;
    for (int r = 0; r < 3; ++r) {
      std::vector<std::thread> pool;
      std::atomic<int> bad{0};
      t0 = Clock::now();
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          // cuDNN's load calls the driver directly: the thread needs the device's context current.
          if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) ++bad;
          const BackendTimes b = backend_load(handles[t].get(), backend_json);
          if (b.status != CUDNN_STATUS_SUCCESS) {
            std::fprintf(stderr, "  thread %d of %d: cuDNN status %s\n", t, threads, cudnnGetErrorString(b.status));
            ++bad;
          }
        });
      for (auto& th : pool) th.join();
      walls.push_back(ms_since(t0));
      if (bad) return fail("parallel load", internal_error("a backend load failed"));
    }
    std::printf("  %d backend load(s) side by side, a thread each: wall %.3f ms (median of 3)\n", threads,
                median(walls));
  }

  // The backend's load under the sampler.
  double sampled_ms = 0;
  {
    Sampler sampler(sample_us);
    if (!sampler.made) return fail("sampler", internal_error("timer_create failed"));
    g_on = true;
    t0 = Clock::now();
    for (int r = 0; r < reps; ++r) (void)backend_load(handle->get(), backend_json);
    sampled_ms = ms_since(t0);
    g_on = false;
  }
  const int total = std::min(g_count.load(), kMaxSamples);
  std::printf("  sampled %d backend loads in %.1f ms, every %d us: %d samples\n", reps, sampled_ms, sample_us, total);
  std::map<std::string, int> self_lib, self_sym, incl_lib, incl_sym;
  std::map<void*, std::pair<std::string, std::string>> names;
  auto name = [&](void* pc) -> const std::pair<std::string, std::string>& {
    auto it = names.find(pc);
    if (it == names.end()) {
      std::string sym;
      std::string lib = lib_of(pc, &sym);
      it = names.emplace(pc, std::make_pair(lib, sym)).first;
    }
    return it->second;
  };
  for (int i = 0; i < total; ++i) {
    const Sample& s = g_samples[i];
    const auto& leaf = name(s.pc[0]);
    ++self_lib[leaf.first];
    ++self_sym[leaf.second];
    std::set<std::string> libs, syms;
    for (int f = 0; f < s.depth; ++f) {
      const auto& n = name(s.pc[f]);
      libs.insert(n.first);
      syms.insert(n.second);
    }
    for (const auto& l : libs) ++incl_lib[l];
    for (const auto& l : syms) ++incl_sym[l];
  }
  print_top("self, by library", self_lib, total, 12);
  print_top("self, by symbol or 64 KiB page", self_sym, total, 30);
  print_top("inclusive, by library", incl_lib, total, 12);
  print_top("inclusive, by symbol or 64 KiB page", incl_sym, total, 30);
  return 0;
}
#endif  // CUDNN_FRONTEND_VERSION
