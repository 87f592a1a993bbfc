// preload_cudnn_libraries (kiln/cuda/device.h): cuDNN's sub-libraries load from the folder of the libcudnn in
// use, without a GPU, and loading them twice is harmless.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "kiln/cuda/device.h"

namespace kiln {
namespace {

TEST(PreloadCudnn, LoadsEverySubLibraryBesideTheLoadedCudnn) {
  // cuDNN 9 ships graph, heuristic and both engine libraries beside libcudnn.so.9 (the toolkit's install
  // here, PyTorch's wheel on the GPU machine).
  EXPECT_EQ(preload_cudnn_libraries(), 4);
  // Now resident: cuDNN's own dlopen by soname finds them without reading the disk again.
  void* h = dlopen("libcudnn_engines_precompiled.so.9", RTLD_NOLOAD | RTLD_LAZY);
  EXPECT_NE(h, nullptr) << dlerror();
  if (h) dlclose(h);
  EXPECT_EQ(preload_cudnn_libraries(), 4);
}

}  // namespace
}  // namespace kiln
