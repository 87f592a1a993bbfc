// `kiln tune` as a user runs it, where no GPU is needed: recorded inputs are checked before the GPU is
// touched (exit 2, naming the tensor and the file).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli_test_util.h"

namespace {

using kiln::test::CliResult;
using kiln::test::run_kiln;
using kiln::test::TempDir;

TEST(TuneCli, RecordedInputsAreCheckedBeforeTheGpu) {
  const std::string spec = std::string(KILN_SOURCE_DIR) + "/examples/small/layer_norm.json";
  CliResult r = run_kiln("tune " + spec + " --inputs /nonexistent/kiln_inputs");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--inputs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no file '/nonexistent/kiln_inputs/x.bin'"), std::string::npos) << r.err;
}

// --shapes FILE (kiln::Planner's recorder file): read and checked before the GPU is touched; a file that
// does not parse, or has no shape of any spec's structure, is exit 2 naming it.
TEST(TuneCli, RecordedShapesAreCheckedBeforeTheGpu) {
  const TempDir tmp("kiln_tune_shapes");
  const std::string& dir = tmp.path();
  const std::string spec = std::string(KILN_SOURCE_DIR) + "/examples/small/layer_norm.json";
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  CliResult r = run_kiln("tune " + spec + " --shapes " + dir + "/none.json");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("recorded-shapes file '" + dir + "/none.json' cannot be read"), std::string::npos) << r.err;
  const std::string bad = write(
      "bad.json", R"({"format":"kiln-shapes","version":1,"shapes":[{"structure":"12","shape_key":"","count":1}]})");
  r = run_kiln("tune " + spec + " --shapes " + bad);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("shapes[0]: \"structure\" '12' is not 32 lowercase hex digits"), std::string::npos) << r.err;
  const std::string other = write(
      "other.json",
      R"({"format":"kiln-shapes","version":1,"shapes":[{"structure":"0123456789abcdef0123456789abcdef","shape_key":"tokens=5","count":1}]})");
  r = run_kiln("tune " + spec + " --shapes " + other);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("no recorded shape has the structure of any spec given"), std::string::npos) << r.err;
  r = run_kiln("tune " + spec + " --shapes " + other + " --buckets tokens=cubes");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--buckets: bucket policy: 'tokens': unknown bucket rule 'cubes'"), std::string::npos) << r.err;
  r = run_kiln("tune " + spec + " --hottest 3");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("give --shapes"), std::string::npos) << r.err;
}

// kiln stats: a recorded-shapes file's summary, hottest first; a damaged file is exit 2 naming it.
// A tune refused for bad input, or for want of a GPU, creates no store; numbers that mean nothing are
// refused naming their flag; a store path that is not a regular file is refused.
TEST(TuneCli, RefusedRunsLeaveNoStoreAndBadNumbersNameTheirFlag) {
  const TempDir tmp("kiln_tune_refused");
  const std::string& dir = tmp.path();
  const std::string spec = std::string(KILN_SOURCE_DIR) + "/examples/small/layer_norm.json";
  const std::string db = dir + "/new.db";
  CliResult r = run_kiln("tune " + dir + "/missing.json --store " + db);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(::access(db.c_str(), F_OK), 0) << "a store was created by a refused run";
  struct Bad {
    std::string flags, message;
  };
  // Checked while the command line is read (before any GPU check): "--flag: must be ..., got 'value'".
  for (const Bad& b : {Bad{"--budget -1", "--budget: must be a number >= 0, got '-1'"},
                       Bad{"--budget nan", "--budget: must be a number >= 0, got 'nan'"},
                       Bad{"--candidate-budget-ms 0", "--candidate-budget-ms: must be a number > 0, got '0'"},
                       Bad{"--target-noise -0.5", "--target-noise: must be a number >= 0, got '-0.5'"},
                       Bad{"--top-k -3", "--top-k: must be a whole number >= 0, got '-3'"},
                       Bad{"--compile-first 0", "--compile-first: must be a whole number >= 1, got '0'"},
                       Bad{"--compile-patience -1", "--compile-patience: must be a whole number >= 1, got '-1'"},
                       Bad{"--build-helpers 65", "--build-helpers: must be a whole number in -1..64"},
                       Bad{"--build-helpers -2", "--build-helpers: must be a whole number in -1..64"},
                       Bad{"--build-helpers 1.5", "--build-helpers: must be a whole number in -1..64"}}) {
    r = run_kiln("tune " + spec + " " + b.flags + " --store " + db);
    EXPECT_EQ(r.code, 2) << b.flags << ": " << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << b.flags << ": " << r.err;
  }
  EXPECT_NE(::access(db.c_str(), F_OK), 0) << "a store was created by a refused run";
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = run_kiln("tune " + spec + " --store " + fifo);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("is not a regular file"), std::string::npos) << r.err;
  // A store path that cannot be reached, or whose folder is a file, is bad input (exit 2) before the GPU is asked.
  const std::string loop = dir + "/loop";
  ASSERT_EQ(::symlink(loop.c_str(), loop.c_str()), 0);
  r = run_kiln("tune " + spec + " --store " + loop);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("plan store '" + loop + "' cannot be reached: Too many levels of symbolic links"),
            std::string::npos)
      << r.err;
  const std::string file = dir + "/afile";
  std::ofstream(file) << "x";
  r = run_kiln("tune " + spec + " --store " + file + "/x.db");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(::access((file + "/x.db").c_str(), F_OK), -1);
  r = run_kiln("run " + spec + " --store " + loop);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("cannot be reached"), std::string::npos) << r.err;
  r = run_kiln("tune " + spec + " --store " + db);
  if (r.code == 3) {
    EXPECT_NE(::access(db.c_str(), F_OK), 0) << "no GPU, yet a store was created";
  }
}

