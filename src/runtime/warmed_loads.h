// LoadsWarmedByCaller: which stored plans the cuDNN backend may load beside other threads' loads. Private to the
// runtime layer: only Planner::preload keeps its promise (an obtain() holds the plan in the cache before its caller
// could run it).
#pragma once

#include <cstddef>

namespace kiln::runtime_detail {

// While one lives on a thread, the stored plans that thread loads (PlanBackend::from_store) are run once by the
// Planner (Planner::preload with warm: PlanBackend::warm_up) before anyone is served them; a plan whose warm-up
// fails is loaded again outside the scope (the ordinary way) before it is held. The cuDNN backend then loads them
// beside other threads' loads (kiln/cuda/capture_gate.h LoadingWork) and skips the Frontend's warmup capture, which
// cannot run beside another load's device work. Nests; scoped to the thread that made it. A backend may ignore it.
class LoadsWarmedByCaller {
 public:
  LoadsWarmedByCaller();
  ~LoadsWarmedByCaller();
  LoadsWarmedByCaller(const LoadsWarmedByCaller&) = delete;
  LoadsWarmedByCaller& operator=(const LoadsWarmedByCaller&) = delete;
  static void* operator new(std::size_t) = delete;
  // Whether one lives on the calling thread.
  static bool active();
};

}  // namespace kiln::runtime_detail
