#include "kiln/store/env_policy.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

#include "kiln/core/hash.h"

namespace kiln {
namespace {

constexpr const char* kFieldNames[kFingerprintFieldCount] = {
    "gpu_name",
    "sm_version",
    "sm_count",
    "cudnn_version",
    "cudnn_frontend_version",
    "cuda_runtime_version",
    "driver_version",
    "driver_release",
    "device_uuid",
    "cudnn_header_version",
    "cudnn_library_path",
    "kiln_version",
    "kiln_git_revision",
};

// A field's value as text (for reasons and the key) and its major part (for kSameMajor).
struct FieldValue {
  std::string text;   // human form: "9.19.0", "13.0", "sm_90", "NVIDIA H200"
  std::string exact;  // machine form used for comparison
  std::string major;
};

std::string major_of_text(const std::string& s) {
  size_t dot = s.find('.');
  return dot == std::string::npos ? s : s.substr(0, dot);
}

FieldValue field_value(const EnvFingerprint& f, FingerprintField field) {
  switch (field) {
    case FingerprintField::kGpuName: return {f.gpu_name, f.gpu_name, f.gpu_name};
    case FingerprintField::kSmVersion:
      return {"sm_" + std::to_string(f.sm_version), std::to_string(f.sm_version), std::to_string(f.sm_version / 10)};
    case FingerprintField::kSmCount: {
      std::string s = std::to_string(f.sm_count);
      return {s, s, s};
    }
    case FingerprintField::kCudnnVersion:
      return {EnvFingerprint::cudnn_version_string(f.cudnn_version), std::to_string(f.cudnn_version),
              std::to_string(f.cudnn_version / 10000)};
    case FingerprintField::kCudnnFrontendVersion:
      return {EnvFingerprint::cudnn_version_string(f.cudnn_frontend_version), std::to_string(f.cudnn_frontend_version),
              std::to_string(f.cudnn_frontend_version / 10000)};
    case FingerprintField::kCudaRuntimeVersion:
      return {EnvFingerprint::cuda_version_string(f.cuda_runtime_version), std::to_string(f.cuda_runtime_version),
              std::to_string(f.cuda_runtime_version / 1000)};
    case FingerprintField::kDriverVersion:
      return {EnvFingerprint::cuda_version_string(f.driver_version), std::to_string(f.driver_version),
              std::to_string(f.driver_version / 1000)};
    case FingerprintField::kDriverRelease: return {f.driver_release, f.driver_release, major_of_text(f.driver_release)};
    case FingerprintField::kDeviceUuid: return {f.device_uuid, f.device_uuid, f.device_uuid};
    case FingerprintField::kCudnnHeaderVersion:
      return {EnvFingerprint::cudnn_version_string(f.cudnn_header_version), std::to_string(f.cudnn_header_version),
              std::to_string(f.cudnn_header_version / 10000)};
    case FingerprintField::kCudnnLibraryPath: return {f.cudnn_library_path, f.cudnn_library_path, f.cudnn_library_path};
    case FingerprintField::kKilnVersion: return {f.kiln_version, f.kiln_version, major_of_text(f.kiln_version)};
    case FingerprintField::kKilnGitRevision: return {f.kiln_git_revision, f.kiln_git_revision, f.kiln_git_revision};
  }
  return {};
}

bool is_text_field(FingerprintField field) {
  return field == FingerprintField::kGpuName || field == FingerprintField::kDeviceUuid ||
         field == FingerprintField::kCudnnLibraryPath || field == FingerprintField::kKilnGitRevision;
}

std::string show(const std::string& s) { return s.empty() ? "(none)" : s; }

}  // namespace

const char* fingerprint_field_name(FingerprintField field) {
  size_t i = static_cast<size_t>(field);
  return i < kFingerprintFieldCount ? kFieldNames[i] : "?";
}

StatusOr<FingerprintField> parse_fingerprint_field(std::string_view name) {
  for (size_t i = 0; i < kFingerprintFieldCount; ++i)
    if (name == kFieldNames[i]) return static_cast<FingerprintField>(i);
  return invalid_argument("unknown fingerprint field '" + std::string(name) + "'");
}

const char* field_rule_name(FieldRule rule) { return enum_name(kFieldRuleNames, rule); }

const char* mismatch_policy_name(MismatchPolicy p) { return enum_name(kMismatchPolicyNames, p); }

StatusOr<MismatchPolicy> parse_mismatch_policy(std::string_view name) {
  if (name == "heuristics") return MismatchPolicy::kHeuristicsAndQueue;  // the short name, kept
  return parse_enum(kMismatchPolicyNames, std::string(name), "mismatch policy");
}

std::array<FieldRule, kFingerprintFieldCount> EnvPolicy::default_rules() {
  std::array<FieldRule, kFingerprintFieldCount> r{};
  r.fill(FieldRule::kInformational);
  auto set = [&r](FingerprintField f, FieldRule rule) { r[static_cast<size_t>(f)] = rule; };
  set(FingerprintField::kGpuName, FieldRule::kMustMatch);
  set(FingerprintField::kSmVersion, FieldRule::kMustMatch);
  set(FingerprintField::kSmCount, FieldRule::kMustMatch);
  set(FingerprintField::kCudnnVersion, FieldRule::kMustMatch);
  set(FingerprintField::kCudnnFrontendVersion, FieldRule::kMustMatch);
  set(FingerprintField::kCudaRuntimeVersion, FieldRule::kSameMajor);
  set(FingerprintField::kDriverVersion, FieldRule::kSameMajor);
  return r;
}

EnvPolicy without_device_fields(EnvPolicy policy) {
  for (FingerprintField f :
       {FingerprintField::kGpuName, FingerprintField::kSmVersion, FingerprintField::kSmCount,
        FingerprintField::kDriverVersion, FingerprintField::kDriverRelease, FingerprintField::kDeviceUuid})
    policy.set_rule(f, FieldRule::kInformational);
  return policy;
}

FingerprintCheck check_fingerprint(const EnvFingerprint& recorded, const EnvFingerprint& current,
                                   const EnvPolicy& policy) {
  FingerprintCheck out;
  for (size_t i = 0; i < kFingerprintFieldCount; ++i) {
    auto field = static_cast<FingerprintField>(i);
    FieldRule rule = policy.rule(field);
    if (rule == FieldRule::kInformational) continue;
    if (rule == FieldRule::kSameMajor && is_text_field(field)) rule = FieldRule::kMustMatch;
    FieldValue a = field_value(recorded, field), b = field_value(current, field);
    bool same = rule == FieldRule::kMustMatch ? a.exact == b.exact : a.major == b.major;
    if (same) continue;
    out.pass = false;
    out.failed_fields.push_back(field);
    out.reasons.push_back(std::string(kFieldNames[i]) + ": recorded " + show(a.text) + ", current " + show(b.text) +
                          (rule == FieldRule::kMustMatch ? " (must match)" : " (major version must match)"));
  }
  return out;
}

std::string fingerprint_to_json(const EnvFingerprint& f) {
  nlohmann::ordered_json j;
  j["gpu_name"] = f.gpu_name;
  j["sm_version"] = f.sm_version;
  j["sm_count"] = f.sm_count;
  j["device_uuid"] = f.device_uuid;
  j["driver_version"] = f.driver_version;
  j["driver_release"] = f.driver_release;
  j["cuda_runtime_version"] = f.cuda_runtime_version;
  j["cudnn_version"] = f.cudnn_version;
  j["cudnn_header_version"] = f.cudnn_header_version;
  j["cudnn_library_path"] = f.cudnn_library_path;
  j["cudnn_frontend_version"] = f.cudnn_frontend_version;
  j["kiln_version"] = f.kiln_version;
  j["kiln_git_revision"] = f.kiln_git_revision;
  j["has_device"] = f.has_device;
  // Replacement instead of throwing on invalid UTF-8 in a name or path.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

namespace {

template <typename T>
Status read_int(const nlohmann::json& j, const char* key, bool required, T* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) return corruption(std::string("fingerprint JSON lacks '") + key + "'");
    return Status::ok();
  }
  bool fits = it->is_number_integer() &&
              !(it->is_number_unsigned() && it->template get<uint64_t>() > static_cast<uint64_t>(INT64_MAX));
  int64_t v = fits ? it->template get<int64_t>() : 0;
  if (!fits || v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max())
    return corruption(std::string("fingerprint JSON field '") + key + "' is not an integer in range");
  *out = static_cast<T>(v);
  return Status::ok();
}

Status read_string(const nlohmann::json& j, const char* key, bool required, std::string* out) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) return corruption(std::string("fingerprint JSON lacks '") + key + "'");
    return Status::ok();
  }
  if (!it->is_string()) return corruption(std::string("fingerprint JSON field '") + key + "' is not a string");
  *out = it->get<std::string>();
  return Status::ok();
}

}  // namespace

