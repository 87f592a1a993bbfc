// Several processes on one store file: concurrent writers, and a writer killed mid-write.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::make_record;
using store_test::TempDir;

// Runs in a forked child: never returns (exit code 0 = every write succeeded).
[[noreturn]] void writer_child(const std::string& path, int id, int n) {
  StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(path);
  if (!s.is_ok()) {
    std::fprintf(stderr, "child %d: %s\n", id, s.status().to_string().c_str());
    _exit(2);
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
      _exit(3);
    }
    // Reads interleave with the writes of the others.
    StatusOr<LookupResult> g = store.get(mine.structure_sig, mine.shape_key, h200());
    if (!g.is_ok() || g->outcome != LookupOutcome::kHit) _exit(4);
  }
  _exit(0);
}

TEST(PlanStoreProcesses, ConcurrentWritersLoseNothing) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  constexpr int kChildren = 5, kEach = 40;
  std::vector<pid_t> pids;
  for (int c = 0; c < kChildren; ++c) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) writer_child(path, c + 1, kEach);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "child " << pid;
  }
  StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(path);
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

TEST(PlanStoreProcesses, ThreadsShareOneStore) {
  TempDir dir;
  StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(dir.file("plans.db"));
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

TEST(PlanStoreProcesses, KilledWriterLeavesAConsistentStore) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  for (int round = 0; round < 3; ++round) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(ready[0]);
      StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(path);
      if (!s.is_ok()) _exit(2);
      for (int i = 0;; ++i) {
        PlanRecord r = make_record(round * 100000 + i, h200(), "killed");
        r.plan_bytes = std::string(20000 + i % 1000, static_cast<char>(i));  // big: spans pages
        if (!(*s)->put(r).is_ok()) _exit(3);
        if (i == 5) {  // tell the parent that writes are flowing
          char c = 1;
          if (write(ready[1], &c, 1) != 1) _exit(4);
          close(ready[1]);
        }
      }
    }
    close(ready[1]);
    char c = 0;
    ASSERT_EQ(read(ready[0], &c, 1), 1) << "the writer died before writing";
    close(ready[0]);
    // Let it write for a while longer, then kill it wherever it is.
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + 70 * round));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer stopped by itself: " << WEXITSTATUS(status);

    StatusOr<std::unique_ptr<PlanStore>> s = PlanStore::open(path);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    StatusOr<VerifyReport> v = (*s)->verify();
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(v->integrity, "ok");
    EXPECT_TRUE(v->problems.empty()) << v->problems[0].reason;
    EXPECT_GT(v->checked, 0);
    EXPECT_EQ(v->ok, v->checked);
  }
}

}  // namespace
}  // namespace kiln
