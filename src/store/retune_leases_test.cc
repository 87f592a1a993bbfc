// Leases on the re-tune queue (kiln/store/retune_request.h): claims by environment, lease expiry and the token
// that no longer holds, backoff and the dead letter, release, and workers in several processes (one killed
// mid-job) completing each job exactly once. Run on SQLite and PostgreSQL.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <map>
#include <set>
#include <thread>

#include "kiln/store/plan_store.h"
#include "process_test_util.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::TempDir;
using test::ChildProcess;

RetuneRequest request(int i, int64_t at, const EnvFingerprint& fp = h200()) {
  RetuneRequest r;
  r.structure_sig = "job" + std::to_string(i) + "_0123456789abcdef0123456789abcdef";
  r.shape_key = "b=" + std::to_string(i);
  r.fingerprint = fp;
  r.graph_name = "g" + std::to_string(i);
  r.spec_json = R"({"tensors":{},"nodes":[],"outputs":[]})";
  r.reason = "store miss";
  r.requested_at = at;
  return r;
}

EnvFingerprint other_env() {
  EnvFingerprint f = h200();
  f.cudnn_version = 92000;
  return f;
}

RetuneLeaseOptions lease(int64_t now, int64_t lease_s = 10, const std::string& worker = "w1") {
  RetuneLeaseOptions o;
  o.worker = worker;
  o.lease_s = lease_s;
  o.now = now;
  return o;
}

RetuneJobFinish ended(RetuneJobEnd end, int64_t now, const std::string& message = "") {
  RetuneJobFinish f;
  f.end = end;
  f.now = now;
  f.message = message;
  f.max_attempts = 2;
  f.backoff_s = 10;
  return f;
}

class RetuneLeasesContract : public store_test::StoreContract {};

TEST_P(RetuneLeasesContract, ClaimsTheOldestRowOfItsOwnEnvironmentOnce) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  ASSERT_TRUE(s->enqueue_retune(request(2, 200)).is_ok());
  ASSERT_TRUE(s->enqueue_retune(request(1, 100)).is_ok());
  ASSERT_TRUE(s->enqueue_retune(request(3, 50, other_env())).is_ok());
  const std::string here = fingerprint_key(h200());
  auto a = s->claim_retune(here, lease(1000));
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(a->has_value());
  EXPECT_EQ((*a)->entry.graph_name, "g1");  // the oldest of this environment; g3 is another's
  EXPECT_EQ((*a)->attempt, 1);
  EXPECT_EQ((*a)->lease_expires_at, 1010);
  EXPECT_EQ((*a)->entry.spec_json, request(1, 0).spec_json);
  auto b = s->claim_retune(here, lease(1000, 10, "w2"));
  ASSERT_TRUE(b.is_ok() && b->has_value());
  EXPECT_EQ((*b)->entry.graph_name, "g2");
  EXPECT_NE((*a)->token, (*b)->token);
  auto none = s->claim_retune(here, lease(1000));
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->has_value()) << "every row of this environment is held";
  auto other = s->claim_retune(fingerprint_key(other_env()), lease(1000));
  ASSERT_TRUE(other.is_ok() && other->has_value());
  EXPECT_EQ((*other)->entry.graph_name, "g3");

  auto jobs = s->list_retune_jobs(here);
  ASSERT_TRUE(jobs.is_ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].worker, "w1");
  EXPECT_EQ((*jobs)[1].worker, "w2");
}

TEST_P(RetuneLeasesContract, ALeaseThatRanOutIsClaimedAgainAndTheFirstClaimNoLongerHolds) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  ASSERT_TRUE(s->enqueue_retune(request(1, 100)).is_ok());
  const std::string here = fingerprint_key(h200());
  auto first = s->claim_retune(here, lease(1000, 10, "dies"));
  ASSERT_TRUE(first.is_ok() && first->has_value());
  EXPECT_FALSE(s->claim_retune(here, lease(1009))->has_value()) << "still leased";
  auto second = s->claim_retune(here, lease(1011, 10, "survivor"));
  ASSERT_TRUE(second.is_ok() && second->has_value());
  EXPECT_EQ((*second)->attempt, 2);
  // The first worker comes back: its claim no longer holds, and it changes nothing.
  Status late = s->finish_retune(**first, ended(RetuneJobEnd::kDone, 1012));
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition) << late.to_string();
  EXPECT_NE(late.message().find("lease lost"), std::string::npos) << late.message();
  EXPECT_EQ(s->heartbeat_retune(**first, 10).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s->finish_retune(**second, ended(RetuneJobEnd::kDone, 1013, "tuned")).is_ok());
  auto log = s->retune_job_log();
  ASSERT_TRUE(log.is_ok());
  ASSERT_EQ(log->size(), 1u) << "one completion";
  EXPECT_EQ((*log)[0].worker, "survivor");
  EXPECT_EQ((*log)[0].outcome, "done");
  EXPECT_EQ((*log)[0].attempt, 2);
  // Ending a claim twice is refused too.
  EXPECT_EQ(s->finish_retune(**second, ended(RetuneJobEnd::kDone, 1014)).code(), StatusCode::kFailedPrecondition);
}

