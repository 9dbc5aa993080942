// ddp-hwinfo: prints the hardware this process sees and the settings the
// auto-settings table recommends.
//   ddp-hwinfo [--world_size N] [--local_world_size N] [--target_batch N]
// Defaults: WORLD_SIZE / LOCAL_WORLD_SIZE from the environment, else the GPU
// count (or 1); target batch 256.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ddprun/worker/hardware.h"

namespace {

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ddprun::worker;
  HardwareInfo hw = DetectHardware();
  int gpus = hw.torch_cuda ? static_cast<int>(hw.gpus.size()) : 0;
  int world = EnvInt("WORLD_SIZE", std::max(1, gpus));
  int local = EnvInt("LOCAL_WORLD_SIZE", 0);
  int target = 256;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> int {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "ddp-hwinfo: %s needs a value\n", flag);
        std::exit(2);
      }
      int v = std::atoi(argv[++i]);
      if (v <= 0) {
        std::fprintf(stderr, "ddp-hwinfo: %s must be a positive integer\n",
                     flag);
        std::exit(2);
      }
      return v;
    };
    if (a == "--world_size" || a == "--world-size") {
      world = value("--world_size");
    } else if (a == "--local_world_size" || a == "--local-world-size") {
      local = value("--local_world_size");
    } else if (a == "--target_batch" || a == "--target-batch") {
      target = value("--target_batch");
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: ddp-hwinfo [--world_size N] [--local_world_size N] "
          "[--target_batch N]\n");
      return 0;
    } else {
      std::fprintf(stderr, "ddp-hwinfo: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  if (local <= 0) local = world;
  AutoSettings s = RecommendSettings(hw, world, local, target);
  std::fputs(FormatHardwareReport(hw, s).c_str(), stdout);
  return 0;
}