TEST(StatsCli, RecordedShapesSummaryHottestFirst) {
  const TempDir tmp("kiln_stats");
  const std::string& dir = tmp.path();
  const std::string file = dir + "/shapes.json";
  std::ofstream(file) << R"({"format":"kiln-shapes","version":1,"shapes":[
    {"structure":"0123456789abcdef0123456789abcdef","shape_key":"tokens=7","graph":"mlp","count":3,"sources":{"memory":3}},
    {"structure":"0123456789abcdef0123456789abcdef","shape_key":"tokens=100","graph":"mlp","count":50,"sources":{"memory":49,"heuristics":1}},
    {"structure":"0123456789abcdef0123456789abcdef","shape_key":"tokens=300","graph":"mlp","count":2,"sources":{"dynamic":1,"memory":1}}]})";
  const CliResult run = run_kiln("stats " + file + " --buckets tokens=pow2");
  ASSERT_NE(run.code, -1);
  EXPECT_EQ(run.code, 0) << run.err;
  const std::string& text = run.out;
  EXPECT_NE(text.find("3 shapes of 1 structures, 55 calls (dynamic 1, heuristics 1, memory 53)"), std::string::npos)
      << text;
  const size_t hot = text.find("tokens=100"), cold = text.find("tokens=7");
  ASSERT_NE(hot, std::string::npos) << text;
  ASSERT_NE(cold, std::string::npos) << text;
  EXPECT_LT(hot, cold) << text;  // hottest first
  EXPECT_NE(text.find("tokens=65-128"), std::string::npos) << text;
  // A shape served by a dynamic-shape stopgap is a stopgap (a candidate for offline tuning).
  const size_t line = text.find("tokens=300");
  ASSERT_NE(line, std::string::npos) << text;
  EXPECT_NE(text.substr(line, text.find('\n', line) - line).find("yes"), std::string::npos) << text;
  std::ofstream(dir + "/bad.json") << "{\"format\":\"kiln-shapes\",\"version\":1,\"shapes\":{}}";
  CliResult r = run_kiln("stats " + dir + "/bad.json");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("\"shapes\" is not a list"), std::string::npos) << r.err;
}

