// `kiln worker` as a fleet runs it, on SQLite and PostgreSQL stores: without a GPU it refuses to start; given
// an environment (--environment-json, for tests) it claims that environment's jobs only, a failed tune is
// retried after its backoff and dead-lettered with its reason, every claim is in the job log, and the report
// (--json) says what it did. The GPU side (a winner stored) is src/runtime/retune_gpu_test.cc's.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "kiln/core/exit_codes.h"
#include "kiln/graph/graph.h"
#include "kiln/spec/spec.h"
#include "kiln/store/env_policy.h"
#include "kiln/store/plan_store.h"
#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;
using store_test::TempDir;
using test::CliResult;
using test::run_kiln;

// Two graphs of one structure at two batch sizes: two jobs.
std::string spec(int batch) {
  return R"({"name":"relu)" + std::to_string(batch) + R"(","tensors":{"x":{"dims":[)" + std::to_string(batch) +
         R"(,64]}},"nodes":[{"name":"r","op":"relu","inputs":["x"],"outputs":["y"]}],"outputs":["y"]})";
}

// Queued `age_s` seconds ago (the oldest is claimed first).
RetuneRequest request_for(int batch, const EnvFingerprint& env, int64_t age_s) {
  StatusOr<Graph> g = parse_spec_string(spec(batch), "test spec");
  EXPECT_TRUE(g.is_ok()) << g.status().to_string();
  StatusOr<GraphSignature> sig = compute_signature(*g);
  EXPECT_TRUE(sig.is_ok()) << sig.status().to_string();
  RetuneRequest r;
  r.structure_sig = sig->structure;
  r.shape_key = sig->shape_key;
  r.fingerprint = env;
  r.graph_name = g->name;
  r.spec_json = spec(batch);
  r.reason = "store miss";
  r.requested_at = static_cast<int64_t>(std::time(nullptr)) - age_s;
  return r;
}

class WorkerCli : public store_test::StoreContract {
 protected:
  void SetUp() override {
    store_test::StoreContract::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    where_ = dir_.file("plans.db");
    store_ = open_store(where_);
    ASSERT_NE(store_, nullptr);
    env_file_ = dir_.file("h200.json");
    std::ofstream(env_file_) << fingerprint_to_json(h200());
  }
  // The --store value of the store under test.
  std::string location() const { return file_case() ? where_ : store_test::postgres_location(where_); }
  CliResult worker(const std::string& args) {
    return run_kiln("worker --store \"" + location() + "\" --environment-json " + env_file_ + " " + args);
  }
  TempDir dir_;
  std::string where_, env_file_;
  std::unique_ptr<PlanStore> store_;
};

TEST_P(WorkerCli, WithoutAGpuItRefusesToStart) {
  CliResult r = run_kiln("worker --store \"" + location() + "\" --once");
  EXPECT_EQ(r.code, kExitEnvironment) << r.output();
  EXPECT_NE(r.err.find("a worker tunes on this machine's GPU, and there is none"), std::string::npos) << r.err;
}

