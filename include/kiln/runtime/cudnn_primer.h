// kiln/runtime/cudnn_primer.h: cuDNN's once-per-process first-use work, paid ahead of the first plan.
//
// In a new process the first plan loaded (deserialized) or built costs 41-59 ms more than the next ones on
// the H200, whichever engine it is (docs/h200-results.md "Cold start"). That work is host-side: a
// deviceless load pays it too (43-62 ms on a machine without a GPU, then 0.2-0.6 ms a load), and so does a
// deviceless mode-A heuristics query for another graph, while a FALLBACK-mode build (and the load of its
// plan) does not. So it can be paid without a GPU or a CUDA context: prime_cudnn() asks mode A's heuristics
// for a tiny built-in convolution + bias + ReLU against the built-in H200 profile (kiln/lower/lower.h
// builtin_h200_profile) and keeps nothing. It takes longer than the work it pays for (105 ms on a machine
// without a GPU, 300 ms on the H200's host), so Planner::create starts it on a thread of its own beside
// the CUDA context's creation and does not wait for it: the first plan then waits only for the part of it
// that it needs, if any is left.
#pragma once

#include "kiln/core/status.h"

namespace kiln {

struct PrimeReport {
  Status status;       // the primer's build; a failure leaves cuDNN unprimed (the first plan then pays)
  double ms = 0;       // the first call's time (0 for the calls after it)
  bool first = false;  // this call ran it; the calls after it return its status at once
};

// Once per process; thread-safe (concurrent callers wait for the first one).
PrimeReport prime_cudnn();

}  // namespace kiln
