#include "agent/frontends/accelerate/accelerate_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

namespace ddprun::agent {
namespace {

// ClusterConfig's dataclass fields (BaseConfig's first).
const std::set<std::string>& KnownKeys() {
  static const std::set<std::string>* keys =
      new std::set<std::string>{"compute_environment",
                                "distributed_type",
                                "mixed_precision",
                                "use_cpu",
                                "debug",
                                "num_processes",
                                "machine_rank",
                                "num_machines",
                                "gpu_ids",
                                "main_process_ip",
                                "main_process_port",
                                "rdzv_backend",
                                "same_network",
                                "main_training_function",
                                "enable_cpu_affinity",
                                "fp8_config",
                                "deepspeed_config",
                                "fsdp_config",
                                "parallelism_config",
                                "megatron_lm_config",
                                "mpirun_config",
                                "downcast_bf16",
                                "tpu_name",
                                "tpu_zone",
                                "tpu_use_cluster",
                                "tpu_use_sudo",
                                "command_file",
                                "commands",
                                "tpu_vm",
                                "tpu_env",
                                "dynamo_config"};
  return *keys;
}

const char* const kSections[] = {"fp8_config",         "deepspeed_config",
                                 "fsdp_config",        "parallelism_config",
                                 "megatron_lm_config", "mpirun_config",
                                 "dynamo_config"};

// DistributedType values (accelerate/utils/dataclasses.py).
const std::set<std::string>& DistributedTypes() {
  static const std::set<std::string>* types = new std::set<std::string>{
      "NO",         "MULTI_CPU",   "MULTI_GPU", "MULTI_NPU",   "MULTI_MLU",
      "MULTI_SDAA", "MULTI_MUSA",  "MULTI_XPU", "DEEPSPEED",   "FSDP",
      "XLA",        "MEGATRON_LM", "MULTI_HPU", "MULTI_NEURON"};
  return *types;
}

std::string WithoutUnderscores(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  return s;
}

// PyYAML's implicit resolvers (yaml/resolver.py, YAML 1.1), in its order:
// a plain scalar is a bool, float, int or null only when it matches one of
// these whole; anything else (an IP 10.1.2.3, 1e3, -.5) stays a string.
const std::regex& BoolRe() {
  static const std::regex* re = new std::regex(
      "yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|"
      "Off|OFF");
  return *re;
}
const std::regex& FloatRe() {
  static const std::regex* re = new std::regex(
      "[-+]?[0-9][0-9_]*\\.[0-9_]*([eE][-+][0-9]+)?"
      "|\\.[0-9][0-9_]*([eE][-+][0-9]+)?"
      "|[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+\\.[0-9_]*"
      "|[-+]?\\.(inf|Inf|INF)"
      "|\\.(nan|NaN|NAN)");
  return *re;
}
const std::regex& IntRe() {
  static const std::regex* re = new std::regex(
      "[-+]?0b[0-1_]+"
      "|[-+]?0[0-7_]+"
      "|[-+]?(0|[1-9][0-9_]*)"
      "|[-+]?0x[0-9a-fA-F_]+"
      "|[-+]?[1-9][0-9_]*(:[0-5]?[0-9])+");
  return *re;
}

// Sexagesimal "a:b:c" (base 60), summed from the last part as PyYAML's
// construct_yaml_int/float do (the same float rounding).
double Base60(const std::string& body) {
  std::vector<double> parts;
  std::stringstream ss(body);
  for (std::string part; std::getline(ss, part, ':');) {
    parts.push_back(std::stod(part));
  }
  double value = 0, base = 1;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    value += *it * base;
    base *= 60;
  }
  return value;
}

constexpr size_t kMaxNumberText = 256;

// A plain scalar as PyYAML's SafeLoader/FullLoader constructs it.
PyValue PlainScalar(const std::string& t) {
  if (t.empty() || t == "~" || t == "null" || t == "Null" || t == "NULL") {
    return PyValue::None();
  }
  // std::regex recurses per character (a scalar of 100 000 digits
  // overflowed the stack): a text this long is taken as the string it is
  // (PyYAML would make a number of it that no key of accelerate's takes).
  if (t.size() > kMaxNumberText) return PyValue::Str(t);
  if (std::regex_match(t, BoolRe())) {
    const char c = t[0];
    return PyValue::Bool(c == 'y' || c == 'Y' || c == 't' || c == 'T' ||
                         t == "on" || t == "On" || t == "ON");
  }
  // construct_yaml_float/int: underscores dropped, then the sign.
  std::string body = WithoutUnderscores(t);
  const bool negative = !body.empty() && body[0] == '-';
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) body.erase(0, 1);
  try {
    if (std::regex_match(t, FloatRe())) {
      std::string lower = body;
      for (char& c : lower) c = static_cast<char>(std::tolower(c));
      if (lower == ".nan") return PyValue::Float(NAN);
      double v = lower == ".inf"                        ? INFINITY
                 : lower.find(':') != std::string::npos ? Base60(lower)
                                                        : std::stod(lower);
      return PyValue::Float(negative ? -v : v);
    }
    if (std::regex_match(t, IntRe())) {
      long long v = 0;
      if (body == "0") {
        v = 0;
      } else if (body.compare(0, 2, "0b") == 0) {
        v = std::stoll(body.substr(2), nullptr, 2);
      } else if (body.compare(0, 2, "0x") == 0) {
        v = std::stoll(body.substr(2), nullptr, 16);
      } else if (body[0] == '0') {
        v = std::stoll(body, nullptr, 8);
      } else if (body.find(':') != std::string::npos) {
        v = static_cast<long long>(Base60(body));
      } else {
        v = std::stoll(body, nullptr, 10);
      }
      return PyValue::Int(negative ? -v : v);
    }
  } catch (const std::exception&) {
    // Out of range (PyYAML would build a big int) or only underscores
    // ("0b_", a PyYAML error): keep the text.
  }
  return PyValue::Str(t);
}

}  // namespace

