// kiln/runtime/cudnn_primer.h: cuDNN's once-per-process first-use work, paid ahead of the first plan.
//
// In a new process the first plan that uses one of cuDNN's precompiled engines (the example conv's engine 32)
// costs 60-90 ms more than the next ones on the H200's host (86-88 ms on 2026-12-04), whichever plan it is,
// loaded or built (docs/h200-results.md "Cold start"). That work is host-side and needs no GPU: a deviceless
// load pays it too (72-75 ms on a machine without a GPU, then 0.6 ms a load). Profiled there (perf, docs/runtime.md "Cold start"), it is the
// precompiled-engine library's own code with malloc, strcmp and dynamic_cast under it: an initialization inside
// cuDNN, not the plan, and not cuBLASLt (which that library loads: preloading cuBLASLt left it unchanged).
//
// prime_cudnn() pays it without a GPU or a CUDA context, with the cheapest trigger found: it builds a tiny
// built-in convolution + bias + ReLU with that engine pinned (kPrimerEngine, no heuristics) against the built-in
// H200 profile (kiln/lower/lower.h builtin_h200_profile) and keeps nothing: 72-81 ms on a machine without a GPU,
// about what the work itself costs there, and 213-235 ms on the H200's host (its lowering and build included).
// Where that engine does not build (another cuDNN), it asks mode A's heuristics for the same graph instead,
// which pays it too at a higher cost (139-150 ms on the machine without a GPU, 281-289 ms on the H200's host).
//
// Planner::create starts it on a thread of its own beside the CUDA context's creation and does not wait for it
// (PlannerOptions::prime_cudnn): the first plan then waits only for what is left of it. An application that
// makes its CUDA context, or loads its weights, before it creates a Planner starts it earlier, at its own start:
//
//   int main(int argc, char** argv) {
//     parse_the_command_line(argc, argv);                        // an early exit would wait for the primer
//     kiln::PrimerThread primer = kiln::start_priming_cudnn();  // returns at once; keep it (dropped, it waits)
//     load_weights_onto_the_gpu();                               // the primer runs meanwhile
//     auto planner = kiln::Planner::create(options);             // its first plan finds cuDNN primed
#pragma once

#include <cstdint>
#include <string>
#include <thread>

#include "kiln/core/status.h"

namespace kiln {

// The precompiled engine the primer pins: the one cuDNN 9.19's heuristics choose for its graph on the H200.
constexpr int64_t kPrimerEngine = 32;

struct PrimeReport {
  Status status;       // the primer's build; a failure leaves cuDNN unprimed (the first plan then pays)
  double ms = 0;       // the first call's time (0 for the calls after it)
  bool first = false;  // this call ran it; the calls after it return its status at once
  // How it primed: "engine 32 pinned", or "mode A's query (engine 32 did not build: ...)"; where the set-up failed
  // before either (status not ok), "its set-up (the built-in H200 profile and graph)".
  std::string how;
};

// Once per process; thread-safe (concurrent callers wait for the first one).
PrimeReport prime_cudnn();

// prime_cudnn() on a thread of its own, started by start_priming_cudnn() and joined by the destructor (which waits
// for the primer to finish). Movable, not copyable.
class PrimerThread {
 public:
  PrimerThread() = default;
  explicit PrimerThread(std::thread t) : thread_(std::move(t)) {}
  PrimerThread(PrimerThread&&) = default;
  PrimerThread& operator=(PrimerThread&& other) noexcept;
  PrimerThread(const PrimerThread&) = delete;
  PrimerThread& operator=(const PrimerThread&) = delete;
  ~PrimerThread();
  void join();  // waits for the primer (done at once after the first call)

 private:
  std::thread thread_;
};

// Starts prime_cudnn() on a thread and returns at once; calls after the first one prime nothing again (their
// threads return at once). A thread that cannot be started leaves cuDNN unprimed and returns an empty PrimerThread.
[[nodiscard]] PrimerThread start_priming_cudnn();

}  // namespace kiln
