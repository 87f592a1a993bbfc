// Must NOT compile (tests/layering/CMakeLists.txt): graph may use only core (docs/architecture.md), so the
// store's headers are not on its include path. If this ever compiles, the build stopped enforcing the layers.
#include "kiln/graph/graph.h"
#include "kiln/store/plan_store.h"

int layering_graph_includes_store() { return 0; }
