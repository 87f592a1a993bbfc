// Device profiles: cuDNN's serialized device properties plus what the frontend needs beside them.
#include <ctime>
#include <fstream>
#include <sstream>

#include "kiln/core/read_file.h"
#include "kiln/cuda/cuda_handles.h"
#include "kiln/cuda/device.h"
#include "kiln/h200_profile.h"
#include "kiln/lower/lower.h"
#include "lower/fe_status.h"

namespace kiln {

StatusOr<DeviceProfile> record_device_profile(int ordinal) {
  KILN_ASSIGN_OR_RETURN(DeviceInfo dev, query_device(ordinal));
  KILN_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  fe::DeviceProperties props;  // by device id alone: cuDNN refuses a handle and an id together
  KILN_FE_RETURN_IF_ERROR(props.set_device_id(ordinal).build(), "reading cuDNN device properties");
  std::vector<uint8_t> bytes;
  KILN_FE_RETURN_IF_ERROR(props.serialize(bytes), "serializing cuDNN device properties");
  while (!bytes.empty() && bytes.back() == 0) bytes.pop_back();
  DeviceProfile p;
  p.gpu_name = dev.name;
  p.sm_version = dev.sm_version();
  p.sm_count = dev.sm_count;
  p.recorded_cudnn_version = static_cast<int64_t>(cudnnGetVersion());
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  p.recorded_at = date;
  p.cudnn_device_properties.assign(bytes.begin(), bytes.end());
  return p;
}

Status save_device_profile(const DeviceProfile& p, const std::string& path) {
  nlohmann::ordered_json j;
  j["kiln_device_profile"] = 1;
  j["gpu_name"] = p.gpu_name;
  j["sm_version"] = p.sm_version;
  j["sm_count"] = p.sm_count;
  j["recorded_cudnn_version"] = p.recorded_cudnn_version;
  j["recorded_at"] = p.recorded_at;
  // cuDNN's representation is JSON text itself: keep it parsed so the file stays readable and diffable.
  nlohmann::ordered_json inner = nlohmann::ordered_json::parse(p.cudnn_device_properties, nullptr, false);
  if (inner.is_discarded()) j["cudnn_device_properties_text"] = p.cudnn_device_properties;
  else j["cudnn_device_properties"] = inner;
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return invalid_argument("cannot write device profile '" + path + "'");
    f << j.dump(2) << "\n";
    if (!f.good()) return unavailable("writing device profile '" + path + "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return unavailable("cannot rename '" + tmp + "' to '" + path + "'");
  return Status::ok();
}

namespace {
StatusOr<DeviceProfile> parse_device_profile_unchecked(const std::string& text, const std::string& path);
}  // namespace

StatusOr<DeviceProfile> load_device_profile(const std::string& path) {
  auto text = read_file(path, {"device profile", int64_t{16} << 20});
  if (!text.is_ok() && text.status().code() == StatusCode::kNotFound)
    return not_found("device profile '" + path + "' not found");
  KILN_RETURN_IF_ERROR(text.status());
  return parse_device_profile(*text, path);
}

StatusOr<DeviceProfile> parse_device_profile(const std::string& text, const std::string& path) {
  return catch_exceptions("device profile '" + path + "'", [&] { return parse_device_profile_unchecked(text, path); });
}

StatusOr<DeviceProfile> builtin_h200_profile() {
  return parse_device_profile(generated::kH200ProfileJson, "profiles/h200.json (built in)");
}

namespace {
constexpr int kProfileFormat = 1;  // the "kiln_device_profile" this Kiln writes and reads

// A JSON value's kind, with every number one kind (nlohmann tells signed, unsigned and float apart).
char profile_json_kind(const nlohmann::json& v) {
  return v.is_number()    ? 'n'
         : v.is_string()  ? 's'
         : v.is_array()   ? 'a'
         : v.is_object()  ? 'o'
         : v.is_boolean() ? 'b'
                          : '-';
}

// "9.19.0" from cuDNN's version number (major * 10000 + minor * 100 + patch since cuDNN 9).
std::string profile_cudnn_version_text(int64_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

// The profile's format and the cuDNN it was recorded with. cuDNN's device properties are its own
// serialization: a profile from another cuDNN release (major or minor) is recorded again, not guessed at.
Status check_profile_format(const nlohmann::ordered_json& j, const std::string& path) {
  const std::string name = "device profile '" + path + "'";
  if (!j.contains("kiln_device_profile") || !j["kiln_device_profile"].is_number_integer())
    return invalid_argument(name + ": missing 'kiln_device_profile' (the format version, " +
                            std::to_string(kProfileFormat) + "): not a profile `kiln profile record` wrote");
  const int64_t format = j["kiln_device_profile"].get<int64_t>();
  if (format != kProfileFormat)
    return invalid_argument(name + ": format version " + std::to_string(format) + ", and this Kiln reads version " +
                            std::to_string(kProfileFormat) + " (record the profile again with `kiln profile record`)");
  if (!j.contains("recorded_cudnn_version") || !j["recorded_cudnn_version"].is_number_integer())
    return invalid_argument(name + ": missing 'recorded_cudnn_version' (an integer, as cuDNN gives it: 91900)");
  const int64_t recorded = j["recorded_cudnn_version"].get<int64_t>();
  const auto loaded = static_cast<int64_t>(cudnnGetVersion());
  if (recorded < 0 || recorded / 100 != loaded / 100)
    return invalid_argument(name + ": recorded with cuDNN " + profile_cudnn_version_text(recorded) +
                            ", and this Kiln runs cuDNN " + profile_cudnn_version_text(loaded) +
                            ": cuDNN's device properties are read only by the release that wrote them; record the " +
                            "profile again with this cuDNN (`kiln profile record` on the GPU)");
  return Status::ok();
}

// cuDNN's device properties: an object with every field this cuDNN records (the built-in H200 profile's, made
// by the same release), agreeing with the sm_version and sm_count beside them. The frontend would otherwise
// refuse them only when a graph is compiled, in its own words (exit 5).
Status check_device_properties(const DeviceProfile& p, const std::string& path) {
  const std::string name = "device profile '" + path + "': cudnn_device_properties";
  const nlohmann::json props = nlohmann::json::parse(p.cudnn_device_properties, nullptr, false);
  if (props.is_discarded() || !props.is_object()) return invalid_argument(name + " is not a JSON object");
  const nlohmann::json builtin = nlohmann::json::parse(generated::kH200ProfileJson, nullptr, false);
  if (builtin.is_object() && builtin.contains("cudnn_device_properties"))
    for (const auto& [key, value] : builtin["cudnn_device_properties"].items())
      if (!props.contains(key) || profile_json_kind(props[key]) != profile_json_kind(value))
        return invalid_argument(name + ": '" + key + "' is missing or not a" +
                                (value.is_string()  ? " string"
                                 : value.is_array() ? "n array"
                                                    : " number") +
                                " (record the profile again with `kiln profile record`)");
  for (const char* key : {"deviceVer", "multiProcessorCount"})
    if (!props.contains(key) || !props[key].is_number_integer())
      return invalid_argument(name + ": '" + key + "' is missing or not an integer");
  const int64_t device_ver = props["deviceVer"].get<int64_t>();  // 900 for SM 9.0
  if (device_ver / 10 != p.sm_version)
    return invalid_argument("device profile '" + path + "': sm_version " + std::to_string(p.sm_version) +
                            " contradicts cudnn_device_properties.deviceVer " + std::to_string(device_ver) + " (SM " +
                            std::to_string(device_ver / 10) + ")");
  if (props["multiProcessorCount"].get<int64_t>() != p.sm_count)
    return invalid_argument("device profile '" + path + "': sm_count " + std::to_string(p.sm_count) +
                            " contradicts cudnn_device_properties.multiProcessorCount " +
                            std::to_string(props["multiProcessorCount"].get<int64_t>()));
  return Status::ok();
}

StatusOr<DeviceProfile> parse_device_profile_unchecked(const std::string& text, const std::string& path) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("device profile '" + path + "': not valid JSON");
  DeviceProfile p;
  auto need = [&](const char* key) -> Status {
    if (!j.contains(key)) return invalid_argument("device profile '" + path + "': missing '" + key + "'");
    return Status::ok();
  };
  KILN_RETURN_IF_ERROR(need("gpu_name"));
  KILN_RETURN_IF_ERROR(need("sm_version"));
  KILN_RETURN_IF_ERROR(need("sm_count"));
  if (!j["gpu_name"].is_string() || !j["sm_version"].is_number_integer() || !j["sm_count"].is_number_integer())
    return invalid_argument("device profile '" + path +
                            "': gpu_name must be a string, sm_version and sm_count integers");
  for (const char* key : {"sm_version", "sm_count"})
    if (j[key].get<int64_t>() > (int64_t{1} << 20) || j[key].get<int64_t>() < 0)
      return invalid_argument("device profile '" + path + "': '" + key + "' is out of range");
  p.gpu_name = j["gpu_name"].get<std::string>();
  p.sm_version = j["sm_version"].get<int>();
  p.sm_count = j["sm_count"].get<int>();
  if (p.sm_version <= 0 || p.sm_count <= 0)
    return invalid_argument("device profile '" + path + "': sm_version and sm_count must be positive");
  KILN_RETURN_IF_ERROR(check_profile_format(j, path));
  p.recorded_cudnn_version = j["recorded_cudnn_version"].get<int64_t>();
  if (j.contains("recorded_at") && j["recorded_at"].is_string()) p.recorded_at = j["recorded_at"].get<std::string>();
  if (j.contains("cudnn_device_properties")) p.cudnn_device_properties = j["cudnn_device_properties"].dump();
  else if (j.contains("cudnn_device_properties_text") && j["cudnn_device_properties_text"].is_string())
    p.cudnn_device_properties = j["cudnn_device_properties_text"].get<std::string>();
  else return invalid_argument("device profile '" + path + "': missing 'cudnn_device_properties'");
  KILN_RETURN_IF_ERROR(check_device_properties(p, path));
  return p;
}
}  // namespace

}  // namespace kiln
