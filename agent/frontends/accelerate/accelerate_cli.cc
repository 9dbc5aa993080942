#include "agent/frontends/accelerate/accelerate_cli.h"

#include <algorithm>
#include <cctype>

#include "agent/cli/cli_entrypoint.h"

namespace ddprun::agent {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(c));
  return s;
}

// PrecisionType and DynamoBackend (accelerate/utils/dataclasses.py).
const std::vector<std::string>& Precisions() {
  static const std::vector<std::string> v = {"no", "fp8", "fp16", "bf16"};
  return v;
}
const std::vector<std::string>& DynamoBackends() {
  static const std::vector<std::string> v = {"NO",
                                             "EAGER",
                                             "AOT_EAGER",
                                             "INDUCTOR",
                                             "AOT_TS_NVFUSER",
                                             "NVPRIMS_NVFUSER",
                                             "CUDAGRAPHS",
                                             "OFI",
                                             "FX2TRT",
                                             "ONNXRT",
                                             "TENSORRT",
                                             "AOT_TORCHXLA_TRACE_ONCE",
                                             "TORCHXLA_TRACE_ONCE",
                                             "TVM",
                                             "HPU_BACKEND",
                                             "NEURON"};
  return v;
}

std::string ListRepr(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "['" : ", '") + s + "'";
  return out + "]";
}

