// Must compile (tests/layering/CMakeLists.txt): the tools layer's positive control. tools uses runtime and
// capture (and, through them, every layer below), so their headers and its own are on its include path.
#include "kiln/capture/capture.h"
#include "kiln/runtime/planner.h"
#include "kiln/tools/deep_verify.h"
#include "kiln/tools/replay.h"
#include "kiln/tools/runner.h"

int layering_tools_includes_runtime() { return 0; }
