// Must compile (tests/layering/CMakeLists.txt): the positive control. store uses graph, which uses core, so
// all three are on its include path; a harness that could not build this would pass the negative cases
// vacuously.
#include "kiln/core/fingerprint.h"
#include "kiln/core/status.h"
#include "kiln/graph/graph.h"
#include "kiln/store/plan_store.h"

int layering_store_includes_graph() { return 0; }
