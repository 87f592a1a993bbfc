// Status and StatusOr (kiln/core/status.h): the text a user reads (code name and message), context added in
// front of the message and the trace kept apart from it, the macros that return an error with the
// expression, file and line; a StatusOr's value reads back, and reading the value of an error aborts with the
// status named, by every accessor (value, *, ->), instead of reading an empty optional.
#include <gtest/gtest.h>

#include <iterator>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "kiln/core/status.h"

namespace kiln {
namespace {

StatusOr<std::string> make(bool ok) {
  if (ok) return std::string("plan");
  return not_found("no plan 'x' in the store");
}

TEST(Status, OkIsTheDefaultAndSaysOk) {
  const Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.to_string(), "OK");
  EXPECT_TRUE(s.message().empty());
  EXPECT_TRUE(Status::ok().is_ok());
}

// Each factory makes its own code, and each code has its own name (exit codes and messages key on them).
TEST(Status, FactoriesMakeTheirCodeAndEveryCodeHasItsName) {
  const std::pair<Status, const char*> made[] = {
      {invalid_argument("m"), "InvalidArgument"},
      {not_found("m"), "NotFound"},
      {corruption("m"), "Corruption"},
      {not_supported("m"), "NotSupported"},
      {unavailable("m"), "Unavailable"},
      {failed_precondition("m"), "FailedPrecondition"},
      {check_failed("m"), "CheckFailed"},
      {cancelled("m"), "Cancelled"},
      {newer_version("m"), "NewerVersion"},
      {internal_error("m"), "Internal"},
  };
  std::set<StatusCode> codes;
  for (const auto& [s, name] : made) {
    EXPECT_FALSE(s.is_ok()) << name;
    EXPECT_STREQ(status_code_name(s.code()), name);
    EXPECT_EQ(s.to_string(), std::string(name) + ": m");
    EXPECT_EQ(s.message(), "m");
    codes.insert(s.code());
  }
  EXPECT_EQ(codes.size(), std::size(made));
  EXPECT_STREQ(status_code_name(StatusCode::kOk), "OK");
}

// Context goes in front of the message; the code and the trace (the path the error travelled) are kept.
TEST(Status, WithContextPrefixesTheMessageAndKeepsCodeAndTrace) {
  Status s = corruption("checksum mismatch");
  s.add_trace("read_record() (plan_store.cc:10)");
  const Status c = s.with_context("plan store /x/plans.db");
  EXPECT_EQ(c.code(), StatusCode::kCorruption);
  EXPECT_EQ(c.message(), "plan store /x/plans.db: checksum mismatch");
  EXPECT_EQ(c.trace(), "read_record() (plan_store.cc:10)");
  EXPECT_EQ(s.message(), "checksum mismatch");  // the original is unchanged
  EXPECT_TRUE(Status::ok().with_context("never said").is_ok());
  EXPECT_EQ(Status::ok().with_context("never said").message(), "");
}

Status fails() { return not_found("no plan 'x'"); }
Status passes() { return Status::ok(); }
StatusOr<int> seven() { return 7; }

Status returns_if_error(bool fail, int* reached) {
  KILN_RETURN_IF_ERROR(passes());
  ++*reached;
  if (fail) KILN_RETURN_IF_ERROR(fails());
  ++*reached;
  return Status::ok();
}

Status assigns_or_returns(StatusOr<int> in, int* out) {
  KILN_ASSIGN_OR_RETURN(*out, std::move(in));
  return Status::ok();
}

// The macros return the error unchanged for the user (code and message) and add "expression (file:line)"
// to the trace only, the file without its folders.
TEST(Status, MacrosReturnTheErrorWithTheExpressionInTheTrace) {
  int reached = 0;
  EXPECT_TRUE(returns_if_error(false, &reached).is_ok());
  EXPECT_EQ(reached, 2);
  reached = 0;
  const Status s = returns_if_error(true, &reached);
  EXPECT_EQ(reached, 1);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no plan 'x'");
  EXPECT_EQ(s.trace().rfind("fails() (status_test.cc:", 0), 0u) << s.trace();

  int v = 0;
  EXPECT_TRUE(assigns_or_returns(seven(), &v).is_ok());
  EXPECT_EQ(v, 7);
  const Status e = assigns_or_returns(StatusOr<int>(unavailable("no GPU")), &v);
  EXPECT_EQ(e.to_string(), "Unavailable: no GPU");
  EXPECT_NE(e.trace().find("std::move(in) (status_test.cc:"), std::string::npos) << e.trace();
  EXPECT_EQ(v, 7);  // not assigned
}

// Frames are added innermost first, one per line.
TEST(Status, TraceFramesAreOnePerLine) {
  Status s = unavailable("no GPU");
  s.add_trace("cudaSetDevice(0) (device.cc:3)");
  s = annotate(s, "make_stream()", "/a/b/stream.cc", 12);
  EXPECT_EQ(s.trace(), "cudaSetDevice(0) (device.cc:3)\nmake_stream() (stream.cc:12)");
  EXPECT_EQ(s.message(), "no GPU");
}

// No exception leaves a library entry point: allocation failures are Unavailable, others Internal.
TEST(Status, CatchExceptionsTurnsThrowsIntoStatuses) {
  EXPECT_TRUE(catch_exceptions("read", [] { return Status::ok(); }).is_ok());
  EXPECT_EQ(*catch_exceptions("read", [] { return StatusOr<int>(3); }), 3);
  Status s = catch_exceptions("reference", []() -> Status { throw std::bad_alloc(); });
  EXPECT_EQ(s.to_string(), "Unavailable: reference: out of host memory");
  s = catch_exceptions("reference", []() -> Status { throw std::length_error("vector"); });
  EXPECT_EQ(s.to_string(), "Unavailable: reference: out of host memory (vector)");
  s = catch_exceptions("parse", []() -> Status { throw std::runtime_error("bad token"); });
  EXPECT_EQ(s.to_string(), "Internal: parse: unexpected exception: bad token");
  s = catch_exceptions("parse", []() -> Status { throw 42; });
  EXPECT_EQ(s.to_string(), "Internal: parse: unexpected exception");
  StatusOr<int> o = catch_exceptions("parse", []() -> StatusOr<int> { throw std::runtime_error("x"); });
  EXPECT_EQ(o.status().code(), StatusCode::kInternal);
}

TEST(StatusOr, ValueOfASuccessReadsBack) {
  StatusOr<std::string> s = make(true);
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s.value(), "plan");
  EXPECT_EQ(*s, "plan");
  EXPECT_EQ(s->size(), 4u);
  EXPECT_EQ(std::move(s).value(), "plan");
}

TEST(StatusOrDeathTest, ValueOfAnErrorAbortsNamingTheStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const char* expected = "StatusOr::value\\(\\) of an error: NotFound: no plan 'x' in the store";
  EXPECT_DEATH({ (void)make(false).value(); }, expected);
  EXPECT_DEATH(
      {
        StatusOr<std::string> s = make(false);
        (void)*s;
      },
      expected);
  EXPECT_DEATH(
      {
        StatusOr<std::string> s = make(false);
        (void)s->size();
      },
      expected);
  EXPECT_DEATH(
      {
        const StatusOr<std::string> s = make(false);
        (void)s.value();
      },
      expected);
}

}  // namespace
}  // namespace kiln
