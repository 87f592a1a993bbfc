// kiln/core/build_identity.h: which Kiln this is, for fingerprints, `kiln --version` and benchmark meta blocks.
// Functions rather than the generated kiln/build_info.h's macros: that header changes with every commit (the
// git revision), and whatever includes it recompiles (docs/contributing.md "Build cost"); these are defined in
// one small file.
#pragma once

namespace kiln {

const char* kiln_version_string();      // "0.1.0"
const char* kiln_git_revision();        // short SHA of the build, or "unknown"
const char* kiln_cuda_architectures();  // CMAKE_CUDA_ARCHITECTURES of the build, e.g. "90"

}  // namespace kiln
