// kiln profile record|show: device profiles for deviceless (ahead-of-time) plan compilation.
#include <cstdio>

#include "commands.h"
#include "kiln/core/printable.h"
#include "kiln/core/atomic_file.h"
#include "kiln/lower/lower.h"

namespace kiln::cli {
namespace {

struct ProfileOptions {
  std::string out = "profiles/device.json";
  std::string path;
  int device = 0;
  bool force = false;
};

void add_profile(CLI::App& app, Runner* run) {
  auto o = std::make_shared<ProfileOptions>();
  CLI::App* sub = app.add_subcommand("profile", "Record or show a device profile for deviceless compilation");
  sub->require_subcommand(1);
  CLI::App* rec = sub->add_subcommand("record", "Record this machine's GPU (needs a GPU)");
  rec->add_option("--out", o->out, "Where to write the profile JSON")->capture_default_str();
  rec->add_option("--device", o->device, "CUDA device ordinal")->check(whole_number_at_least(0));
  rec->add_flag("--force", o->force, "Write over an existing profile file");
  rec->callback([run, o] {
    *run = [o]() -> Status {
      FileWriteOptions fo;
      fo.overwrite = o->force;
      fo.what = "device profile";
      KILN_RETURN_IF_ERROR(check_destination(o->out, fo));  // before the GPU is asked
      StatusOr<DeviceProfile> recorded = record_device_profile(o->device);
      if (!recorded.is_ok()) return recorded.status().with_context("profile record reads this machine's GPU");
      const DeviceProfile& p = *recorded;
      KILN_RETURN_IF_ERROR(
          write_file_atomically(o->out, fo, [&p](const std::string& tmp) { return save_device_profile(p, tmp); }));
      std::printf("recorded %s (sm_%d, %d SMs, cuDNN %lld) into %s\n", printable(p.gpu_name).c_str(), p.sm_version,
                  p.sm_count, static_cast<long long>(p.recorded_cudnn_version), o->out.c_str());
      return Status::ok();
    };
  });
  CLI::App* show = sub->add_subcommand("show", "Print a recorded profile's summary");
  show->add_option("path", o->path, "Profile JSON")->required();
  show->callback([run, o] {
    *run = [o]() -> Status {
      KILN_ASSIGN_OR_RETURN(DeviceProfile p, load_device_profile(o->path));
      std::printf("%s: sm_%d, %d SMs, recorded with cuDNN %lld on %s, %zu bytes of cuDNN device properties\n",
                  printable(p.gpu_name).c_str(), p.sm_version, p.sm_count,
                  static_cast<long long>(p.recorded_cudnn_version), printable(p.recorded_at).c_str(),
                  p.cudnn_device_properties.size());
      return Status::ok();
    };
  });
}

}  // namespace

KILN_REGISTER_COMMAND("profile", add_profile);

}  // namespace kiln::cli