TEST_P(RetuneLeasesContract, AFailedJobBacksOffAndIsDeadLetteredWithItsReason) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  ASSERT_TRUE(s->enqueue_retune(request(1, 100)).is_ok());
  const std::string here = fingerprint_key(h200());
  auto a = s->claim_retune(here, lease(1000));
  ASSERT_TRUE(a.is_ok() && a->has_value());
  ASSERT_TRUE(s->finish_retune(**a, ended(RetuneJobEnd::kFailed, 1000, "no correct candidate")).is_ok());
  auto jobs = s->list_retune_jobs();
  ASSERT_TRUE(jobs.is_ok() && jobs->size() == 1u);
  EXPECT_EQ((*jobs)[0].state, "retry");
  EXPECT_EQ((*jobs)[0].next_attempt_at, 1010);  // backoff 10 s after the first attempt
  EXPECT_FALSE(s->claim_retune(here, lease(1009))->has_value()) << "backing off";
  auto b = s->claim_retune(here, lease(1010));
  ASSERT_TRUE(b.is_ok() && b->has_value());
  EXPECT_EQ((*b)->attempt, 2);
  ASSERT_TRUE(s->finish_retune(**b, ended(RetuneJobEnd::kFailed, 1011, "tuning failed: out of memory")).is_ok());
  jobs = s->list_retune_jobs();
  ASSERT_TRUE(jobs.is_ok() && jobs->size() == 1u);
  EXPECT_EQ((*jobs)[0].state, "dead");
  EXPECT_EQ((*jobs)[0].attempts, 2);
  EXPECT_EQ((*jobs)[0].last_error, "tuning failed: out of memory");
  EXPECT_FALSE(s->claim_retune(here, lease(999999))->has_value()) << "a dead job is never claimed";
  auto log = s->retune_job_log();
  ASSERT_TRUE(log.is_ok() && log->size() == 2u);
  EXPECT_EQ((*log)[0].outcome, "failed");
  EXPECT_EQ((*log)[1].outcome, "dead");
}

TEST_P(RetuneLeasesContract, AReleasedJobGoesBackAtOnceWithoutCountingTheAttempt) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  ASSERT_TRUE(s->enqueue_retune(request(1, 100)).is_ok());
  const std::string here = fingerprint_key(h200());
  auto a = s->claim_retune(here, lease(1000));
  ASSERT_TRUE(a.is_ok() && a->has_value());
  ASSERT_TRUE(s->finish_retune(**a, ended(RetuneJobEnd::kReleased, 1001, "SIGTERM")).is_ok());
  auto b = s->claim_retune(here, lease(1001));
  ASSERT_TRUE(b.is_ok() && b->has_value());
  EXPECT_EQ((*b)->attempt, 1);
}

