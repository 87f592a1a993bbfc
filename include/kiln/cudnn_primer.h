// kiln/cudnn_primer.h: cuDNN's once-per-process first-use work, paid ahead of the first plan.
//
// In a new process the first plan loaded (deserialized) or built costs 41-59 ms more than the next ones on
// the H200, whichever engine it is (docs/h200-results.md "Cold start"). That work is host-side: a
// deviceless load pays it too (46-56 ms on a machine without a GPU, then 0.2-0.5 ms a load), and so does a
// deviceless heuristic build (mode A) of another graph, while a FALLBACK-mode build does not. So it can be
// paid without a GPU or a CUDA context: prime_cudnn() builds a tiny built-in convolution + bias + ReLU by
// mode A's heuristics against the built-in H200 profile (kiln/lower.h builtin_h200_profile), and throws
// the plan away. Planner::create runs it on a thread while the CUDA context is made (200 ms on the H200).
#pragma once

#include "kiln/status.h"

namespace kiln {

struct PrimeReport {
  Status status;       // the primer's build; a failure leaves cuDNN unprimed (the first plan then pays)
  double ms = 0;       // the first call's time (0 for the calls after it)
  bool first = false;  // this call ran it; the calls after it return its status at once
};

// Once per process; thread-safe (concurrent callers wait for the first one).
PrimeReport prime_cudnn();

}  // namespace kiln
