// normalized_graph_json (docs/normalized-graph.md) on the example specs, and `kiln validate --normalized` as a
// user runs it: inferred dims, topological order, defaults filled in, dtypes, input ranges, the tolerances
// check_outputs gives, the version, and the CLI's files, refusals and exit codes.
#include "kiln/validate/normalized_graph.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "kiln/spec/spec.h"
#include "kiln/validate/numerics.h"

namespace kiln {
namespace {

using Json = nlohmann::json;
using test::CliResult;
using test::run_kiln;

std::string ex(const std::string& rel) { return std::string(KILN_SOURCE_DIR) + "/examples/" + rel; }

Json normalized(const Graph& g) {
  StatusOr<std::string> text = normalized_graph_json(g);
  EXPECT_TRUE(text.is_ok()) << text.status().message();
  return text.is_ok() ? Json::parse(*text) : Json();
}

Json normalized_file(const std::string& path) {
  StatusOr<Graph> g = parse_spec_file(path);
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return g.is_ok() ? normalized(*g) : Json();
}

Json normalized_text(const std::string& spec) {
  StatusOr<Graph> g = parse_spec_string(spec, "test.json");
  EXPECT_TRUE(g.is_ok()) << g.status().message();
  return g.is_ok() ? normalized(*g) : Json();
}

const Json& tensor(const Json& doc, const std::string& name) {
  for (const Json& t : doc["tensors"])
    if (t["name"] == name) return t;
  ADD_FAILURE() << "no tensor '" << name << "'";
  static const Json none;
  return none;
}

std::vector<std::string> node_names(const Json& doc) {
  std::vector<std::string> names;
  for (const Json& n : doc["nodes"]) names.push_back(n["name"]);
  return names;
}

std::set<std::string> keys(const Json& j) {
  std::set<std::string> k;
  for (auto it = j.begin(); it != j.end(); ++it) k.insert(it.key());
  return k;
}

// The version and the keys of each part are what docs/normalized-graph.md describes: a change here is a
// change of the format (a new version when a reader of this one would misread it).
TEST(NormalizedGraph, VersionAndKeysArePinned) {
  EXPECT_EQ(kNormalizedGraphVersion, 1);
  const Json doc = normalized_file(ex("small/conv_bias_relu.json"));
  EXPECT_EQ(doc["format"], "kiln-normalized-graph");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(keys(doc), (std::set<std::string>{"format", "version", "name", "io_dtype", "intermediate_dtype",
                                              "compute_dtype", "dynamic", "tensors", "nodes", "outputs"}));
  EXPECT_EQ(keys(tensor(doc, "x")), (std::set<std::string>{"name", "dims", "strides", "layout", "dtype", "input",
                                                           "output", "virtual", "symbols", "by_value", "draw"}));
  EXPECT_EQ(keys(doc["nodes"][0]), (std::set<std::string>{"name", "op", "kind", "mode", "compute_dtype", "inputs",
                                                          "outputs", "attributes", "reduction_length"}));
  EXPECT_EQ(keys(doc["outputs"][0]),
            (std::set<std::string>{"tensor", "reduction_length", "accumulation", "tolerance"}));
  EXPECT_EQ(keys(doc["outputs"][0]["tolerance"]),
            (std::set<std::string>{"bound", "bound_tf32", "legacy", "legacy_tf32"}));
  EXPECT_EQ(keys(doc["outputs"][0]["tolerance"]["bound"]),
            (std::set<std::string>{"atol", "rtol", "nmse_max", "rel_floor", "acc_coeff", "acc_nmse_coeff"}));
  // The documentation names the version and every key.
  const std::string docs = test::file_text(std::string(KILN_SOURCE_DIR) + "/docs/normalized-graph.md");
  EXPECT_NE(docs.find("\"version\": 1"), std::string::npos);
  for (const char* k : {"symbols", "draw", "reduction_length", "accumulation", "bound_tf32", "legacy_tf32",
                        "acc_nmse_coeff", "attn_scale_given", "virtual", "by_value"})
    EXPECT_NE(docs.find(std::string("`") + k + "`"), std::string::npos)
        << "docs/normalized-graph.md does not describe " << k;
}

// conv + bias + relu, dynamic batch: dims inferred from the symbols' values, NHWC strides, the layout an
// undeclared output inherits, intermediate dtypes, conv defaults filled in, the roles and the input ranges.
TEST(NormalizedGraph, ConvBiasReluInfersDimsStridesAndDefaults) {
  const Json doc = normalized_file(ex("small/conv_bias_relu.json"));
  EXPECT_EQ(doc["name"], "conv_bias_relu_small");
  EXPECT_EQ(doc["dynamic"], Json({{"batch", 2}}));
  const Json& x = tensor(doc, "x");
  EXPECT_EQ(x["dims"], Json({2, 8, 8, 8}));
  EXPECT_EQ(x["strides"], Json({512, 1, 64, 8}));  // NHWC: channels innermost
  EXPECT_EQ(x["symbols"], Json({"batch", nullptr, nullptr, nullptr}));
  EXPECT_EQ(x["dtype"], "fp16");
  EXPECT_TRUE(x["input"]);
  EXPECT_FALSE(x["output"]);
  EXPECT_EQ(x["draw"], Json({{"lo", -1.0}, {"hi", 1.0}}));
  EXPECT_EQ(tensor(doc, "bias")["draw"], Json({{"lo", -0.5}, {"hi", 0.5}}));  // bias_add's bias
  EXPECT_FALSE(tensor(doc, "w").contains("symbols"));
  const Json& conv_out = tensor(doc, "conv_out");  // never declared: inferred, NHWC from x, fp32 inside
  EXPECT_EQ(conv_out["dims"], Json({2, 16, 8, 8}));
  EXPECT_EQ(conv_out["layout"], "NHWC");
  EXPECT_EQ(conv_out["strides"], Json({1024, 1, 128, 16}));
  EXPECT_EQ(conv_out["dtype"], "fp32");
  EXPECT_TRUE(conv_out["virtual"]);
  EXPECT_FALSE(conv_out.contains("draw"));
  EXPECT_EQ(tensor(doc, "y")["dtype"], "fp16");
  EXPECT_TRUE(tensor(doc, "y")["output"]);
  EXPECT_EQ(node_names(doc), (std::vector<std::string>{"conv", "add_bias", "relu"}));
  const Json& conv = doc["nodes"][0];
  EXPECT_EQ(conv["op"], "conv_fprop");
  EXPECT_EQ(conv["kind"], "conv_fprop");
  EXPECT_TRUE(conv["mode"].is_null());
  EXPECT_EQ(conv["compute_dtype"], "fp32");
  EXPECT_EQ(conv["inputs"], Json::parse(R"([{"role": "x", "tensor": "x"}, {"role": "w", "tensor": "w"}])"));
  EXPECT_EQ(conv["outputs"], Json::parse(R"([{"role": "y", "tensor": "conv_out"}])"));
  EXPECT_EQ(conv["attributes"], Json::parse(R"({"pre_padding": [1, 1], "post_padding": [1, 1], "stride": [1, 1],
                                                "dilation": [1, 1], "groups": 1})"));
  EXPECT_EQ(conv["reduction_length"], 8 * 3 * 3);  // C/groups * filter
  EXPECT_EQ(doc["nodes"][1]["op"], "bias_add");
  EXPECT_EQ(doc["nodes"][1]["kind"], "pointwise");
  EXPECT_EQ(doc["nodes"][1]["mode"], "bias_add");
  EXPECT_EQ(doc["nodes"][1]["inputs"][1]["role"], "b");
  EXPECT_EQ(doc["outputs"][0]["tensor"], "y");
  EXPECT_EQ(doc["outputs"][0]["reduction_length"], 72);
  EXPECT_EQ(doc["outputs"][0]["accumulation"]["nodes"], 3);
}

// Nodes come in Kiln's topological order, not the spec's; one stride given for two spatial dims is filled
// in for both, and padding defaults to 0.
TEST(NormalizedGraph, NodesInTopologicalOrderWithAttributesResolved) {
  const Json doc =
      normalized_text(R"({"io_dtype": "fp32", "tensors": {"x": {"dims": [1, 4, 9, 9]}, "w": {"dims": [8, 4, 3, 3]}},
    "nodes": [{"name": "act", "op": "gelu", "inputs": ["c"], "outputs": ["y"]},
              {"name": "conv", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["c"], "stride": 2}],
    "outputs": ["y"]})");
  EXPECT_EQ(node_names(doc), (std::vector<std::string>{"conv", "act"}));
  EXPECT_EQ(doc["nodes"][0]["attributes"]["stride"], Json({2, 2}));
  EXPECT_EQ(doc["nodes"][0]["attributes"]["pre_padding"], Json({0, 0}));
  EXPECT_EQ(doc["nodes"][0]["attributes"]["dilation"], Json({1, 1}));
  EXPECT_EQ(doc["nodes"][1]["op"], "gelu_erf");  // the canonical name, not the alias
  EXPECT_EQ(tensor(doc, "c")["dims"], Json({1, 8, 4, 4}));
  EXPECT_EQ(tensor(doc, "y")["dtype"], "fp32");
}

TEST(NormalizedGraph, MatmulBiasGelu) {
  const Json doc = normalized_file(ex("small/matmul_bias_gelu.json"));
  EXPECT_EQ(node_names(doc), (std::vector<std::string>{"mm", "add_bias", "gelu"}));
  EXPECT_EQ(doc["nodes"][0]["inputs"], Json::parse(R"([{"role": "a", "tensor": "a"}, {"role": "b", "tensor": "b"}])"));
  EXPECT_EQ(doc["nodes"][0]["outputs"][0]["role"], "c");
  EXPECT_EQ(doc["nodes"][0]["reduction_length"], 32);
  EXPECT_EQ(doc["nodes"][0]["attributes"], Json::object());
  EXPECT_EQ(tensor(doc, "mm_out")["dims"], Json({1, 16, 24}));
  EXPECT_EQ(tensor(doc, "mm_out")["strides"], Json({384, 24, 1}));
  EXPECT_EQ(tensor(doc, "mm_out")["dtype"], "fp32");
  EXPECT_EQ(tensor(doc, "a")["dtype"], "bf16");
  EXPECT_EQ(tensor(doc, "y")["dtype"], "bf16");
  EXPECT_EQ(doc["nodes"][2]["op"], "gelu_erf");
  EXPECT_EQ(doc["nodes"][2]["mode"], "gelu_erf");
  EXPECT_EQ(doc["outputs"][0]["reduction_length"], 32);
}

TEST(NormalizedGraph, LayerNormAndRmsNormFillEpsilonAndRanges) {
  Json doc = normalized_file(ex("small/layer_norm.json"));
  const Json& norm = doc["nodes"][0];
  EXPECT_EQ(norm["attributes"]["epsilon"], 1e-5);
  EXPECT_EQ(norm["inputs"][1], Json::parse(R"({"role": "scale", "tensor": "gamma"})"));
  EXPECT_EQ(norm["inputs"][2], Json::parse(R"({"role": "bias", "tensor": "beta"})"));
  EXPECT_EQ(norm["reduction_length"], 32);  // the row: every axis but the first
  EXPECT_EQ(tensor(doc, "gamma")["draw"], Json({{"lo", 0.5}, {"hi", 1.5}}));
  EXPECT_EQ(tensor(doc, "beta")["draw"], Json({{"lo", -0.5}, {"hi", 0.5}}));
  EXPECT_EQ(tensor(doc, "gamma")["dtype"], "fp32");
  EXPECT_EQ(tensor(doc, "x")["dims"][0], 16);
  EXPECT_EQ(tensor(doc, "x")["symbols"][0], "tokens");

  doc = normalized_text(R"({"tensors": {"x": {"dims": [4, 8]}, "g": {"dims": [1, 8]}},
    "nodes": [{"name": "rms", "op": "rms_norm", "inputs": ["x", "g"], "outputs": ["y"]}], "outputs": ["y"]})");
  EXPECT_EQ(doc["nodes"][0]["attributes"], Json({{"epsilon", 1e-5}}));  // the default, filled in
  EXPECT_EQ(doc["nodes"][0]["kind"], "rms_norm");
  EXPECT_EQ(tensor(doc, "g")["draw"], Json({{"lo", 0.5}, {"hi", 1.5}}));
}

