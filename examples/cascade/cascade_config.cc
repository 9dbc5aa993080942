#include "examples/cascade/cascade_config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

#include "examples/formats/flag_parser.h"

namespace ddprun::examples {
namespace {

constexpr char kSection[] = "stage_configs";

bool ParseInt(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0') return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return *end == '\0';
}

bool ParseBool(std::string text, bool* out) {
  for (char& c : text) c = static_cast<char>(std::tolower(c));
  if (text == "true" || text == "yes" || text == "on" || text == "1") {
    *out = true;
  } else if (text == "false" || text == "no" || text == "off" || text == "0") {
    *out = false;
  } else {
    return false;
  }
  return true;
}

bool IsFileName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) {
                       return std::isalnum(static_cast<unsigned char>(c)) ||
                              c == '_' || c == '-' || c == '.';
                     }) &&
         name[0] != '.';
}

// Checks one resolved stage against the one before it (null for the
// first). `where` names it in errors.
Status CheckStage(const StageConfig& s, const StageConfig* previous,
                  const std::string& where) {
  if (s.volume_size.size() != 3) {
    return InvalidArgumentError(where + "volume_size must be [D, H, W]");
  }
  if (s.patch_size < 1 || s.voxel_dim < 1 || s.vit_depth < 1 ||
      s.num_heads < 1) {
    return InvalidArgumentError(
        where + "patch_size, voxel_dim, vit_depth and num_heads must be >= 1");
  }
  for (int64_t edge : s.volume_size) {
    if (edge < 2 * s.patch_size || edge % s.patch_size != 0) {
      return InvalidArgumentError(
          where + "volume_size " + SizeText(s.volume_size) +
          " must be a multiple of patch_size " + std::to_string(s.patch_size) +
          " and at least two patches in every axis");
    }
  }
  if (s.voxel_dim % s.num_heads != 0) {
    return InvalidArgumentError(
        where + "num_heads " + std::to_string(s.num_heads) +
        " must divide voxel_dim " + std::to_string(s.voxel_dim));
  }
  if (s.physics_weight < 0) {
    return InvalidArgumentError(where + "physics_weight must be >= 0");
  }
  if (previous != nullptr) {
    for (size_t a = 0; a < 3; ++a) {
      if (s.volume_size[a] < previous->volume_size[a]) {
        return InvalidArgumentError(where + "volume_size " +
                                    SizeText(s.volume_size) +
                                    " is smaller than the previous stage's " +
                                    SizeText(previous->volume_size) +
                                    " (stages go from coarse to fine)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& StageConfigKeys() {
  static const std::vector<std::string> keys{
      "name",      "volume_size", "voxel_dim",      "vit_depth",
      "num_heads", "patch_size",  "physics_weight", "use_physics_loss"};
  return keys;
}

std::string SizeText(const std::vector<int64_t>& size) {
  std::string text;
  for (size_t i = 0; i < size.size(); ++i)
    text += (i ? "x" : "") + std::to_string(size[i]);
  return text;
}

Status StageConfigReader::Add(const std::string& at, const ConfigEntry& e) {
  const std::string prefix = std::string(kSection) + "[";
  if (e.key.rfind(prefix, 0) != 0) {
    return InvalidArgumentError(
        at + "'" + e.key +
        "' must be a list of stage mappings ({\"name\": ..., "
        "\"volume_size\": [D, H, W], ...})");
  }
  const size_t close = e.key.find("].", prefix.size());
  int64_t index = -1;
  if (close == std::string::npos ||
      !ParseInt(e.key.substr(prefix.size(), close - prefix.size()), &index)) {
    return InvalidArgumentError(at + "unexpected key '" + e.key + "'");
  }
  const std::string field = e.key.substr(close + 2);
  const auto& keys = StageConfigKeys();
  if (std::find(keys.begin(), keys.end(), field) == keys.end()) {
    const std::string hint = ClosestName(field, keys);
    std::string known;
    for (const std::string& k : keys) known += (known.empty() ? "" : ", ") + k;
    return InvalidArgumentError(at + "unknown key '" + e.key + "'" +
                                (hint.empty()
                                     ? " (a stage takes " + known + ")"
                                     : " (did you mean '" + hint + "'?)"));
  }
  if (e.is_null || e.values.empty()) {
    return InvalidArgumentError(at + "key '" + e.key + "' has no value");
  }
  if (e.is_list && field != "volume_size") {
    return InvalidArgumentError(at + "key '" + e.key +
                                "' takes one value, not a list");
  }
  // Checked here, where the line is known.
  const auto bad = [&](const std::string& what) {
    return InvalidArgumentError(at + "key '" + e.key + "': " + what);
  };
  for (const std::string& v : e.values) {
    int64_t i = 0;
    double d = 0;
    bool b = false;
    if (field == "name" && !IsFileName(v)) {
      return bad("'" + v +
                 "' must be a file-name part (letters, digits, _ - .): the "
                 "stage's best checkpoint is <name>_best.pt");
    }
    if ((field == "volume_size" || field == "voxel_dim" ||
         field == "vit_depth" || field == "num_heads" ||
         field == "patch_size") &&
        (!ParseInt(v, &i) || i < 1)) {
      return bad("'" + v + "' is not a positive integer");
    }
    if (field == "physics_weight" && (!ParseDouble(v, &d) || d < 0)) {
      return bad("'" + v + "' is not a number >= 0");
    }
    if (field == "use_physics_loss" && !ParseBool(v, &b)) {
      return bad("'" + v + "' is not true or false");
    }
  }
  if (field == "volume_size" && e.values.size() != 3 && e.values.size() != 1) {
    return bad("expected [D, H, W] (or one size for a cube)");
  }
  Pending& stage = stages_[index];
  if (stage.at.empty()) stage.at = at;
  if (!stage.values.emplace(field, e.values).second) {
    return InvalidArgumentError(at + "key '" + e.key + "' is given twice");
  }
  return Status::Ok();
}

StatusOr<std::vector<StageConfig>> StageConfigReader::Resolve(
    const StageDefaults& d,
    const std::function<bool(const std::string&)>& is_set) const {
  struct Source {
    std::string where;
    const std::map<std::string, std::vector<std::string>>* values = nullptr;
  };
  std::vector<StageConfig> stages;
  std::vector<Source> sources;
  if (is_set("stages") || stages_.empty()) {
    for (size_t i = 0; i < d.sizes.size(); ++i) {
      StageConfig s;
      s.name = "stage" + std::to_string(i + 1);
      s.volume_size = {d.sizes[i], d.sizes[i], d.sizes[i]};
      stages.push_back(s);
      sources.push_back({"--stages: stage " + std::to_string(i + 1), nullptr});
    }
  } else {
    int64_t expected = 0;
    for (const auto& [index, pending] : stages_) {
      if (index != expected) {
        return InvalidArgumentError(pending.at + std::string(kSection) + "[" +
                                    std::to_string(expected) + "] has no keys");
      }
      ++expected;
      StageConfig s;
      s.name = "stage" + std::to_string(index + 1);
      const std::string where =
          pending.at + kSection + "[" + std::to_string(index) + "]";
      const auto size = pending.values.find("volume_size");
      if (size == pending.values.end()) {
        return InvalidArgumentError(where + ": volume_size is required");
      }
      for (const std::string& v : size->second)
        s.volume_size.push_back(std::strtoll(v.c_str(), nullptr, 10));
      if (s.volume_size.size() == 1) s.volume_size.assign(3, s.volume_size[0]);
      stages.push_back(s);
      sources.push_back({where, &pending.values});
    }
  }
  if (stages.empty()) return InvalidArgumentError("no stages to train");
  std::set<std::string> names;
  for (size_t i = 0; i < stages.size(); ++i) {
    StageConfig& s = stages[i];
    const auto* values = sources[i].values;
    auto pick = [&](const std::string& field) -> const std::string* {
      if (is_set(field) || values == nullptr) return nullptr;
      const auto it = values->find(field);
      return it == values->end() ? nullptr : &it->second.front();
    };
    auto integer = [&](const std::string& field, int64_t fallback) {
      const std::string* v = pick(field);
      return v ? std::strtoll(v->c_str(), nullptr, 10) : fallback;
    };
    if (const std::string* name = pick("name")) s.name = *name;
    s.voxel_dim = integer("voxel_dim", d.voxel_dim);
    s.vit_depth = integer("vit_depth", d.vit_depth);
    s.num_heads = integer("num_heads", d.num_heads);
    s.patch_size = integer("patch_size", d.patch_size);
    const std::string* weight = pick("physics_weight");
    s.physics_weight =
        weight ? std::strtod(weight->c_str(), nullptr) : d.physics_weight;
    if (const std::string* use = pick("use_physics_loss")) {
      ParseBool(*use, &s.use_physics_loss);
    }
    const std::string where = sources[i].where + " (" + s.name + "): ";
    DDP_RETURN_IF_ERROR(CheckStage(s, i > 0 ? &stages[i - 1] : nullptr, where));
    if (!names.insert(s.name).second) {
      return InvalidArgumentError(where + "name '" + s.name +
                                  "' is used by an earlier stage");
    }
  }
  return stages;
}

}  // namespace ddprun::examples
