// Internal to the tune layer: the pieces of the tuner's decisions that the supervisor
// (kiln/tune/tune_supervisor.h) shares, so that a supervised tuning decides exactly as an in-process one.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/core/engine_config.h"
#include "kiln/core/status.h"
#include "kiln/tune/tune_policy.h"

namespace kiln {
// Declared in kiln/tune/tuner.h, which includes what the tuner's callers need; this header only names them,
// so that tuner.cc, which defines what is declared here, and this header do not include each other.
struct TuneOptions;
struct TuneResult;
}  // namespace kiln

namespace kiln::tune_internal {

// A candidate's result before anything happened to it: identity fields and heuristic rank.
CandidateResult result_for(const EngineConfig& config, int rank);

// The winner among r.candidates (configs and checks parallel to them): the fastest Passed and timed one
// (any timed one when not `verifying`), then the incumbent rule; fills r.fastest, r.winner,
// r.incumbent_decision, r.winner_config, r.winner_check and, through `plan_of`, r.winner_plan. No
// eligible candidate leaves r.winner empty (not an error).
Status decide_winner(TuneResult& r, const std::vector<EngineConfig>& configs, const std::vector<std::string>& checks,
                     bool verifying, const TuneOptions& options,
                     const std::function<StatusOr<std::vector<uint8_t>>(size_t)>& plan_of);

// "SIGSEGV", "SIGKILL", ... for the signals a crashed worker or build helper ends by; "signal" for others.
const char* signal_name(int sig);

}  // namespace kiln::tune_internal
