// Plan store speed, for SQLite files and PostgreSQL locations alike (public API only): fill N records, then
// time (a) get() of a stored plan (latency p50/p99/max), (b) list() of the records (median of 20), and (c) 16
// forked clients each running 500 mixed operations on the one store (puts, gets, lists, re-tune requests, graph
// specs, removes), as operations per second, and (d) the same mix from one client alone, timed per kind of
// operation.
//   store_bench --store LOCATION [--records N] [--lookups N] [--clients N] [--ops N] [--json]
// LOCATION is a SQLite path (the file is replaced) or a PostgreSQL URI / libpq string (its records are removed
// first). Prints a table, and with --json one JSON object on the last line.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/store/plan_store.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
// The q-quantile (0..1) of v, nearest rank.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(q * static_cast<double>(v.size()));
  return v[std::min(i, v.size() - 1)];
}
int fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "store_bench: %s: %s\n", what.c_str(), s.to_string().c_str());
  return 1;
}
bool is_postgres(const std::string& loc) {
  return loc.rfind("postgresql://", 0) == 0 || loc.rfind("postgres://", 0) == 0 || loc.find('=') != std::string::npos;
}

EnvFingerprint h200() {
  EnvFingerprint f;
  f.gpu_name = "NVIDIA H200";
  f.sm_version = 90;
  f.sm_count = 132;
  f.device_uuid = "GPU-0d9f7a3e-1111-2222-3333-444455556666";
  f.driver_version = 13000;
  f.driver_release = "580.159.04";
  f.cuda_runtime_version = 13000;
  f.cudnn_version = 91900;
  f.cudnn_header_version = 91900;
  f.cudnn_library_path = "/usr/lib/x86_64-linux-gnu/libcudnn.so.9";
  f.cudnn_frontend_version = 12300;
  f.kiln_version = "0.1.0";
  f.kiln_git_revision = "abcdef123456";
  f.has_device = true;
  return f;
}

// Record i (as store_test's make_record): a distinct structure signature, a plan of 200-249 bytes.
PlanRecord make_record(int i, const std::string& prefix = "bench.sig") {
  PlanRecord r;
  r.structure_sig = prefix + std::to_string(i) + ".0123456789abcdef0123456789abcdef";
  r.shape_key = "b=" + std::to_string(8 * (i % 4 + 1)) + ";s=128";
  r.fingerprint = h200();
  r.plan_bytes = std::string(200 + i % 50, '\0');
  for (size_t k = 0; k < r.plan_bytes.size(); ++k) r.plan_bytes[k] = static_cast<char>((k * 31 + i) & 0xff);
  r.engine_id = 7 + i % 5;
  r.knobs = {{"TILE_SIZE", 2}, {"SPLIT_K", i % 3}};
  r.workspace_bytes = 1 << 20;
  r.tuned = true;
  r.stats.median_ms = 0.125 + i * 0.001;
  r.stats.min_ms = 0.120;
  r.stats.max_ms = 0.140;
  r.stats.noise_rel = 0.02;
  r.stats.samples = 50;
  r.numerics.verdict = Disposition::kPassed;
  r.numerics.max_abs = 1e-3;
  r.numerics.max_rel = 2e-3;
  r.numerics.nmse = 1e-7;
  r.tuned_by = "bench@host";
  r.created_at = 1700000000 + i;
  return r;
}

// Per kind of operation (its name in the table): each call's milliseconds (filled by an in-process client).
using OpTimes = std::map<std::string, std::vector<double>>;

