// What a spec may hold (kiln/graph/limits.h, docs/spec.md "Limits"), refused by the parser before any work,
// and the overflow and overlap checks as a spec author meets them (messages start with the file name).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#include "kiln/graph/limits.h"
#include "kiln/spec/spec.h"

namespace kiln {
namespace {

const char* kRelu = R"({"io_dtype": "fp32", "tensors": {"x": {"dims": [4, 4]}},
  "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})";

void expect_has(const Status& s, const std::string& part) {
  EXPECT_NE(s.message().find(part), std::string::npos) << "missing '" << part << "' in: " << s.message();
}

TEST(SpecLimits, TextOverTheByteLimitIsRefusedBeforeParsing) {
  std::string text(static_cast<size_t>(limits::kMaxSpecBytes) + 1, ' ');  // not even JSON: never parsed
  auto g = parse_spec_string(text, "big.json");
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  expect_has(g.status(), "big.json: 67108865 bytes, over the limit of 67108864 bytes");
}

// Regression (hostile-user tests): `kiln validate /dev/zero` read until the machine ran out of memory, then up
// to the limit, and /dev/ptmx blocked forever: a device by its name is refused at once. A pipe reports no
// size, so the read itself stops at the limit.
TEST(SpecLimits, ADeviceIsRefusedAndAPipeIsReadOnlyUpToTheLimit) {
  for (const char* dev : {"/dev/zero", "/dev/null", "/dev/ptmx"}) {
    auto g = parse_spec_file(dev);
    ASSERT_FALSE(g.is_ok()) << dev;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << dev;
    expect_has(g.status(), "is a device or socket, not a file");
  }
  std::signal(SIGPIPE, SIG_IGN);  // the writer's write after the read stops is an EPIPE, not the test's end
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::thread writer([w = fds[1]] {
    const std::string chunk(1 << 16, ' ');
    while (::write(w, chunk.data(), chunk.size()) > 0) {
    }
    ::close(w);
  });
  auto g = parse_spec_file("/dev/fd/" + std::to_string(fds[0]));
  ::close(fds[0]);  // the writer's next write fails, and it stops
  writer.join();
  ASSERT_FALSE(g.is_ok());
  expect_has(g.status(), "more than 67108864 bytes, over the limit for a spec");
}

TEST(SpecLimits, FileOverTheByteLimitIsRefusedByItsSize) {
  std::string path = ::testing::TempDir() + "/kiln_big_spec_" + std::to_string(::getpid()) + ".json";
  {
    std::ofstream f(path, std::ios::binary);
    f.seekp(limits::kMaxSpecBytes);  // sparse: the file is never read
    f.put(' ');
  }
  auto g = parse_spec_file(path);
  std::remove(path.c_str());
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  expect_has(g.status(), "over the limit of 67108864 bytes");
}

TEST(SpecLimits, TooManyNodesIsRefusedBeforeTheyAreRead) {
  std::string nodes;
  for (int64_t i = 0; i <= limits::kMaxNodes; ++i) nodes += i ? ",{}" : "{}";  // never looked at one by one
  auto g = parse_spec_string(R"({"tensors": {}, "outputs": [], "nodes": [)" + nodes + "]}", "many.json");
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  expect_has(g.status(), "many.json: spec: key 'nodes': 200001 nodes, over the limit of 200000");
}

// Regression: a long "pin" crashed the process (std::regex recursion exhausted the stack).
TEST(SpecLimits, LongPinIsRefusedNotAStackOverflow) {
  std::string pin = "eng1";
  for (int i = 0; i < 20000; ++i) pin += "_k1=1";
  std::string text = std::string(kRelu).insert(1, "\"pin\": \"" + pin + "\", ");
  auto g = parse_spec_string(text, "pin.json");
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  expect_has(g.status(), "pin.json: spec: key 'pin': 100004 bytes, over the limit of 256");
}

TEST(SpecLimits, RankAndNamesAsAuthorsMeetThem) {
  auto g = parse_spec_string(R"({"tensors": {"x": {"dims": [1,1,1,1,1,1,1,1,2]}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})",
                             "rank.json");
  ASSERT_FALSE(g.is_ok());
  expect_has(g.status(), "rank.json: tensor 'x': attribute 'dims': 9 entries, over the rank limit of 8");
  std::string name(300, 'a');
  g = parse_spec_string(R"({"tensors": {")" + name + R"(": {"dims": [4]}},
    "nodes": [{"name": "r", "op": "relu", "inputs": [")" +
                            name + R"("], "outputs": ["y"]}], "outputs": ["y"]})",
                        "name.json");
  ASSERT_FALSE(g.is_ok());
  expect_has(g.status(), "name.json: tensor 'aaaa");
  expect_has(g.status(), "name: 300 bytes, over the limit of 256");
}

