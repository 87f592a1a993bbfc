// kiln doctor: prints the environment fingerprint that plans are keyed on.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kiln/lower/environment.h"
#include "kiln/runtime/source_chain.h"
#include "kiln/store/env_policy.h"

namespace kiln::cli {
namespace {

// "13.1.0" from 130100 (cuBLASLt's major * 10000 + minor * 100 + patch).
std::string cublaslt_version_string(int64_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

struct DoctorOptions {
  bool json = false;
  int device = 0;
};

Status run_doctor(const DoctorOptions& o) {
  EnvReport r = collect_environment(o.device);
  const EnvFingerprint& f = r.fingerprint;
  const LibraryInfo blt = cublaslt_library();
  bool mismatch = f.cudnn_version / 100 != f.cudnn_header_version / 100;
  if (o.json) {
    // The fingerprint exactly as the plan store records it, plus what a person reading it needs.
    auto j = nlohmann::ordered_json::parse(fingerprint_to_json(f), nullptr, /*allow_exceptions=*/false);
    j["compute_capability"] =
        f.has_device ? std::to_string(f.sm_version / 10) + "." + std::to_string(f.sm_version % 10) : "";
    j["cudnn_version_string"] = EnvFingerprint::cudnn_version_string(f.cudnn_version);
    j["cublaslt_version"] = blt.version;
    j["cublaslt_library_path"] = blt.path;
    j["device_ok"] = r.device_status.is_ok();
    if (!r.device_status.is_ok()) j["device_error"] = r.device_status.message();
    if (mismatch) j["warning"] = "loaded cuDNN differs from the headers Kiln was built with";
    // The order in which a Planner asks its plan sources (kiln/runtime/source_chain.h).
    j["source_chain"] = nlohmann::ordered_json::parse(source_chain_json());
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("GPU                  %s\n", f.has_device ? f.gpu_name.c_str() : "(none)");
    if (f.has_device) {
      std::printf("compute capability   %d.%d\n", f.sm_version / 10, f.sm_version % 10);
      std::printf("SM count             %d\n", f.sm_count);
      std::printf("device UUID          %s\n", f.device_uuid.c_str());
      std::printf("driver               %s (CUDA %s)\n", f.driver_release.empty() ? "?" : f.driver_release.c_str(),
                  EnvFingerprint::cuda_version_string(f.driver_version).c_str());
    }
    std::printf("CUDA runtime         %s\n", EnvFingerprint::cuda_version_string(f.cuda_runtime_version).c_str());
    std::printf("cuDNN (loaded)       %s  %s\n", EnvFingerprint::cudnn_version_string(f.cudnn_version).c_str(),
                f.cudnn_library_path.c_str());
    std::printf("cuDNN (headers)      %s\n", EnvFingerprint::cudnn_version_string(f.cudnn_header_version).c_str());
    std::printf("cuDNN Frontend       %s\n", EnvFingerprint::cudnn_version_string(f.cudnn_frontend_version).c_str());
    std::printf("cuBLASLt (loaded)    %s  %s\n", cublaslt_version_string(blt.version).c_str(), blt.path.c_str());
    std::printf("Kiln                 %s (%s)\n", f.kiln_version.c_str(), f.kiln_git_revision.c_str());
    std::printf("plan sources         %s\n", source_chain_text().c_str());
    if (mismatch) std::printf("warning: loaded cuDNN differs from the headers Kiln was built with\n");
  }
  if (!r.device_status.is_ok())
    return unavailable("no GPU: " + r.device_status.message() +
                       " (plans can still be compiled for a recorded profile)");
  if (mismatch)
    return unavailable("loaded cuDNN " + EnvFingerprint::cudnn_version_string(f.cudnn_version) + " from " +
                       f.cudnn_library_path + " differs from the headers (" +
                       EnvFingerprint::cudnn_version_string(f.cudnn_header_version) + ")");
  return Status::ok();
}

void add_doctor(CLI::App& app, Runner* run) {
  auto o = std::make_shared<DoctorOptions>();
  CLI::App* sub = app.add_subcommand("doctor", "Print the environment fingerprint plans are keyed on");
  sub->add_flag("--json", o->json, "Machine-readable output");
  sub->add_option("--device", o->device, "CUDA device ordinal")->check(whole_number_at_least(0));
  sub->callback([run, o] { *run = [o] { return run_doctor(*o); }; });
}

}  // namespace

KILN_REGISTER_COMMAND("doctor", add_doctor);

}  // namespace kiln::cli