// One client's mixed operations on an open store: 0 when every call succeeded. `times`: record each call's time.
int mixed_ops(PlanStore& store, int client, int ops, OpTimes* times) {
  const std::string own = "bench.mix.c" + std::to_string(client) + ".";
  Status st;
  // Runs one call (a Status-returning lambda) under its kind's name, unless an earlier one failed.
  auto timed = [&](const char* kind, auto&& call) {
    if (!st.is_ok()) return;
    const auto t = Clock::now();
    st = call();
    if (times) (*times)[kind].push_back(ms_since(t));
  };
  for (int i = 0; i < ops; ++i) {
    const int key = (i * 7 + client) % 12;
    const PlanRecord mine = make_record(key, own);
    switch (i % 10) {
      case 0:
      case 1:
      case 2: timed("put own", [&] { return store.put(mine).status(); }); break;
      case 3: {
        PlanRecord r = make_record(0, "bench.shared");
        r.engine_id = client;
        timed("put shared", [&] { return store.put(r).status(); });
        break;
      }
      case 4:
      case 5: timed("get own", [&] { return store.get(mine.structure_sig, mine.shape_key, h200()).status(); }); break;
      case 6: {
        ListFilter f;
        f.structure_prefix = own;
        timed("list own (<=12)", [&] { return store.list(f).status(); });
        break;
      }
      case 7: {
        RetuneRequest q;
        q.structure_sig = mine.structure_sig;
        q.shape_key = "b=8;s=128";
        q.fingerprint = h200();
        q.graph_name = "bench";
        q.spec_json = "{\"bench\":" + std::to_string(i) + "}";
        q.reason = "store miss";
        timed("enqueue_retune", [&] { return store.enqueue_retune(q).status(); });
        break;
      }
      case 8: {
        const std::string spec = "{\"step\":" + std::to_string(i) + "}";
        timed("put_graph_spec",
              [&] { return store.put_graph_spec(mine.structure_sig, "b=8;s=128", "bench", spec).status(); });
        timed("get_graph_spec", [&] { return store.get_graph_spec(mine.structure_sig, "b=8;s=128").status(); });
        break;
      }
      default: {
        ListFilter f;
        f.structure_prefix = mine.structure_sig;
        timed("remove own", [&] { return store.remove(f).status(); });
        break;
      }
    }
    if (!st.is_ok()) return fail("client " + std::to_string(client) + " op " + std::to_string(i), st);
  }
  return 0;
}