TEST_P(RetuneLeasesContract, AHeartbeatKeepsTheClaim) {
  TempDir dir;
  auto s = open_store(dir.file("p.db"));
  ASSERT_TRUE(s->enqueue_retune(request(1, 100)).is_ok());
  const std::string here = fingerprint_key(h200());
  auto a = s->claim_retune(here, lease(0, 1));  // real time, a 1 s lease
  ASSERT_TRUE(a.is_ok() && a->has_value());
  ASSERT_TRUE(s->heartbeat_retune(**a, 3600).is_ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  EXPECT_FALSE(s->claim_retune(here, lease(0))->has_value()) << "the heartbeat extended the lease";
}

TEST_P(RetuneLeasesContract, ReadOnlyStoresClaimNothing) {
  TempDir dir;
  const std::string where = dir.file("p.db");
  { ASSERT_TRUE(open_store(where)->enqueue_retune(request(1, 100)).is_ok()); }
  auto ro = open_store(where, /*read_only=*/true);
  EXPECT_EQ(ro->claim_retune(fingerprint_key(h200()), lease(1000)).status().code(), StatusCode::kFailedPrecondition);
  auto jobs = ro->list_retune_jobs();
  ASSERT_TRUE(jobs.is_ok()) << jobs.status().to_string();
  EXPECT_EQ(jobs->size(), 1u);
}

// Four worker processes drain 40 jobs; a fifth claims one and is killed (SIGKILL) holding it. Its lease runs
// out, the job is claimed again, and every job is completed exactly once.
TEST_P(RetuneLeasesContract, WorkersInSeveralProcessesCompleteEachJobOnceEvenWhenOneIsKilled) {
  TempDir dir;
  const std::string where = dir.file("p.db");
  const int kJobs = 40;
  {
    auto s = open_store(where);
    for (int i = 0; i < kJobs; ++i) ASSERT_TRUE(s->enqueue_retune(request(i, 100 + i)).is_ok());
  }
  const std::string here = fingerprint_key(h200());
  const auto impl = GetParam();
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  ChildProcess victim([&] {
    auto s = impl.open(where, StoreOpenOptions{});
    if (!s.is_ok()) return 2;
    auto job = (*s)->claim_retune(here, lease(0, 1, "victim"));
    if (!job.is_ok() || !job->has_value()) return 3;
    char c = 'x';
    if (::write(pipefd[1], &c, 1) != 1) return 4;
    ::pause();  // holds the job until killed
    return 0;
  });
  char c = 0;
  ASSERT_EQ(::read(pipefd[0], &c, 1), 1) << "the victim claimed nothing";
  ASSERT_TRUE(victim.kill(SIGKILL));
  ::close(pipefd[0]);
  ::close(pipefd[1]);
  auto exits = test::run_in_children(
      4,
      [&](int id) {
        auto s = impl.open(where, StoreOpenOptions{});
        if (!s.is_ok()) return 2;
        const std::string me = "worker" + std::to_string(id);
        int idle = 0;
        while (idle < 40) {  // until nothing is left, the victim's job included (its lease: 1 s)
          auto job = (*s)->claim_retune(here, lease(0, 30, me));
          if (!job.is_ok()) return std::fprintf(stderr, "%s\n", job.status().to_string().c_str()), 3;
          if (!job->has_value()) {
            ++idle;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            continue;
          }
          idle = 0;
          // The work: the queue row goes when the plan is stored (as keep_plan does), then the claim ends.
          const RetuneQueueEntry& e = (*job)->entry;
          auto removed = (*s)->remove_from_retune_queue(e.structure_sig, e.shape_key, e.fingerprint_key);
          if (!removed.is_ok()) return std::fprintf(stderr, "%s\n", removed.status().to_string().c_str()), 4;
          Status fin = (*s)->finish_retune(**job, ended(RetuneJobEnd::kDone, 0, me));
          if (!fin.is_ok()) return std::fprintf(stderr, "%s\n", fin.to_string().c_str()), 5;
        }
        return 0;
      },
      120);
  for (const auto& e : exits) EXPECT_TRUE(e.exited && e.code == 0) << e.how_it_ended();
  auto s = open_store(where);
  auto log = s->retune_job_log();
  ASSERT_TRUE(log.is_ok()) << log.status().to_string();
  std::map<std::string, int> done;
  for (const RetuneJobLogEntry& e : *log)
    if (e.outcome == "done") ++done[e.structure_sig];
  EXPECT_EQ(done.size(), static_cast<size_t>(kJobs)) << "every job completed";
  for (const auto& [sig, n] : done) EXPECT_EQ(n, 1) << sig << " completed " << n << " times";
  EXPECT_TRUE(s->list_retune_queue()->empty());
  std::printf("[leases] %d jobs, 4 workers + 1 killed holding a job: %zu completions, %zu log rows\n", kJobs,
              done.size(), log->size());
}

KILN_STORE_CONTRACT_SUITE(RetuneLeasesContract);

}  // namespace
}  // namespace kiln
