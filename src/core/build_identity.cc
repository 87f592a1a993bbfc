// The one file that reads the generated kiln/build_info.h (kiln/core/build_identity.h says why).
#include "kiln/core/build_identity.h"

#include "kiln/build_info.h"

namespace kiln {

const char* kiln_version_string() { return KILN_VERSION_STRING; }
const char* kiln_git_revision() { return KILN_GIT_REVISION; }
const char* kiln_cuda_architectures() { return KILN_CUDA_ARCHITECTURES; }

}  // namespace kiln
