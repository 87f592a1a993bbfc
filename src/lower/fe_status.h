// Frontend error_t -> kiln::Status. Only for src/lower/.
#pragma once

#include <string>
#include <utility>

#include "kiln/core/status.h"
#include "lower/frontend.h"

namespace kiln::lower_detail {

inline Status fe_status(const fe::error_t& e, const std::string& what) {
  if (e.is_good()) return Status::ok();
  std::string msg = what + ": " + e.err_msg;
  switch (e.code) {
    case fe::error_code_t::GRAPH_NOT_SUPPORTED:
    case fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED:
    case fe::error_code_t::HEURISTIC_QUERY_FAILED:
    case fe::error_code_t::UNSUPPORTED_GRAPH_FORMAT: return not_supported(msg);
    case fe::error_code_t::ATTRIBUTE_NOT_SET:
    case fe::error_code_t::SHAPE_DEDUCTION_FAILED:
    case fe::error_code_t::INVALID_TENSOR_NAME:
    case fe::error_code_t::INVALID_VARIANT_PACK:
    case fe::error_code_t::INVALID_VALUE: return invalid_argument(msg);
    default: return internal_error(msg);
  }
}

}  // namespace kiln::lower_detail

namespace kiln::lower_detail {

// cuDNN Frontend throws from some calls even though it reports most errors as error_t (Graph::sdpa throws
// std::runtime_error when no implementation fits; backend descriptor builders throw cudnnException): no
// exception may cross into Kiln, so every frontend call is made through this.
// `what` is made only for a message (`what_of()`): some of these calls run on every execute, where building it
// cost about a tenth of Kiln's own C++ call (a profile of the Python overhead benchmark, docs/python.md).
template <typename W, typename F>
Status fe_guard_lazy(W&& what_of, F&& call) noexcept {
  try {
    return call();
  } catch (const std::bad_alloc&) {
    return unavailable(what_of() + ": out of host memory");
  } catch (const std::exception& e) {
    return not_supported(what_of() + ": cuDNN Frontend threw: " + e.what());
  } catch (...) {
    return internal_error(what_of() + ": cuDNN Frontend threw an exception of unknown type");
  }
}
template <typename F>
Status fe_guard(const std::string& what, F&& call) noexcept {
  return fe_guard_lazy([&what] { return what; }, std::forward<F>(call));
}

}  // namespace kiln::lower_detail

// `what` (a string expression) is evaluated only when the call fails or throws.
#define KILN_FE_RETURN_IF_ERROR(call, what)                                                      \
  KILN_RETURN_IF_ERROR(::kiln::lower_detail::fe_guard_lazy(                                      \
      [&]() -> std::string { return (what); },                                                   \
      [&]() -> ::kiln::Status {                                                                  \
        const auto kiln_fe_error = (call);                                                       \
        return kiln_fe_error.is_good() ? ::kiln::Status::ok()                                    \
                                       : ::kiln::lower_detail::fe_status(kiln_fe_error, (what)); \
      }))
