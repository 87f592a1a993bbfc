// kiln/tools/replay.h: a trace of requests (graph, shape) run through kiln::Planner with N threads, each
// request obtained and executed on buffers the replay owns, reported per source: the calls served, the
// time to first execution (obtain + execute + sync) and the execution time, with latency percentiles
// (docs/runtime.md "Replaying a trace"). What `kiln replay` runs; the trace is checked whole, and every
// option, before the GPU is touched.
//
// Trace (JSON): {"format": "kiln-trace", "version": 1,
//                "requests": [{"spec": "mlp.json", "shape": {"tokens": 100}, "count": 20}, ...]}
// spec paths are relative to the trace's folder; "shape" may be left out (the spec's own); "count" is 1
// by default. Requests run in order, spread over the threads. An entry {"wait": "promotions"} is a barrier:
// every request before it finishes and the Planner's background promotions are done before the next runs.
// {"wait": "notices", "count": N, "timeout_s": T} waits, after the requests before it, until the Planner has
// acted on N notices of plans stored by other processes (a fleet store's NOTIFY, docs/fleet.md), or T seconds
// (default 60) have passed; the report says what each such wait saw.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "kiln/core/enum_names.h"
#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/runtime/planner.h"

namespace kiln {

struct TraceRequest {
  size_t graph = 0;                      // index into Trace::graphs
  std::map<std::string, int64_t> shape;  // every dynamic dim, or empty: the spec's own shape
  bool barrier = false;                  // {"wait": "promotions"}, or with notices > 0 {"wait": "notices"}
  int64_t notices = 0;                   // {"wait": "notices"}: how many the Planner must have acted on
  double timeout_s = 60;                 // {"wait": "notices"}: the longest wait
};

struct Trace {
  std::string path;
  std::vector<std::string> specs;  // each spec once, resolved against the trace's folder
  std::vector<Graph> graphs;       // parsed and validated, in the order of specs
  std::vector<TraceRequest> requests;
};

// The most requests a trace may expand to (counts included).
constexpr int64_t kMaxTraceRequests = 10'000'000;

// Reads and checks a trace file: its format and version, each request's fields (an unknown field is
// refused: a typo such as "shapes" must not run the spec's own shape), each spec (parsed and validated),
// each shape (every dynamic dim of its graph, each an extent from 1 to limits::kMaxExtent), each count,
// and at least one spec. InvalidArgument naming the trace, the request's index and the field.
StatusOr<Trace> read_trace(const std::string& path);
StatusOr<Trace> parse_trace_json(const std::string& text, const std::string& path);

// What a replay does; PlannerOptions come from the same job (planner_options()).
struct ReplayJob {
  std::string trace;
  std::string store_path;  // "" : no store
  std::string buckets;     // BucketPolicy text ("batch=pow2")
  int threads = 1;         // 1..256
  int handles = 4;         // 1..64
  NewShapes new_shapes = NewShapes::kStopgap;
  bool promote = true;
  PromoteBy promote_by = PromoteBy::kBuild;
  PromotionTuning tuning;
  bool tune_bounds_given = false;  // the tuning bounds were set by the user (they need kTune)
  bool padded = true;
  bool split = true;
  bool split_overlap = true;           // false (--no-split-overlap): a shape that is no sum of tuned ones is padded
  int split_max_parts = 3;             // 2..64
  bool split_max_parts_given = false;  // set by the user (it needs split stopgaps)
  bool preload = false;                // before the first request, load the stored plans of each structure
  bool warm = false;                   // with preload: run each once
  std::string record_shapes;           // write the shapes served here ("" : not written)
  bool save_kernel_caches = false;     // keep the structures' dynamic-shape kernel caches in the store (needs one)
  bool overwrite = false;              // record_shapes may replace a file
  int shadow_every = -1;  // shadow sampling: one request in N runs a key's plan in shadow (0: none; -1: the Planner's)
};

inline constexpr EnumName<NewShapes> kNewShapesNames[] = {{NewShapes::kStopgap, "stopgap"},
                                                          {NewShapes::kBuildNow, "build-now"}};
inline constexpr EnumName<PromoteBy> kPromoteByNames[] = {{PromoteBy::kBuild, "build"}, {PromoteBy::kTune, "tune"}};
// "stopgap", "build-now" and "build", "tune": the names `kiln replay` takes. The parsers' InvalidArgument
// names the option: "--new-shapes must be 'stopgap' or 'build-now', got 'later'".
const char* new_shapes_name(NewShapes n);
StatusOr<NewShapes> parse_new_shapes(const std::string& name);
const char* promote_by_name(PromoteBy p);
StatusOr<PromoteBy> parse_promote_by(const std::string& name);

// The job's own consistency, before anything is read: the bounds of threads, handles and the tuning,
// --warm without --preload, --save-kernel-caches without --store, tuning bounds or PromoteBy::kTune where they would do nothing.
// InvalidArgument naming the option ("--threads must be 1..256, got 0").
Status check_replay_job(const ReplayJob& job);
// The Planner the job asks for (the bucket policy parsed: InvalidArgument "--buckets: ...").
StatusOr<PlannerOptions> planner_options(const ReplayJob& job);

struct ReplaySample {
  PlanSource source = PlanSource::kHeuristics;      // what served the call
  PlanSource built_from = PlanSource::kHeuristics;  // of the plan executed (a hit on a stopgap: kDynamic or kPadded)
  size_t request = 0;                               // index into Trace::requests
  double obtain_ms = 0, exec_ms = 0;                // host clock: obtain(); execute + sync
  double gpu_ms = 0;   // the execution's own time on the stream (CUDA events), launch overhead left out
  std::string config;  // the plan's identity
  std::string why;     // the Planner's words for how it obtained the plan (Obtained::why)
};

// One {"wait": "notices"} barrier as it went.
struct NoticeWait {
  size_t request = 0;  // index into Trace::requests
  int64_t wanted = 0, seen = 0;
  double waited_s = 0;
  bool timed_out = false;
};

struct ReplayReport {
  Trace trace;
  int threads = 1;
  double planner_create_ms = 0;
  bool preloaded = false;
  PreloadReport preload;
  double wall_s = 0;
  std::vector<ReplaySample> samples;  // by request index
  std::vector<NoticeWait> notice_waits;
  PlannerStats stats;
};

// The job: checks it, reads the trace, checks the record_shapes destination, creates the Planner, preloads,
// runs the requests phase by phase (barriers between), keeps the kernel caches (save_kernel_caches, after the
// promotions), writes the recorded shapes. Needs a GPU.
StatusOr<ReplayReport> run_replay(const ReplayJob& job);
// The same on a Planner the caller made (a fake backend in tests, or a service's own); the trace read.
StatusOr<ReplayReport> replay_on(Planner& planner, Trace trace, int threads, bool preload, bool warm);

// Nearest-rank percentile p (0..1) of v; 0 for an empty v.
double percentile(std::vector<double> v, double p);

// The report as JSON: trace, requests, threads, planner_create_ms, preload (when asked), wall_s,
// latency_ms {p50, p90, p99}, by_source {name: calls, share, obtain_ms_p50, first_execution_ms_p50/p90,
// execute_ms_p50}, by_shape [per graph and shape: the first call's source and plan, the stopgap's and the
// static plan's execution times], promotions, stats.
nlohmann::ordered_json replay_report_json(const ReplayReport& report);
// The same as a few lines of text (what `kiln replay` prints without --json).
std::string replay_report_text(const ReplayReport& report);

}  // namespace kiln
