#include "agent/frontends/accelerate/accelerate_args.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "agent/frontends/accelerate/accelerate_config.h"
#include "agent/frontends/accelerate/accelerate_flags.h"
#include "agent/cli/cli_values.h"
#include "agent/cli/option_tokenizer.h"

namespace ddprun::agent {
namespace {

// accelerate's get_int_from_env: the first variable set to an int >= 0.
StatusOr<long long> IntFromEnv(const std::map<std::string, std::string>& env,
                               const std::vector<std::string>& names,
                               long long def) {
  for (const std::string& name : names) {
    auto it = env.find(name);
    if (it == env.end()) continue;
    DDP_ASSIGN_OR_RETURN(long v, ParseIntValue(name, it->second));
    if (v >= 0) return v;
  }
  return def;
}

std::size_t CountCommaParts(const std::string& s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), ',')) + 1;
}

// The config file half of _validate_launch_command.
Status ApplyConfig(const AccelerateConfig& cfg, AccelerateArgs* a) {
  auto& ns = a->ns;
  const std::string dt = cfg.Get("distributed_type").ToString();
  if (!a->Flag("multi_gpu") && !a->Flag("use_fsdp")) {
    if (dt == "DEEPSPEED" || dt == "XLA" || dt == "MEGATRON_LM") {
      return InvalidArgumentError(
          "--config_file " + cfg.path + ": distributed_type " + dt +
          " is not supported by ddprun-accelerate" +
          (dt == "DEEPSPEED" ? " (use ddprun-deepspeed)" : ""));
    }
    ns["multi_gpu"] =
        PyValue::Bool(dt.compare(0, 6, "MULTI_") == 0 && dt != "MULTI_CPU");
    ns["use_fsdp"] = PyValue::Bool(dt == "FSDP");
    auto pc = cfg.sections.find("parallelism_config");
    ns["use_parallelism_config"] =
        PyValue::Bool(pc != cfg.sections.end() && !pc->second.empty());
  }
  if (a->Get("gpu_ids").is_none()) {
    ns["gpu_ids"] =
        cfg.Get("gpu_ids").is_none() ? PyValue::Str("all") : cfg.Get("gpu_ids");
  }
  if (a->Flag("multi_gpu") && a->Get("num_machines").is_none()) {
    ns["num_machines"] = cfg.Get("num_machines");
  }
  const std::string gpu_ids = a->Get("gpu_ids").ToString();
  if (CountCommaParts(gpu_ids) < 2 && gpu_ids != "all" &&
      a->Flag("multi_gpu") && a->Int("num_machines", 1) <= 1) {
    return InvalidArgumentError(
        "Less than two GPU ids were configured and tried to run on multiple "
        "GPUs. Please ensure at least two are specified for `--gpu_ids`, or "
        "use `--gpu_ids='all'`.");
  }
  // Section keys become flags (fsdp_config.x -> fsdp_x) unless given on
  // the command line; plain keys fill flags still None.
  for (const auto& [section, entries] : cfg.sections) {
    for (const auto& [raw_key, value] : entries) {
      std::string key = raw_key;
      if (section == "fsdp_config" && key.compare(0, 4, "fsdp") != 0) {
        key = "fsdp_" + key;
      } else if (section == "fp8_config" && key.compare(0, 3, "fp8") != 0) {
        key = "fp8_" + key;
      } else if (section == "dynamo_config" &&
                 key.compare(0, 7, "dynamo_") != 0) {
        key = "dynamo_" + key;
      }
      if (!a->given.count(key)) ns[key] = value;
    }
  }
  for (const auto& [name, value] : cfg.values) {
    if (name == "compute_environment" || name == "mixed_precision" ||
        name == "distributed_type") {
      continue;
    }
    auto it = ns.find(name);
    if (it == ns.end() || it->second.is_none()) ns[name] = value;
  }
  if (!a->Flag("debug")) ns["debug"] = cfg.Get("debug");
  if (!a->Get("mixed_precision").Truthy()) {
    ns["mixed_precision"] = cfg.Get("mixed_precision").is_none()
                                ? PyValue::Str("no")
                                : cfg.Get("mixed_precision");
  }
  if (a->Get("dynamo_backend").is_none())
    ns["dynamo_backend"] = PyValue::Str("no");
  if (a->Int("num_processes", 0) == -1) {
    return InvalidArgumentError(
        "You need to manually pass in `--num_processes` using this config "
        "yaml (" +
        cfg.path + ").");
  }
  return Status::Ok();
}

}  // namespace

