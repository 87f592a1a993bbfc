// LoadsWarmedByCaller (runtime/warmed_loads.h): a thread-local count.
#include "runtime/warmed_loads.h"

namespace kiln::runtime_detail {
namespace {
thread_local int loads_warmed_by_caller = 0;
}  // namespace

LoadsWarmedByCaller::LoadsWarmedByCaller() { ++loads_warmed_by_caller; }
LoadsWarmedByCaller::~LoadsWarmedByCaller() { --loads_warmed_by_caller; }
bool LoadsWarmedByCaller::active() { return loads_warmed_by_caller > 0; }

}  // namespace kiln::runtime_detail
