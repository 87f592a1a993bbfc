// kiln/tune/tune_policy.h: the autotuner's decisions, as pure host logic over measured candidates: which
// candidate wins, whether it dethrones an incumbent from an earlier tuning, fused versus unfused, and how
// the result is reported (text table, JSON, progress). No CUDA, no cuDNN: tested with synthetic timings.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/disposition.h"  // and kiln/core/enum_names.h
#include "kiln/core/engine_config.h"
#include "kiln/core/status.h"

namespace kiln {

struct Measurement;

struct CandidateResult {
  EngineConfig config;  // the engine and its knobs (kiln/core/engine_config.h)
  Disposition disposition = Disposition::kNotVerified;
  std::string message;  // why it is not Passed, or a note

  // Timing (milliseconds). samples == 0 means not timed.
  double median_ms = 0.0;
  double min_ms = 0.0;
  double max_ms = 0.0;
  double rel_error = 0.0;  // relative standard error of the median (kiln/measure/measure_stats.h)
  size_t samples = 0;
  bool throttled = false;  // the SM clock dropped or was capped while sampling (kiln/measure/measure.h)

  int64_t workspace_bytes = 0;
  int heuristic_rank = -1;  // 0 = the heuristic's first choice; -1 = not from the heuristic list
  double flops = 0.0;       // work per launch, for TFLOP/s (0: unknown)
  double bytes = 0.0;       // memory traffic per launch, for GB/s when flops is 0 (0: unknown)
  // Where the tuner's wall time went for this candidate (milliseconds; 0: the phase did not run): its
  // build (on a worker thread, overlapped with other candidates), the gate (one run and the device
  // comparison), and the measurement (warm-up included, which warmup_ms also gives alone).
  double build_ms = 0.0;
  double check_ms = 0.0;
  double measure_ms = 0.0;
  double warmup_ms = 0.0;

