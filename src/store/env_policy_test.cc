#include "kiln/store/env_policy.h"

#include <gtest/gtest.h>

#include <functional>

#include "store/store_test_util.h"

namespace kiln {
namespace {

using store_test::h200;

struct FieldChange {
  FingerprintField field;
  std::function<void(EnvFingerprint&)> change;
  const char* expected_reason;  // exact text, or "" when the change must pass
};

TEST(EnvPolicy, SameFingerprintPasses) {
  FingerprintCheck c = check_fingerprint(h200(), h200(), EnvPolicy{});
  EXPECT_TRUE(c.pass);
  EXPECT_TRUE(c.reasons.empty());
}

TEST(EnvPolicy, EachExactFieldFailsWithANamedReason) {
  const FieldChange changes[] = {
      {FingerprintField::kGpuName, [](EnvFingerprint& f) { f.gpu_name = "NVIDIA H100 80GB HBM3"; },
       "gpu_name: recorded NVIDIA H200, current NVIDIA H100 80GB HBM3 (must match)"},
      {FingerprintField::kSmVersion, [](EnvFingerprint& f) { f.sm_version = 100; },
       "sm_version: recorded sm_90, current sm_100 (must match)"},
      {FingerprintField::kSmCount, [](EnvFingerprint& f) { f.sm_count = 114; },
       "sm_count: recorded 132, current 114 (must match)"},
      {FingerprintField::kCudnnVersion, [](EnvFingerprint& f) { f.cudnn_version = 92000; },
       "cudnn_version: recorded 9.19.0, current 9.20.0 (must match)"},
      {FingerprintField::kCudnnFrontendVersion, [](EnvFingerprint& f) { f.cudnn_frontend_version = 12400; },
       "cudnn_frontend_version: recorded 1.23.0, current 1.24.0 (must match)"},
      {FingerprintField::kCudaRuntimeVersion, [](EnvFingerprint& f) { f.cuda_runtime_version = 12080; },
       "cuda_runtime_version: recorded 13.0, current 12.8 (major version must match)"},
      {FingerprintField::kDriverVersion, [](EnvFingerprint& f) { f.driver_version = 12090; },
       "driver_version: recorded 13.0, current 12.9 (major version must match)"},
  };
  for (const auto& c : changes) {
    EnvFingerprint cur = h200();
    c.change(cur);
    FingerprintCheck r = check_fingerprint(h200(), cur, EnvPolicy{});
    EXPECT_FALSE(r.pass) << fingerprint_field_name(c.field);
    ASSERT_EQ(r.reasons.size(), 1u) << fingerprint_field_name(c.field);
    EXPECT_EQ(r.reasons[0], c.expected_reason);
    EXPECT_EQ(r.failed_fields[0], c.field);
    EXPECT_NE(fingerprint_key(cur), fingerprint_key(h200())) << fingerprint_field_name(c.field);
  }
}

TEST(EnvPolicy, MayDifferFieldsPass) {
  const std::function<void(EnvFingerprint&)> changes[] = {
      [](EnvFingerprint& f) { f.driver_version = 13010; },  // driver minor
      [](EnvFingerprint& f) { f.driver_release = "580.200.01"; },
      [](EnvFingerprint& f) { f.device_uuid = "GPU-another-card"; },
      [](EnvFingerprint& f) { f.kiln_git_revision = "0000deadbeef"; },
      [](EnvFingerprint& f) { f.kiln_version = "0.2.0"; },
      [](EnvFingerprint& f) { f.cuda_runtime_version = 13010; },  // runtime minor
      [](EnvFingerprint& f) { f.cudnn_library_path = "/opt/cudnn/lib/libcudnn.so.9"; },
  };
  for (const auto& change : changes) {
    EnvFingerprint cur = h200();
    change(cur);
    FingerprintCheck r = check_fingerprint(h200(), cur, EnvPolicy{});
    EXPECT_TRUE(r.pass) << (r.reasons.empty() ? "" : r.reasons[0]);
    EXPECT_EQ(fingerprint_key(cur), fingerprint_key(h200()));
  }
}

TEST(EnvPolicy, SeveralFieldsGiveSeveralReasons) {
  EnvFingerprint cur = h200();
  cur.cudnn_version = 92000;
  cur.sm_count = 114;
  FingerprintCheck r = check_fingerprint(h200(), cur, EnvPolicy{});
  EXPECT_FALSE(r.pass);
  EXPECT_EQ(r.reasons.size(), 2u);
}

TEST(EnvPolicy, RulesCanBeTightenedAndRelaxed) {
  EnvFingerprint cur = h200();
  cur.device_uuid = "GPU-other";
  EnvPolicy pin;
  pin.set_rule(FingerprintField::kDeviceUuid, FieldRule::kMustMatch);
  EXPECT_FALSE(check_fingerprint(h200(), cur, pin).pass);

  cur = h200();
  cur.driver_version = 13010;
  EnvPolicy exact_driver;
  exact_driver.set_rule(FingerprintField::kDriverVersion, FieldRule::kMustMatch);
  EXPECT_FALSE(check_fingerprint(h200(), cur, exact_driver).pass);

  cur = h200();
  cur.sm_count = 114;
  EnvPolicy relaxed;
  relaxed.set_rule(FingerprintField::kSmCount, FieldRule::kInformational);
  EXPECT_TRUE(check_fingerprint(h200(), cur, relaxed).pass);
}

TEST(EnvPolicy, WithoutDeviceFieldsJudgesOnlyTheLibraries) {
  // A machine without a GPU knows this build's libraries, not the device: the device fields are not judged,
  // a library that moved still is (the frontend upgrade, seen from a CPU-only machine).
  EnvFingerprint cur = h200();
  cur.gpu_name.clear();
  cur.sm_version = 0;
  cur.sm_count = 0;
  cur.driver_version = 0;
  EnvPolicy p = without_device_fields(EnvPolicy{});
  EXPECT_TRUE(check_fingerprint(h200(), cur, p).pass);
  EXPECT_FALSE(check_fingerprint(h200(), cur, EnvPolicy{}).pass);
  cur.cudnn_frontend_version = 13200;
  FingerprintCheck r = check_fingerprint(h200(), cur, p);
  ASSERT_FALSE(r.pass);
  ASSERT_EQ(r.reasons.size(), 1u);
  EXPECT_EQ(r.reasons[0], "cudnn_frontend_version: recorded 1.23.0, current 1.32.0 (must match)");
  EXPECT_EQ(p.on_mismatch, EnvPolicy{}.on_mismatch);
}

TEST(EnvPolicy, JsonRoundTripIsCanonical) {
  EnvFingerprint f = h200();
  std::string text = fingerprint_to_json(f);
  StatusOr<EnvFingerprint> back = fingerprint_from_json(text);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(fingerprint_to_json(*back), text);
  EXPECT_EQ(fingerprint_key(*back), fingerprint_key(f));
  EXPECT_EQ(fingerprint_key(f).size(), 32u);
  // Whitespace and key order do not matter when parsing.
  StatusOr<EnvFingerprint> spaced = fingerprint_from_json(
      "{ \"sm_count\": 132, \"gpu_name\": \"NVIDIA H200\", \"sm_version\": 90, \"driver_version\": 13000,"
      "  \"cuda_runtime_version\": 13000, \"cudnn_version\": 91900, \"cudnn_frontend_version\": 12300 }");
  ASSERT_TRUE(spaced.is_ok()) << spaced.status().to_string();
  EXPECT_EQ(fingerprint_key(*spaced), fingerprint_key(f));
}

TEST(EnvPolicy, BadJsonIsCorruptionNamingTheField) {
  StatusOr<EnvFingerprint> a = fingerprint_from_json("{not json");
  EXPECT_EQ(a.status().code(), StatusCode::kCorruption);
  StatusOr<EnvFingerprint> b = fingerprint_from_json("[1,2]");
  EXPECT_EQ(b.status().code(), StatusCode::kCorruption);
  StatusOr<EnvFingerprint> c = fingerprint_from_json("{\"gpu_name\": \"x\"}");
  EXPECT_EQ(c.status().code(), StatusCode::kCorruption);
  EXPECT_NE(c.status().message().find("sm_version"), std::string::npos) << c.status().message();
  std::string text = fingerprint_to_json(h200());
  std::string bad = text;
  bad.replace(bad.find("\"sm_count\":132"), 14, "\"sm_count\":\"x\"");
  StatusOr<EnvFingerprint> d = fingerprint_from_json(bad);
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_NE(d.status().message().find("sm_count"), std::string::npos) << d.status().message();
  StatusOr<EnvFingerprint> e = fingerprint_from_json("{\"gpu_name\":\"x\",\"sm_version\":99999999999}");
  EXPECT_EQ(e.status().code(), StatusCode::kCorruption);
}

TEST(EnvPolicy, PolicyNamesParse) {
  EXPECT_EQ(*parse_mismatch_policy("retune"), MismatchPolicy::kRetune);
  EXPECT_EQ(*parse_mismatch_policy("heuristics-and-queue"), MismatchPolicy::kHeuristicsAndQueue);
  EXPECT_EQ(*parse_mismatch_policy("fail"), MismatchPolicy::kFail);
  EXPECT_EQ(parse_mismatch_policy("nope").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EnvPolicy{}.on_mismatch, MismatchPolicy::kHeuristicsAndQueue);
  for (size_t i = 0; i < kFingerprintFieldCount; ++i) {
    auto f = static_cast<FingerprintField>(i);
    EXPECT_EQ(*parse_fingerprint_field(fingerprint_field_name(f)), f);
  }
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Pinned: a change here changes every key and checksum in every deployed store. Bump the record format
// version (kiln-plan-record/vN, kiln-env-key/vN) and write a migration rather than editing these values.
TEST(StoreCanonicalForm, FingerprintKeyAndChecksumArePinned) {
  EXPECT_EQ(fingerprint_key(store_test::h200()), "01d6c78f72eb93a22893966167548b2d");
  EXPECT_EQ(fingerprint_to_json(store_test::h200()),
            "{\"gpu_name\":\"NVIDIA H200\",\"sm_version\":90,\"sm_count\":132,"
            "\"device_uuid\":\"GPU-0d9f7a3e-1111-2222-3333-444455556666\",\"driver_version\":13000,"
            "\"driver_release\":\"580.159.04\",\"cuda_runtime_version\":13000,\"cudnn_version\":91900,"
            "\"cudnn_header_version\":91900,\"cudnn_library_path\":\"/usr/lib/x86_64-linux-gnu/libcudnn.so.9\","
            "\"cudnn_frontend_version\":12300,\"kiln_version\":\"0.1.0\",\"kiln_git_revision\":\"abcdef123456\","
            "\"has_device\":true}");
  PlanRecord r = store_test::make_record(1);
  // Schema 2 (plans bind tensors by canonical number) changed the bytes: kiln_schema_version is covered.
  EXPECT_EQ(compute_record_checksum(r), "092b6a28cac67e079bbc913cb1a98136");
  // Every field is covered.
  PlanRecord s = r;
  s.stats.runner_up_median_ms += 1e-9;
  EXPECT_NE(compute_record_checksum(s), compute_record_checksum(r));
  s = r;
  s.fingerprint.device_uuid = "x";
  EXPECT_NE(compute_record_checksum(s), compute_record_checksum(r));
  s = r;
  s.plan_bytes.back() ^= 1;
  EXPECT_NE(compute_record_checksum(s), compute_record_checksum(r));
}

}  // namespace
}  // namespace kiln
