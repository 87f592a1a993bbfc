// The one place that includes cuDNN Frontend. Only files in src/lower/ include this header, and the build
// compiles every such file in one translation unit, the lower layer's frontend unit (CMakeLists.txt
// kiln_frontend_unit; docs/contributing.md "Build cost"): each unit that instantiates the frontend costs
// ~40 s more per build. The unit defines KILN_FRONTEND_UNIT before each of its files; elsewhere this fails.
#pragma once

#ifndef KILN_FRONTEND_UNIT
#error "lower/frontend.h is compiled only in the lower layer's frontend unit (docs/contributing.md 'Build cost')"
#endif

#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;