StatusOr<EnvFingerprint> fingerprint_from_json(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return corruption("fingerprint is not valid JSON");
  if (!j.is_object()) return corruption("fingerprint JSON is not an object");
  EnvFingerprint f;
  try {
    KILN_RETURN_IF_ERROR(read_string(j, "gpu_name", true, &f.gpu_name));
    KILN_RETURN_IF_ERROR(read_int(j, "sm_version", true, &f.sm_version));
    KILN_RETURN_IF_ERROR(read_int(j, "sm_count", true, &f.sm_count));
    KILN_RETURN_IF_ERROR(read_string(j, "device_uuid", false, &f.device_uuid));
    KILN_RETURN_IF_ERROR(read_int(j, "driver_version", true, &f.driver_version));
    KILN_RETURN_IF_ERROR(read_string(j, "driver_release", false, &f.driver_release));
    KILN_RETURN_IF_ERROR(read_int(j, "cuda_runtime_version", true, &f.cuda_runtime_version));
    KILN_RETURN_IF_ERROR(read_int(j, "cudnn_version", true, &f.cudnn_version));
    KILN_RETURN_IF_ERROR(read_int(j, "cudnn_header_version", false, &f.cudnn_header_version));
    KILN_RETURN_IF_ERROR(read_string(j, "cudnn_library_path", false, &f.cudnn_library_path));
    KILN_RETURN_IF_ERROR(read_int(j, "cudnn_frontend_version", true, &f.cudnn_frontend_version));
    KILN_RETURN_IF_ERROR(read_string(j, "kiln_version", false, &f.kiln_version));
    KILN_RETURN_IF_ERROR(read_string(j, "kiln_git_revision", false, &f.kiln_git_revision));
    auto it = j.find("has_device");
    if (it != j.end()) {
      if (!it->is_boolean()) return corruption("fingerprint JSON field 'has_device' is not a boolean");
      f.has_device = it->get<bool>();
    }
  } catch (const std::exception& e) {  // e.g. an integer out of range for its field
    return corruption(std::string("fingerprint JSON: ") + e.what());
  }
  return f;
}

std::string fingerprint_key(const EnvFingerprint& f) {
  static const std::array<FieldRule, kFingerprintFieldCount> rules = EnvPolicy::default_rules();
  std::string canon = "kiln-env-key/v1\n";
  for (size_t i = 0; i < kFingerprintFieldCount; ++i) {
    if (rules[i] == FieldRule::kInformational) continue;
    FieldValue v = field_value(f, static_cast<FingerprintField>(i));
    const std::string& part = rules[i] == FieldRule::kSameMajor ? v.major : v.exact;
    canon += std::string(kFieldNames[i]) + "=" + std::to_string(part.size()) + ":" + part + "\n";
  }
  return stable_hash128_hex(canon);
}

}  // namespace kiln
