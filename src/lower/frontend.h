// The one place that includes cuDNN Frontend. Only files in src/lower/ include this header; it is also
// the precompiled header of the lower layer, since parsing it costs minutes per translation unit.
#pragma once

#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;
