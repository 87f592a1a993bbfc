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
  if (j.contains("recorded_cudnn_version") && j["recorded_cudnn_version"].is_number_integer())
    p.recorded_cudnn_version = j["recorded_cudnn_version"].get<int64_t>();
  if (j.contains("recorded_at") && j["recorded_at"].is_string()) p.recorded_at = j["recorded_at"].get<std::string>();
  if (j.contains("cudnn_device_properties")) p.cudnn_device_properties = j["cudnn_device_properties"].dump();
  else if (j.contains("cudnn_device_properties_text") && j["cudnn_device_properties_text"].is_string())
    p.cudnn_device_properties = j["cudnn_device_properties_text"].get<std::string>();
  else return invalid_argument("device profile '" + path + "': missing 'cudnn_device_properties'");
  return p;
}
}  // namespace

}  // namespace kiln
