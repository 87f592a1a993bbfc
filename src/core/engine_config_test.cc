// EngineConfig, plan_identity and the knobs' text forms (kiln/core/engine_config.h).
#include "kiln/core/engine_config.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(EngineConfig, IdentityRoundTrips) {
  auto c = EngineConfig::parse("eng12_k2=1_k3=0");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->engine_id, 12);
  EXPECT_EQ(c->knobs.at("k2"), 1);
  EXPECT_EQ(c->knobs.at("k3"), 0);
  EXPECT_EQ(c->identity(), "eng12_k2=1_k3=0");
  auto bare = EngineConfig::parse("eng0");
  ASSERT_TRUE(bare.is_ok());
  EXPECT_TRUE(bare->knobs.empty());
}

TEST(EngineConfig, BadIdentityNamesThePart) {
  auto a = EngineConfig::parse("engine7");
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("'engine7'"), std::string::npos);
  auto b = EngineConfig::parse("eng7_kx=1");
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("kx=1"), std::string::npos) << b.status().message();
  auto c = EngineConfig::parse("eng7_k2=");
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("k2="), std::string::npos);
}

// Regression: EngineConfig::parse read `*end` through a pointer into a destroyed `substr` temporary
// (stack-use-after-scope under AddressSanitizer; the sanitizer host tier in scripts/test.sh catches it).
// Long knob texts (past the small-string buffer) and a bad character right at the end are the cases where
// the freed bytes decide the answer.
TEST(EngineConfigRegression, KnobParsingReadsNoDestroyedTemporary) {
  auto long_knobs = EngineConfig::parse("eng12_k0000000000000000000000002=0000000000000000000000001_k3=-42");
  ASSERT_TRUE(long_knobs.is_ok()) << long_knobs.status().to_string();
  EXPECT_EQ(long_knobs->knobs.at("k2"), 1);
  EXPECT_EQ(long_knobs->knobs.at("k3"), -42);
  for (const char* bad : {"eng12_k2=1x", "eng12_k2x=1", "eng12_k2=0000000000000000000000001x",
                          "eng12_k0000000000000000000000002x=1", "eng12_k2= 1 "}) {
    auto c = EngineConfig::parse(bad);
    ASSERT_FALSE(c.is_ok()) << bad << " parsed as " << c->identity();
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

// The identity text is the one cuDNN's engine tags use: kN knobs by N (k13 after k2), any other name last.
TEST(EngineConfig, IdentityOrdersKnobTypesNumerically) {
  EngineConfig c{41, {{"k13", 0}, {"k2", 4}}};
  EXPECT_EQ(c.identity(), "eng41_k2=4_k13=0");
  EXPECT_EQ(c.identity(), plan_identity(41, c.knobs));
  EXPECT_EQ(plan_identity(7, {{"TILE", 2}, {"k3", 1}}), "eng7_k3=1_TILE=2");
  auto back = EngineConfig::parse(c.identity());
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, c);
  auto padded = EngineConfig::parse("eng41_k02=4_k13=0");  // a knob type is a number: k02 is k2
  ASSERT_TRUE(padded.is_ok());
  EXPECT_EQ(*padded, c);
  EXPECT_FALSE(EngineConfig::parse("eng41_k-2=4").is_ok());
}

TEST(EngineConfig, KnobTypeOfNamesTheKnob) {
  EXPECT_EQ(*knob_type_of("k2"), 2);
  EXPECT_EQ(*knob_type_of("k13"), 13);
  for (const char* bad : {"k", "kx", "k-1", "TILE_SIZE", "k2x", "k99999999999"}) {
    auto t = knob_type_of(bad);
    ASSERT_FALSE(t.is_ok()) << bad;
    EXPECT_NE(t.status().message().find(std::string("'") + bad + "'"), std::string::npos) << t.status().message();
  }
}

TEST(Knobs, TextRoundTripsAndRefusesWhatIsNotCanonical) {
  Knobs k{{"k2", 1}, {"k13", -3}};
  EXPECT_EQ(knobs_to_text(k), "k13=-3;k2=1");
  EXPECT_EQ(*knobs_from_text(knobs_to_text(k)), k);
  EXPECT_TRUE(knobs_from_text("")->empty());
  for (const char* bad : {"k2", "=1", "k2=1;", "k2=1;k2=2", "k2=x"}) EXPECT_FALSE(knobs_from_text(bad).is_ok()) << bad;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(EngineConfig, OutOfRangeNumbersAreRefusedNotWrapped) {
  for (const char* text :
       {"eng99999999999999999999", "eng12_k99999999999999999999=1", "eng12_k2=99999999999999999999", "eng12_k=1"}) {
    auto c = EngineConfig::parse(text);
    ASSERT_FALSE(c.is_ok()) << text;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(c.status().message().find(text), std::string::npos) << c.status().message();
  }
}

// cuBLASLt's algorithms (kCublasLtEngineBase): "blt<N>" and named knobs, round-tripping through the same type.
TEST(EngineConfig, CublasLtIdentityRoundTrips) {
  auto c = EngineConfig::parse("blt66_tile=18_stages=35_splitk=1_cluster=2");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(is_cublaslt_engine(c->engine_id));
  EXPECT_EQ(c->engine_id, kCublasLtEngineBase + 66);
  EXPECT_EQ(c->knobs.at("tile"), 18);
  EXPECT_EQ(c->identity(), "blt66_cluster=2_splitk=1_stages=35_tile=18");  // names in order
  auto back = EngineConfig::parse(c->identity());
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(*back, *c);
  EXPECT_FALSE(is_cublaslt_engine(EngineConfig::parse("eng12_k2=1")->engine_id));
  EXPECT_EQ(EngineConfig::parse("blt0")->identity(), "blt0");
  auto k = EngineConfig::parse("knl1_threads=256_blocks=4");  // Kiln's own kernels: the same form
  ASSERT_TRUE(k.is_ok()) << k.status().to_string();
  EXPECT_TRUE(is_kiln_kernel_engine(k->engine_id));
  EXPECT_FALSE(is_cublaslt_engine(k->engine_id));
  EXPECT_EQ(k->identity(), "knl1_blocks=4_threads=256");
  EXPECT_EQ(EngineConfig::parse("blt1048575")->identity(), "blt1048575");  // the last cuBLASLt id is still one
  EXPECT_TRUE(is_cublaslt_engine(EngineConfig::parse("blt1048575")->engine_id));
}

TEST(EngineConfig, BadCublasLtIdentityNamesThePart) {
  for (const char* bad : {"blt",
                          "bltx",
                          "blt-1",
                          "blt66_Tile=1",
                          "blt66_tile",
                          "blt66_tile=",
                          "blt66_tile=1x",
                          "blt66_tile=1_tile=2",
                          "blt66_k2=1",
                          "blt99999999999",
                          "blt1048576",
                          "eng1048576",
                          "eng1048600_k2=1",
                          "eng2097152",
                          "knl",
                          "knl1_Threads=2",
                          "knl1048576",
                          "blt066",
                          "blt+66",
                          "blt 66",
                          "blt66_tile=+18",
                          "blt66_tile= 18",
                          "blt66_",
                          "knl1_threads=0256"}) {
    auto c = EngineConfig::parse(bad);
    ASSERT_FALSE(c.is_ok()) << bad << " parsed as " << c->identity();
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(c.status().message().find(std::string("'") + bad + "'"), std::string::npos) << c.status().message();
  }
}

}  // namespace
}  // namespace kiln
