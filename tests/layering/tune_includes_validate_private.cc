// Must NOT compile (tests/layering/CMakeLists.txt): a layer's private headers (src/<layer>/*.h) are its own.
// tune may use validate's public headers (kiln/validate/...), never validate/gate.h, which is not installed.
#include "kiln/validate/numerics.h"
#include "validate/gate.h"

int layering_tune_includes_validate_private() { return 0; }
