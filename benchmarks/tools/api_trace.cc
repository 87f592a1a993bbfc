// libkiln_api_trace.so: where a process's CUDA driver time goes, for machines without Nsight Systems (the GPU
// machine has none). CUDA loads it at cuInit through its injection hook and calls InitializeInjection():
//
//   CUDA_INJECTION64_PATH=/path/libkiln_api_trace.so KILN_API_TRACE=trace.txt planner_cold_start ...
//
// It subscribes to CUPTI's callbacks (no hardware counters: it runs where ncu cannot read them) and writes, at
// exit, to KILN_API_TRACE (default: stderr):
//   - every driver call of at least KILN_API_TRACE_MIN_MS (default 0.1) ms, with its start on the monotonic clock
//     (std::chrono::steady_clock's, which planner_cold_start prints as its origin), its duration and its thread;
//   - every module load (CUPTI's resource callback) with its cubin's size;
//   - per driver function: calls, total and longest ms, most total first;
//   - whether NVRTC's libraries were mapped into the process (a runtime compile happened or was made ready).
// A measuring tool only: calls are timed on the host around the driver's own work, with CUPTI's callback cost
// (about a microsecond a call) added to each.
#include <cupti.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

double now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Call {
  double start_ms, took_ms;
  std::string name;
  long tid;
};
struct Total {
  long calls = 0;
  double total_ms = 0, max_ms = 0;
};
struct ModuleLoad {
  double at_ms;
  size_t cubin_bytes;
  long tid;
};

struct Trace {
  std::mutex mu;
  double min_ms = 0.1;
  std::vector<Call> long_calls;
  std::map<std::string, Total> totals;
  std::vector<ModuleLoad> modules;
  CUpti_SubscriberHandle sub{};
};

Trace* g_trace = nullptr;

long thread_id() { return static_cast<long>(syscall(SYS_gettid)); }

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  Trace& t = *g_trace;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    if (cb->callbackSite == CUPTI_API_ENTER) {
      double s = now_ms();
      std::memcpy(cb->correlationData, &s, sizeof s);
      return;
    }
    double s;
    std::memcpy(&s, cb->correlationData, sizeof s);
    const double took = now_ms() - s;
    std::lock_guard<std::mutex> lock(t.mu);
    Total& tot = t.totals[cb->functionName ? cb->functionName : "?"];
    ++tot.calls;
    tot.total_ms += took;
    tot.max_ms = std::max(tot.max_ms, took);
    if (took >= t.min_ms) t.long_calls.push_back({s, took, cb->functionName ? cb->functionName : "?", thread_id()});
  } else if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
    const auto* rd = static_cast<const CUpti_ResourceData*>(data);
    const auto* md = static_cast<const CUpti_ModuleResourceData*>(rd->resourceDescriptor);
    std::lock_guard<std::mutex> lock(t.mu);
    t.modules.push_back({now_ms(), md ? md->cubinSize : 0, thread_id()});
  }
}

// Which of NVRTC's libraries the process has mapped (/proc/self/maps), once each.
std::vector<std::string> nvrtc_mapped() {
  std::vector<std::string> found;
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) return found;
  char line[4096];
  while (std::fgets(line, sizeof line, f)) {
    const char* p = std::strstr(line, "libnvrtc");
    if (!p) continue;
    const char* slash = std::strrchr(line, '/');
    std::string name(slash ? slash + 1 : p);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (std::find(found.begin(), found.end(), name) == found.end()) found.push_back(name);
  }
  std::fclose(f);
  return found;
}

void write_report() {
  Trace& t = *g_trace;
  std::lock_guard<std::mutex> lock(t.mu);
  const char* path = std::getenv("KILN_API_TRACE");
  FILE* out = (path && *path) ? std::fopen(path, "w") : nullptr;
  if (!out) out = stderr;
  std::fprintf(out, "# kiln api trace (pid %d): driver calls of at least %.3f ms, monotonic ms\n",
               static_cast<int>(getpid()), t.min_ms);
  std::sort(t.long_calls.begin(), t.long_calls.end(),
            [](const Call& a, const Call& b) { return a.start_ms < b.start_ms; });
  for (const Call& c : t.long_calls)
    std::fprintf(out, "call  start %.3f  took %8.3f  tid %ld  %s\n", c.start_ms, c.took_ms, c.tid, c.name.c_str());
  for (const ModuleLoad& m : t.modules)
    std::fprintf(out, "module loaded  at %.3f  cubin %zu bytes  tid %ld\n", m.at_ms, m.cubin_bytes, m.tid);
  std::vector<std::pair<std::string, Total>> rows(t.totals.begin(), t.totals.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.total_ms > b.second.total_ms; });
  std::fprintf(out, "# per function: calls, total ms, longest ms\n");
  for (const auto& [name, tot] : rows)
    std::fprintf(out, "total  %-40s %7ld %10.3f %10.3f\n", name.c_str(), tot.calls, tot.total_ms, tot.max_ms);
  const std::vector<std::string> nvrtc = nvrtc_mapped();
  std::fprintf(out, "nvrtc mapped: %s", nvrtc.empty() ? "none" : "");
  for (size_t i = 0; i < nvrtc.size(); ++i) std::fprintf(out, "%s%s", i ? ", " : "", nvrtc[i].c_str());
  std::fprintf(out, "\n");
  if (out != stderr) std::fclose(out);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  if (g_trace) return 1;
  g_trace = new Trace;
  if (const char* m = std::getenv("KILN_API_TRACE_MIN_MS")) g_trace->min_ms = std::atof(m);
  if (cuptiSubscribe(&g_trace->sub, reinterpret_cast<CUpti_CallbackFunc>(on_callback), nullptr) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "kiln api trace: cuptiSubscribe failed; not tracing\n");
    return 0;
  }
  cuptiEnableDomain(1, g_trace->sub, CUPTI_CB_DOMAIN_DRIVER_API);
  cuptiEnableCallback(1, g_trace->sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
  std::atexit(write_report);
  return 1;
}
