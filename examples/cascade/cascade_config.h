#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"
#include "examples/formats/yaml_config.h"

namespace ddprun::examples {

// One stage of the cascade, as an entry of the guide's "stage_configs"
// gives it. The stage denoises volumes of `volume_size` with a 3D ViT of
// `vit_depth` blocks of width `voxel_dim` over voxel patches of
// `patch_size`^3; its best checkpoint is <checkpoint dir>/<name>_best.pt.
struct StageConfig {
  std::string name;
  std::vector<int64_t> volume_size;  // D, H, W
  int64_t voxel_dim = 0;
  int64_t vit_depth = 0;
  int64_t num_heads = 0;
  int64_t patch_size = 0;
  double physics_weight = 0;  // weight of the projection loss
  bool use_physics_loss = true;
};

// What a stage takes for a field its stage_configs entry leaves out, and
// the stage list without any stage_configs (cubic sizes, names stage1..N).
struct StageDefaults {
  std::vector<int64_t> sizes;
  int64_t voxel_dim = 0;
  int64_t vit_depth = 0;
  int64_t num_heads = 0;
  int64_t patch_size = 0;
  double physics_weight = 0;
};

// The keys a stage_configs entry may hold.
const std::vector<std::string>& StageConfigKeys();

// Collects the "stage_configs[i].<key>" entries of a config file (the
// FlagParser section handler, TrainerCli::AddConfigSection) and resolves
// the stage list once the command line is parsed. Not thread-safe.
class StageConfigReader {
 public:
  // Takes one entry; INVALID_ARGUMENT "<at>unknown key
  // 'stage_configs[0].vit_dept' (did you mean 'vit_depth'?)" or a bad
  // value, naming the file and line.
  Status Add(const std::string& at, const ConfigEntry& entry);

  // The stages. Their list: --stages when `is_set("stages")` (the command
  // line beats the config), else the config's stage_configs, else
  // defaults.sizes. Each field: the flag when is_set(<field>) (a flag sets
  // every stage), else the stage's entry, else the default. Checks what
  // the model needs (sizes divisible by patch_size, voxel_dim divisible by
  // num_heads, each stage at least as large as the one before, unique
  // names usable as file names, sizes at least 2 patches); errors name the
  // stage and, for a config stage, its file and line.
  StatusOr<std::vector<StageConfig>> Resolve(
      const StageDefaults& defaults,
      const std::function<bool(const std::string&)>& is_set) const;

  bool has_stages() const { return !stages_.empty(); }

 private:
  struct Pending {
    std::string at;  // "<file>:<line>: " of the entry's first key
    std::map<std::string, std::vector<std::string>> values;
  };
  std::map<int64_t, Pending> stages_;  // by index in stage_configs
};

// "8x16x16".
std::string SizeText(const std::vector<int64_t>& size);

}  // namespace ddprun::examples
