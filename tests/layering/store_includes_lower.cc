// Must NOT compile (tests/layering/CMakeLists.txt): store may use core and graph, not lower; collecting the
// environment fingerprint (kiln/lower/environment.h) is the lower layer's, so a store that needed it would
// reach over a layer.
#include "kiln/lower/environment.h"
#include "kiln/store/plan_store.h"

int layering_store_includes_lower() { return 0; }
