#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "agent/frontends/accelerate/accelerate_args.h"
#include "agent/cli/cli_parser.h"
#include "ddprun/common/status_or.h"

// ddprun-accelerate: what `accelerate launch` does with its arguments
// (accelerate/commands/launch.py launch_command, and
// accelerate/utils/launch.py prepare_multi_gpu_env /
// prepare_simple_launcher_cmd_env), on ddprun.
namespace ddprun::agent {

// The host facts the launch depends on, injected for tests.
struct AccelerateProbes {
  AccelerateHost host;
  // is_port_in_use: something accepts connections on localhost:port.
  std::function<bool(int port)> port_in_use;
  // get_free_port: a port free on this host now.
  std::function<int()> free_port;
};

struct AcceleratePlan {
  bool show_help = false;
  // accelerate's warnings (printed before the launch).
  std::vector<std::string> warnings;
  // The multi-GPU path (--multi_gpu, --use_fsdp, or a config file's
  // MULTI_* / FSDP distributed_type, or several GPUs found): a torchrun
  // launch, i.e. ddprun's agent, with accelerate's variables in
  // `launch.env_overrides` (accelerate sets them in the launcher's own
  // environment, so torchrun's workers inherit them).
  bool torchrun = false;
  CommandLine launch;
  // The single-process path (accelerate's simple_launcher, e.g. --cpu):
  // `exec_argv` run once with `exec_env`, without a torchrun agent.
  std::vector<std::string> exec_argv;
  std::map<std::string, std::string> exec_env;
};

// Errors: kInvalidArgument (bad input: one line), kUnavailable (the main
// process port is taken on machine 0 of several, as accelerate's
// ConnectionError).
StatusOr<AcceleratePlan> PlanAccelerateLaunch(
    const std::vector<std::string>& args,
    const std::map<std::string, std::string>& env,
    const AccelerateProbes& probes);

// The variables accelerate puts into the workers' environment for `a`
// (multi-GPU path when `multi_gpu`, else the simple launcher's), exactly
// as prepare_multi_gpu_env / prepare_simple_launcher_cmd_env write them:
// ACCELERATE_MIXED_PRECISION, ACCELERATE_DYNAMO_{BACKEND, MODE,
// USE_FULLGRAPH, USE_DYNAMIC, USE_REGIONAL_COMPILATION}, OMP_NUM_THREADS,
// ACCELERATE_DEBUG_MODE, CUDA_VISIBLE_DEVICES (--gpu_ids), ACCELERATE_FP8_*
// (fp8), ACCELERATE_CPU_AFFINITY; multi-GPU: FSDP_* with --use_fsdp,
// PARALLELISM_CONFIG_*; simple: ACCELERATE_USE_CPU, KMP_AFFINITY and
// KMP_BLOCKTIME on CPU, MASTER_ADDR/MASTER_PORT for several processes.
// Errors: kInvalidArgument for a mixed precision or dynamo backend
// accelerate does not know, FSDP RAM-efficient loading without module
// state sync.
StatusOr<std::map<std::string, std::string>> AccelerateWorkerEnv(
    const AccelerateArgs& a, bool multi_gpu);

// --help text.
std::string AccelerateHelpText();

}  // namespace ddprun::agent
