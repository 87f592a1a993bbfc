# FindCUDNN: yields the imported target CUDNN::cudnn and CUDNN_VERSION / CUDNN_INCLUDE_DIR / CUDNN_LIBRARY_DIR.
#
# Search order (first hit wins):
#   1. CUDNN_ROOT (CMake variable or environment variable): a folder with include/cudnn.h and lib/ or lib64/.
#   2. A Python site-packages install (nvidia-cudnn-cu1x wheels: site-packages/nvidia/cudnn), asked of
#      KILN_PYTHON (default: python3). This is where the GPU machine keeps cuDNN 9.19, beside an older
#      9.14 in /usr/lib that must not be picked up.
#   3. The CUDA toolkit's own folders, then the system's.
# The header's version must equal the library's major.minor found next to it, and is checked at run time
# too (`kiln doctor`).
include(FindPackageHandleStandardArgs)

set(_cudnn_hints)
if(DEFINED CUDNN_ROOT)
  list(APPEND _cudnn_hints "${CUDNN_ROOT}")
elseif(DEFINED ENV{CUDNN_ROOT})
  list(APPEND _cudnn_hints "$ENV{CUDNN_ROOT}")
endif()
if(NOT _cudnn_hints)
  if(NOT KILN_PYTHON)
    set(KILN_PYTHON python3)
  endif()
  execute_process(
    COMMAND ${KILN_PYTHON} -c "import nvidia.cudnn as m, os; print(list(m.__path__)[0])"
    OUTPUT_VARIABLE _cudnn_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _cudnn_py_rc)
  if(_cudnn_py_rc EQUAL 0 AND EXISTS "${_cudnn_py}/include/cudnn.h")
    list(APPEND _cudnn_hints "${_cudnn_py}")
  endif()
endif()
if(_cudnn_hints)
  set(_cudnn_no_default NO_DEFAULT_PATH)
else()
  set(_cudnn_no_default)
  if(CUDAToolkit_LIBRARY_DIR)
    list(APPEND _cudnn_hints "${CUDAToolkit_LIBRARY_DIR}/.." "${CUDAToolkit_INCLUDE_DIRS}/..")
  endif()
endif()

find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} PATH_SUFFIXES include ${_cudnn_no_default})
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${_cudnn_hints} PATH_SUFFIXES lib lib64 ${_cudnn_no_default})

if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  file(READ "${CUDNN_INCLUDE_DIR}/cudnn_version.h" _cudnn_vh)
  string(REGEX MATCH "define CUDNN_MAJOR ([0-9]+)" _ "${_cudnn_vh}")
  set(_maj "${CMAKE_MATCH_1}")
  string(REGEX MATCH "define CUDNN_MINOR ([0-9]+)" _ "${_cudnn_vh}")
  set(_min "${CMAKE_MATCH_1}")
  string(REGEX MATCH "define CUDNN_PATCHLEVEL ([0-9]+)" _ "${_cudnn_vh}")
  set(CUDNN_VERSION "${_maj}.${_min}.${CMAKE_MATCH_1}")
endif()

find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)

if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  get_filename_component(CUDNN_LIBRARY_DIR "${CUDNN_LIBRARY}" DIRECTORY)
  add_library(CUDNN::cudnn SHARED IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES
    IMPORTED_LOCATION "${CUDNN_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
