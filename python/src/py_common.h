// What the binding's files share (python/src/, docs/python.md): how a Status becomes a Python exception, and the
// graph facts the tensor checks and the torch op read. Kiln's library throws nothing; only this binding does,
// and only StatusError, which module.cc turns into the exception class for its code (kiln/errors.py).
#pragma once
#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/status.h"
#include "kiln/graph/graph.h"

namespace kiln::py {
namespace nb = nanobind;
using namespace nanobind::literals;

// A Status that is not OK, on its way to Python.
struct StatusError {
  Status status;
};

[[noreturn]] inline void raise(Status s) { throw StatusError{std::move(s)}; }
// Sets the Python exception for a Status that is not OK (its class by code, kiln/errors.py), as a StatusError thrown
// to nanobind would; for C entry points that cannot throw (torch_bridge.h).
void set_python_error(const Status& s);
inline void check(const Status& s) {
  if (!s.is_ok()) raise(s);
}
template <class T>
T value_or_raise(StatusOr<T>&& s) {
  if (!s.is_ok()) raise(s.status());
  return std::move(s).value();
}
// `f()`, which returns a StatusOr<T>, run with the GIL released (every call that can block); its value, or its
// error raised.
template <class T, class F>
T unlocked(F&& f) {
  StatusOr<T> r = Status(StatusCode::kInternal, "not run");
  {
    nb::gil_scoped_release release;
    r = f();
  }
  return value_or_raise(std::move(r));
}
[[noreturn]] inline void bad_input(std::string message) {
  raise(Status(StatusCode::kInvalidArgument, std::move(message)));
}

// A text argument that names something (a path, a location): refused when it holds a NUL byte, which would cut it
// short where the C library reads it (as Python's own open() refuses it).
inline const std::string& text_arg(const std::string& s, const char* what) {
  if (s.find('\0') != std::string::npos) bad_input(std::string(what) + ": embedded NUL byte");
  return s;
}
// An SM version as a target: 0 (any), or major * 10 + minor (90 for SM 9.0), as `kiln validate --target-sm` reads it.
void check_target_sm(int sm);

// The tensors a caller binds, in the graph's order: inputs (graph inputs not passed by value), then outputs.
struct BoundNames {
  std::vector<int> inputs;
  std::vector<int> outputs;
};
BoundNames bound_names(const Graph& g);

// A tensor's description as Python sees it: {"name", "shape", "strides", "dtype", "symbols", "layout", ...}.
nb::dict tensor_dict(const Graph& g, int t);

void init_errors(nb::module_& m);
void init_graph(nb::module_& m);
void init_planner(nb::module_& m);
void init_runner(nb::module_& m);
void init_store(nb::module_& m);
void init_tune(nb::module_& m);
void init_tensors(nb::module_& m);

}  // namespace kiln::py