PyValue ResolveYamlPlainScalar(const std::string& text) {
  return PlainScalar(text);
}

namespace {

std::string ReprOf(const PyValue& v) {
  if (v.kind != PyValue::Kind::kStr) return v.ToString();
  std::string out = "'";
  for (char c : v.s) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

// What one config may hold: values nested this deep, or printing longer in
// all (YAML aliases repeat a value without repeating its text: a small
// file of aliases of aliases would print to gigabytes).
constexpr int kMaxDepth = 64;
constexpr size_t kMaxPrinted = size_t{256} << 10;
// What a value costs beyond its text, so that aliases of short values
// cannot make the walk itself long.
constexpr size_t kValueCost = 8;

struct ValueTooLarge {};

// Reads values into PyValues within the limits above; throws ValueTooLarge
// past them (caught in ReadEntries).
class ValueReader {
 public:
  PyValue FromYaml(const YAML::Node& node, int depth = 0) {
    Spend(kValueCost, depth);
    if (node.IsNull()) return PyValue::None();
    if (node.IsScalar()) {
      const std::string text = node.Scalar();
      Spend(text.size(), depth);
      return node.Tag() == "?" ? PlainScalar(text) : PyValue::Str(text);
    }
    std::string repr;
    if (node.IsSequence()) {
      for (const auto& item : node) {
        Append(&repr, ReprOf(FromYaml(item, depth + 1)), depth);
      }
      return PyValue::List("[" + repr + "]");
    }
    for (const auto& kv : node) {
      Append(&repr,
             ReprOf(FromYaml(kv.first, depth + 1)) + ": " +
                 ReprOf(FromYaml(kv.second, depth + 1)),
             depth);
    }
    return PyValue::List("{" + repr + "}");
  }

  PyValue FromJson(const nlohmann::json& j, int depth = 0) {
    Spend(kValueCost, depth);
    switch (j.type()) {
      case nlohmann::json::value_t::null:
        return PyValue::None();
      case nlohmann::json::value_t::boolean:
        return PyValue::Bool(j.get<bool>());
      case nlohmann::json::value_t::number_integer:
      case nlohmann::json::value_t::number_unsigned:
        return PyValue::Int(j.get<long long>());
      case nlohmann::json::value_t::number_float:
        return PyValue::Float(j.get<double>());
      case nlohmann::json::value_t::string:
        return PyValue::Str(j.get<std::string>());
      default:
        break;
    }
    std::string repr;
    if (j.is_array()) {
      for (const auto& item : j) {
        Append(&repr, ReprOf(FromJson(item, depth + 1)), depth);
      }
      return PyValue::List("[" + repr + "]");
    }
    for (auto it = j.begin(); it != j.end(); ++it) {
      Append(&repr,
             ReprOf(PyValue::Str(it.key())) + ": " +
                 ReprOf(FromJson(it.value(), depth + 1)),
             depth);
    }
    return PyValue::List("{" + repr + "}");
  }

 private:
  void Spend(size_t n, int depth) {
    if (depth > kMaxDepth || n > left_) throw ValueTooLarge{};
    left_ -= n;
  }
  void Append(std::string* repr, const std::string& item, int depth) {
    Spend(item.size() + 2, depth);
    *repr += (repr->empty() ? "" : ", ") + item;
  }

  size_t left_ = kMaxPrinted;
};

// One top-level entry: a section (a mapping, or null = empty) or a value.
struct RawEntry {
  PyValue value;
  bool is_mapping = false;
  std::map<std::string, PyValue> mapping;
};

// ReadEntries within ValueReader's limits (throws ValueTooLarge).
StatusOr<std::map<std::string, RawEntry>> ReadEntriesWithin(
    const std::string& path, const std::string& text) {
  ValueReader reader;
  std::map<std::string, RawEntry> out;
  const bool json =
      path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (json) {
    nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
    if (doc.is_discarded() || !doc.is_object()) {
      return InvalidArgumentError("--config_file " + path +
                                  ": not a JSON object");
    }
    for (auto it = doc.begin(); it != doc.end(); ++it) {
      RawEntry e;
      if (it.value().is_object()) {
        e.is_mapping = true;
        for (auto s = it.value().begin(); s != it.value().end(); ++s) {
          e.mapping[s.key()] = reader.FromJson(s.value());
        }
      } else {
        e.value = reader.FromJson(it.value());
      }
      out[it.key()] = std::move(e);
    }
    return out;
  }
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError("--config_file " + path +
                                ": not valid YAML: " + e.msg);
  }
  if (!doc.IsMap()) {
    return InvalidArgumentError("--config_file " + path +
                                ": not a YAML mapping");
  }
  for (const auto& kv : doc) {
    RawEntry e;
    if (kv.second.IsMap()) {
      e.is_mapping = true;
      for (const auto& s : kv.second) {
        e.mapping[s.first.Scalar()] = reader.FromYaml(s.second);
      }
    } else {
      e.value = reader.FromYaml(kv.second);
    }
    out[kv.first.Scalar()] = std::move(e);
  }
  return out;
}

StatusOr<std::map<std::string, RawEntry>> ReadEntries(const std::string& path,
                                                      const std::string& text) {
  try {
    return ReadEntriesWithin(path, text);
  } catch (const ValueTooLarge&) {
    return InvalidArgumentError(
        "--config_file " + path + ": values nested deeper than " +
        std::to_string(kMaxDepth) + " levels or longer than " +
        std::to_string(kMaxPrinted >> 10) +
        " KiB in all (YAML aliases of aliases?)");
  }
}

}  // namespace

