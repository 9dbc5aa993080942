#include "agent/frontends/accelerate/accelerate_flags.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <sstream>

#include "agent/cli/cli_values.h"

namespace ddprun::agent {
namespace {

PyValue S(const char* s) { return PyValue::Str(s); }
PyValue I(long long i) { return PyValue::Int(i); }
PyValue F(double f) { return PyValue::Float(f); }
PyValue B(bool b) { return PyValue::Bool(b); }
PyValue N() { return PyValue::None(); }

}  // namespace

// A store_true added to the parser itself defaults to None, one added to a
// group to False (CustomArgumentParser).
const std::vector<AccelFlag>& AccelerateFlags() {
  static const std::vector<AccelFlag>* flags = new std::vector<AccelFlag>{
      {"config_file", {"--config_file"}, AccelFlagType::kStr, N(), {}},
      {"quiet", {"--quiet", "-q"}, AccelFlagType::kFlag, N(), {}},
      {"cpu", {"--cpu"}, AccelFlagType::kFlag, B(false), {}},
      {"multi_gpu", {"--multi_gpu"}, AccelFlagType::kFlag, B(false), {}},
      {"mixed_precision",
       {"--mixed_precision"},
       AccelFlagType::kStr,
       N(),
       {"no", "fp16", "bf16", "fp8"}},
      {"num_processes", {"--num_processes"}, AccelFlagType::kInt, N(), {}},
      {"num_machines", {"--num_machines"}, AccelFlagType::kInt, N(), {}},
      {"num_cpu_threads_per_process",
       {"--num_cpu_threads_per_process"},
       AccelFlagType::kInt,
       N(),
       {}},
      {"enable_cpu_affinity",
       {"--enable_cpu_affinity"},
       AccelFlagType::kFlag,
       B(false),
       {}},
      // config_utils.DYNAMO_BACKENDS, lower-cased (its typo included).
      {"dynamo_backend",
       {"--dynamo_backend"},
       AccelFlagType::kStr,
       N(),
       {"no", "eager", "aot_eager", "inductor", "aot_ts_nvfuser",
        "nvprims_nvfuser", "cudagraphs", "ofi", "fx2trt", "onnxrt", "tensorrt",
        "aot_torchxla_trace_once", "torhchxla_trace_once", "tvm"}},
      {"dynamo_mode",
       {"--dynamo_mode"},
       AccelFlagType::kStr,
       S("default"),
       {"default", "reduce-overhead", "max-autotune"}},
      {"dynamo_use_fullgraph",
       {"--dynamo_use_fullgraph"},
       AccelFlagType::kFlag,
       B(false),
       {}},
      {"dynamo_use_dynamic",
       {"--dynamo_use_dynamic"},
       AccelFlagType::kFlag,
       B(false),
       {}},
      {"dynamo_use_regional_compilation",
       {"--dynamo_use_regional_compilation"},
       AccelFlagType::kFlag,
       B(false),
       {}},
      {"use_fsdp", {"--use_fsdp"}, AccelFlagType::kFlag, B(false), {}},
      {"use_parallelism_config",
       {"--use_parallelism_config"},
       AccelFlagType::kFlag,
       B(false),
       {}},
      {"gpu_ids", {"--gpu_ids"}, AccelFlagType::kStr, N(), {}},
      {"same_network", {"--same_network"}, AccelFlagType::kFlag, B(false), {}},
      {"machine_rank", {"--machine_rank"}, AccelFlagType::kInt, N(), {}},
      {"main_process_ip", {"--main_process_ip"}, AccelFlagType::kStr, N(), {}},
      {"main_process_port",
       {"--main_process_port"},
       AccelFlagType::kInt,
       N(),
       {}},
      {"tee", {"-t", "--tee"}, AccelFlagType::kStr, S("0"), {}},
      {"log_dir", {"--log_dir"}, AccelFlagType::kStr, N(), {}},
      {"role", {"--role"}, AccelFlagType::kStr, S("default"), {}},
      {"rdzv_backend",
       {"--rdzv_backend"},
       AccelFlagType::kStr,
       S("static"),
       {}},
      {"rdzv_conf", {"--rdzv_conf"}, AccelFlagType::kStr, S(""), {}},
      {"max_restarts", {"--max_restarts"}, AccelFlagType::kInt, I(0), {}},
      {"monitor_interval",
       {"--monitor_interval"},
       AccelFlagType::kFloat,
       F(0.1),
       {}},
      {"module", {"-m", "--module"}, AccelFlagType::kFlag, N(), {}},
      {"no_python", {"--no_python"}, AccelFlagType::kFlag, N(), {}},
      {"fsdp_version",
       {"--fsdp_version"},
       AccelFlagType::kStr,
       S("1"),
       {"1", "2"}},
      {"fsdp_offload_params",
       {"--fsdp_offload_params"},
       AccelFlagType::kStr,
       S("false"),
       {}},
      {"fsdp_min_num_params",
       {"--fsdp_min_num_params"},
       AccelFlagType::kInt,
       I(100000000),
       {}},
      {"fsdp_sharding_strategy",
       {"--fsdp_sharding_strategy"},
       AccelFlagType::kStr,
       S("FULL_SHARD"),
       {}},
      {"fsdp_reshard_after_forward",
       {"--fsdp_reshard_after_forward"},
       AccelFlagType::kStr,
       S("true"),
       {}},
      {"fsdp_auto_wrap_policy",
       {"--fsdp_auto_wrap_policy"},
       AccelFlagType::kStr,
       N(),
       {}},
      {"fsdp_transformer_layer_cls_to_wrap",
       {"--fsdp_transformer_layer_cls_to_wrap"},
       AccelFlagType::kStr,
       N(),
       {}},
      {"fsdp_backward_prefetch",
       {"--fsdp_backward_prefetch"},
       AccelFlagType::kStr,
       N(),
       {}},
      {"fsdp_state_dict_type",
       {"--fsdp_state_dict_type"},
       AccelFlagType::kStr,
       N(),
       {}},
      {"fsdp_forward_prefetch",
       {"--fsdp_forward_prefetch"},
       AccelFlagType::kStr,
       S("false"),
       {}},
      {"fsdp_use_orig_params",
       {"--fsdp_use_orig_params"},
       AccelFlagType::kStr,
       S("true"),
       {}},
      {"fsdp_cpu_ram_efficient_loading",
       {"--fsdp_cpu_ram_efficient_loading"},
       AccelFlagType::kStr,
       S("true"),
       {}},
      {"fsdp_sync_module_states",
       {"--fsdp_sync_module_states"},
       AccelFlagType::kStr,
       S("true"),
       {}},
      {"fsdp_activation_checkpointing",
       {"--fsdp_activation_checkpointing"},
       AccelFlagType::kStr,
       S("false"),
       {}},
      {"fp8_backend",
       {"--fp8_backend"},
       AccelFlagType::kStr,
       N(),
       {"ao", "te", "msamp"}},
      {"fp8_use_autocast_during_eval",
       {"--fp8_use_autocast_during_eval"},
       AccelFlagType::kFlag,
       B(false),
       {}},
      {"fp8_margin", {"--fp8_margin"}, AccelFlagType::kInt, I(0), {}},
      {"fp8_interval", {"--fp8_interval"}, AccelFlagType::kInt, I(1), {}},
      {"fp8_format",
       {"--fp8_format"},
       AccelFlagType::kStr,
       S("HYBRID"),
       {"HYBRID", "E4M3", "E5M2"}},
      {"fp8_amax_history_len",
       {"--fp8_amax_history_len"},
       AccelFlagType::kInt,
       I(1024),
       {}},
      {"fp8_amax_compute_algo",
       {"--fp8_amax_compute_algo"},
       AccelFlagType::kStr,
       S("most_recent"),
       {"max", "most_recent"}},
      {"fp8_override_linear_precision",
       {"--fp8_override_linear_precision"},
       AccelFlagType::kBoolList,
       PyValue::List("(False, False, False)"),
       {}},
      {"fp8_opt_level",
       {"--fp8_opt_level"},
       AccelFlagType::kStr,
       S("O2"),
       {"O1", "O2"}},
      // type=str_to_bool applies to the string default "true" too: 1.
      {"fp8_enable_fsdp_float8_all_gather",
       {"--fp8_enable_fsdp_float8_all_gather"},
       AccelFlagType::kStrToBool,
       I(1),
       {}},
      {"fp8_pad_inner_dim",
       {"--fp8_pad_inner_dim"},
       AccelFlagType::kStrToBool,
       I(1),
       {}},
      {"debug", {"--debug"}, AccelFlagType::kFlag, N(), {}},
      {"parallelism_config_dp_replicate_size",
       {"--parallelism_config_dp_replicate_size"},
       AccelFlagType::kInt,
       I(1),
       {}},
      {"parallelism_config_dp_shard_size",
       {"--parallelism_config_dp_shard_size"},
       AccelFlagType::kInt,
       I(1),
       {}},
      {"parallelism_config_tp_size",
       {"--parallelism_config_tp_size"},
       AccelFlagType::kInt,
       I(1),
       {}},
      {"parallelism_config_cp_size",
       {"--parallelism_config_cp_size"},
       AccelFlagType::kInt,
       I(1),
       {}},
      {"parallelism_config_cp_backend",
       {"--parallelism_config_cp_backend"},
       AccelFlagType::kStr,
       S("torch"),
       {"torch"}},
      {"parallelism_config_cp_comm_strategy",
       {"--parallelism_config_cp_comm_strategy"},
       AccelFlagType::kStr,
       S("allgather"),
       {}},
      {"parallelism_config_sp_size",
       {"--parallelism_config_sp_size"},
       AccelFlagType::kInt,
       I(1),
       {}},
      {"parallelism_config_sp_backend",
       {"--parallelism_config_sp_backend"},
       AccelFlagType::kStr,
       S("deepspeed"),
       {"deepspeed"}},
      {"parallelism_config_sp_seq_length",
       {"--parallelism_config_sp_seq_length"},
       AccelFlagType::kStr,
       N(),
       {}},
      {"parallelism_config_sp_seq_length_is_variable",
       {"--parallelism_config_sp_seq_length_is_variable"},
       AccelFlagType::kPyBool,
       B(true),
       {}},
      {"parallelism_config_sp_attn_implementation",
       {"--parallelism_config_sp_attn_implementation"},
       AccelFlagType::kStr,
       S("sdpa"),
       {}},
      // A DeepSpeed flag that accelerate's own test_validate_launch_command
      // passes on a launch that is not a DeepSpeed launch: accepted there
      // and unused (the DeepSpeed launch itself stays unsupported here).
      {"deepspeed_config_file",
       {"--deepspeed_config_file"},
       AccelFlagType::kStr,
       N(),
       {}},
  };
  return *flags;
}

namespace {

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

}  // namespace

Status UnsupportedFlagError(const std::string& message) {
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

StatusOr<PyValue> ConvertAccelerateFlag(const AccelFlag& f,
                                        const std::string& name,
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
    case AccelFlagType::kFlag:
      return PyValue::Bool(true);
    case AccelFlagType::kInt: {
      DDP_ASSIGN_OR_RETURN(long v, ParseIntValue(name, text));
      return PyValue::Int(v);
    }
    case AccelFlagType::kFloat: {
      DDP_ASSIGN_OR_RETURN(double v, ParseDoubleValue(name, text));
      return PyValue::Float(v);
    }
    case AccelFlagType::kStrToBool: {
      DDP_ASSIGN_OR_RETURN(long long v, str_to_bool(text));
      return PyValue::Int(v);
    }
    case AccelFlagType::kPyBool:
      return PyValue::Bool(!text.empty());
    case AccelFlagType::kBoolList: {
      std::string repr;
      std::stringstream ss(text);
      for (std::string part; std::getline(ss, part, ',');) {
        DDP_ASSIGN_OR_RETURN(long long v, str_to_bool(part));
        repr += (repr.empty() ? "" : ", ") + std::to_string(v);
      }
      return PyValue::List("(" + repr + ")");
    }
    case AccelFlagType::kStr:
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

}  // namespace ddprun::agent