// One client in a forked child: opens the store, says so on ready_fd, waits for the end of go_fd, runs the mix.
int run_client(const std::string& location, int client, int ops, int ready_fd, int go_fd) {
  StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(location);
  if (!s.is_ok()) return fail("client open", s.status());
  char c = 1;
  if (::write(ready_fd, &c, 1) != 1) return 1;
  while (::read(go_fd, &c, 1) > 0) {
  }  // end of file: go
  return mixed_ops(**s, client, ops, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  std::string location;
  int records = 1000, lookups = 2000, clients = 16, ops = 500, list_runs = 20;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--store") && i + 1 < argc) location = argv[++i];
    else if (!std::strcmp(argv[i], "--records") && i + 1 < argc) records = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--lookups") && i + 1 < argc) lookups = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--clients") && i + 1 < argc) clients = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--ops") && i + 1 < argc) ops = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--json")) json = true;
    else location.clear(), i = argc;
  }
  if (location.empty() || records < 1 || lookups < 1 || clients < 1 || ops < 1) {
    std::fprintf(stderr,
                 "usage: store_bench --store LOCATION [--records N] [--lookups N] [--clients N] [--ops N] [--json]\n");
    return 2;
  }
  const bool pg = is_postgres(location);
  if (!pg)
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::filesystem::remove(location + suffix);

  // Fill.
  StatusOr<std::unique_ptr<PlanStore>> opened = PlanStore::open(location);
  if (!opened.is_ok()) return fail("open", opened.status());
  std::unique_ptr<PlanStore> store = std::move(opened).value();
  StatusOr<int64_t> cleared = store->remove(ListFilter{}, /*all=*/true);
  if (!cleared.is_ok()) return fail("clearing the store", cleared.status());
  StatusOr<std::vector<RetuneQueueEntry>> queued = store->list_retune_queue();
  if (!queued.is_ok()) return fail("list_retune_queue", queued.status());
  for (const RetuneQueueEntry& e : *queued)
    if (e.structure_sig.rfind("bench.", 0) == 0)
      if (auto r = store->remove_from_retune_queue(e.structure_sig, e.shape_key, e.fingerprint_key); !r.is_ok())
        return fail("clearing the re-tune queue", r.status());
  auto t_fill = Clock::now();
  for (int i = 0; i < records; ++i)
    if (auto p = store->put(make_record(i)); !p.is_ok()) return fail("put", p.status());
  const double fill_ms = ms_since(t_fill);

  // (a) Lookups of stored plans, spread over the records.
  std::vector<double> get_ms;
  const EnvFingerprint env = h200();
  for (int i = 0; i < lookups; ++i) {
    const PlanRecord r = make_record((i * 7919) % records);
    auto t = Clock::now();
    StatusOr<LookupResult> g = store->get(r.structure_sig, r.shape_key, env);
    get_ms.push_back(ms_since(t));
    if (!g.is_ok()) return fail("get", g.status());
    if (g->outcome != LookupOutcome::kHit) {
      std::fprintf(stderr, "store_bench: record %d is not a hit\n", (i * 7919) % records);
      return 1;
    }
  }

  // (b) list() of every record.
  std::vector<double> list_ms;
  size_t listed = 0;
  for (int i = 0; i < list_runs; ++i) {
    auto t = Clock::now();
    StatusOr<std::vector<PlanSummary>> l = store->list();
    list_ms.push_back(ms_since(t));
    if (!l.is_ok()) return fail("list", l.status());
    listed = l->size();
  }
  // (d) The same mix from one client alone, each kind of operation timed: what a call costs without contention.
  OpTimes solo;
  if (mixed_ops(*store, clients, ops, &solo) != 0) return 1;
  store.reset();  // the clients open their own: nothing of the parent's connection crosses the fork

  // (c) Forked clients, started together once all have opened the store.
  int ready[2], go[2];
  if (::pipe(ready) != 0 || ::pipe(go) != 0) return 1;
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int c = 0; c < clients; ++c) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      ::close(go[1]);
      const int code = run_client(location, c, ops, ready[1], go[0]);
      std::fflush(nullptr);
      ::_exit(code);
    }
    if (pid < 0) return 1;
    pids.push_back(pid);
  }
  ::close(ready[1]);
  ::close(go[0]);
  int started = 0;
  char c;
  while (started < clients && ::read(ready[0], &c, 1) == 1) ++started;
  auto t_mix = Clock::now();
  ::close(go[1]);
  int failed = clients - started;
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const double mix_s = ms_since(t_mix) / 1000;
  if (failed) {
    std::fprintf(stderr, "store_bench: %d of %d clients failed\n", failed, clients);
    return 1;
  }
  const double total_ops = static_cast<double>(clients) * ops;

  std::printf("store_bench  %s store, %d records\n", pg ? "PostgreSQL" : "SQLite", records);
  std::printf("  %-34s %10s %10s %10s\n", "measure", "p50", "p99", "max");
  std::printf("  %-34s %8.3fms %8.3fms %8.3fms\n", ("get() x" + std::to_string(lookups)).c_str(), quantile(get_ms, 0.5),
              quantile(get_ms, 0.99), quantile(get_ms, 1.0));
  std::printf("  %-34s %8.3fms %10s %8.3fms\n",
              ("list() of " + std::to_string(listed) + " x" + std::to_string(list_runs)).c_str(),
              quantile(list_ms, 0.5), "", quantile(list_ms, 1.0));
  std::printf("  %-34s %.0f ops in %.2f s = %.0f ops/s\n",
              (std::to_string(clients) + " clients x " + std::to_string(ops) + " mixed").c_str(), total_ops, mix_s,
              total_ops / mix_s);
  std::printf("  (fill: %d puts in %.0f ms, %.3f ms/put)\n", records, fill_ms, fill_ms / records);
  std::printf("  one client alone, %d mixed ops:\n", ops);
  nlohmann::json solo_json = nlohmann::json::object();
  for (const auto& [kind, v] : solo) {
    std::printf("    %-32s %8.3fms %8.3fms %8.3fms  (%zu calls)\n", kind.c_str(), quantile(v, 0.5), quantile(v, 0.99),
                quantile(v, 1.0), v.size());
    solo_json[kind] = {{"n", v.size()}, {"p50", quantile(v, 0.5)}, {"p99", quantile(v, 0.99)}};
  }
  if (json) {
    nlohmann::json j;
    j["meta"] = {{"argv", std::vector<std::string>(argv, argv + argc)}, {"backend", pg ? "postgresql" : "sqlite"}};
    j["records"] = records;
    j["fill_ms_per_put"] = fill_ms / records;
    j["get_ms"] = {{"n", lookups},
                   {"p50", quantile(get_ms, 0.5)},
                   {"p99", quantile(get_ms, 0.99)},
                   {"max", quantile(get_ms, 1.0)}};
    j["list_ms"] = {{"records", listed}, {"runs", list_runs}, {"median", quantile(list_ms, 0.5)}};
    j["solo_op_ms"] = solo_json;
    j["mixed"] = {{"clients", clients}, {"ops_each", ops}, {"seconds", mix_s}, {"ops_per_s", total_ops / mix_s}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}