// Regression: a spec of 100,000 nodes took minutes to read. Validation scanned every node for each tensor's
// producer, nlohmann's callback parser (used to find repeated keys) scanned the nodes array at every
// object's end, and ordered_json found each of 100,000 tensor names by a linear scan: each quadratic.
// Linear now.
TEST(SpecScale, QuadraticParsing_100000NodesAndTensorsReadInSeconds) {
  const int n = 100000;
  std::string text = R"({"io_dtype": "fp32", "tensors": {)";
  for (int i = 0; i < n; ++i) text += (i ? ", \"x" : "\"x") + std::to_string(i) + R"(": {"dims": [4]})";
  text += R"(}, "nodes": [)";
  for (int i = 1; i < n; ++i) {
    std::string in = i == 1 ? "x0" : "s" + std::to_string(i - 1), out = i == n - 1 ? "y" : "s" + std::to_string(i);
    text += (i > 1 ? "," : "") + std::string(R"({"name": "a)") + std::to_string(i) + R"(", "op": "add", "inputs": [")" +
            in + R"(", "x)" + std::to_string(i) + R"("], "outputs": [")" + out + R"("]})";
  }
  text += R"(], "outputs": ["y"]})";
  auto t0 = std::chrono::steady_clock::now();
  auto g = parse_spec_string(text, "wide.json");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  std::printf("[ scale ] parse + validate of 99,999 nodes and 100,000 declared tensors: %.2f s\n", s);
  EXPECT_LT(s, 30.0);  // 2 to 6 s on a loaded 2-core machine; the quadratic parser took over 15 minutes
  // Declaration order is kept (Graph::tensors follows the spec, not the names' sort order).
  EXPECT_EQ(g->tensors[0].name, "x0");
  EXPECT_EQ(g->tensors[1].name, "x1");
  EXPECT_EQ(g->tensors[10].name, "x10");
}

// Regression (as users met it): stride 2^63-1 on a [4,4] tensor passed `kiln validate`.
TEST(SpecOverflow, Stride2Pow63IsNamedWithTheFile) {
  auto g =
      parse_spec_string(R"({"io_dtype": "fp32", "tensors": {"x": {"dims": [4, 4], "strides": [9223372036854775807, 1]}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})",
                        "stride.json");
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  expect_has(g.status(), "stride.json: tensor 'x': strides [9223372036854775807,1] on dims [4,4] reach past");
}

TEST(SpecOverlap, OutputStridesSharingMemoryAreNamed) {
  auto g = parse_spec_string(
      R"({"io_dtype": "fp32", "tensors": {"x": {"dims": [4, 4]}, "y": {"dims": [4, 4], "strides": [1, 1]}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})",
      "overlap.json");
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  expect_has(g.status(),
             "overlap.json: node 'r' (relu): output 'y': strides [1,1] on dims [4,4] make elements share memory");
}

// docs/spec.md asks for rank 3 or more for NCHW/NHWC; a rank-2 NHWC tensor is refused (input or output).
TEST(SpecLayouts, NhwcNeedsRank3) {
  auto g = parse_spec_string(R"({"tensors": {"x": {"dims": [4, 4], "layout": "NHWC"}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})",
                             "nhwc.json");
  ASSERT_FALSE(g.is_ok());
  expect_has(g.status(), "nhwc.json: tensor 'x': layout NHWC needs rank 3 or more, got 2");
  g = parse_spec_string(R"({"tensors": {"x": {"dims": [4, 4]}, "y": {"layout": "NHWC"}},
    "nodes": [{"name": "r", "op": "relu", "inputs": ["x"], "outputs": ["y"]}], "outputs": ["y"]})",
                        "nhwc.json");
  ASSERT_FALSE(g.is_ok());
  expect_has(g.status(), "nhwc.json: tensor 'y': layout NHWC needs rank 3 or more, got 2");
}

}  // namespace
}  // namespace kiln
