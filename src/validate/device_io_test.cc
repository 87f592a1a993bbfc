// Recorded inputs for `kiln tune --inputs` and `kiln run --inputs` (kiln/validate/device_io.h): read back exactly as
// written (strided too), and a missing or misshapen file named before any GPU work.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "cli_test_util.h"  // TempDir
#include "kiln/validate/device_io.h"
#include "kiln/validate/reference.h"
#include "validate/test_graphs.h"

namespace kiln {
namespace {

using namespace testing_graphs;

Graph conv_like() {
  Graph g = make_graph("rec", DataType::kFloat16);
  const std::vector<int64_t> xd = {2, 3, 4, 5};
  const int x = add_tensor(g, "x", xd, std::nullopt, nhwc_strides(xd));
  const int s = add_tensor(g, "s", {1}, DataType::kFloat32);
  g.tensors[static_cast<size_t>(s)].by_value = true;  // by value: no file
  g.tensors[static_cast<size_t>(s)].value = 2.0;
  const int y = add_tensor(g, "y", xd, std::nullopt, nhwc_strides(xd));
  add_node(g, "scale", OpKind::kPointwise, {x, s}, y).pointwise.mode = PointwiseMode::kScale;
  g.outputs = {y};
  return g;
}

TEST(RecordedInputs, ReadBackExactlyAsWritten) {
  const Graph g = conv_like();
  auto in = make_random_inputs(g, 3);
  ASSERT_TRUE(in.is_ok());
  const test::TempDir tmp("kiln_inputs_ok");
  ASSERT_FALSE(tmp.path().empty());
  const std::string dir = tmp.path();
  ASSERT_TRUE(in->at(0).write_file(dir + "/x.bin").is_ok());
  EXPECT_TRUE(check_graph_input_files(g, dir).is_ok());
  auto back = read_graph_inputs(g, dir);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  ASSERT_EQ(back->size(), 1u);  // the by-value scalar has no file
  EXPECT_EQ(back->at(0).strides, in->at(0).strides);
  EXPECT_EQ(back->at(0).values(), in->at(0).values());
}

TEST(RecordedInputs, MissingOrMisshapenFilesAreNamed) {
  const Graph g = conv_like();
  const test::TempDir tmp("kiln_inputs_bad");
  ASSERT_FALSE(tmp.path().empty());
  const std::string dir = tmp.path();
  Status st = check_graph_input_files(g, dir);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("input tensor 'x': no file '" + dir + "/x.bin'"), std::string::npos) << st.message();
  std::ofstream(dir + "/x.bin") << "short";
  st = check_graph_input_files(g, dir);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("has 5 bytes, the graph needs 240"), std::string::npos) << st.message();
  EXPECT_FALSE(read_graph_inputs(g, dir).is_ok());
}

}  // namespace
}  // namespace kiln
