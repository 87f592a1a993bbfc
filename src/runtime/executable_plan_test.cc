// ExecutablePlan (kiln/runtime/plan_types.h): bindings checked by tensor name before any launch.
#include <gtest/gtest.h>

#include <unistd.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "runtime/fake_backend_test_util.h"

namespace kiln {
namespace {

using namespace planner_fake;  // NOLINT(build/namespaces): the shared fakes

TEST(ExecutablePlan, BindingsAreCheckedBeforeAnyLaunch) {
  Fixture f;
  auto got = f.planner->obtain(token_graph(64));
  ASSERT_TRUE(got.is_ok()) << got.status().to_string();
  const ExecutablePlan& p = *got->plan;
  alignas(64) static char mem[4][1 << 16];
  auto xb = p.tensor_bytes("x");
  ASSERT_TRUE(xb.is_ok());
  EXPECT_EQ(*xb, size_t{64} * 128 * 2);
  TensorBindings ok = {{"x", {mem[0], *xb}}, {"w", {mem[1]}}, {"b", {mem[2]}}, {"y", {mem[3]}}};
  EXPECT_TRUE(p.execute(nullptr, ok, mem[0]).is_ok());
  EXPECT_EQ(f.backend->runs.load(), 1);
  auto expect_refused = [&](TensorBindings t, void* ws, const std::string& what) {
    Status s = p.execute(nullptr, t, ws);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.to_string();
  };
  TensorBindings t = ok;
  t.erase("w");
  expect_refused(t, mem[0], "tensor 'w' is not bound");
  t = ok;
  t["y"].ptr = nullptr;
  expect_refused(t, mem[0], "tensor 'y' is bound to a null pointer");
  t = ok;
  t["x"].ptr = mem[0] + 2;
  expect_refused(t, mem[0], "is not 16-byte aligned");
  t = ok;
  t["x"].bytes = *xb - 1;
  expect_refused(t, mem[0], "tensor 'x': buffer of 16383 bytes, the shape tokens=64 needs 16384");
  t = ok;
  t["h"] = {mem[0]};  // a virtual intermediate: not bindable
  expect_refused(t, mem[0], "no input or output tensor 'h' to bind");
  expect_refused(ok, nullptr, "needs a workspace of 1024 bytes");
  EXPECT_EQ(f.backend->runs.load(), 1);  // none of those reached the executor
}

}  // namespace
}  // namespace kiln