  std::string identity() const { return config.identity(); }
  bool timed() const { return samples > 0 && median_ms > 0.0; }
  // Copies median/min/max/rel_error/samples from a Measurement.
  void set_timing(const Measurement& m);
};

// ---- Winner rule ----------------------------------------------------------------------------------
enum class Objective {
  kTime,       // fastest median
  kWorkspace,  // smallest workspace among those within workspace_tolerance of the fastest median
};
inline constexpr EnumName<Objective> kObjectiveNames[] = {{Objective::kTime, "time"},
                                                          {Objective::kWorkspace, "workspace"}};
const char* objective_name(Objective o);  // kObjectiveNames' name
StatusOr<Objective> parse_objective(const std::string& name);

struct WinnerOptions {
  Objective objective = Objective::kTime;
  double workspace_tolerance = 0.05;  // kWorkspace: eligible when median <= best_median * (1 + tolerance)
};

// Index of the winner among `candidates`. Only kPassed candidates with a timing are eligible: an Incorrect
// candidate never wins, however fast. kTime: smallest (median, workspace, identity). kWorkspace: among the
// eligible within tolerance of the fastest median, smallest (workspace, median, identity). Deterministic
// for any input order. NotFound (with the count per disposition) when nothing is eligible.
StatusOr<size_t> pick_winner(const std::vector<CandidateResult>& candidates, const WinnerOptions& options = {});

// ---- Incumbent rule -------------------------------------------------------------------------------
// The plan chosen by an earlier tuning of the same key.
struct Incumbent {
  std::string identity;
  double median_ms = 0.0;
  double rel_error = 0.0;
};

struct IncumbentOptions {
  // k: how many standard errors each side must clear. With k = 2, a change of plan needs the challenger's
  // upper bound to lie below the incumbent's lower bound at roughly 95% each.
  double noise_multiplier = 2.0;
  // Floor on each side's relative noise: within-run error understates run-to-run variation (clocks,
  // placement, other tenants), so a fresh 0.1% error is treated as noise_floor.
  double noise_floor = 0.005;
};

struct IncumbentDecision {
  bool replace = false;
  std::string chosen_identity;   // the incumbent's or the challenger's
  double speedup = 0.0;          // incumbent.median / challenger.median (> 1: challenger faster)
  double required_margin = 0.0;  // fraction by which the challenger had to be faster
  std::string explanation;       // "kept incumbent eng3:...: challenger eng5 1.2% faster, within noise 1.5%"
};

// The challenger replaces the incumbent only when
//     challenger.median * (1 + k * n_c) < incumbent.median * (1 - k * n_i),
// n_x = max(rel_error_x, noise_floor), k = noise_multiplier. A challenger that is not kPassed or not timed
// never replaces; an incumbent without a positive median is always replaced by a valid challenger; a
// challenger with the incumbent's identity keeps it.
IncumbentDecision decide_incumbent(const Incumbent& incumbent, const CandidateResult& challenger,
                                   const IncumbentOptions& options = {});

// ---- Fused versus unfused -------------------------------------------------------------------------
// A bound below which a chain of parts is not expected to run (`group_of[node]`: the node's part, as
// partition_graph numbers them), from what is known: a part whose time is known (`part_ms[group]` > 0, tuned as a
// graph of its own) takes that; a part of one node its time alone (`node_ms[node]` > 0); any other part at least
// the time alone of its slowest `heavy` node (a GEMM, conv or attention, whose own work any part holding it does),
// its other nodes counting nothing (a fused pointwise or reduction may move no bytes of its own). A heuristic, not
// a proof: `kiln tune` skips a decomposition only where this bound passes the fused winner's median by a margin
// (kiln/tune/unfused.h), since a chain can run a little faster than its parts alone (an intermediate still in L2).
double chain_lower_bound_ms(const std::vector<int>& group_of, const std::vector<double>& node_ms,
                            const std::vector<bool>& heavy, const std::map<int, double>& part_ms);

enum class FusionPolicy { kFaster, kAlwaysFused, kAlwaysUnfused };
inline constexpr EnumName<FusionPolicy> kFusionPolicyNames[] = {{FusionPolicy::kFaster, "faster"},
                                                                {FusionPolicy::kAlwaysFused, "always_fused"},
                                                                {FusionPolicy::kAlwaysUnfused, "always_unfused"}};
const char* fusion_policy_name(FusionPolicy p);  // kFusionPolicyNames' name
StatusOr<FusionPolicy> parse_fusion_policy(const std::string& name);

// One side of the comparison: the fused graph's winner, or the unfused parts' winners run in sequence.
struct FusionSide {
  bool available = false;               // a passing, timed plan exists for this side
  double median_ms = 0.0;               // sum of the parts' medians for the unfused side
  double rel_error = 0.0;               // relative error of that sum (errors added in quadrature)
  std::vector<std::string> identities;  // one for fused, one per part for unfused
};
// The fused side from the fused graph's winning candidate (unavailable unless kPassed and timed).
FusionSide fused_side(const CandidateResult& winner);
// The unfused side from each part's winner; unavailable if any part is missing, not kPassed or not timed.
FusionSide unfused_side(const std::vector<CandidateResult>& part_winners);

struct FusionDecision {
  bool use_fused = false;
  std::string explanation;
};
// kFaster picks the smaller median; a tie (equal medians) goes to fused (fewer launches, less traffic).
// kAlwaysFused / kAlwaysUnfused pick their side and fail with NotSupported when it is unavailable.
// NotFound when neither side is available.
StatusOr<FusionDecision> decide_fusion(const FusionSide& fused, const FusionSide& unfused, FusionPolicy policy);

// ---- Candidate budget -----------------------------------------------------------------------------
// Which runtime-compiled candidates a tune compiles (docs/measure.md "The candidate budget"). Their builds are what a
// tune of a norm costs: on the H100, 25-27 runtime-compiled candidates took 84-97 s of build time on 16 threads
// (8-9 s wall) against under 0.7 s for every gate and timing together. The budget compiles them in rank order and
// stops when the ranking has stopped paying:
//   1. rank: identities the store saw win at other shapes of this structure (`prior`, most often first), then the
//      heuristics' rank, then the enumeration's order;
//   2. compile and time the first `first` per build lane (TuneBackend::build_lanes: 1, or with build helpers one
//      more per helper);
//   3. then one more at a time, as long as one of the last `patience` timed beat the best before it by more than
//      the noise (max(noise_multiplier x its relative error, noise_floor)); otherwise the rest are left, reported
//      NotVerified ("not run: candidate budget ...").
// Candidates that are not runtime-compiled cost no compile: every one is built and timed, as before.
struct CandidateBudget {
  bool exhaustive = false;  // every candidate (kiln tune --exhaustive)
  int first = 4;
  int patience = 2;
  double noise_multiplier = 2.0;
  double noise_floor = 0.01;
  std::vector<std::string> prior;
};
Status check_candidate_budget(const CandidateBudget& b);  // InvalidArgument naming the field out of range

// The order a tune takes candidates in: those that are not runtime-compiled first, in their order; then the
// runtime-compiled ones ranked as above. `runtime_compiled[i]` and `ranks[i]` (-1: not ranked) describe candidate i
// of `identities`. Returns indices into them. Exhaustive: the enumeration's order, unchanged.
std::vector<size_t> budget_order(const std::vector<std::string>& identities, const std::vector<int>& ranks,
                                 const std::vector<bool>& runtime_compiled, const CandidateBudget& b);

// After the runtime-compiled candidates `rtc` were settled, in budget order, and `best_before_ms` the best time among
// the other candidates (0: none): whether the next runtime-compiled one is worth compiling. Only timed candidates
// count (one that failed to build, run or pass the gate is as if not compiled): always while fewer than `first`
// were timed; `*why` says why not when not.
bool budget_wants_more(const std::vector<CandidateResult>& rtc, double best_before_ms, const CandidateBudget& b,
                       std::string* why);

// CandidateBudget::prior for a tune at shape `own_shape_key`: the identities that won at the other shapes the store
// holds for the structure (`winners`: shape key, identity), most often first (ties: by identity); `incumbent`
// (the key's own stored winner, "" for none) goes first, so that a budgeted re-tune times it again and the incumbent
// rule can keep it.
std::vector<std::string> rank_prior_winners(const std::vector<std::pair<std::string, std::string>>& winners,
                                            const std::string& own_shape_key, const std::string& incumbent = "");

// ---- Reports --------------------------------------------------------------------------------------
struct ReportOptions {
  WinnerOptions winner;
  std::string title;  // first line of the text table, e.g. the graph key
  bool show_messages = true;
};

// A text table sorted by median (timed candidates first, then the rest by disposition and identity):
//   rank, marks ('*' winner, 'H' heuristic's first choice), identity, disposition, median ms,
//   spread (±rel error, min..max), TFLOP/s or GB/s, workspace.
// Footer lines: "best: <id> <ms>", "best vs heuristic: <x>x (heuristic <id> <ms>)", "best vs worst: <x>x".
std::string format_report_table(const std::vector<CandidateResult>& candidates, const ReportOptions& options = {});

// {"meta": meta, "objective": ..., "winner": identity or null, "candidates": [...] (same order as the
//  table), "summary": {"best_ms", "heuristic_ms", "best_over_heuristic", "worst_ms", "best_over_worst",
//  "counts": {"Passed": n, ...}}}
nlohmann::json report_to_json(const std::vector<CandidateResult>& candidates, const nlohmann::json& meta,
                              const ReportOptions& options = {});

// One candidate as JSON. kReport, as reports write it: identity, engine_id, knobs, disposition, message,
// workspace_bytes, heuristic_rank, samples, throttled, median_ms (null when not timed); when timed also
// min_ms, max_ms, rel_error (null when not finite), tflops or gbps; flops and bytes when known; phases_ms
// {build, gate, warmup, timing}. kExact adds what kReport leaves out or derives (the timing of a candidate
// that is not timed, flops and bytes of 0, measure_ms), so that candidate_from_json gives the same
// CandidateResult back: what a tuning worker sends its supervisor (kiln/tune/tune_supervisor.h).
enum class CandidateJson { kReport, kExact };
nlohmann::json candidate_to_json(const CandidateResult& c, CandidateJson form = CandidateJson::kReport);
// The inverse of candidate_to_json (kExact: every field; kReport: what the report keeps, a rel_error of null
// read as infinity). InvalidArgument naming what is missing or malformed.
StatusOr<CandidateResult> candidate_from_json(const nlohmann::json& j);

// Progress on a long tuning run. kAuto draws a one-line bar (rewritten with '\r') with an estimate of the
// time left when `out` is a TTY, and prints plain lines (done/total, elapsed) otherwise; kLines and kBar
// force a style; kSilent prints nothing. The total may be unknown at construction (0) and given with
// each update.
class ProgressReporter {
 public:
  enum class Mode { kAuto, kBar, kLines, kSilent };
  ProgressReporter(std::string label, size_t total, std::FILE* out = stderr, Mode mode = Mode::kAuto);
  ~ProgressReporter();  // finishes the bar line if needed
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  // Reports that `done` of `total` items are finished; `note` describes the latest (e.g. identity and time).
  void update(size_t done, const std::string& note = "");
  // The same, setting the total.
  void update(size_t done, size_t total, const std::string& note);
  void finish(const std::string& note = "");
  bool drawing_bar() const { return mode_ == Mode::kBar; }

 private:
  std::string label_;
  size_t total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::FILE* out_;
  Mode mode_;
  bool finished_ = false;
  bool bar_open_ = false;
};

}  // namespace kiln