// The three entries of fp8_override_linear_precision, as str() of each.
std::vector<std::string> TripleItems(const PyValue& v) {
  std::string text = v.ToString();
  std::vector<std::string> out;
  std::string item;
  for (char c : text) {
    if (c == '(' || c == ')' || c == '[' || c == ']' || c == ' ') continue;
    if (c == ',') {
      out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  out.push_back(item);
  return out;
}

Status AddFp8(const AccelerateArgs& a,
              std::map<std::string, std::string>* env) {
  for (const auto& [dest, value] : a.ns) {
    if (dest.compare(0, 4, "fp8_") != 0 || value.is_none()) continue;
    if (dest == "fp8_override_linear_precision") {
      std::vector<std::string> items = TripleItems(value);
      if (items.size() != 3) {
        return InvalidArgumentError(
            "fp8_override_linear_precision: expected three booleans, got " +
            value.ToString());
      }
      (*env)["ACCELERATE_FP8_OVERRIDE_FPROP"] = items[0];
      (*env)["ACCELERATE_FP8_OVERRIDE_DGRAD"] = items[1];
      (*env)["ACCELERATE_FP8_OVERRIDE_WGRAD"] = items[2];
    } else {
      (*env)["ACCELERATE_" + Upper(dest)] = value.ToString();
    }
  }
  return Status::Ok();
}

void AddFsdp(const AccelerateArgs& a, std::map<std::string, std::string>* env) {
  auto& e = *env;
  auto str = [&a](const char* dest) { return a.Get(dest).ToString(); };
  e["ACCELERATE_USE_FSDP"] = "true";
  e["FSDP_VERSION"] = str("fsdp_version");
  e["FSDP_SHARDING_STRATEGY"] = str("fsdp_sharding_strategy");
  e["FSDP_RESHARD_AFTER_FORWARD"] = Lower(str("fsdp_reshard_after_forward"));
  e["FSDP_OFFLOAD_PARAMS"] = Lower(str("fsdp_offload_params"));
  e["FSDP_MIN_NUM_PARAMS"] = str("fsdp_min_num_params");
  const std::pair<const char*, const char*> optional[] = {
      {"fsdp_auto_wrap_policy", "FSDP_AUTO_WRAP_POLICY"},
      {"fsdp_transformer_layer_cls_to_wrap", "FSDP_TRANSFORMER_CLS_TO_WRAP"},
      {"fsdp_backward_prefetch", "FSDP_BACKWARD_PREFETCH"},
      {"fsdp_state_dict_type", "FSDP_STATE_DICT_TYPE"},
      {"fsdp_ignored_modules", "FSDP_IGNORED_MODULES"}};
  for (const auto& [dest, var] : optional) {
    if (!a.Get(dest).is_none()) e[var] = str(dest);
  }
  e["FSDP_FORWARD_PREFETCH"] = Lower(str("fsdp_forward_prefetch"));
  e["FSDP_USE_ORIG_PARAMS"] = Lower(str("fsdp_use_orig_params"));
  e["FSDP_CPU_RAM_EFFICIENT_LOADING"] =
      Lower(str("fsdp_cpu_ram_efficient_loading"));
  e["FSDP_SYNC_MODULE_STATES"] = Lower(str("fsdp_sync_module_states"));
  e["FSDP_ACTIVATION_CHECKPOINTING"] =
      Lower(str("fsdp_activation_checkpointing"));
}

void AddParallelism(const AccelerateArgs& a,
                    std::map<std::string, std::string>* env) {
  auto& e = *env;
  auto str = [&a](const std::string& key) {
    return a.Get("parallelism_config_" + key).ToString();
  };
  e["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true";
  for (const char* key : {"dp_replicate_size", "dp_shard_size", "tp_size",
                          "cp_size", "cp_backend", "sp_size", "sp_backend"}) {
    e["PARALLELISM_CONFIG_" + Upper(key)] = str(key);
  }
  if (a.Int("parallelism_config_cp_size", 1) > 1) {
    e["PARALLELISM_CONFIG_CP_COMM_STRATEGY"] = str("cp_comm_strategy");
  }
  if (a.Int("parallelism_config_sp_size", 1) > 1) {
    for (const char* key : {"sp_seq_length", "sp_seq_length_is_variable",
                            "sp_attn_implementation"}) {
      e["PARALLELISM_CONFIG_" + Upper(key)] = str(key);
    }
  }
}

// The torchrun command line accelerate's multi_gpu_launcher runs, as
// ddprun arguments.
StatusOr<std::vector<std::string>> TorchrunArgs(
    const AccelerateArgs& a, const AccelerateProbes& probes,
    std::vector<std::string>* warnings) {
  const PyValue& port_value = a.Get("main_process_port");
  int port = port_value.is_none() ? 29500 : static_cast<int>(port_value.i);
  if (!port_value.is_none() && port == 0) port = probes.free_port();
  if (port < 0 || port > 65535) {
    return InvalidArgumentError("--main_process_port: invalid value '" +
                                port_value.ToString() + "'");
  }
  const long long procs = a.Int("num_processes", 0);
  const long long machines = a.Int("num_machines", 1);
  std::vector<std::string> out;
  if (machines > 1) {
    if (a.Get("machine_rank").is_none()) {
      return InvalidArgumentError(
          "--machine_rank is required with --num_machines > 1");
    }
    if (a.Get("main_process_ip").is_none()) {
      return InvalidArgumentError(
          "When using multiple machines, you need to specify the main "
          "process IP (--main_process_ip).");
    }
    const long long per_node = procs / machines;
    if (per_node < 1) {
      return InvalidArgumentError(
          "--num_processes " + std::to_string(procs) + " over --num_machines " +
          std::to_string(machines) + " gives no process per machine");
    }
    out = {"--nproc_per_node=" + std::to_string(per_node),
           "--nnodes=" + std::to_string(machines),
           "--node_rank=" + a.Get("machine_rank").ToString()};
    const std::string ip = a.Get("main_process_ip").ToString();
    if (a.Flag("same_network")) {
      out.push_back("--master_addr=" + ip);
      out.push_back("--master_port=" + std::to_string(port));
    } else {
      out.push_back("--rdzv_endpoint=" + ip + ":" + std::to_string(port));
    }
  } else {
    if (procs < 1) {
      return InvalidArgumentError(
          "--num_processes: " + std::to_string(procs) +
          " processes (the multi-GPU launch needs at least 1; no GPU was "
          "found, pass --num_processes)");
    }
    out = {"--nproc_per_node=" + std::to_string(procs),
           "--master_port=" + std::to_string(port)};
  }
  bool standalone = false;
  if ((machines <= 1 || a.Int("machine_rank", 0) == 0) &&
      probes.port_in_use(port)) {
    if (machines > 1) {
      return UnavailableError(
          "Tried to launch distributed communication on port `" +
          std::to_string(port) +
          "`, but another process is utilizing it. Please specify a "
          "different port (such as using the `--main_process_port` flag or "
          "specifying a different `main_process_port` in your config file) "
          "and rerun your script.");
    }
    standalone = true;
    warnings->push_back(
        "Port `" + std::to_string(port) +
        "` is already in use. Accelerate will attempt to launch in a "
        "standalone-like mode by finding an open port automatically for this "
        "session.");
  }
  if (standalone) {
    out = {out[0], "--standalone"};
  } else {
    out.push_back("--rdzv_backend=" + a.Get("rdzv_backend").ToString());
    const std::string conf = a.Get("rdzv_conf").ToString();
    if (!a.Get("rdzv_conf").is_none() && !conf.empty()) {
      out.push_back("--rdzv_conf=" + conf);
    }
  }
  out.push_back("--max_restarts=" + a.Get("max_restarts").ToString());
  out.push_back("--monitor_interval=" + a.Get("monitor_interval").ToString());
  out.push_back("--tee=" + a.Get("tee").ToString());
  if (!a.Get("log_dir").is_none()) {
    out.push_back("--log_dir=" + a.Get("log_dir").ToString());
  }
  out.push_back("--role=" + a.Get("role").ToString());
  if (a.Flag("module")) out.push_back("--module");
  if (a.Flag("no_python")) out.push_back("--no_python");
  out.push_back("--");
  out.push_back(a.training_script);
  out.insert(out.end(), a.training_script_args.begin(),
             a.training_script_args.end());
  return out;
}

}  // namespace

StatusOr<std::map<std::string, std::string>> AccelerateWorkerEnv(
    const AccelerateArgs& a, bool multi_gpu) {
  std::map<std::string, std::string> env;
  if (!multi_gpu) {
    const bool use_cpu = a.Flag("cpu") || a.Flag("use_cpu");
    env["ACCELERATE_USE_CPU"] = use_cpu ? "True" : "False";
  }
  if (a.Flag("debug")) env["ACCELERATE_DEBUG_MODE"] = "true";
  const PyValue& gpu_ids = a.Get("gpu_ids");
  if (!gpu_ids.is_none() && gpu_ids.ToString() != "all") {
    env["CUDA_VISIBLE_DEVICES"] = gpu_ids.ToString();
  }
  if (!multi_gpu) {
    const long long machines = a.Int("num_machines", 1);
    if (machines > 1 && (a.Get("main_process_ip").is_none() ||
                         a.Get("main_process_port").is_none())) {
      return InvalidArgumentError(
          "When using multiple machines, you need to specify the main "
          "process IP and port.");
    }
    if (a.Int("num_processes", 0) > 1 || machines > 1) {
      env["MASTER_ADDR"] = a.Get("main_process_ip").is_none()
                               ? "127.0.0.1"
                               : a.Get("main_process_ip").ToString();
      env["MASTER_PORT"] = a.Get("main_process_port").is_none()
                               ? "29500"
                               : a.Get("main_process_port").ToString();
    }
    if (env["ACCELERATE_USE_CPU"] == "True") {
      env["KMP_AFFINITY"] = "granularity=fine,compact,1,0";
      env["KMP_BLOCKTIME"] = "1";
    }
  }
  const std::string precision = Lower(a.Get("mixed_precision").ToString());
  if (std::find(Precisions().begin(), Precisions().end(), precision) ==
      Precisions().end()) {
    return InvalidArgumentError("Unknown mixed_precision mode: " + precision +
                                ". Choose between " + ListRepr(Precisions()) +
                                ".");
  }
  env["ACCELERATE_MIXED_PRECISION"] = precision;
  if (precision == "fp8") DDP_RETURN_IF_ERROR(AddFp8(a, &env));
  const std::string dynamo = Upper(a.Get("dynamo_backend").ToString());
  if (std::find(DynamoBackends().begin(), DynamoBackends().end(), dynamo) ==
      DynamoBackends().end()) {
    return InvalidArgumentError("Unknown dynamo backend: " + dynamo +
                                ". Choose between " +
                                ListRepr(DynamoBackends()) + ".");
  }
  env["ACCELERATE_DYNAMO_BACKEND"] = dynamo;
  env["ACCELERATE_DYNAMO_MODE"] = a.Get("dynamo_mode").ToString();
  env["ACCELERATE_DYNAMO_USE_FULLGRAPH"] =
      a.Get("dynamo_use_fullgraph").ToString();
  env["ACCELERATE_DYNAMO_USE_DYNAMIC"] = a.Get("dynamo_use_dynamic").ToString();
  env["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] =
      a.Get("dynamo_use_regional_compilation").ToString();
  if (multi_gpu && a.Flag("use_fsdp")) {
    if (a.Flag("fsdp_cpu_ram_efficient_loading") &&
        !a.Flag("fsdp_sync_module_states")) {
      return InvalidArgumentError(
          "When using `--fsdp_cpu_ram_efficient_loading` set "
          "`--fsdp_sync_module_states` to `True`");
    }
    AddFsdp(a, &env);
  }
  env["OMP_NUM_THREADS"] = a.Get("num_cpu_threads_per_process").ToString();
  if (a.Flag("enable_cpu_affinity")) env["ACCELERATE_CPU_AFFINITY"] = "1";
  if (multi_gpu && a.Flag("use_parallelism_config")) AddParallelism(a, &env);
  return env;
}

StatusOr<AcceleratePlan> PlanAccelerateLaunch(
    const std::vector<std::string>& args,
    const std::map<std::string, std::string>& env,
    const AccelerateProbes& probes) {
  DDP_ASSIGN_OR_RETURN(AccelerateArgs a,
                       ParseAccelerateArgs(args, env, probes.host));
  AcceleratePlan plan;
  if (a.help) {
    plan.show_help = true;
    return plan;
  }
  plan.warnings = a.warnings;
  if (a.Flag("module") && a.Flag("no_python")) {
    return InvalidArgumentError(
        "--module and --no_python cannot be used together");
  }
  // launch_command: FSDP and multi-GPU go through torchrun; anything else
  // (--cpu, one process, MULTI_CPU without mpirun) is one plain process.
  plan.torchrun = !a.Flag("cpu") && (a.Flag("use_fsdp") || a.Flag("multi_gpu"));
  // prepare_simple_launcher_cmd_env runs mpirun over the hostfile when the
  // config's mpirun_config gives one; one process here would silently be a
  // different job.
  if (!plan.torchrun && !a.Get("mpirun_hostfile").is_none()) {
    return InvalidArgumentError(
        "mpirun_config.mpirun_hostfile (--config_file " + a.config_file +
        "): accelerate's mpirun launch is not supported by "
        "ddprun-accelerate; remove mpirun_config and start ddprun-accelerate "
        "(or ddprun) on each machine");
  }
  DDP_ASSIGN_OR_RETURN(auto worker_env, AccelerateWorkerEnv(a, plan.torchrun));
  LaunchOptions check;
  check.entrypoint = a.training_script;
  check.module = a.Flag("module");
  check.no_python = a.Flag("no_python");
  DDP_RETURN_IF_ERROR(CheckEntrypoint(check, env));
  if (!plan.torchrun) {
    plan.exec_env = env;
    for (const auto& [k, v] : worker_env) plan.exec_env[k] = v;
    if (!check.no_python) {
      auto py = env.find("PYTHON_EXEC");
      plan.exec_argv.push_back(py == env.end() ? "python3" : py->second);
      if (check.module) plan.exec_argv.push_back("-m");
    }
    plan.exec_argv.push_back(a.training_script);
    plan.exec_argv.insert(plan.exec_argv.end(), a.training_script_args.begin(),
                          a.training_script_args.end());
    return plan;
  }
  DDP_ASSIGN_OR_RETURN(std::vector<std::string> torchrun,
                       TorchrunArgs(a, probes, &plan.warnings));
  // torchrun's PET_* defaults still apply to what accelerate leaves unset;
  // the flags it always passes (and ddprun's scheduler defaults, which
  // torchrun does not have) do not.
  std::map<std::string, std::string> parse_env;
  for (const auto& [k, v] : env) {
    if (k.compare(0, 6, "SLURM_") == 0 || k == "JOB_COMPLETION_INDEX") continue;
    bool overridden = false;
    for (const char* pet :
         {"PET_LOG_DIR", "PET_MODULE", "PET_NO_PYTHON", "PET_RDZV_BACKEND",
          "PET_RDZV_CONF", "PET_MAX_RESTARTS", "PET_MONITOR_INTERVAL",
          "PET_TEE", "PET_ROLE"}) {
      overridden = overridden || k == pet;
    }
    if (!overridden) parse_env[k] = v;
  }
  for (const auto& [k, v] : worker_env) parse_env[k] = v;
  DDP_ASSIGN_OR_RETURN(plan.launch,
                       ParseCommandLine(torchrun, parse_env, /*legacy=*/false));
  plan.launch.env_overrides = worker_env;
  return plan;
}

}  // namespace ddprun::agent