const PyValue& AccelerateArgs::Get(const std::string& dest) const {
  static const PyValue none;
  auto it = ns.find(dest);
  return it == ns.end() ? none : it->second;
}

long long AccelerateArgs::Int(const std::string& dest, long long def) const {
  const PyValue& v = Get(dest);
  if (v.kind == PyValue::Kind::kInt) return v.i;
  if (v.kind == PyValue::Kind::kBool) return v.b ? 1 : 0;
  return def;
}

int PhysicalCores(const std::string& root) {
  std::set<std::string> cores;
  for (const char* file : {"core_cpus_list", "thread_siblings_list"}) {
    const std::string dir = root + "/sys/devices/system/cpu";
    if (DIR* d = ::opendir(dir.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name.size() < 4 || name.compare(0, 3, "cpu") != 0 ||
            !std::isdigit(static_cast<unsigned char>(name[3]))) {
          continue;
        }
        std::ifstream in(dir + "/" + name + "/topology/" + file);
        std::string line;
        if (std::getline(in, line)) cores.insert(line);
      }
      ::closedir(d);
    }
    if (!cores.empty()) return static_cast<int>(cores.size());
  }
  std::ifstream cpuinfo(root + "/proc/cpuinfo");
  std::string physical = "", line;
  while (std::getline(cpuinfo, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key =
        line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value =
        colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "physical id") physical = value;
    if (key == "core id") cores.insert(physical + "/" + value);
  }
  return cores.empty() ? 1 : static_cast<int>(cores.size());
}

