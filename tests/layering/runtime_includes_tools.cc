// Must not compile (tests/layering/CMakeLists.txt): runtime sits below tools, so the programs over the
// runtime (kiln run's runner, replay, deep verify) are not on its include path.
#include "kiln/tools/runner.h"

int layering_runtime_includes_tools() { return 0; }
