// Many processes on one store at once, on every implementation (SQLite file, PostgreSQL schema): forked clients
// running a deterministic mix of every kind of operation, and (PostgreSQL only) the database server restarted
// under writers that must ride it out. Afterwards the parent replays each client's operations to know what the
// store must hold, and checks that nothing acknowledged was lost and nothing was left half-written.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/store/plan_store.h"
#include "process_test_util.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::TempDir;
using test::ChildExit;
using test::ReadySignal;
using test::run_in_children;

// A child still running after this long has hung: it is killed and fails the test.
constexpr double kChildTimeoutS = 120;
constexpr int kClients = 16;
constexpr int kOwnKeys = 12;  // keys only one client writes (and removes)

// A child's key k: no '_' or '%' (a prefix filter must match it and nothing of another child's).
std::string own_sig(int child, int k) {
  char b[64];
  std::snprintf(b, sizeof b, "chaos.c%02d.k%02d.0123456789abcdef", child, k);
  return b;
}
std::string own_prefix(int child) {
  char b[32];
  std::snprintf(b, sizeof b, "chaos.c%02d.", child);
  return b;
}
const char* const kSharedSig = "chaos.shared.0123456789abcdef";

// The plan bytes client `child` writes at step i: they say who wrote them, so a reader can tell a whole value
// from a mix of two (half-written) without knowing which write won.
std::string plan_bytes_of(int child, int i) {
  std::string s = "c=" + std::to_string(child) + ";i=" + std::to_string(i) + ";";
  const size_t n = 200 + static_cast<size_t>(child * 37 + i * 11) % 600;
  for (size_t k = s.size(); k < n; ++k) s.push_back(static_cast<char>((k * 131 + child * 17 + i) & 0xff));
  return s;
}
// True when `bytes` is exactly what some (child, i) wrote; sets them.
bool whole_plan_bytes(const std::string& bytes, int* child, int* i) {
  if (std::sscanf(bytes.c_str(), "c=%d;i=%d;", child, i) != 2) return false;
  return bytes == plan_bytes_of(*child, *i);
}

PlanRecord own_record(int child, int k, int i) {
  PlanRecord r = make_record(child * 100 + k);
  r.structure_sig = own_sig(child, k);
  r.plan_bytes = plan_bytes_of(child, i);
  r.engine_id = child;
  return r;
}
PlanRecord shared_record(int child, int i) {
  PlanRecord r = make_record(0);
  r.structure_sig = kSharedSig;
  r.plan_bytes = plan_bytes_of(child, i);
  r.engine_id = child;
  r.tuned_by = "client" + std::to_string(child);
  return r;
}
std::string spec_of(int child, int k, int i) {
  return "{\"chaos\":{\"child\":" + std::to_string(child) + ",\"key\":" + std::to_string(k) +
         ",\"step\":" + std::to_string(i) + "}}";
}

// One operation of the mix, a pure function of (child, i): the parent replays the same sequence.
enum class Op { kPutOwn, kPutShared, kGetOwn, kGetShared, kList, kEnqueue, kGraphSpec, kRemoveOwn };
struct Step {
  Op op;
  int key;
};
Step step_of(int child, int i) {
  uint64_t x = static_cast<uint64_t>(child) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i) + 1;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;  // splitmix64's finalizer
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  const int key = static_cast<int>((x >> 8) % kOwnKeys);
  switch (x % 16) {
    case 0:
    case 1:
    case 2:
    case 3: return {Op::kPutOwn, key};
    case 4:
    case 5: return {Op::kPutShared, key};
    case 6:
    case 7:
    case 8: return {Op::kGetOwn, key};
    case 9: return {Op::kGetShared, key};
    case 10: return {Op::kList, key};
    case 11:
    case 12: return {Op::kEnqueue, key};
    case 13:
    case 14: return {Op::kGraphSpec, key};
    default: return {Op::kRemoveOwn, key};
  }
}