StatusOr<AccelerateArgs> ParseAccelerateArgs(
    const std::vector<std::string>& args,
    const std::map<std::string, std::string>& env, const AccelerateHost& host) {
  std::vector<OptionSpec> specs = {
      {"help", {"-h", "--help"}, OptionKind::kHelp}};
  for (const AccelFlag& f : AccelerateFlags()) {
    specs.push_back({f.dest, f.names,
                     f.type == AccelFlagType::kFlag ? OptionKind::kFlag
                                                    : OptionKind::kValue});
  }
  StatusOr<TokenizedArgs> tokens =
      TokenizeOptions(args, specs, /*allow_abbrev=*/false);
  if (!tokens.ok()) return UnsupportedFlagError(tokens.status().message());
  AccelerateArgs a;
  if (tokens->help) {
    a.help = true;
    return a;
  }
  for (const AccelFlag& f : AccelerateFlags()) {
    a.ns[f.dest] = f.def;
    if (!tokens->Has(f.dest)) continue;
    DDP_ASSIGN_OR_RETURN(a.ns[f.dest],
                         ConvertAccelerateFlag(f, tokens->Name(f.dest),
                                               tokens->Get(f.dest, "")));
    a.given.insert(f.dest);
  }
  if (!tokens->has_entrypoint || tokens->entrypoint.empty()) {
    return InvalidArgumentError(
        "missing training script: usage is ddprun-accelerate [options] "
        "TRAINING_SCRIPT [args...]");
  }
  a.training_script = tokens->entrypoint;
  a.training_script_args = tokens->rest;

  auto& ns = a.ns;
  if (a.Flag("multi_gpu") + a.Flag("cpu") + a.Flag("use_fsdp") > 1) {
    return InvalidArgumentError(
        "You can only use one of `--cpu`, `--multi_gpu`, `--tpu`, "
        "`--use_deepspeed`, `--use_fsdp` at a time.");
  }
  if (a.Flag("multi_gpu") && !a.Get("num_processes").is_none() &&
      a.Int("num_processes", 0) < 2) {
    return InvalidArgumentError(
        "You need to use at least 2 processes to use `--multi_gpu`.");
  }
  // accelerate compares the str "1" to the int 1 here: only a config
  // file's integer fsdp_version: 1 trips it.
  const PyValue& fsdp_version = a.Get("fsdp_version");
  if ((!a.Flag("use_fsdp") ||
       (fsdp_version.kind == PyValue::Kind::kInt && fsdp_version.i == 1)) &&
      a.Flag("use_parallelism_config")) {
    return InvalidArgumentError(
        "You cannot use `--use_parallelism_config` without `--use_fsdp` and "
        "`--fsdp_version=2`.");
  }
  std::vector<std::string> warned;
  const std::string default_config = DefaultAccelerateConfigPath(env);
  std::string config_path =
      a.Get("config_file").is_none() ? "" : a.Get("config_file").ToString();
  if (config_path.empty() && !a.Flag("cpu") &&
      std::ifstream(default_config).good()) {
    config_path = default_config;
  }
  if (!config_path.empty()) {
    DDP_ASSIGN_OR_RETURN(AccelerateConfig cfg,
                         LoadAccelerateConfig(config_path));
    DDP_RETURN_IF_ERROR(ApplyConfig(cfg, &a));
    a.config_file = config_path;
  } else {
    if (a.Get("num_processes").is_none()) {
      ns["num_processes"] = PyValue::Int(host.cuda_devices);
      warned.push_back("\t`--num_processes` was set to a value of `" +
                       std::to_string(host.cuda_devices) + "`");
    }
    if (a.Get("debug").is_none()) ns["debug"] = PyValue::Bool(false);
    if (!a.Flag("multi_gpu") && a.Int("num_processes", 0) > 1 &&
        host.cuda_devices > 1) {
      warned.push_back(
          "\t\tMore than one GPU was found, enabling multi-GPU training.\n"
          "\t\tIf this was unintended please pass in `--num_processes=1`.");
      ns["multi_gpu"] = PyValue::Bool(true);
    }
    if (a.Get("num_machines").is_none()) {
      warned.push_back("\t`--num_machines` was set to a value of `1`");
      ns["num_machines"] = PyValue::Int(1);
    }
    if (a.Get("mixed_precision").is_none()) {
      warned.push_back("\t`--mixed_precision` was set to a value of `'no'`");
      ns["mixed_precision"] = PyValue::Str("no");
    }
    if (!ns.count("use_cpu")) ns["use_cpu"] = a.Get("cpu");
    if (a.Get("dynamo_backend").is_none()) {
      warned.push_back("\t`--dynamo_backend` was set to a value of `'no'`");
      ns["dynamo_backend"] = PyValue::Str("no");
    }
  }
  if (a.Get("num_cpu_threads_per_process").is_none()) {
    DDP_ASSIGN_OR_RETURN(long long omp,
                         IntFromEnv(env, {"OMP_NUM_THREADS"}, 1));
    ns["num_cpu_threads_per_process"] = PyValue::Int(omp);
    DDP_ASSIGN_OR_RETURN(long long omp_set,
                         IntFromEnv(env, {"OMP_NUM_THREADS"}, 0));
    const long long procs = a.Int("num_processes", 0);
    if (a.Flag("use_cpu") && procs >= 1 && omp_set == 0) {
      const long long machines = std::max(1LL, a.Int("num_machines", 1));
      DDP_ASSIGN_OR_RETURN(
          long long local,
          IntFromEnv(env,
                     {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE",
                      "MV2_COMM_WORLD_LOCAL_SIZE"},
                     std::max(1LL, procs / machines)));
      const long long threads = local > 0 ? host.physical_cores / local : 0;
      if (threads > 1) {
        ns["num_cpu_threads_per_process"] = PyValue::Int(threads);
        warned.push_back("\t`--num_cpu_threads_per_process` was set to `" +
                         std::to_string(threads) +
                         "` to improve out-of-box performance when training "
                         "on CPUs");
      }
    }
  }
  if (!warned.empty()) {
    std::string message =
        "The following values were not passed to `accelerate launch` and had "
        "defaults used instead:\n";
    for (std::size_t i = 0; i < warned.size(); ++i) {
      message += (i ? "\n" : "") + warned[i];
    }
    message +=
        "\nTo avoid this warning pass in values for each of the problematic "
        "parameters or run `accelerate config`.";
    a.warnings.push_back(message);
  }
  return a;
}

}  // namespace ddprun::agent
