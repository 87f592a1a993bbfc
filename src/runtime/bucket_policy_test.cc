// The bucket policy (kiln/runtime/bucket_policy.h, docs/runtime.md "Buckets"): its text form, each rule's
// buckets and representatives, and the errors for policies that cannot be meant.
#include <gtest/gtest.h>

#include "kiln/runtime/bucket_policy.h"

namespace kiln {
namespace {

Bucket bucket(const BucketPolicy& p, const std::string& sym, int64_t v) {
  auto b = p.bucket_of(sym, v);
  EXPECT_TRUE(b.is_ok()) << b.status().to_string();
  return b.is_ok() ? *b : Bucket{};
}

TEST(BucketPolicy, ExactIsTheDefault) {
  BucketPolicy p;
  const Bucket b = bucket(p, "batch", 24);
  EXPECT_EQ(b.lo, 24);
  EXPECT_EQ(b.hi, 24);
  EXPECT_EQ(b.representative, 24);
  EXPECT_FALSE(p.same_bucket({{"batch", 24}}, {{"batch", 25}}));
  EXPECT_EQ(p.bucket_key({{"batch", 24}}), "batch=24");
}

TEST(BucketPolicy, PowersOfTwo) {
  auto p = BucketPolicy::parse("batch=pow2");
  ASSERT_TRUE(p.is_ok());
  struct Want {
    int64_t v, lo, hi;
  };
  for (const Want& w : {Want{1, 1, 1}, Want{2, 2, 2}, Want{3, 3, 4}, Want{4, 3, 4}, Want{5, 5, 8}, Want{8, 5, 8},
                        Want{9, 9, 16}, Want{1000, 513, 1024}, Want{1024, 513, 1024}, Want{1025, 1025, 2048}}) {
    const Bucket b = bucket(*p, "batch", w.v);
    EXPECT_EQ(b.lo, w.lo) << w.v;
    EXPECT_EQ(b.hi, w.hi) << w.v;
    EXPECT_EQ(b.representative, w.hi) << w.v;
    EXPECT_TRUE(b.contains(w.v));
  }
  EXPECT_TRUE(p->same_bucket({{"batch", 5}}, {{"batch", 8}}));
  EXPECT_FALSE(p->same_bucket({{"batch", 4}}, {{"batch", 5}}));
  EXPECT_EQ(p->representative({{"batch", 100}}), (std::map<std::string, int64_t>{{"batch", 128}}));
  EXPECT_EQ(p->bucket_key({{"batch", 100}}), "batch=65-128");
  // A symbol without a rule of its own takes the default (exact here).
  EXPECT_EQ(bucket(*p, "seq", 100).hi, 100);
}

TEST(BucketPolicy, RangesAndTheDefaultRule) {
  auto p = BucketPolicy::parse(" seq = ranges:65-512, 1-64 ; *=pow2 ");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->rule_for("seq").text(), "ranges:1-64,65-512");  // sorted
  EXPECT_EQ(bucket(*p, "seq", 1).hi, 64);
  EXPECT_EQ(bucket(*p, "seq", 64).representative, 64);
  EXPECT_EQ(bucket(*p, "seq", 65).lo, 65);
  EXPECT_EQ(bucket(*p, "seq", 300).representative, 512);
  // Outside every range: its own bucket.
  const Bucket out = bucket(*p, "seq", 600);
  EXPECT_EQ(out.lo, 600);
  EXPECT_EQ(out.hi, 600);
  // Another symbol: the default, pow2.
  EXPECT_EQ(bucket(*p, "batch", 3).hi, 4);
  // Two dims: one bucket only when both share theirs.
  EXPECT_TRUE(p->same_bucket({{"batch", 3}, {"seq", 100}}, {{"batch", 4}, {"seq", 500}}));
  EXPECT_FALSE(p->same_bucket({{"batch", 3}, {"seq", 100}}, {{"batch", 5}, {"seq", 100}}));
  EXPECT_FALSE(p->same_bucket({{"batch", 3}}, {{"batch", 3}, {"seq", 1}}));
  EXPECT_EQ(p->text(), "seq=ranges:1-64,65-512;*=pow2");
  auto again = BucketPolicy::parse(p->text());
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->text(), p->text());
}

// A range holds both its ends; two ranges that share an end overlap (the value would have two buckets).
TEST(BucketPolicy, RangeEndsAreInclusiveAndRangesMayNotShareOne) {
  auto p = BucketPolicy::parse("seq=ranges:1-64,65-512");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  for (int64_t v : {1, 64}) {
    const Bucket b = bucket(*p, "seq", v);
    EXPECT_EQ(b.lo, 1) << v;
    EXPECT_EQ(b.hi, 64) << v;
  }
  for (int64_t v : {65, 512}) {
    const Bucket b = bucket(*p, "seq", v);
    EXPECT_EQ(b.lo, 65) << v;
    EXPECT_EQ(b.hi, 512) << v;
  }
  EXPECT_TRUE(p->same_bucket({{"seq", 1}}, {{"seq", 64}}));
  EXPECT_FALSE(p->same_bucket({{"seq", 64}}, {{"seq", 65}}));
  auto shared = BucketPolicy::parse("seq=ranges:1-64,64-128");
  ASSERT_FALSE(shared.is_ok());
  EXPECT_NE(shared.status().message().find("ranges 1-64 and 64-128 overlap"), std::string::npos)
      << shared.status().to_string();
}

TEST(BucketPolicy, BadPoliciesAreRefusedNamingThePart) {
  struct Bad {
    const char* text;
    const char* message;
  };
  for (const Bad& b :
       {Bad{"batch=squares", "'batch': unknown bucket rule 'squares'"}, Bad{"batch", "'batch' is not SYMBOL=RULE"},
        Bad{"=pow2", "'=pow2' is not SYMBOL=RULE"}, Bad{"batch=pow2;batch=exact", "'batch' is given twice"},
        Bad{"seq=ranges:1-64,60-128", "ranges 1-64 and 60-128 overlap"},
        Bad{"seq=ranges:64-1", "range '64-1' is empty"},
        Bad{"seq=ranges:0-8", "range '0-8' is not A-B with integers 1 <= A <= B"},
        Bad{"seq=ranges:a-b", "range 'a-b' is not A-B"}, Bad{"seq=ranges:", "range '' is not A-B"}}) {
    auto p = BucketPolicy::parse(b.text);
    ASSERT_FALSE(p.is_ok()) << b.text;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find(b.message), std::string::npos) << b.text << ": " << p.status().to_string();
  }
  BucketPolicy p;
  auto z = p.bucket_of("batch", 0);
  ASSERT_FALSE(z.is_ok());
  EXPECT_NE(z.status().message().find("'batch' = 0: must be >= 1"), std::string::npos);
}

TEST(ShapeKey, ParsesAndPrints) {
  auto s = parse_shape_key("batch=8,seq=128");
  ASSERT_TRUE(s.is_ok());
  EXPECT_EQ(s->at("seq"), 128);
  EXPECT_EQ(shape_key_text(*s), "batch=8,seq=128");
  EXPECT_TRUE(parse_shape_key("")->empty());
  EXPECT_FALSE(parse_shape_key("batch").is_ok());
  EXPECT_FALSE(parse_shape_key("batch=0").is_ok());
  EXPECT_FALSE(parse_shape_key("batch=1,batch=2").is_ok());
}

}  // namespace
}  // namespace kiln