// Reductions: negative axes resolved and sorted; no axes means every axis; the mode apart from the op name.
TEST(NormalizedGraph, ReductionAxesResolved) {
  Json doc = normalized_text(R"({"io_dtype": "fp32", "tensors": {"x": {"dims": [2, 3, 4]}},
    "nodes": [{"name": "s", "op": "reduce_sum", "inputs": ["x"], "outputs": ["y"], "axes": [-1, 0]}], "outputs": ["y"]})");
  EXPECT_EQ(doc["nodes"][0]["attributes"]["axes"], Json({0, 2}));
  EXPECT_EQ(doc["nodes"][0]["op"], "reduce_sum");
  EXPECT_EQ(doc["nodes"][0]["kind"], "reduction");
  EXPECT_EQ(doc["nodes"][0]["mode"], "sum");
  EXPECT_EQ(doc["nodes"][0]["reduction_length"], 8);
  EXPECT_EQ(tensor(doc, "y")["dims"], Json({1, 3, 1}));
  doc = normalized_file(ex("small/matmul_amax.json"));
  EXPECT_EQ(node_names(doc), (std::vector<std::string>{"mm", "amax"}));
  EXPECT_EQ(doc["nodes"][1]["attributes"]["axes"], Json({0, 1, 2}));
  EXPECT_EQ(doc["nodes"][1]["mode"], "amax");
  EXPECT_EQ(doc["outputs"].size(), 2u);
}

