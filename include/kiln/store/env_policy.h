// kiln/store/env_policy.h: which parts of an EnvFingerprint must match for a stored plan to be run, what to do
// when they do not, and the fingerprint's canonical JSON and key.
//
// Default policy (docs/store.md has the table):
//   must match      gpu_name, sm_version, sm_count, cudnn_version, cudnn_frontend_version
//   same major      cuda_runtime_version (major), driver_version (CUDA driver API major)
//   informational   driver_release, device_uuid, cudnn_header_version, cudnn_library_path,
//                   kiln_version, kiln_git_revision
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/enum_names.h"
#include "kiln/core/fingerprint.h"
#include "kiln/core/status.h"

namespace kiln {

// Every EnvFingerprint field a policy can name (has_device is not a match criterion).
enum class FingerprintField {
  kGpuName,
  kSmVersion,
  kSmCount,
  kCudnnVersion,
  kCudnnFrontendVersion,
  kCudaRuntimeVersion,
  kDriverVersion,
  kDriverRelease,
  kDeviceUuid,
  kCudnnHeaderVersion,
  kCudnnLibraryPath,
  kKilnVersion,
  kKilnGitRevision,
};
inline constexpr size_t kFingerprintFieldCount = 13;

// "cudnn_version", "driver_version", ... (the EnvFingerprint member name).
const char* fingerprint_field_name(FingerprintField field);
StatusOr<FingerprintField> parse_fingerprint_field(std::string_view name);

enum class FieldRule {
  kMustMatch,      // recorded == current
  kSameMajor,      // the major version must match (CUDA 13.0 vs 13.1 passes); for text fields: kMustMatch
  kInformational,  // recorded for people, never a match criterion
};
inline constexpr EnumName<FieldRule> kFieldRuleNames[] = {{FieldRule::kMustMatch, "must match"},
                                                          {FieldRule::kSameMajor, "same major"},
                                                          {FieldRule::kInformational, "informational"}};
const char* field_rule_name(FieldRule rule);  // "must match", "same major", "informational"

// What a caller does with a stored plan whose fingerprint fails the policy. The store never hands out the
// bytes of such a plan, whatever the policy.
enum class MismatchPolicy {
  kRetune,              // tune again now, then store the new winner
  kHeuristicsAndQueue,  // run cuDNN's heuristic choice now, queue a background re-tune (default for services)
  kFail,                // refuse: PlanStore::get returns FailedPrecondition naming the fields
};
inline constexpr EnumName<MismatchPolicy> kMismatchPolicyNames[] = {
    {MismatchPolicy::kRetune, "retune"},
    {MismatchPolicy::kHeuristicsAndQueue, "heuristics-and-queue"},
    {MismatchPolicy::kFail, "fail"}};
const char* mismatch_policy_name(MismatchPolicy p);  // "retune", "heuristics-and-queue", "fail"
StatusOr<MismatchPolicy> parse_mismatch_policy(std::string_view name);

struct EnvPolicy {
  // Indexed by FingerprintField; starts with the default table above.
  std::array<FieldRule, kFingerprintFieldCount> rules = default_rules();
  MismatchPolicy on_mismatch = MismatchPolicy::kHeuristicsAndQueue;

  FieldRule rule(FingerprintField f) const { return rules[static_cast<size_t>(f)]; }
  EnvPolicy& set_rule(FingerprintField f, FieldRule r) {
    rules[static_cast<size_t>(f)] = r;
    return *this;
  }
  static std::array<FieldRule, kFingerprintFieldCount> default_rules();
};

struct FingerprintCheck {
  bool pass = true;
  // One line per failing field: "cudnn_version: recorded 9.19.0, current 9.20.0 (must match)".
  std::vector<std::string> reasons;
  std::vector<FingerprintField> failed_fields;  // parallel to reasons
};

// Compares a stored plan's fingerprint with this process's, field by field, under `policy`.
FingerprintCheck check_fingerprint(const EnvFingerprint& recorded, const EnvFingerprint& current,
                                   const EnvPolicy& policy);

// `policy` with the fields only a device can report (gpu_name, sm_version, sm_count, driver_version,
// driver_release, device_uuid) made informational: what can be judged on a machine without a GPU, where
// the current fingerprint holds this build's libraries (cuDNN, frontend, CUDA runtime) and nothing else.
EnvPolicy without_device_fields(EnvPolicy policy);

// Canonical JSON text of every field: fixed key order, no whitespace. The same fingerprint always gives
// the same bytes (the plan record checksum covers this text).
std::string fingerprint_to_json(const EnvFingerprint& f);
// Parses fingerprint_to_json's output (key order and whitespace free). Match-relevant fields are required
// and type-checked; informational ones default when absent. Corruption for malformed text or types.
StatusOr<EnvFingerprint> fingerprint_from_json(std::string_view text);

// Stable 128-bit key (32 hex digits) over the fields that the *default* policy matches on, at the
// precision it matches them (majors for same-major fields). Records are keyed on it; it does not depend on
// the policy a caller passes, so a relaxed policy can still find records filed under another key.
std::string fingerprint_key(const EnvFingerprint& f);

}  // namespace kiln