const PyValue& AccelerateConfig::Get(const std::string& key) const {
  static const PyValue none;
  auto it = values.find(key);
  return it == values.end() ? none : it->second;
}

std::string DefaultAccelerateConfigPath(
    const std::map<std::string, std::string>& env) {
  auto get = [&env](const char* name) {
    auto it = env.find(name);
    return it == env.end() ? std::string() : it->second;
  };
  std::string hf_home = get("HF_HOME");
  if (hf_home.empty()) {
    const std::string xdg = get("XDG_CACHE_HOME");
    hf_home = (xdg.empty() ? get("HOME") + "/.cache" : xdg) + "/huggingface";
  }
  return hf_home + "/accelerate/default_config.yaml";
}

StatusOr<AccelerateConfig> LoadAccelerateConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return InvalidArgumentError("--config_file " + path +
                                ": the configuration file does not exist");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseAccelerateConfig(path, ss.str());
}

StatusOr<AccelerateConfig> ParseAccelerateConfig(const std::string& path,
                                                 const std::string& text) {
  DDP_ASSIGN_OR_RETURN(auto entries, ReadEntries(path, text));
  auto bad = [&path](const std::string& why) {
    return InvalidArgumentError("--config_file " + path + ": " + why);
  };
  AccelerateConfig config;
  config.path = path;
  for (const char* section : kSections) config.sections[section];
  // process_config: defaults and the legacy keys.
  if (entries.count("fp16") && !entries.count("mixed_precision")) {
    entries["mixed_precision"].value =
        entries["fp16"].value.Truthy() ? PyValue::Str("fp16") : PyValue::None();
  }
  entries.erase("fp16");
  if (entries.count("dynamo_backend")) {
    const PyValue backend = entries["dynamo_backend"].value;
    entries.erase("dynamo_backend");
    RawEntry dynamo;
    dynamo.is_mapping = true;
    if (backend.ToString() != "NO") dynamo.mapping["dynamo_backend"] = backend;
    entries["dynamo_config"] = dynamo;
  }
  std::string unknown;
  for (const auto& [key, entry] : entries) {
    if (!KnownKeys().count(key)) unknown += (unknown.empty() ? "" : ", ") + key;
  }
  if (!unknown.empty()) {
    return bad("unknown keys (" + unknown +
               "); fix or remove them (accelerate rejects them too)");
  }
  for (auto& [key, entry] : entries) {
    bool section = false;
    for (const char* s : kSections) section = section || key == s;
    if (section) {
      if (!entry.is_mapping && !entry.value.is_none()) {
        return bad(key + " must be a mapping");
      }
      config.sections[key] = entry.mapping;
    } else if (entry.is_mapping) {
      return bad(key + " must not be a mapping");
    } else {
      config.values[key] = entry.value;
    }
  }
  auto& v = config.values;
  if (!v.count("compute_environment")) {
    v["compute_environment"] = PyValue::Str("LOCAL_MACHINE");
  }
  const std::string env_kind = v["compute_environment"].ToString();
  if (env_kind == "AMAZON_SAGEMAKER") {
    return bad(
        "compute_environment AMAZON_SAGEMAKER is not supported by "
        "ddprun-accelerate (it launches on this machine)");
  }
  if (env_kind != "LOCAL_MACHINE") {
    return bad("invalid compute_environment '" + env_kind + "'");
  }
  if (!v.count("distributed_type")) {
    return bad("a distributed_type must be specified in the config file");
  }
  const PyValue& dt = v["distributed_type"];
  if (dt.kind != PyValue::Kind::kStr || !DistributedTypes().count(dt.s)) {
    return bad("invalid distributed_type '" + dt.ToString() + "'");
  }
  auto set_default = [&v](const char* key, PyValue value) {
    if (!v.count(key)) v[key] = std::move(value);
  };
  set_default("num_processes", PyValue::Int(dt.s == "NO" ? 1 : -1));
  set_default("mixed_precision", PyValue::None());
  set_default("use_cpu", PyValue::Bool(false));
  set_default("debug", PyValue::Bool(false));
  set_default("enable_cpu_affinity", PyValue::Bool(false));
  set_default("machine_rank", PyValue::Int(0));
  set_default("num_machines", PyValue::Int(1));
  set_default("gpu_ids", PyValue::None());
  set_default("main_process_ip", PyValue::None());
  set_default("main_process_port", PyValue::None());
  set_default("rdzv_backend", PyValue::Str("static"));
  set_default("same_network", PyValue::Bool(false));
  set_default("main_training_function", PyValue::Str("main"));
  set_default("downcast_bf16", PyValue::Bool(false));
  set_default("tpu_use_cluster", PyValue::Bool(false));
  set_default("tpu_use_sudo", PyValue::Bool(false));
  for (const char* key : {"num_processes", "machine_rank", "num_machines"}) {
    if (v[key].kind != PyValue::Kind::kInt) {
      return bad(std::string(key) + " must be an integer (got '" +
                 v[key].ToString() + "')");
    }
  }
  if (!v["main_process_port"].is_none() &&
      v["main_process_port"].kind != PyValue::Kind::kInt) {
    return bad("main_process_port must be an integer (got '" +
               v["main_process_port"].ToString() + "')");
  }
  // `gpu_ids: 0` reads as an int; accelerate treats the ids as a string.
  if (v["gpu_ids"].kind == PyValue::Kind::kInt) {
    v["gpu_ids"] = PyValue::Str(v["gpu_ids"].ToString());
  }
  return config;
}

}  // namespace ddprun::agent