// Found by a hostile trial: a mistyped store path is not made into a new, empty store the worker waits on, and
// times that would overflow a unix time, or a poll that would hammer the store, are refused naming the flag.
TEST_P(WorkerCli, AMissingStoreAndOutOfBoundTimesAreRefusedByName) {
  KILN_STORE_FILE_CASE();
  const std::string missing = dir_.file("no-such.db");
  CliResult r = run_kiln("worker --store " + missing + " --environment-json " + env_file_ + " --drain");
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.err.find("no plan store at " + missing), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(missing));
  for (const auto& [flag, words] :
       {std::pair<std::string, std::string>{"--lease 9223372036854775807", "--lease must be at most 604800"},
        {"--backoff 9223372036854775807", "--backoff must be at most 2592000"},
        {"--poll 1e-9", "--poll must be 0.05 to 3600 seconds, got 1e-09"},
        {"--poll 1e300", "--poll must be 0.05 to 3600 seconds"}}) {
    r = worker("--drain " + flag);
    EXPECT_EQ(r.code, kExitBadInput) << flag << ": " << r.output();
    EXPECT_NE(r.err.find(words), std::string::npos) << flag << ": " << r.err;
  }
  // An unknown rollout policy, named, before any job is claimed.
  r = worker("--drain --rollout canary");
  EXPECT_EQ(r.code, kExitBadInput) << r.output();
  EXPECT_NE(r.err.find("--rollout"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("'canary'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("shadow"), std::string::npos) << r.err;  // the choices
}

TEST_P(WorkerCli, AFailedTuneIsRetriedAfterItsBackoffThenDeadLetteredWithItsReason) {
  ASSERT_TRUE(store_->enqueue_retune(request_for(8, h200(), 300)).is_ok());
  ASSERT_TRUE(store_->enqueue_retune(request_for(16, h200(), 200)).is_ok());
  EnvFingerprint other = h200();
  other.cudnn_version = 92000;
  ASSERT_TRUE(store_->enqueue_retune(request_for(32, other, 400)).is_ok());

  // One job: the tune fails (no GPU here); the job waits for its retry.
  CliResult one = worker("--once --json --max-attempts 2 --backoff 3600");
  EXPECT_EQ(one.code, kExitCheckFailed) << one.output();
  nlohmann::json j = nlohmann::json::parse(one.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << one.output();
  ASSERT_EQ(j["jobs"].size(), 1u) << one.out;
  EXPECT_EQ(j["jobs"][0]["graph_name"], "relu8") << "the oldest first";
  EXPECT_EQ(j["jobs"][0]["end"], "failed");
  EXPECT_EQ(j["jobs"][0]["attempt"], 1);
  EXPECT_NE(j["jobs"][0]["message"].get<std::string>().find("tuning failed"), std::string::npos) << one.out;
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["fingerprint_key"], fingerprint_key(h200()));

  // Draining with no backoff: the other job fails twice, relu8 is still backing off (an hour).
  CliResult drain = worker("--drain --json --max-attempts 2 --backoff 0");
  EXPECT_EQ(drain.code, kExitCheckFailed) << drain.output();
  j = nlohmann::json::parse(drain.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << drain.output();
  ASSERT_EQ(j["jobs"].size(), 2u) << drain.out;
  for (const auto& job : j["jobs"]) EXPECT_EQ(job["graph_name"], "relu16") << drain.out;
  EXPECT_EQ(j["jobs"][1]["attempt"], 2);

  auto jobs = store_->list_retune_jobs();
  ASSERT_TRUE(jobs.is_ok()) << jobs.status().to_string();
  ASSERT_EQ(jobs->size(), 3u);
  std::map<std::string, RetuneJobState> by_name;
  for (const RetuneJobState& s : *jobs) by_name[s.entry.graph_name] = s;
  EXPECT_EQ(by_name["relu8"].state, "retry");
  EXPECT_EQ(by_name["relu16"].state, "dead");
  EXPECT_NE(by_name["relu16"].last_error.find("tuning failed"), std::string::npos) << by_name["relu16"].last_error;
  EXPECT_EQ(by_name["relu32"].state, "queued") << "another environment's job is left alone";
  auto log = store_->retune_job_log();
  ASSERT_TRUE(log.is_ok());
  EXPECT_EQ(log->size(), 3u) << "every ended claim is logged";
}

TEST_P(WorkerCli, NothingOfThisEnvironmentIsANormalEnd) {
  CliResult r = worker("--drain");
  EXPECT_EQ(r.code, kExitOk) << r.output();
  EXPECT_NE(r.out.find("0 jobs (0 done, 0 failed, 0 released, 0 lost)"), std::string::npos) << r.out;
}

KILN_STORE_CONTRACT_SUITE(WorkerCli);

}  // namespace
}  // namespace kiln