// What one client leaves behind, by replaying its steps.
struct ClientState {
  std::map<int, std::optional<int>> plan;  // key -> the step of the last put, nullopt when last removed
  std::map<int, int> spec;                 // key -> the step of the last graph spec
  std::map<int, int64_t> enqueued;         // key -> how many times it was queued
  int shared_puts = 0;
};
ClientState replay(int child, int n) {
  ClientState st;
  for (int i = 0; i < n; ++i) {
    const Step s = step_of(child, i);
    if (s.op == Op::kPutOwn) st.plan[s.key] = i;
    if (s.op == Op::kRemoveOwn) st.plan[s.key] = std::nullopt;
    if (s.op == Op::kGraphSpec) st.spec[s.key] = i;
    if (s.op == Op::kEnqueue) ++st.enqueued[s.key];
    if (s.op == Op::kPutShared) ++st.shared_puts;
  }
  return st;
}

// Prints why a child fails (its assertions would be counted by nobody) and gives its exit code.
int child_fail(int child, int i, const char* what, const std::string& detail, int code) {
  std::fprintf(stderr, "client %d step %d: %s: %s\n", child, i, what, detail.c_str());
  return code;
}

// How a child treats an error: ManyClients gives up at once; the restart case retries Unavailable.
struct Retry {
  bool unavailable = false;  // retry Unavailable (the store reconnects on the next call)
  double give_up_s = 60;     // ... for at most this long per operation
  int64_t* retries = nullptr;
};
template <typename F>
auto with_retry(const Retry& r, F&& f) -> decltype(f()) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(r.give_up_s * 1000));
  for (;;) {
    auto out = f();
    if (out.is_ok() || !r.unavailable || out.status().code() != StatusCode::kUnavailable ||
        std::chrono::steady_clock::now() > end)
      return out;
    if (r.retries && (*r.retries)++ == 0)  // the first, to show what the outage looked like
      std::fprintf(stderr, "retrying after: %s\n", out.status().to_string().c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Runs client `child`'s n steps against the store (a forked child): 0 when every step did what it should.
// With `until` (a file's path), it goes on past n steps until that file exists, then 50 steps more (at most
// 20000 in all); *steps says how many it ran.
int run_client(const store_test::StoreImplementation& impl, const std::string& where, int child, int n,
               const Retry& retry, ReadySignal* ready = nullptr, int ready_after = 0, const std::string& until = "",
               int* steps = nullptr) {
  StatusOr<std::unique_ptr<PlanStore>> opened = with_retry(retry, [&] { return impl.open(where, {}); });
  if (!opened.is_ok()) return child_fail(child, -1, "open", opened.status().to_string(), 2);
  PlanStore& store = **opened;
  ClientState st;    // what this client has written so far (for its own reads)
  int seen_at = -1;  // the step at which `until` was first seen
  for (int i = 0;; ++i) {
    if (steps) *steps = i;
    if (i >= n) {
      if (until.empty()) break;
      if (seen_at < 0 && std::filesystem::exists(until)) seen_at = i;
      if ((seen_at >= 0 && i >= seen_at + 50) || i >= 20000) break;
    }
    if (ready && i == ready_after && !ready->signal()) return child_fail(child, i, "ready", "pipe", 9);
    const Step s = step_of(child, i);
    switch (s.op) {
      case Op::kPutOwn: {
        auto p = with_retry(retry, [&] { return store.put(own_record(child, s.key, i)); });
        if (!p.is_ok()) return child_fail(child, i, "put", p.status().to_string(), 3);
        st.plan[s.key] = i;
        break;
      }
      case Op::kPutShared: {
        auto p = with_retry(retry, [&] { return store.put(shared_record(child, i)); });
        if (!p.is_ok()) return child_fail(child, i, "put shared", p.status().to_string(), 3);
        ++st.shared_puts;
        break;
      }
      case Op::kGetOwn: {
        const PlanRecord r = own_record(child, s.key, 0);
        auto g = with_retry(retry, [&] { return store.get(r.structure_sig, r.shape_key, h200()); });
        if (!g.is_ok()) return child_fail(child, i, "get", g.status().to_string(), 4);
        auto it = st.plan.find(s.key);
        const bool present = it != st.plan.end() && it->second.has_value();
        if (present && (g->outcome != LookupOutcome::kHit || !g->record ||
                        g->record->plan_bytes != plan_bytes_of(child, *it->second)))
          return child_fail(child, i, "get",
                            "not the plan this client wrote last at step " + std::to_string(*it->second), 5);
        if (!present && g->outcome != LookupOutcome::kMiss)
          return child_fail(child, i, "get", "a removed or never written key is not a miss", 5);
        break;
      }
      case Op::kGetShared: {
        auto g = with_retry(retry, [&] { return store.get(kSharedSig, make_record(0).shape_key, h200()); });
        if (!g.is_ok()) return child_fail(child, i, "get shared", g.status().to_string(), 4);
        int c = 0, j = 0;
        if (st.shared_puts > 0 && (g->outcome != LookupOutcome::kHit || !g->record ||
                                   !whole_plan_bytes(g->record->plan_bytes, &c, &j) || c != g->record->engine_id))
          return child_fail(child, i, "get shared", "not a whole value of one writer", 5);
        break;
      }
      case Op::kList: {
        ListFilter f;
        f.structure_prefix = own_prefix(child);
        auto l = with_retry(retry, [&] { return store.list(f); });
        if (!l.is_ok()) return child_fail(child, i, "list", l.status().to_string(), 4);
        size_t want = 0;
        for (const auto& [k, v] : st.plan) want += v.has_value();
        if (l->size() != want)
          return child_fail(child, i, "list", std::to_string(l->size()) + " records, want " + std::to_string(want), 5);
        for (const PlanSummary& p : *l)
          if (!p.problem.empty()) return child_fail(child, i, "list", p.problem, 5);
        break;
      }
      case Op::kEnqueue: {
        RetuneRequest q;
        q.structure_sig = own_sig(child, s.key);
        q.shape_key = "b=8;s=128";
        q.fingerprint = h200();
        q.graph_name = "chaos";
        q.spec_json = spec_of(child, s.key, i);
        q.reason = "store miss (chaos step " + std::to_string(i) + ")";
        auto e = with_retry(retry, [&] { return store.enqueue_retune(q); });
        if (!e.is_ok()) return child_fail(child, i, "enqueue_retune", e.status().to_string(), 3);
        ++st.enqueued[s.key];
        // A retried request whose first attempt committed (its answer lost with the connection) counts twice.
        if (retry.unavailable && e->request_count > st.enqueued[s.key]) st.enqueued[s.key] = e->request_count;
        if (e->request_count != st.enqueued[s.key])
          return child_fail(
              child, i, "enqueue_retune",
              "count " + std::to_string(e->request_count) + ", want " + std::to_string(st.enqueued[s.key]), 5);
        break;
      }
      case Op::kGraphSpec: {
        const std::string sig = own_sig(child, s.key), spec = spec_of(child, s.key, i);
        auto p = with_retry(retry, [&] { return store.put_graph_spec(sig, "b=8;s=128", "chaos", spec); });
        if (!p.is_ok()) return child_fail(child, i, "put_graph_spec", p.status().to_string(), 3);
        auto g = with_retry(retry, [&] { return store.get_graph_spec(sig, "b=8;s=128"); });
        if (!g.is_ok()) return child_fail(child, i, "get_graph_spec", g.status().to_string(), 4);
        if (!g->has_value() || (*g)->spec_json != spec)
          return child_fail(child, i, "get_graph_spec", "not the spec just written", 5);
        st.spec[s.key] = i;
        break;
      }
      case Op::kRemoveOwn: {
        ListFilter f;
        f.structure_prefix = own_sig(child, s.key);
        auto r = with_retry(retry, [&] { return store.remove(f); });
        if (!r.is_ok()) return child_fail(child, i, "remove", r.status().to_string(), 3);
        auto it = st.plan.find(s.key);
        // Under retries a remove may have been done by the attempt whose answer was lost: 0 is then right.
        const int64_t want = it != st.plan.end() && it->second.has_value() ? 1 : 0;
        if (*r != want && !(retry.unavailable && *r == 0))
          return child_fail(child, i, "remove", std::to_string(*r) + " rows, want " + std::to_string(want), 5);
        st.plan[s.key] = std::nullopt;
        break;
      }
    }
  }
  return 0;
}

// Checks that the store holds what clients 0..clients-1, each after n steps, left: every plan present and
// whole, removed ones absent, the shared key one writer's whole value, specs and queue counts all there, and
// verify() finding nothing wrong. `retried`: clients retried calls whose answer was lost, so a queued key may
// have been counted more often than asked (at least once each).
void expect_store_holds(PlanStore& store, const std::vector<int>& steps, bool retried = false) {
  const int clients = static_cast<int>(steps.size());
  int64_t plans = 0, lost = 0, wrong = 0, resurrected = 0;
  for (int c = 0; c < clients; ++c) {
    const ClientState st = replay(c, steps[c]);
    for (int k = 0; k < kOwnKeys; ++k) {
      const PlanRecord r = own_record(c, k, 0);
      StatusOr<LookupResult> g = store.get(r.structure_sig, r.shape_key, h200());
      ASSERT_TRUE(g.is_ok()) << g.status().to_string();
      auto it = st.plan.find(k);
      if (it != st.plan.end() && it->second.has_value()) {
        ++plans;
        if (g->outcome != LookupOutcome::kHit || !g->record) {
          ++lost;
          ADD_FAILURE() << "lost: client " << c << " key " << k << " (outcome " << static_cast<int>(g->outcome) << ")";
        } else if (g->record->plan_bytes != plan_bytes_of(c, *it->second)) {
          ++wrong;
          ADD_FAILURE() << "client " << c << " key " << k << ": not the plan of its last put (step " << *it->second
                        << ")";
        }
      } else if (g->outcome != LookupOutcome::kMiss) {
        ++resurrected;
        ADD_FAILURE() << "client " << c << " key " << k << " was removed (or never written) but reads back";
      }
      StatusOr<std::optional<GraphSpecEntry>> spec = store.get_graph_spec(own_sig(c, k), "b=8;s=128");
      ASSERT_TRUE(spec.is_ok()) << spec.status().to_string();
      auto sp = st.spec.find(k);
      if (sp == st.spec.end()) {
        EXPECT_FALSE(spec->has_value()) << "client " << c << " key " << k;
      } else {
        ASSERT_TRUE(spec->has_value()) << "lost spec: client " << c << " key " << k;
        EXPECT_EQ((*spec)->spec_json, spec_of(c, k, sp->second));
      }
    }
    StatusOr<std::vector<RetuneQueueEntry>> q = store.list_retune_queue();
    ASSERT_TRUE(q.is_ok()) << q.status().to_string();
    for (int k = 0; k < kOwnKeys; ++k) {
      auto want = st.enqueued.find(k);
      int64_t got = 0;
      for (const RetuneQueueEntry& e : *q)
        if (e.structure_sig == own_sig(c, k)) got += e.request_count;
      const int64_t asked = want == st.enqueued.end() ? 0 : want->second;
      if (retried && asked > 0) EXPECT_GE(got, asked) << "queue: client " << c << " key " << k;
      else EXPECT_EQ(got, asked) << "queue: client " << c << " key " << k;
    }
  }
  std::printf("[chaos check] %lld plans left in place: %lld lost, %lld not the last value, %lld removed but present\n",
              static_cast<long long>(plans), static_cast<long long>(lost), static_cast<long long>(wrong),
              static_cast<long long>(resurrected));
  ListFilter all_own;
  all_own.structure_prefix = "chaos.c";
  StatusOr<std::vector<PlanSummary>> listed = store.list(all_own);
  ASSERT_TRUE(listed.is_ok());
  EXPECT_EQ(static_cast<int64_t>(listed->size()), plans);

  int shared_writers = 0;
  for (int c = 0; c < clients; ++c) shared_writers += replay(c, steps[c]).shared_puts > 0;
  StatusOr<LookupResult> sh = store.get(kSharedSig, make_record(0).shape_key, h200());
  ASSERT_TRUE(sh.is_ok());
  if (shared_writers > 0) {
    ASSERT_EQ(static_cast<int>(sh->outcome), static_cast<int>(LookupOutcome::kHit)) << "the shared key is lost";
    int c = -1, i = -1;
    EXPECT_TRUE(whole_plan_bytes(sh->record->plan_bytes, &c, &i)) << "the shared key holds a mixed value";
    EXPECT_EQ(c, sh->record->engine_id);
    EXPECT_EQ(sh->record->tuned_by, "client" + std::to_string(c));
    ASSERT_GE(c, 0);
    ASSERT_LT(c, clients);
    EXPECT_EQ(step_of(c, i).op, Op::kPutShared) << "client " << c << " never wrote the shared key at step " << i;
  }

  StatusOr<VerifyReport> v = store.verify();
  ASSERT_TRUE(v.is_ok()) << v.status().to_string();
  EXPECT_EQ(v->integrity, "ok");
  EXPECT_TRUE(v->problems.empty()) << v->problems.size()
                                   << " problems (half-written records), first: " << v->problems[0].reason;
  EXPECT_EQ(v->checked, plans + (shared_writers > 0 ? 1 : 0));
  EXPECT_EQ(v->ok, v->checked);
}

class PlanStoreChaosContract : public store_test::StoreContract {};

TEST_P(PlanStoreChaosContract, ManyClientsMixedOperationsLoseNothing) {
  TempDir dir;
  const std::string where = dir.file("plans.db");
  // 16 x 500 on both: SQLite's single writer (BEGIN IMMEDIATE, busy timeout) keeps up on 2 cores (see the printed
  // figures); if it did not, SQLite would drop to 16 x 200 and PostgreSQL keep 16 x 500.
  const int each = 500;
  {
    // The schema (PostgreSQL) or file is made once, before the clients race to open it.
    StatusOr<std::unique_ptr<PlanStore>> s = open_impl(where);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  }
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<ChildExit> exits = run_in_children(
      kClients, [&](int c) { return run_client(GetParam(), where, c, each, Retry{}); }, kChildTimeoutS);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const ChildExit& c : exits) {
    ASSERT_GE(c.pid, 0) << "fork failed";
    ASSERT_TRUE(c.exited) << "client " << c.pid << ": " << c.how_it_ended();
    EXPECT_EQ(c.code, 0) << "client " << c.pid << " (its stderr says why)";
  }
  const int ops = kClients * each;
  std::printf("[chaos %s] %d clients x %d ops = %d ops in %.2f s: %.0f ops/s\n", GetParam().name.c_str(), kClients,
              each, ops, secs, ops / secs);
  StatusOr<std::unique_ptr<PlanStore>> s = open_impl(where);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  expect_store_holds(**s, std::vector<int>(kClients, each));
}

// A PostgreSQL server of a case's own, under `dir` (scripts/postgres.sh start|restart|stop DIR): restarting
// the shared server of $KILN_TEST_POSTGRES_DATA would end the sessions of every other PostgreSQL case that
// `ctest -j` runs beside this one (seen: RetuneQueueProcessesContract failing with "the database system is
// shutting down"). Stopped when it goes out of scope.
class PrivatePostgres {
 public:
  explicit PrivatePostgres(const std::string& dir) : dir_(dir) {
    // The server runs as kiln-pg when we are root: it must be let into the test's folder (mkdtemp makes it 0700).
    std::error_code ec;
    std::filesystem::permissions(std::filesystem::path(dir).parent_path(), std::filesystem::perms(0755), ec);
    std::FILE* out = ::popen(script("start").c_str(), "r");
    if (!out) return;
    char line[512];
    while (std::fgets(line, sizeof line, out)) conninfo_ = line;
    started_ = ::pclose(out) == 0;
    while (!conninfo_.empty() && (conninfo_.back() == '\n' || conninfo_.back() == '\r')) conninfo_.pop_back();
  }
  ~PrivatePostgres() {
    if (started_) (void)std::system(script("stop").c_str());
  }
  bool started() const { return started_ && !conninfo_.empty(); }
  const std::string& conninfo() const { return conninfo_; }
  int restart() const { return std::system(script("restart").c_str()); }
  std::string script(const char* cmd) const {
    return std::string("bash ") + KILN_SOURCE_DIR + "/scripts/postgres.sh " + cmd + " " + dir_;
  }

 private:
  std::string dir_, conninfo_;
  bool started_ = false;
};

// A PostgreSQL server is restarted (fast shutdown: every session is ended) while clients write; each treats
// Unavailable as retryable, and every client must finish with nothing lost or half-written. The server is the
// case's own (PrivatePostgres), started with scripts/postgres.sh like the shared one.
TEST_P(PlanStoreChaosContract, DatabaseRestartMidRun) {
  if (GetParam().name != "postgresql") GTEST_SKIP() << "restarts the PostgreSQL server; SQLite has none";
  TempDir dir;
  PrivatePostgres server(dir.file("pg"));
  if (!server.started()) {
    if (std::getenv("CI")) FAIL() << "could not start a PostgreSQL server: " << server.script("start");
    GTEST_SKIP() << "could not start a PostgreSQL server (" << server.script("start") << "; its stderr says why)";
  }
  const std::string where = server.conninfo();
  store_test::StoreImplementation impl = GetParam();
  impl.open = [](const std::string& location, const StoreOpenOptions& o) { return PlanStore::open(location, o); };
  {
    StatusOr<std::unique_ptr<PlanStore>> s = impl.open(where, {});
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  }
  constexpr int kWriters = 8, kEach = 400;
  // Each client says when it is 20 steps in; the restart starts when all are writing, and each client goes on
  // until the restart is over (and at least kEach steps): the count of retries below shows that it hit them.
  std::vector<std::unique_ptr<ReadySignal>> ready;
  for (int c = 0; c < kWriters; ++c) ready.push_back(std::make_unique<ReadySignal>());
  std::vector<std::unique_ptr<test::ChildProcess>> kids;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < kWriters; ++c)
    kids.push_back(std::make_unique<test::ChildProcess>([&, c] {
      int64_t retries = 0;
      Retry r;
      r.unavailable = true;
      r.retries = &retries;
      int steps = 0;
      const int code = run_client(impl, where, c, kEach, r, ready[c].get(), 20, dir.file("restarted"), &steps);
      std::ofstream(dir.file("client." + std::to_string(c))) << retries << " " << steps;
      return code;
    }));
  for (int c = 0; c < kWriters; ++c) {
    ASSERT_TRUE(kids[c]->started()) << "fork failed";
    ASSERT_TRUE(ready[c]->wait(kChildTimeoutS)) << "client " << c << " died or hung before writing";
  }
  const auto r0 = std::chrono::steady_clock::now();
  const int rc = server.restart();
  const double restart_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - r0).count();
  EXPECT_EQ(rc, 0) << server.script("restart");
  std::ofstream(dir.file("restarted")) << "done\n";  // the clients finish 50 steps after seeing this
  for (int c = 0; c < kWriters; ++c) {
    const ChildExit e = kids[c]->wait(kChildTimeoutS);
    ASSERT_TRUE(e.exited) << "client " << c << ": " << e.how_it_ended();
    EXPECT_EQ(e.code, 0) << "client " << c << " (its stderr says why)";
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t retries = 0, ops = 0;
  std::vector<int> steps(kWriters, 0);
  for (int c = 0; c < kWriters; ++c) {
    std::ifstream in(dir.file("client." + std::to_string(c)));
    int64_t n = -1;
    ASSERT_TRUE(in >> n >> steps[c]) << "client " << c << " wrote no retry and step counts";
    ASSERT_GE(steps[c], kEach) << "client " << c;
    retries += n;
    ops += steps[c];
  }
  std::printf("[chaos restart] %d clients, %lld ops in %.2f s (restart took %.2f s), %lld retried calls\n", kWriters,
              static_cast<long long>(ops), secs, restart_s, static_cast<long long>(retries));
  EXPECT_GT(retries, 0) << "no client saw the restart: the run ended before it, the case proved nothing";
  StatusOr<std::unique_ptr<PlanStore>> s = impl.open(where, {});
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  expect_store_holds(**s, steps, /*retried=*/true);
}

KILN_STORE_CONTRACT_SUITE(PlanStoreChaosContract);

}  // namespace
}  // namespace kiln