// A shape a padded stopgap served is a stopgap too; source names reach the terminal without control
// characters (found by a new-user review: an ESC in a source name was printed raw).
TEST(StatsCli, PaddedIsAStopgapAndSourceNamesArePrintable) {
  const TempDir tmp("kiln_stats_padded");
  const std::string& dir = tmp.path();
  const std::string file = dir + "/shapes.json";
  std::ofstream(file) << R"({"format":"kiln-shapes","version":1,"shapes":[
    {"structure":"0123456789abcdef0123456789abcdef","shape_key":"tokens=100","graph":"mlp","count":5,"sources":{"memory":4,"padded":1}},
    {"structure":"0123456789abcdef0123456789abcdef","shape_key":"tokens=128","graph":"mlp","count":2,"sources":{"pad\u001b[2Jded":2}}]})";
  const CliResult run = run_kiln("stats " + file);
  ASSERT_NE(run.code, -1);
  EXPECT_EQ(run.code, 0) << run.err;
  const std::string& text = run.out;
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_NE(text.find("pad\\x1b[2Jded 2"), std::string::npos) << text;  // escaped as kiln::printable does
  const size_t line = text.find("tokens=100");
  ASSERT_NE(line, std::string::npos) << text;
  EXPECT_NE(text.substr(line, text.find('\n', line) - line).find("yes"), std::string::npos) << text;
}

