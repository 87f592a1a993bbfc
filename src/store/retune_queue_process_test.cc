// Several processes queueing re-tunes on one store file at once: no request is lost.
#include <gtest/gtest.h>

#include "kiln/store/plan_store.h"
#include "process_test_util.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::TempDir;

// A child still running after this long has hung: it is killed and fails the test.
constexpr double kChildTimeoutS = 120;

RetuneRequest request(const std::string& sig, const std::string& reason) {
  RetuneRequest r;
  r.structure_sig = sig;
  r.shape_key = "batch=8";
  r.fingerprint = h200();
  r.graph_name = sig;
  r.spec_json = R"({"tensors":{},"nodes":[],"outputs":[]})";
  r.reason = reason;
  return r;
}

// Runs in a forked child: its exit code (0 = every request was queued).
int enqueue_child(const store_test::StoreImplementation& impl, const std::string& path, int id, int n) {
  StatusOr<std::unique_ptr<PlanStore>> s = impl.open(path, StoreOpenOptions{});
  if (!s.is_ok()) {
    std::fprintf(stderr, "child %d: %s\n", id, s.status().to_string().c_str());
    return 2;
  }
  for (int i = 0; i < n; ++i) {
    // One key every child asks for (with a reason of its own), and one only this child asks for.
    StatusOr<RetuneQueueEntry> shared = (*s)->enqueue_retune(request("shared", "child " + std::to_string(id)));
    StatusOr<RetuneQueueEntry> mine = (*s)->enqueue_retune(request("child" + std::to_string(id), "store miss"));
    if (!shared.is_ok() || !mine.is_ok()) {
      std::fprintf(stderr, "child %d: %s %s\n", id, shared.status().to_string().c_str(),
                   mine.status().to_string().c_str());
      return 3;
    }
    if (mine->request_count != i + 1) return 4;
  }
  return 0;
}

class RetuneQueueProcessesContract : public store_test::StoreContract {};

TEST_P(RetuneQueueProcessesContract, ConcurrentEnqueueLosesNothing) {
  TempDir dir;
  std::string path = dir.file("plans.db");
  constexpr int kChildren = 5, kEach = 30;
  for (const test::ChildExit& c : test::run_in_children(
           kChildren, [&](int i) { return enqueue_child(GetParam(), path, i + 1, kEach); }, kChildTimeoutS)) {
    ASSERT_GE(c.pid, 0) << "fork failed";
    ASSERT_TRUE(c.exited) << "child " << c.pid << ": " << c.how_it_ended();
    EXPECT_EQ(c.code, 0) << "child " << c.pid;
  }
  StatusOr<std::unique_ptr<PlanStore>> s = open_impl(path);
  ASSERT_TRUE(s.is_ok()) << s.status().to_string();
  StatusOr<std::vector<RetuneQueueEntry>> q = (*s)->list_retune_queue();
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  ASSERT_EQ(q->size(), static_cast<size_t>(kChildren + 1));
  int64_t total = 0;
  for (const RetuneQueueEntry& e : *q) {
    total += e.request_count;
    if (e.structure_sig == "shared") {
      EXPECT_EQ(e.request_count, kChildren * kEach);
      EXPECT_EQ(e.reasons.size(), static_cast<size_t>(kChildren));  // every child's reason, once
      EXPECT_LE(e.first_seen, e.last_seen);
    } else {
      EXPECT_EQ(e.request_count, kEach) << e.structure_sig;
      EXPECT_EQ(e.reasons, std::vector<std::string>{"store miss"});
    }
  }
  EXPECT_EQ(total, 2 * kChildren * kEach);
  StatusOr<VerifyReport> v = (*s)->verify();
  ASSERT_TRUE(v.is_ok());
  EXPECT_EQ(v->integrity, "ok");
}

KILN_STORE_CONTRACT_SUITE(RetuneQueueProcessesContract);

}  // namespace
}  // namespace kiln
