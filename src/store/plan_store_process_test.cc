// Several processes on one store file: concurrent writers, and a writer killed mid-write.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "kiln/store/plan_store.h"
#include "process_test_util.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::TempDir;
using test::ChildExit;
using test::ChildProcess;
using test::ReadySignal;
using test::run_in_children;

// A child still running after this long has hung: it is killed and fails the test.
constexpr double kChildTimeoutS = 120;

// Runs in a forked child: its exit code (0 = every write succeeded).
int writer_child(const store_test::StoreImplementation& impl, const std::string& path, int id, int n) {
  StatusOr<std::unique_ptr<PlanStore>> s = impl.open(path, StoreOpenOptions{});
  if (!s.is_ok()) {
    std::fprintf(stderr, "child %d: %s\n", id, s.status().to_string().c_str());
    return 2;
  }
  PlanStore& store = **s;
  for (int i = 0; i < n; ++i) {
    // A record only this child writes...
    PlanRecord mine = make_record(id * 1000 + i, h200(), "child");
    StatusOr<PlanRecord> a = store.put(mine);
    // ...and one every child writes (same key, different engines).
    PlanRecord shared = make_record(i % 3, h200(), "shared");
    shared.engine_id = id;
    shared.tuned_by = "child" + std::to_string(id);
    StatusOr<PlanRecord> b = store.put(shared);
    if (!a.is_ok() || !b.is_ok()) {
      std::fprintf(stderr, "child %d: %s %s\n", id, a.status().to_string().c_str(), b.status().to_string().c_str());
      return 3;
    }
    // Reads interleave with the writes of the others.
    StatusOr<LookupResult> g = store.get(mine.structure_sig, mine.shape_key, h200());
    if (!g.is_ok() || g->outcome != LookupOutcome::kHit) return 4;
  }
  return 0;
}

class PlanStoreProcessesContract : public store_test::StoreContract {};

TEST_P(PlanStoreProcessesContract, ConcurrentWritersLoseNothing) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  constexpr int kChildren = 5, kEach = 40;
  for (const ChildExit& c : run_in_children(
           kChildren, [&](int i) { return writer_child(GetParam(), path, i + 1, kEach); }, kChildTimeoutS)) {
    ASSERT_GE(c.pid, 0) << "fork failed";
    ASSERT_TRUE(c.exited) << "child " << c.pid << ": " << c.how_it_ended();
    EXPECT_EQ(c.code, 0) << "child " << c.pid;
  }
  StatusOr<std::unique_ptr<PlanStore>> s = open_impl(path);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  PlanStore& store = **s;
  ListFilter mine;
  mine.structure_prefix = "child";
  StatusOr<std::vector<PlanSummary>> all = store.list(mine);
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(kChildren * kEach));
  for (int c = 1; c <= kChildren; ++c)
    for (int i = 0; i < kEach; ++i) {
      PlanRecord r = make_record(c * 1000 + i, h200(), "child");
      StatusOr<LookupResult> g = store.get(r.structure_sig, r.shape_key, h200());
      ASSERT_TRUE(g.is_ok());
      ASSERT_EQ(g->outcome, LookupOutcome::kHit) << c << "/" << i;
      EXPECT_EQ(g->record->plan_bytes, r.plan_bytes);
    }
  ListFilter shared;
  shared.structure_prefix = "shared";
  StatusOr<std::vector<PlanSummary>> sh = store.list(shared);
  ASSERT_TRUE(sh.is_ok());
  EXPECT_EQ(sh->size(), 3u);  // one record per key: the last writer's
  for (const auto& p : *sh) {
    EXPECT_GE(p.record.engine_id, 1);
    EXPECT_LE(p.record.engine_id, kChildren);
    EXPECT_EQ(p.record.tuned_by, "child" + std::to_string(p.record.engine_id));
  }
  StatusOr<VerifyReport> v = store.verify();
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v->integrity, "ok");
  EXPECT_TRUE(v->problems.empty());
  EXPECT_EQ(v->checked, kChildren * kEach + 3);
}

TEST_P(PlanStoreProcessesContract, ThreadsShareOneStore) {
  TempDir dir;
  StatusOr<std::unique_ptr<PlanStore>> s = open_impl(dir.file("plans.db"));
  ASSERT_TRUE(s.is_ok());
  PlanStore& store = **s;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        PlanRecord r = make_record(t * 100 + i, h200(), "thread");
        if (!store.put(r).is_ok()) ++failures;
        StatusOr<LookupResult> g = store.get(r.structure_sig, r.shape_key, h200());
        if (!g.is_ok() || g->outcome != LookupOutcome::kHit) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store.list()->size(), 100u);
  EXPECT_EQ(store.counters().hits, 100);
}

TEST_P(PlanStoreProcessesContract, KilledWriterLeavesAConsistentStore) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  for (int round = 0; round < 3; ++round) {
    ReadySignal writing;
    ChildProcess writer([&] {
      StatusOr<std::unique_ptr<PlanStore>> s = open_impl(path);
      if (!s.is_ok()) return 2;
      for (int i = 0;; ++i) {
        PlanRecord r = make_record(round * 100000 + i, h200(), "killed");
        r.plan_bytes = std::string(20000 + i % 1000, static_cast<char>(i));  // big: spans pages
        if (!(*s)->put(r).is_ok()) return 3;
        if (i == 5 && !writing.signal()) return 4;  // tell the parent that writes are flowing
      }
    });
    ASSERT_TRUE(writer.started()) << "fork failed";
    ASSERT_TRUE(writing.wait(kChildTimeoutS)) << "the writer died or hung before writing";
    // Let it write for a while longer, then kill it wherever it is.
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + 70 * round));
    ASSERT_TRUE(writer.kill(SIGKILL));
    const ChildExit end = writer.wait(kChildTimeoutS);
    ASSERT_NE(end.signal, 0) << "the writer stopped by itself: " << end.how_it_ended();

    StatusOr<std::unique_ptr<PlanStore>> s = open_impl(path);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    StatusOr<VerifyReport> v = (*s)->verify();
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(v->integrity, "ok");
    EXPECT_TRUE(v->problems.empty()) << v->problems[0].reason;
    EXPECT_GT(v->checked, 0);
    EXPECT_EQ(v->ok, v->checked);
  }
}

KILN_STORE_CONTRACT_SUITE(PlanStoreProcessesContract);

}  // namespace
}  // namespace kiln