// kiln replay: the whole trace is checked before the GPU is touched (exit 2 naming the request), and
// without a GPU the Planner says so (exit 3).
TEST(ReplayCli, TraceIsCheckedBeforeTheGpu) {
  const TempDir tmp("kiln_replay");
  const std::string& dir = tmp.path();
  std::filesystem::copy_file(std::string(KILN_SOURCE_DIR) + "/examples/small/layer_norm.json", dir + "/ln.json");
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  auto trace = [&](const std::string& name, const std::string& requests) {
    std::ofstream(dir + "/" + name) << R"({"format":"kiln-trace","version":1,"requests":)" + requests + "}";
    return dir + "/" + name;
  };
  struct Bad {
    std::string requests, message;
  };
  for (const Bad& b :
       {Bad{"[]", "\"requests\" is missing, not a list, or empty"},
        Bad{R"([{"shape":{}}])", "requests[0]: \"spec\" is missing or not a string"},
        Bad{R"([{"spec":"ln.json","shape":{"batch":2}}])",
            "requests[0]: graph 'layer_norm_small' has no dynamic dim 'batch'"},
        Bad{R"([{"spec":"ln.json","shape":{"tokens":0}}])", "shape \"tokens\" is not an integer from 1 to 2147483647"},
        // An empty shape is not the spec's own (that is "shape" left out): refused (found by review).
        Bad{R"([{"spec":"ln.json","shape":{}}])", "requests[0]: shape must name every dynamic dim"},
        // A spec that is a pipe would block the read forever: refused before it is opened (found by review).
        Bad{R"([{"spec":"fifo"}])", "requests[0]: spec '" + dir + "/fifo' is not a regular file"},
        Bad{R"([{"spec":"ln.json"},{"spec":"ln.json","count":9223372036854775807}])", "more than 10000000 requests"},
        Bad{R"([{"spec":""}])", "requests[0]: \"spec\" is empty"},
        Bad{R"([{"spec":"ln.json","count":-1}])", "\"count\" is not an integer >= 1"},
        Bad{R"([{"spec":"ln.json"},{"spec":"missing.json"}])", "requests[1]: " + dir + "/missing.json"},
        Bad{R"([{"spec":"ln.json"},{"wait":"builds"}])",
            "requests[1]: unknown barrier \"builds\": a barrier is {\"wait\": \"promotions\"} or {\"wait\": "
            "\"notices\", \"count\": N, \"timeout_s\": T}"},
        Bad{R"([{"wait":"promotions","spec":"ln.json"}])", "requests[0]: a barrier is {\"wait\": \"promotions\"}"},
        Bad{R"([{"spec":"ln.json","shapes":{"tokens":3}}])",
            "requests[0]: unknown field \"shapes\" (a request has \"spec\", \"shape\" and \"count\")"},
        Bad{R"([{"wait":"promotions"}])", "no request names a spec (only barriers)"},
        Bad{R"([{"spec":"ln.json"},{"wait":"notices","count":2}])",
            "a {\"wait\": \"notices\"} barrier needs a PostgreSQL --store"}}) {
    CliResult r = run_kiln("replay " + trace("t.json", b.requests));
    EXPECT_EQ(r.code, 2) << b.requests << ": " << r.err;
    EXPECT_NE(r.err.find(b.message), std::string::npos) << b.requests << ": " << r.err;
  }
  // A bucket policy for a dim no traced graph has is refused before the GPU (found by review).
  CliResult bk = run_kiln("replay " + trace("okb.json", R"([{"spec":"ln.json"}])") + " --buckets 'tokns=pow2'");
  EXPECT_EQ(bk.code, 2) << bk.err;
  EXPECT_NE(bk.err.find("--buckets: no graph of the trace has a dynamic dim 'tokns'"), std::string::npos) << bk.err;
  // A misspelt top-level field is refused, as a request's is (found by review).
  std::ofstream(dir + "/extra.json") << R"({"format":"kiln-trace","version":1,"requests":[{"spec":"ln.json"}],"x":1})";
  CliResult x = run_kiln("replay " + dir + "/extra.json");
  EXPECT_EQ(x.code, 2) << x.err;
  EXPECT_NE(x.err.find("unknown field \"x\" (a trace has"), std::string::npos) << x.err;
  // --save-kernel-caches creates the store: a folder that is not there is said before the GPU.
  x = run_kiln("replay " + trace("ok0.json", R"([{"spec":"ln.json"}])") + " --store " + dir +
               "/nodir/s.db --save-kernel-caches");
  EXPECT_EQ(x.code, 2) << x.err;
  EXPECT_NE(x.err.find("--store: folder " + dir + "/nodir does not exist"), std::string::npos) << x.err;
  x = run_kiln("replay " + dir + "/ok0.json --save-kernel-caches");  // nowhere to keep them
  EXPECT_EQ(x.code, 2) << x.err;
  EXPECT_NE(x.err.find("give --store too"), std::string::npos) << x.err;
  std::ofstream(dir + "/fmt.json") << R"({"format":5,"version":1,"requests":[{"spec":"ln.json"}]})";
  CliResult f = run_kiln("replay " + dir + "/fmt.json");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("not a trace (\"format\" is not \"kiln-trace\")"), std::string::npos) << f.err;
  const std::string ok = trace("ok.json", R"([{"spec":"ln.json","shape":{"tokens":100},"count":3}])");
  // --record-shapes never writes over the command's own inputs, --force or not; its folder must exist.
  f = run_kiln("replay " + ok + " --record-shapes " + dir + "/ln.json --force");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("a file this command reads"), std::string::npos) << f.err;
  f = run_kiln("replay " + ok + " --new-shapes later");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("--new-shapes must be 'stopgap' or 'build-now', got 'later'"), std::string::npos) << f.err;
  f = run_kiln("replay " + ok + " --record-shapes " + dir + "/nodir/out.json");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("--record-shapes: folder " + dir + "/nodir does not exist"), std::string::npos) << f.err;
  f = run_kiln("replay " + ok + " --record-shapes " + dir + "/ln.json/out.json");  // a file, not a folder
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("--record-shapes: " + dir + "/ln.json is not a folder"), std::string::npos) << f.err;
  // --warm without --preload is a usage error, said before the GPU is looked for.
  f = run_kiln("replay " + ok + " --warm");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("--warm warms what --preload loads"), std::string::npos) << f.err;
  // Promotions by tuning: the mode is one of two, its bounds are checked and need it.
  f = run_kiln("replay " + ok + " --promote-by guess");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("--promote-by must be 'build' or 'tune', got 'guess'"), std::string::npos) << f.err;
  f = run_kiln("replay " + ok + " --tune-top-k 4");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("bound the tunes of --promote-by tune: give it too"), std::string::npos) << f.err;
  f = run_kiln("replay " + ok + " --promote-by tune --tune-budget nan");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("--tune-budget must be 0..3600 seconds"), std::string::npos) << f.err;
  f = run_kiln("replay " + ok + " --promote-by tune --no-promote");  // nothing would be tuned
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("--promote-by tune tunes what replaces a stopgap"), std::string::npos) << f.err;
  f = run_kiln("replay " + ok + " --promote-by tune --new-shapes build-now");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("--promote-by tune tunes what replaces a stopgap"), std::string::npos) << f.err;
  f = run_kiln("replay " + ok + " --promote-by tune --tune-top-k -3");
  EXPECT_EQ(f.code, 2) << f.err;
  EXPECT_NE(f.err.find("--tune-top-k must be 0..10000"), std::string::npos) << f.err;
  CliResult r = run_kiln("replay " + ok);
  if (r.code != 0) {  // no GPU here: the Planner says so
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_NE(r.err.find("kiln::Planner needs a GPU"), std::string::npos) << r.err;
  }
}

}  // namespace