TEST(NormalizedGraph, SdpaScaleResolved) {
  Json doc = normalized_file(ex("small/sdpa_fwd.json"));
  EXPECT_EQ(doc["nodes"][0]["attributes"],
            Json::parse(R"({"causal": true, "attn_scale": 0.25, "attn_scale_given": true, "left_bound": null,
                            "right_bound": 0, "diagonal_shift": 0, "diagonal_alignment": "top_left",
                            "padding_mask": false, "paged_kv": false, "ragged": false, "keys": 32})"));
  EXPECT_EQ(doc["nodes"][0]["outputs"][0]["role"], "o");
  doc = normalized_text(R"({"io_dtype": "bf16", "tensors": {"q": {"dims": [1, 4, 8, 64]}, "k": {"dims": [1, 2, 8, 64]},
    "v": {"dims": [1, 2, 8, 64]}}, "nodes": [{"name": "a", "op": "sdpa", "inputs": ["q", "k", "v"], "outputs": ["o"]}],
    "outputs": ["o"]})");
  const Json& a = doc["nodes"][0]["attributes"];
  EXPECT_EQ(a["causal"], false);
  EXPECT_EQ(a["attn_scale"], 0.125);  // 1/sqrt(64)
  EXPECT_EQ(a["attn_scale_given"], false);
  EXPECT_EQ(tensor(doc, "o")["dims"], Json({1, 4, 8, 64}));
  EXPECT_EQ(doc["nodes"][0]["reduction_length"], 64);
}

