#include "agent/accelerate_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

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

bool AllMatch(const std::string& s, std::size_t from, const char* allowed) {
  if (from >= s.size()) return false;
  return s.find_first_not_of(allowed, from) == std::string::npos;
}

std::string WithoutUnderscores(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  return s;
}

// PyYAML (YAML 1.1) resolution of a plain scalar.
PyValue PlainScalar(const std::string& t) {
  static const std::set<std::string> kNull = {"", "~", "null", "Null", "NULL"};
  static const std::set<std::string> kTrue = {
      "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"};
  static const std::set<std::string> kFalse = {
      "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"};
  if (kNull.count(t)) return PyValue::None();
  if (kTrue.count(t)) return PyValue::Bool(true);
  if (kFalse.count(t)) return PyValue::Bool(false);
  const std::size_t sign = (!t.empty() && (t[0] == '-' || t[0] == '+')) ? 1 : 0;
  const bool negative = sign == 1 && t[0] == '-';
  auto as_int = [&](const std::string& digits, int base) {
    long long v = std::stoll(WithoutUnderscores(digits), nullptr, base);
    return PyValue::Int(negative ? -v : v);
  };
  try {
    if (t.compare(sign, 2, "0b") == 0 && AllMatch(t, sign + 2, "01_")) {
      return as_int(t.substr(sign + 2), 2);
    }
    if (t.compare(sign, 2, "0x") == 0 &&
        AllMatch(t, sign + 2, "0123456789abcdefABCDEF_")) {
      return as_int(t.substr(sign + 2), 16);
    }
    if (t.size() > sign + 1 && t[sign] == '0' &&
        AllMatch(t, sign + 1, "01234567_")) {
      return as_int(t.substr(sign + 1), 8);
    }
    if (t == "0" || (t.size() > sign && t[sign] >= '1' && t[sign] <= '9' &&
                     AllMatch(t, sign, "0123456789_"))) {
      return as_int(t.substr(sign), 10);
    }
    // Floats need a dot (and a signed exponent): "1e8" stays a string.
    const std::string body = t.substr(sign);
    if (body == ".inf" || body == ".Inf" || body == ".INF") {
      return PyValue::Float(negative ? -INFINITY : INFINITY);
    }
    if (t == ".nan" || t == ".NaN" || t == ".NAN") return PyValue::Float(NAN);
    const auto dot = body.find('.');
    if (dot != std::string::npos && !body.empty()) {
      std::string mant = body, exp;
      const auto e = body.find_first_of("eE");
      if (e != std::string::npos) {
        mant = body.substr(0, e);
        exp = body.substr(e + 1);
      }
      const bool mant_ok =
          mant.find('.') != std::string::npos &&
          mant.find_first_not_of("0123456789_.") == std::string::npos &&
          (mant[0] != '.' || mant.size() > 1) && mant[0] != '_';
      const bool exp_ok = e == std::string::npos ||
                          (exp.size() > 1 && (exp[0] == '-' || exp[0] == '+') &&
                           AllMatch(exp, 1, "0123456789"));
      if (mant_ok && exp_ok) {
        const double v = std::stod(WithoutUnderscores(mant) +
                                   (exp.empty() ? "" : "e" + exp));
        return PyValue::Float(negative ? -v : v);
      }
    }
  } catch (const std::exception&) {
    // Out of range: PyYAML would build a big int; keep the text.
  }
  return PyValue::Str(t);
}

std::string ReprOf(const PyValue& v) {
  if (v.kind != PyValue::Kind::kStr) return v.ToString();
  std::string out = "'";
  for (char c : v.s) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

PyValue FromYaml(const YAML::Node& node) {
  if (node.IsNull()) return PyValue::None();
  if (node.IsScalar()) {
    const std::string text = node.Scalar();
    return node.Tag() == "?" ? PlainScalar(text) : PyValue::Str(text);
  }
  std::string repr;
  if (node.IsSequence()) {
    for (const auto& item : node) {
      repr += (repr.empty() ? "" : ", ") + ReprOf(FromYaml(item));
    }
    return PyValue::List("[" + repr + "]");
  }
  for (const auto& kv : node) {
    repr += (repr.empty() ? "" : ", ") + ReprOf(FromYaml(kv.first)) + ": " +
            ReprOf(FromYaml(kv.second));
  }
  return PyValue::List("{" + repr + "}");
}

PyValue FromJson(const nlohmann::json& j) {
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
      repr += (repr.empty() ? "" : ", ") + ReprOf(FromJson(item));
    }
    return PyValue::List("[" + repr + "]");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    repr += (repr.empty() ? "" : ", ") + ReprOf(PyValue::Str(it.key())) + ": " +
            ReprOf(FromJson(it.value()));
  }
  return PyValue::List("{" + repr + "}");
}

// One top-level entry: a section (a mapping, or null = empty) or a value.
struct RawEntry {
  PyValue value;
  bool is_mapping = false;
  std::map<std::string, PyValue> mapping;
};

StatusOr<std::map<std::string, RawEntry>> ReadEntries(const std::string& path,
                                                      const std::string& text) {
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
          e.mapping[s.key()] = FromJson(s.value());
        }
      } else {
        e.value = FromJson(it.value());
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
        e.mapping[s.first.Scalar()] = FromYaml(s.second);
      }
    } else {
      e.value = FromYaml(kv.second);
    }
    out[kv.first.Scalar()] = std::move(e);
  }
  return out;
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
  DDP_ASSIGN_OR_RETURN(auto entries, ReadEntries(path, ss.str()));
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
