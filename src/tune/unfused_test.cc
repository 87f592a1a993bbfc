// Host tier: the fused-vs-unfused report and the unfused side, from synthetic results (no GPU).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kiln/tune/unfused.h"

namespace kiln {
namespace {

CandidateResult timed(int64_t engine, double ms, double rel = 0.002) {
  CandidateResult c;
  c.config.engine_id = engine;
  c.disposition = Disposition::kPassed;
  c.median_ms = c.min_ms = c.max_ms = ms;
  c.rel_error = rel;
  c.samples = 10;
  return c;
}

UnfusedResult two_parts(double chain_ms) {
  UnfusedResult u;
  u.materialized = DataType::kBFloat16;
  u.reference_kind = ReferenceKind::kHost;
  for (int i = 0; i < 2; ++i) {
    UnfusedPartResult p;
    p.name = "g/n" + std::to_string(i);
    p.tune.candidates = {timed(10 + i, 0.1 * (i + 1))};
    p.tune.winner = 0;
    u.identities.push_back(p.tune.candidates[0].identity());
    u.sum_of_parts_ms += p.tune.candidates[0].median_ms;
    u.parts.push_back(p);
  }
  u.chain = timed(-1, chain_ms);
  u.intermediate_bytes = 2.0 * 1024 * 1024;
  return u;
}

TEST(UnfusedReport, FusedFasterIsChosenAndBothSidesAreShown) {
  CandidateResult fused = timed(4, 0.2);
  UnfusedResult u = two_parts(0.35);
  auto d = decide_fusion(fused_side(fused), unfused_chain_side(u), FusionPolicy::kFaster);
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(d->use_fused);
  std::string text = format_fusion_report(&fused, u, FusionPolicy::kFaster, d);
  EXPECT_NE(text.find("2 parts, intermediates stored as bf16, policy faster"), std::string::npos) << text;
  EXPECT_NE(text.find("fused     eng4  0.2000 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("eng10 + eng11  0.3500 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("parts alone sum to 0.3000 ms; 2.0 MiB through memory"), std::string::npos) << text;
  EXPECT_NE(text.find("part g/n1: eng11"), std::string::npos) << text;
  EXPECT_NE(text.find("decision: fused eng4"), std::string::npos) << text;
  nlohmann::json j = fusion_report_json(&fused, u, FusionPolicy::kFaster, d);
  EXPECT_EQ(j["decision"], "fused");
  EXPECT_EQ(j["unfused"]["identities"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["sum_of_parts_ms"].get<double>(), 0.3);
  EXPECT_EQ(j["parts"][1]["winner"]["identity"], "eng11");
}

TEST(UnfusedReport, UnfusedFasterWinsUnderTheDefaultPolicyAndNotUnderAlwaysFused) {
  CandidateResult fused = timed(4, 0.5);
  UnfusedResult u = two_parts(0.3);
  auto faster = decide_fusion(fused_side(fused), unfused_chain_side(u), FusionPolicy::kFaster);
  ASSERT_TRUE(faster.is_ok());
  EXPECT_FALSE(faster->use_fused);
  EXPECT_NE(format_fusion_report(&fused, u, FusionPolicy::kFaster, faster).find("decision: unfused eng10 + eng11"),
            std::string::npos);
  auto pinned = decide_fusion(fused_side(fused), unfused_chain_side(u), FusionPolicy::kAlwaysFused);
  ASSERT_TRUE(pinned.is_ok());
  EXPECT_TRUE(pinned->use_fused);
}

TEST(UnfusedReport, IncorrectOrUnavailableChainIsNeverChosen) {
  CandidateResult fused = timed(4, 0.5);
  UnfusedResult wrong = two_parts(0.1);
  wrong.chain.disposition = Disposition::kIncorrect;
  wrong.chain.message = "unfused chain: y: Incorrect";
  EXPECT_FALSE(unfused_chain_side(wrong).available);
  auto d = decide_fusion(fused_side(fused), unfused_chain_side(wrong), FusionPolicy::kFaster);
  ASSERT_TRUE(d.is_ok());
  EXPECT_TRUE(d->use_fused);
  EXPECT_NE(format_fusion_report(&fused, wrong, FusionPolicy::kFaster, d).find("unfused chain: y: Incorrect"),
            std::string::npos);

  UnfusedResult missing = two_parts(0.1);
  missing.unavailable = "part 'g/n1': no correct, timed plan";
  EXPECT_FALSE(unfused_chain_side(missing).available);
  auto forced = decide_fusion(fused_side(fused), unfused_chain_side(missing), FusionPolicy::kAlwaysUnfused);
  EXPECT_FALSE(forced.is_ok());
  std::string text = format_fusion_report(&fused, missing, FusionPolicy::kAlwaysUnfused, forced);
  EXPECT_NE(text.find("unfused   unavailable: part 'g/n1'"), std::string::npos) << text;
  EXPECT_NE(text.find("decision: none: policy always_unfused"), std::string::npos) << text;
}

TEST(UnfusedReport, NotVerifiedChainCountsOnlyWithoutAReference) {
  UnfusedResult u = two_parts(0.3);
  u.chain.disposition = Disposition::kNotVerified;
  u.reference_kind = ReferenceKind::kHost;
  EXPECT_FALSE(unfused_chain_side(u).available);
  u.reference_kind = ReferenceKind::kNone;
  EXPECT_TRUE(unfused_chain_side(u).available);
}

TEST(UnfusedReport, ThrottledTimingsAreMarked) {
  CandidateResult fused = timed(4, 0.2);
  fused.throttled = true;
  UnfusedResult u = two_parts(0.35);
  auto d = decide_fusion(fused_side(fused), unfused_chain_side(u), FusionPolicy::kFaster);
  EXPECT_NE(format_fusion_report(&fused, u, FusionPolicy::kFaster, d).find("0.2000 ms ±0.20% THROTTLED"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