// A by-value scalar has its value and no range; the tolerances are check_outputs' own, output by output,
// with magnitudes (bound) and without (legacy), with and without TF32.
TEST(NormalizedGraph, TolerancesAreCheckOutputs) {
  StatusOr<Graph> g = parse_spec_file(ex("small/fp8_recipe.json"));
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  const Json doc = normalized(*g);
  const Json& max = tensor(doc, "fp8_max");
  EXPECT_TRUE(max["by_value"]);
  EXPECT_EQ(max["value"], 448.0);
  EXPECT_EQ(max["dtype"], "fp32");
  EXPECT_FALSE(max.contains("draw"));
  std::vector<HostTensor> outs;
  for (int t : g->outputs) outs.push_back(HostTensor::zeros(g->dtype_of(t), g->tensors[t].shape()));
  for (bool tf32 : {false, true}) {
    CheckOptions o;
    o.allow_tf32 = tf32;
    ReferenceOutputs ref;
    ref.values = ref.magnitudes = outs;
    StatusOr<CheckReport> bound = check_outputs(*g, outs, ref, o);
    StatusOr<CheckReport> legacy = check_outputs(*g, outs, outs, o);
    ASSERT_TRUE(bound.is_ok() && legacy.is_ok());
    for (size_t i = 0; i < g->outputs.size(); ++i) {
      const Json& tol = doc["outputs"][i]["tolerance"];
      for (auto [name, report] : {std::pair{"bound", &*bound}, std::pair{"legacy", &*legacy}}) {
        const Tolerance& want = report->outputs[i].tolerance;
        const Json& got = tol[std::string(name) + (tf32 ? "_tf32" : "")];
        EXPECT_EQ(got["atol"], want.atol) << name << " " << i;
        EXPECT_EQ(got["rtol"], want.rtol) << name << " " << i;
        EXPECT_EQ(got["nmse_max"], want.nmse_max) << name << " " << i;
        EXPECT_EQ(got["rel_floor"], want.rel_floor) << name << " " << i;
        EXPECT_EQ(got["acc_coeff"], want.acc_coeff) << name << " " << i;
        EXPECT_EQ(got["acc_nmse_coeff"], want.acc_nmse_coeff) << name << " " << i;
      }
    }
  }
  // The scale behind the AMAX: rtol at least 2u of fp16 (the reduction's input), acc_coeff > 0 with magnitudes.
  const Json& scale = doc["outputs"][1];
  EXPECT_EQ(scale["tensor"], "scale");
  EXPECT_GE(scale["tolerance"]["bound"]["rtol"].get<double>(), 2 * std::ldexp(1.0, -11));
  EXPECT_GT(scale["tolerance"]["bound"]["acc_coeff"].get<double>(), 0.0);
  EXPECT_EQ(scale["tolerance"]["legacy"]["acc_coeff"], 0.0);
}

