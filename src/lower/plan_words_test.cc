// plan_failure_in_words: cuDNN Frontend's messages said in Kiln's words, the original kept in the trace.
#include "kiln/lower/plan_words.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

// The text cuDNN Frontend 1.23 returns when heuristics find nothing (plans.h), behind Kiln's context.
const char* kNoEngines =
    "querying cuDNN heuristics for graph 'conv_wgrad': No valid engine configs for ___\n"
    "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR: cudnnFinalize Failed CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING";

TEST(PlanWords, NoValidEngineConfigsNamesTheGraphAndTheReason) {
  Status in = not_supported(kNoEngines);
  in.add_trace("lg->build_heuristic() (cmd_compile.cc:1)");
  Status out = plan_failure_in_words(in, "conv_wgrad");
  EXPECT_EQ(out.code(), StatusCode::kNotSupported);
  EXPECT_EQ(out.message(),
            "cuDNN offers no engine configuration for graph 'conv_wgrad': the engines it has for this graph are "
            "compiled at run time, which needs the CUDA driver library, and there is none here (build this graph "
            "on a machine with a GPU)");
  EXPECT_NE(out.trace().find("lg->build_heuristic() (cmd_compile.cc:1)"), std::string::npos) << out.trace();
  EXPECT_NE(out.trace().find("cuDNN Frontend said: querying cuDNN heuristics"), std::string::npos) << out.trace();

  out = plan_failure_in_words(not_supported("querying cuDNN heuristics for graph 'g': No valid engine configs for _\n"),
                              "g");
  EXPECT_EQ(out.message(), "cuDNN offers no engine configuration for graph 'g': its heuristics returned none for this "
                           "graph on this device");

  // The engine coverage gap lowering names is kept, after the words.
  out = plan_failure_in_words(
      not_supported("querying cuDNN heuristics for graph 'g': No valid engine configs for _\n [engine coverage gap "
                    "reduction_output_not_fp32: node 'r' (reduce_sum) writes 'y' as fp16 ...]"),
      "g");
  EXPECT_EQ(out.message(), "cuDNN offers no engine configuration for graph 'g': its heuristics returned none for this "
                           "graph on this device [engine coverage gap reduction_output_not_fp32: node 'r' (reduce_sum) "
                           "writes 'y' as fp16 ...]");
}

TEST(PlanWords, ACallInTheFrontendsTextIsSaidInWords) {
  Status in = not_supported(
      "cuDNN Frontend rejected graph 'sdpa_fwd': cuda_get_device(&device) failed with CUDA driver version is "
      "insufficient for CUDA runtime version");
  Status out = plan_failure_in_words(in, "sdpa_fwd");
  EXPECT_EQ(out.code(), StatusCode::kNotSupported);
  EXPECT_EQ(out.message().rfind("cuDNN Frontend rejected graph 'sdpa_fwd': a CUDA query inside cuDNN Frontend failed: "
                                "CUDA driver version is insufficient for CUDA runtime version",
                                0),
            0u)
      << out.message();
  EXPECT_EQ(out.message().find('&'), std::string::npos) << out.message();
  EXPECT_EQ(out.message().find("cuda_get_device"), std::string::npos) << out.message();
}

TEST(PlanWords, OtherMessagesAreLeftAlone) {
  Status in = not_supported("creating engine configuration eng9999 for graph 'g': Invalid engine id.");
  EXPECT_EQ(plan_failure_in_words(in, "g").message(), in.message());
  EXPECT_TRUE(plan_failure_in_words(Status::ok(), "g").is_ok());
  // "failed with" without a call before it is words already.
  Status plain = not_supported("building failed with an error");
  EXPECT_EQ(plan_failure_in_words(plain, "g").message(), plain.message());
}

}  // namespace
}  // namespace kiln
