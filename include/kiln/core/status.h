// kiln/core/status.h: the error model. Every fallible call in Kiln returns Status or StatusOr<T>.
// No exceptions cross the library boundary; third-party calls that may throw are caught where
// they are made and turned into a Status.
#pragma once

#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

// Codes map onto CLI exit codes (see exit_code_for): keep them few and meaningful.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input: spec, flag, file contents (exit 2)
  kNotFound,            // a file, record or tensor that is not there (exit 2)
  kCorruption,          // a record or file whose checksum or structure is wrong (exit 4)
  kNotSupported,        // cuDNN or the device cannot do this graph or config (exit 5)
  kUnavailable,         // environment: no GPU, driver too old, library missing (exit 3)
  kFailedPrecondition,  // state does not allow the call (stale plan, policy refusal) (exit 6)
  kCheckFailed,         // a numerical or consistency check failed (exit 1)
  kCancelled,           // the user interrupted (exit 130)
  kNewerVersion,        // made by a newer Kiln (store schema, bundle version): upgrade Kiln (exit 7)
  kInternal,            // a bug or an unexpected library failure (exit 10)
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK; costs nothing
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: message"
  std::string to_string() const;

  // Adds context in front of the message, keeping the code: "context: message".
  Status with_context(const std::string& context) const;

  // Where the error travelled: one "expr (file:line)" line per KILN_RETURN_IF_ERROR it crossed.
  // Kept apart from the message so that users read a clean message and developers get the path.
  const std::string& trace() const { return trace_; }
  void add_trace(const std::string& frame) { trace_ += (trace_.empty() ? "" : "\n") + frame; }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string trace_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status not_supported(std::string m) { return {StatusCode::kNotSupported, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status check_failed(std::string m) { return {StatusCode::kCheckFailed, std::move(m)}; }
inline Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status newer_version(std::string m) { return {StatusCode::kNewerVersion, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Prints "StatusOr::value() of an error: <status>" to stderr and aborts (StatusOr's misuse).
[[noreturn]] void status_or_value_of_error(const Status& status);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // Implicit by design. Two overloads (not one by value) so that `return local;` moves under every
  // front end (nvcc's EDG only applies the implicit move to an rvalue-reference constructor).
  StatusOr(const T& value) : value_(value) {}        // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT
  StatusOr(Status status)                            // NOLINT
      : status_(status.is_ok() ? internal_error("StatusOr constructed from OK status without a value")
                               : std::move(status)) {}
  bool is_ok() const { return status_.is_ok(); }
  const Status& status() const { return status_; }
  // Reading the value of an error is a bug in the caller: it fails loudly (the status on stderr, then
  // abort), never undefined behaviour.
  T& value() & { return checked(); }
  const T& value() const& { return checked(); }
  T&& value() && { return std::move(checked()); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &checked(); }
  T& operator*() & { return checked(); }
  const T& operator*() const& { return checked(); }

 private:
  T& checked() {
    if (!value_) status_or_value_of_error(status_);
    return *value_;
  }
  const T& checked() const {
    if (!value_) status_or_value_of_error(status_);
    return *value_;
  }
  Status status_;
  std::optional<T> value_;
};

// Builds "expr (file:line)" context; used by the macros below.
Status annotate(Status s, const char* expr, const char* file, int line);

// Runs `fn` (returning Status or StatusOr<T>) so that no exception leaves it: std::bad_alloc and
// std::length_error (a buffer sized by the caller's data that cannot be allocated) become Unavailable
// "<what>: out of host memory", any other exception Internal naming `what`. For library entry points
// whose work allocates by sizes that come from user data (host tensors, references, file contents).
template <typename F>
auto catch_exceptions(const std::string& what, F&& fn) noexcept -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Status(StatusCode::kUnavailable, what + ": out of host memory");
  } catch (const std::length_error& e) {
    return Status(StatusCode::kUnavailable, what + ": out of host memory (" + e.what() + ")");
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, what + ": unexpected exception: " + e.what());
  } catch (...) {
    return Status(StatusCode::kInternal, what + ": unexpected exception");
  }
}

}  // namespace kiln

#define KILN_CONCAT_INNER_(a, b) a##b
#define KILN_CONCAT_(a, b) KILN_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK, keeping the
// expression text, file and line in the message.
#define KILN_RETURN_IF_ERROR(expr)                                                                          \
  do {                                                                                                      \
    ::kiln::Status kiln_status_ = (expr);                                                                   \
    if (!kiln_status_.is_ok()) return ::kiln::annotate(std::move(kiln_status_), #expr, __FILE__, __LINE__); \
  } while (0)

// `KILN_ASSIGN_OR_RETURN(auto x, f());` assigns the value of a StatusOr or returns its error.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) KILN_ASSIGN_OR_RETURN_IMPL_(KILN_CONCAT_(kiln_sor_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr)                                   \
  auto tmp = (expr);                                                                  \
  if (!tmp.is_ok()) return ::kiln::annotate(tmp.status(), #expr, __FILE__, __LINE__); \
  lhs = std::move(tmp).value()