// `kiln validate --normalized`: the file is the library's document; "-" is stdout alone (OK on stderr).
TEST(NormalizedGraphCli, WritesTheDocument) {
  test::TempDir dir("kiln_normalized");
  const std::string out = dir.path() + "/g.json", spec = ex("small/matmul_bias_gelu.json");
  CliResult r = run_kiln("validate " + spec + " --normalized " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("OK   " + spec), std::string::npos) << r.out;
  EXPECT_EQ(Json::parse(test::file_text(out)), normalized_file(spec));
  r = run_kiln("validate " + spec + " --normalized -");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out), normalized_file(spec));
  EXPECT_NE(r.err.find("OK   " + spec), std::string::npos) << r.err;
}

// An existing file is refused without --force (exit 2, nothing changed); the spec itself never.
TEST(NormalizedGraphCli, ExistingFileNeedsForceAndTheSpecIsNeverWritten) {
  test::TempDir dir("kiln_normalized");
  const std::string out = dir.path() + "/g.json", spec = ex("small/rms_norm.json");
  std::ofstream(out) << "keep";
  CliResult r = run_kiln("validate " + spec + " --normalized " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("normalized graph " + out + " already exists (pass --force to write over it)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "") << "no OK line for a spec whose document is refused";
  EXPECT_EQ(test::file_text(out), "keep");
  r = run_kiln("validate " + spec + " --normalized " + out + " --force");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Json::parse(test::file_text(out))["nodes"][0]["op"], "rms_norm");
  const std::string copy = dir.path() + "/spec.json";
  std::ofstream(copy) << test::file_text(spec);
  r = run_kiln("validate " + copy + " --normalized " + copy + " --force");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("the spec this command reads (never written over"), std::string::npos) << r.err;
  EXPECT_EQ(test::file_text(copy), test::file_text(spec));
}

