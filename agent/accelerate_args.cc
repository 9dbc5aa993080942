#include "agent/accelerate_args.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "agent/accelerate_config.h"
#include "agent/cli_values.h"
#include "agent/option_tokenizer.h"

namespace ddprun::agent {
namespace {

// How argparse converts a flag's text (the `type=` / `action=`).
enum class Type {
  kStr,
  kInt,
  kFloat,
  kFlag,       // store_true
  kStrToBool,  // type=str_to_bool: y/yes/t/true/on/1 -> 1, n/... -> 0
  kPyBool,     // type=bool: any non-empty text is True
  kBoolList,   // fp8_override_linear_precision: "a,b,c" of str_to_bool
};

struct AccelFlag {
  const char* dest;
  std::vector<std::string> names;
  Type type;
  PyValue def;
  std::vector<std::string> choices;  // empty = any
};

PyValue S(const char* s) { return PyValue::Str(s); }
PyValue I(long long i) { return PyValue::Int(i); }
PyValue F(double f) { return PyValue::Float(f); }
PyValue B(bool b) { return PyValue::Bool(b); }
PyValue N() { return PyValue::None(); }

// launch_command_parser, in its order, for the paths ddprun-accelerate
// runs. A store_true added to the parser itself defaults to None, one added
// to a group to False (CustomArgumentParser).
const std::vector<AccelFlag>& Flags() {
  static const std::vector<AccelFlag>* flags = new std::vector<AccelFlag>{
      {"config_file", {"--config_file"}, Type::kStr, N(), {}},
      {"quiet", {"--quiet", "-q"}, Type::kFlag, N(), {}},
      {"cpu", {"--cpu"}, Type::kFlag, B(false), {}},
      {"multi_gpu", {"--multi_gpu"}, Type::kFlag, B(false), {}},
      {"mixed_precision",
       {"--mixed_precision"},
       Type::kStr,
       N(),
       {"no", "fp16", "bf16", "fp8"}},
      {"num_processes", {"--num_processes"}, Type::kInt, N(), {}},
      {"num_machines", {"--num_machines"}, Type::kInt, N(), {}},
      {"num_cpu_threads_per_process",
       {"--num_cpu_threads_per_process"},
       Type::kInt,
       N(),
       {}},
      {"enable_cpu_affinity",
       {"--enable_cpu_affinity"},
       Type::kFlag,
       B(false),
       {}},
      // config_utils.DYNAMO_BACKENDS, lower-cased (its typo included).
      {"dynamo_backend",
       {"--dynamo_backend"},
       Type::kStr,
       N(),
       {"no", "eager", "aot_eager", "inductor", "aot_ts_nvfuser",
        "nvprims_nvfuser", "cudagraphs", "ofi", "fx2trt", "onnxrt", "tensorrt",
        "aot_torchxla_trace_once", "torhchxla_trace_once", "tvm"}},
      {"dynamo_mode",
       {"--dynamo_mode"},
       Type::kStr,
       S("default"),
       {"default", "reduce-overhead", "max-autotune"}},
      {"dynamo_use_fullgraph",
       {"--dynamo_use_fullgraph"},
       Type::kFlag,
       B(false),
       {}},
      {"dynamo_use_dynamic",
       {"--dynamo_use_dynamic"},
       Type::kFlag,
       B(false),
       {}},
      {"dynamo_use_regional_compilation",
       {"--dynamo_use_regional_compilation"},
       Type::kFlag,
       B(false),
       {}},
      {"use_fsdp", {"--use_fsdp"}, Type::kFlag, B(false), {}},
      {"use_parallelism_config",
       {"--use_parallelism_config"},
       Type::kFlag,
       B(false),
       {}},
      {"gpu_ids", {"--gpu_ids"}, Type::kStr, N(), {}},
      {"same_network", {"--same_network"}, Type::kFlag, B(false), {}},
      {"machine_rank", {"--machine_rank"}, Type::kInt, N(), {}},
      {"main_process_ip", {"--main_process_ip"}, Type::kStr, N(), {}},
      {"main_process_port", {"--main_process_port"}, Type::kInt, N(), {}},
      {"tee", {"-t", "--tee"}, Type::kStr, S("0"), {}},
      {"log_dir", {"--log_dir"}, Type::kStr, N(), {}},
      {"role", {"--role"}, Type::kStr, S("default"), {}},
      {"rdzv_backend", {"--rdzv_backend"}, Type::kStr, S("static"), {}},
      {"rdzv_conf", {"--rdzv_conf"}, Type::kStr, S(""), {}},
      {"max_restarts", {"--max_restarts"}, Type::kInt, I(0), {}},
      {"monitor_interval", {"--monitor_interval"}, Type::kFloat, F(0.1), {}},
      {"module", {"-m", "--module"}, Type::kFlag, N(), {}},
      {"no_python", {"--no_python"}, Type::kFlag, N(), {}},
      {"fsdp_version", {"--fsdp_version"}, Type::kStr, S("1"), {"1", "2"}},
      {"fsdp_offload_params",
       {"--fsdp_offload_params"},
       Type::kStr,
       S("false"),
       {}},
      {"fsdp_min_num_params",
       {"--fsdp_min_num_params"},
       Type::kInt,
       I(100000000),
       {}},
      {"fsdp_sharding_strategy",
       {"--fsdp_sharding_strategy"},
       Type::kStr,
       S("FULL_SHARD"),
       {}},
      {"fsdp_reshard_after_forward",
       {"--fsdp_reshard_after_forward"},
       Type::kStr,
       S("true"),
       {}},
      {"fsdp_auto_wrap_policy",
       {"--fsdp_auto_wrap_policy"},
       Type::kStr,
       N(),
       {}},
      {"fsdp_transformer_layer_cls_to_wrap",
       {"--fsdp_transformer_layer_cls_to_wrap"},
       Type::kStr,
       N(),
       {}},
      {"fsdp_backward_prefetch",
       {"--fsdp_backward_prefetch"},
       Type::kStr,
       N(),
       {}},
      {"fsdp_state_dict_type", {"--fsdp_state_dict_type"}, Type::kStr, N(), {}},
      {"fsdp_forward_prefetch",
       {"--fsdp_forward_prefetch"},
       Type::kStr,
       S("false"),
       {}},
      {"fsdp_use_orig_params",
       {"--fsdp_use_orig_params"},
       Type::kStr,
       S("true"),
       {}},
      {"fsdp_cpu_ram_efficient_loading",
       {"--fsdp_cpu_ram_efficient_loading"},
       Type::kStr,
       S("true"),
       {}},
      {"fsdp_sync_module_states",
       {"--fsdp_sync_module_states"},
       Type::kStr,
       S("true"),
       {}},
      {"fsdp_activation_checkpointing",
       {"--fsdp_activation_checkpointing"},
       Type::kStr,
       S("false"),
       {}},
      {"fp8_backend",
       {"--fp8_backend"},
       Type::kStr,
       N(),
       {"ao", "te", "msamp"}},
      {"fp8_use_autocast_during_eval",
       {"--fp8_use_autocast_during_eval"},
       Type::kFlag,
       B(false),
       {}},
      {"fp8_margin", {"--fp8_margin"}, Type::kInt, I(0), {}},
      {"fp8_interval", {"--fp8_interval"}, Type::kInt, I(1), {}},
      {"fp8_format",
       {"--fp8_format"},
       Type::kStr,
       S("HYBRID"),
       {"HYBRID", "E4M3", "E5M2"}},
      {"fp8_amax_history_len",
       {"--fp8_amax_history_len"},
       Type::kInt,
       I(1024),
       {}},
      {"fp8_amax_compute_algo",
       {"--fp8_amax_compute_algo"},
       Type::kStr,
       S("most_recent"),
       {"max", "most_recent"}},
      {"fp8_override_linear_precision",
       {"--fp8_override_linear_precision"},
       Type::kBoolList,
       PyValue::List("(False, False, False)"),
       {}},
      {"fp8_opt_level", {"--fp8_opt_level"}, Type::kStr, S("O2"), {"O1", "O2"}},
      // type=str_to_bool applies to the string default "true" too: 1.
      {"fp8_enable_fsdp_float8_all_gather",
       {"--fp8_enable_fsdp_float8_all_gather"},
       Type::kStrToBool,
       I(1),
       {}},
      {"fp8_pad_inner_dim",
       {"--fp8_pad_inner_dim"},
       Type::kStrToBool,
       I(1),
       {}},
      {"debug", {"--debug"}, Type::kFlag, N(), {}},
      {"parallelism_config_dp_replicate_size",
       {"--parallelism_config_dp_replicate_size"},
       Type::kInt,
       I(1),
       {}},
      {"parallelism_config_dp_shard_size",
       {"--parallelism_config_dp_shard_size"},
       Type::kInt,
       I(1),
       {}},
      {"parallelism_config_tp_size",
       {"--parallelism_config_tp_size"},
       Type::kInt,
       I(1),
       {}},
      {"parallelism_config_cp_size",
       {"--parallelism_config_cp_size"},
       Type::kInt,
       I(1),
       {}},
      {"parallelism_config_cp_backend",
       {"--parallelism_config_cp_backend"},
       Type::kStr,
       S("torch"),
       {"torch"}},
      {"parallelism_config_cp_comm_strategy",
       {"--parallelism_config_cp_comm_strategy"},
       Type::kStr,
       S("allgather"),
       {}},
      {"parallelism_config_sp_size",
       {"--parallelism_config_sp_size"},
       Type::kInt,
       I(1),
       {}},
      {"parallelism_config_sp_backend",
       {"--parallelism_config_sp_backend"},
       Type::kStr,
       S("deepspeed"),
       {"deepspeed"}},
      {"parallelism_config_sp_seq_length",
       {"--parallelism_config_sp_seq_length"},
       Type::kStr,
       N(),
       {}},
      {"parallelism_config_sp_seq_length_is_variable",
       {"--parallelism_config_sp_seq_length_is_variable"},
       Type::kPyBool,
       B(true),
       {}},
      {"parallelism_config_sp_attn_implementation",
       {"--parallelism_config_sp_attn_implementation"},
       Type::kStr,
       S("sdpa"),
       {}},
  };
  return *flags;
}

// accelerate launch flags of the paths ddprun-accelerate does not run.
const char* const kUnsupported[][2] = {
    {"--tpu", "TPU"},
    {"--no_tpu_cluster", "TPU"},
    {"--vm", "TPU"},
    {"--env", "TPU"},
    {"--main_training_function", "TPU"},
    {"--downcast_bf16", "TPU"},
    {"--use_deepspeed", "DeepSpeed (use ddprun-deepspeed)"},
    {"--deepspeed", "DeepSpeed (use ddprun-deepspeed)"},
    {"--zero", "DeepSpeed (use ddprun-deepspeed)"},
    {"--offload", "DeepSpeed (use ddprun-deepspeed)"},
    {"--gradient_accumulation_steps", "DeepSpeed (use ddprun-deepspeed)"},
    {"--gradient_clipping", "DeepSpeed (use ddprun-deepspeed)"},
    {"--use_megatron_lm", "Megatron-LM"},
    {"--megatron_lm", "Megatron-LM"},
    {"--aws", "SageMaker"},
    {"--mpirun_hostfile", "mpirun"},
};

Status Unsupported(const std::string& message) {
  const auto flag_at = message.find("--");
  if (message.compare(0, 13, "unknown flag ") != 0 ||
      flag_at == std::string::npos) {
    return InvalidArgumentError(message);
  }
  std::string flag = message.substr(flag_at);
  std::replace(flag.begin() + 2, flag.end(), '-', '_');
  for (const auto& u : kUnsupported) {
    if (flag.compare(0, std::strlen(u[0]), u[0]) == 0) {
      return InvalidArgumentError(
          flag + ": accelerate's " + u[1] +
          " launch is not supported by ddprun-accelerate");
    }
  }
  return InvalidArgumentError(message);
}

StatusOr<PyValue> Convert(const AccelFlag& f, const std::string& name,
                          const std::string& text) {
  auto str_to_bool = [&](const std::string& t) -> StatusOr<long long> {
    std::string lower;
    for (char c : t) lower += static_cast<char>(std::tolower(c));
    for (const char* yes : {"y", "yes", "t", "true", "on", "1"}) {
      if (lower == yes) return 1;
    }
    for (const char* no : {"n", "no", "f", "false", "off", "0"}) {
      if (lower == no) return 0;
    }
    return InvalidArgumentError(name + ": invalid truth value '" + t + "'");
  };
  switch (f.type) {
    case Type::kFlag:
      return PyValue::Bool(true);
    case Type::kInt: {
      DDP_ASSIGN_OR_RETURN(long v, ParseIntValue(name, text));
      return PyValue::Int(v);
    }
    case Type::kFloat: {
      DDP_ASSIGN_OR_RETURN(double v, ParseDoubleValue(name, text));
      return PyValue::Float(v);
    }
    case Type::kStrToBool: {
      DDP_ASSIGN_OR_RETURN(long long v, str_to_bool(text));
      return PyValue::Int(v);
    }
    case Type::kPyBool:
      return PyValue::Bool(!text.empty());
    case Type::kBoolList: {
      std::string repr;
      std::stringstream ss(text);
      for (std::string part; std::getline(ss, part, ',');) {
        DDP_ASSIGN_OR_RETURN(long long v, str_to_bool(part));
        repr += (repr.empty() ? "" : ", ") + std::to_string(v);
      }
      return PyValue::List("(" + repr + ")");
    }
    case Type::kStr:
      break;
  }
  if (!f.choices.empty() &&
      std::find(f.choices.begin(), f.choices.end(), text) == f.choices.end()) {
    std::string list;
    for (const auto& c : f.choices) list += (list.empty() ? "" : ", ") + c;
    return InvalidArgumentError(name + ": invalid choice '" + text +
                                "' (choose from " + list + ")");
  }
  return PyValue::Str(text);
}

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
  if (a->Get("dynamo_backend").is_none()) ns["dynamo_backend"] = S("no");
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
  for (const AccelFlag& f : Flags()) {
    specs.push_back(
        {f.dest, f.names,
         f.type == Type::kFlag ? OptionKind::kFlag : OptionKind::kValue});
  }
  StatusOr<TokenizedArgs> tokens =
      TokenizeOptions(args, specs, /*allow_abbrev=*/false);
  if (!tokens.ok()) return Unsupported(tokens.status().message());
  AccelerateArgs a;
  if (tokens->help) {
    a.help = true;
    return a;
  }
  for (const AccelFlag& f : Flags()) {
    a.ns[f.dest] = f.def;
    if (!tokens->Has(f.dest)) continue;
    DDP_ASSIGN_OR_RETURN(a.ns[f.dest], Convert(f, tokens->Name(f.dest),
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
      ns["mixed_precision"] = S("no");
    }
    if (!ns.count("use_cpu")) ns["use_cpu"] = a.Get("cpu");
    if (a.Get("dynamo_backend").is_none()) {
      warned.push_back("\t`--dynamo_backend` was set to a value of `'no'`");
      ns["dynamo_backend"] = S("no");
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
