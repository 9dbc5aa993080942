#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/frontends/py_value.h"
#include "ddprun/common/status_or.h"

// `accelerate launch`'s command line (accelerate/commands/launch.py:
// launch_command_parser and _validate_launch_command), reproduced for
// ddprun-accelerate: the same flags with the same defaults, merged with the
// config file the same way, so that the environment built from the result
// is the one accelerate builds.
namespace ddprun::agent {

// What accelerate asks its host (torch.cuda, psutil).
struct AccelerateHost {
  int cuda_devices = 0;    // torch.cuda.device_count() (visible GPUs)
  int physical_cores = 1;  // psutil.cpu_count(logical=False)
};

// accelerate's argparse namespace after _validate_launch_command.
struct AccelerateArgs {
  bool help = false;
  std::map<std::string, PyValue> ns;  // dest -> value (every flag's dest)
  std::set<std::string> given;        // dests set on the command line
  std::string training_script;
  std::vector<std::string> training_script_args;
  std::string config_file;  // the config file used, "" = none
  // accelerate's "values were not passed ... defaults used instead"
  // message (empty when none), and other warnings it logs.
  std::vector<std::string> warnings;

  const PyValue& Get(const std::string& dest) const;
  bool Flag(const std::string& dest) const { return Get(dest).Truthy(); }
  // An int value (kInt), else `def`.
  long long Int(const std::string& dest, long long def) const;
};

// Parses `args` and applies the config file: --config_file, else the
// default config file (DefaultAccelerateConfigPath) when it exists and
// --cpu is not given. Flags of accelerate's TPU, DeepSpeed, Megatron-LM,
// SageMaker and mpirun paths are errors naming the flag (ddprun-accelerate
// runs the multi-GPU and single-process paths). Errors: kInvalidArgument,
// one line (accelerate's own checks: one of --cpu/--multi_gpu/--tpu/
// --use_deepspeed/--use_fsdp at a time, --multi_gpu with fewer than 2
// processes or GPU ids, --use_parallelism_config without --use_fsdp,
// num_processes -1 from a config file, a bad OMP_NUM_THREADS).
StatusOr<AccelerateArgs> ParseAccelerateArgs(
    const std::vector<std::string>& args,
    const std::map<std::string, std::string>& env, const AccelerateHost& host);

// psutil.cpu_count(logical=False): distinct core_cpus_list (or
// thread_siblings_list) under <root>/sys/devices/system/cpu, else
// distinct (physical id, core id) pairs of <root>/proc/cpuinfo, at least 1.
int PhysicalCores(const std::string& root = "");

}  // namespace ddprun::agent