// A bad spec gets exactly `kiln validate`'s error and exit code, and no file; --normalized takes one spec.
TEST(NormalizedGraphCli, BadSpecKeepsValidatesErrorAndWritesNothing) {
  test::TempDir dir("kiln_normalized");
  const std::string bad = dir.path() + "/bad_rank.json", out = dir.path() + "/g.json";
  std::ofstream(bad) << R"({"tensors": {"x": {"dims": [2, 8, 9, 9]}, "w": {"dims": [16, 8, 3]}},
    "nodes": [{"name": "conv1", "op": "conv_fprop", "inputs": ["x", "w"], "outputs": ["y"]}], "outputs": ["y"]})";
  const CliResult plain = run_kiln("validate " + bad);
  CliResult r = run_kiln("validate " + bad + " --normalized " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.code, plain.code);
  EXPECT_EQ(r.err, plain.err);
  EXPECT_NE(r.err.find("node 'conv1' (conv_fprop): input 'w': rank 3, expected 4"), std::string::npos) << r.err;
  EXPECT_FALSE(std::ifstream(out).good());
  r = run_kiln("validate " + bad + " --normalized -");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  r = run_kiln("validate " + ex("small/rms_norm.json") + " " + ex("small/sdpa_fwd.json") + " --normalized " + out);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--normalized writes one spec's graph; got 2 specs"), std::string::npos) << r.err;
  EXPECT_FALSE(std::ifstream(out).good());
}

// A destination that cannot be written is refused before anything is (review, 2026-12-03): a missing folder
// is not made, a path through a file, an empty name, --force alone; a failed write to stdout is an error.
TEST(NormalizedGraphCli, UnwritableDestinationsAreRefusedWithWhatIsWrong) {
  test::TempDir dir("kiln_normalized");
  const std::string spec = std::string(KILN_SOURCE_DIR) + "/examples/small/matmul_bias_gelu.json";
  const std::string afile = dir.file("afile");
  std::ofstream(afile) << "x";
  struct Case {
    std::string args;
    int code;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {"--normalized " + dir.file("nofolder/g.json"), 2, "folder " + dir.file("nofolder") + " does not exist"},
           {"--normalized " + afile + "/g.json", 2, "a folder on its path is a file"},
           {"--normalized \"\"", 2, "names no file"},
           {"--force", 2, "--force requires --normalized"},
       }) {
    CliResult r = run_kiln("validate " + spec + " " + c.args);
    EXPECT_EQ(r.code, c.code) << c.args << ": " << r.output();
    EXPECT_NE(r.output().find(c.says), std::string::npos) << c.args << ": " << r.output();
    EXPECT_EQ(r.output().find("OK "), std::string::npos) << c.args << ": " << r.output();
  }
  struct stat st {};
  EXPECT_NE(::stat(dir.file("nofolder").c_str(), &st), 0);  // not made
  if (::stat("/dev/full", &st) == 0) {
    CliResult r = run_kiln("validate " + spec + " --normalized - > /dev/full");
    EXPECT_EQ(r.code, 3) << r.output();
    EXPECT_NE(r.output().find("cannot write the normalized graph to standard output"), std::string::npos) << r.output();
  }
}

}  // namespace
}  // namespace kiln
