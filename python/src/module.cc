// kiln._kiln: the extension module (docs/python.md). Python's `kiln` package wraps it; nothing here is meant to be
// imported directly.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "kiln/core/exit_codes.h"
#include "py_common.h"

namespace kiln::py {
namespace {

// Exception classes by StatusCode, given by kiln/errors.py at import (_set_error_classes). Kept for the process's
// life: the translator may run until the interpreter ends.
PyObject* g_error_classes[16] = {};
PyObject* g_base_error = nullptr;

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const StatusError& e) {
    set_python_error(e.status);
  }
}

}  // namespace

void set_python_error(const Status& s) {
  const auto code = static_cast<size_t>(s.code());
  PyObject* cls = code < std::size(g_error_classes) && g_error_classes[code] ? g_error_classes[code] : g_base_error;
  if (cls == nullptr) cls = PyExc_RuntimeError;
  // kiln/errors.py's KilnError(message, code_name, exit_code). Kiln cuts long names in its messages by bytes, which
  // may split a UTF-8 character: the message is decoded with replacement.
  const std::string& m = s.message();
  PyObject* args = Py_BuildValue("(Nsi)", PyUnicode_DecodeUTF8(m.data(), static_cast<Py_ssize_t>(m.size()), "replace"),
                                 status_code_name(s.code()), exit_code_for(s));
  if (args == nullptr) return;  // the error Py_BuildValue set stands
  PyErr_SetObject(cls, args);
  Py_DECREF(args);
}

void init_errors(nb::module_& m) {
  nb::register_exception_translator(translate);
  m.def(
      "_set_leak_warnings", [](bool on) { nb::set_leak_warnings(on); }, "on"_a,
      "nanobind's report, at exit, of Kiln objects still alive (kiln.torch turns it off: torch's dispatcher keeps "
      "each op's kernel, and so its runner and graph, until the interpreter is gone, which is no leak).");
  m.def(
      "_set_error_classes",
      [](nb::dict by_code_name, nb::handle base) {
        for (int c = 0; c <= static_cast<int>(StatusCode::kInternal); ++c) {
          const char* name = status_code_name(static_cast<StatusCode>(c));
          if (!by_code_name.contains(name)) continue;
          nb::object cls = by_code_name[name];
          Py_XDECREF(g_error_classes[c]);
          g_error_classes[c] = cls.release().ptr();
        }
        Py_XDECREF(g_base_error);
        g_base_error = nb::borrow(base).release().ptr();
      },
      "by_code_name"_a, "base"_a, "Which exception class each status code raises (kiln/errors.py).");
  m.def(
      "_raise_status",
      [](const std::string& code_name, const std::string& message) {
        for (int c = 1; c <= static_cast<int>(StatusCode::kInternal); ++c) {
          if (code_name == status_code_name(static_cast<StatusCode>(c)))
            raise(Status(static_cast<StatusCode>(c), message));
        }
        raise(Status(StatusCode::kInternal, "unknown status code '" + code_name + "': " + message));
      },
      "code_name"_a, "message"_a, "Raises the exception for a status code (tests of the translation).");
}

void check_target_sm(int sm) {
  if (sm == 0 || (sm >= 10 && sm <= 1000)) return;
  if (sm >= 1 && sm <= 9)
    bad_input("target_sm " + std::to_string(sm) +
              " is ambiguous: an SM version is written as major * 10 + minor; write " + std::to_string(sm) +
              "0 for SM " + std::to_string(sm) + ".0");
  bad_input("target_sm " + std::to_string(sm) + ": an SM version is major * 10 + minor (90 for SM 9.0), or 0 for any");
}

}  // namespace kiln::py

NB_MODULE(_kiln, m) {
  using namespace kiln::py;
  m.doc() = "Kiln's extension module: the C++ library under the `kiln` package (docs/python.md).";
  m.attr("__version__") = KILN_VERSION;
  init_errors(m);
  init_graph(m);
  init_planner(m);
  init_runner(m);
  init_store(m);
  init_tune(m);
  init_tensors(m);
}
