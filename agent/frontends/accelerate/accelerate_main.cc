#include "agent/frontends/accelerate/accelerate_main.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "agent/frontends/accelerate/accelerate_cli.h"
#include "agent/cli/nproc_resolver.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/net.h"

namespace ddprun::agent {
namespace {

constexpr const char* kProg = "ddprun-accelerate";

// accelerate's logger.warning text as accelerate prints it: its newlines and
// tabs are layout (a list of defaults), so they stay; any other control
// character is escaped (the text can hold config values).
std::string WarningText(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += (c == '\n' || c == '\t') ? std::string(1, c)
                                    : EscapeControlChars(std::string(1, c));
  }
  return out;
}

}  // namespace

int RunAccelerate(const std::vector<std::string>& args, EnvMap env,
                  const RunAgentFn& run_agent) {
  AccelerateProbes probes;
  probes.host.cuda_devices = VisibleGpus(ProbeHostDevices(), env);
  probes.host.physical_cores = PhysicalCores();
  // accelerate's is_port_in_use (a connection to localhost:port succeeds)
  // and get_free_port (port 0 bound and read back; 0: none).
  probes.port_in_use = LoopbackPortAccepts;
  probes.free_port = [] { return FreePort().value_or(0); };
  StatusOr<AcceleratePlan> plan = PlanAccelerateLaunch(args, env, probes);
  if (!plan.ok()) {
    std::cerr << kProg << ": error: " << plan.status().message() << "\n";
    return plan.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (plan->show_help) {
    std::cout << AccelerateHelpText();
    return 0;
  }
  if (MinLogLevel() <= LogLevel::kWarning) {
    for (const std::string& w : plan->warnings) {
      std::cerr << kProg << ": warning: " << WarningText(w) << "\n";
    }
    std::cerr.flush();
  }
  if (plan->torchrun) return run_agent(std::move(plan->launch), std::move(env));
  // accelerate's simple_launcher: one process, no torchrun. It becomes this
  // process (signals, exit code and terminal are the script's own).
  auto path = plan->exec_env.find("PATH");
  const std::string exe =
      FindOnPath(plan->exec_argv[0], path == plan->exec_env.end()
                                         ? "/usr/local/bin:/usr/bin:/bin"
                                         : path->second);
  if (exe.empty()) {
    std::cerr << kProg << ": error: '" << plan->exec_argv[0] << "' not found\n";
    return 1;
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : plan->exec_env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (auto& a : plan->exec_argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::fflush(nullptr);
  ::execve(exe.c_str(), argv.data(), envp.data());
  std::cerr << kProg << ": error: cannot execute '" << exe
            << "': " << std::strerror(errno) << "\n";
  return 1;
}

std::string AccelerateHelpText() {
  return R"(usage: ddprun-accelerate [options] TRAINING_SCRIPT [SCRIPT_ARGS...]

Drop-in replacement for `accelerate launch` (accelerate/commands/launch.py)
on ddprun. Flags, defaults and the config file (--config_file, else
$HF_HOME/accelerate/default_config.yaml when it exists and --cpu is not
given) work as in accelerate, and the workers get the variables accelerate
sets (ACCELERATE_MIXED_PRECISION, ACCELERATE_DYNAMO_*, ACCELERATE_USE_CPU,
ACCELERATE_DEBUG_MODE, FSDP_*, ...), so Accelerator() builds the same
AcceleratorState. The multi-GPU path (--multi_gpu, --use_fsdp, a config's
MULTI_GPU/FSDP, or several GPUs found) runs ddprun's torchrun agent, with
torchrun's worker environment; anything else (--cpu, one process) runs the
script once, as accelerate's simple launcher does. Both --a_b and --a-b.

options:
  --config_file FILE          accelerate config (YAML, or JSON if *.json)
  -q, --quiet                 accepted (accelerate: quieter subprocess errors)
  --cpu                       force CPU training (one process)
  --multi_gpu                 distributed launch through ddprun's agent
  --mixed_precision {no,fp16,bf16,fp8}
  --num_processes N           total processes (default: the GPUs found)
  --num_machines N            machines (default 1)
  --machine_rank N            this machine's rank
  --main_process_ip IP        machine 0's address
  --main_process_port PORT    machine 0's port (default 29500; 0 = free port;
                              taken on one machine = standalone mode)
  --same_network              machines share a network: static master
                              address instead of a rendezvous endpoint
  --gpu_ids IDS               CUDA_VISIBLE_DEVICES for the workers
  --num_cpu_threads_per_process N
                              OMP_NUM_THREADS (default $OMP_NUM_THREADS or 1;
                              with --cpu: physical cores / local processes)
  --enable_cpu_affinity       ACCELERATE_CPU_AFFINITY=1
  --dynamo_backend BACKEND    torch.compile backend: no, eager, inductor, ...
  --dynamo_mode {default,reduce-overhead,max-autotune}
  --dynamo_use_fullgraph, --dynamo_use_dynamic,
  --dynamo_use_regional_compilation
  --use_fsdp, --fsdp_*        FSDP through accelerate (FSDP_* variables)
  --use_parallelism_config, --parallelism_config_*
  --fp8_backend {ao,te,msamp}, --fp8_*   with --mixed_precision fp8
  --rdzv_backend BACKEND      torchrun rendezvous (default static)
  --rdzv_conf K=V,...         torchrun rendezvous configuration
  --max_restarts N            worker-group restarts (default 0)
  --monitor_interval S        accepted (ddprun reacts to exits at once)
  -t, --tee N                 torchrun --tee
  --log_dir DIR               torchrun --log_dir
  --role NAME                 torchrun --role (default "default")
  -m, --module                run TRAINING_SCRIPT as a module (python -m)
  --no_python                 execute TRAINING_SCRIPT directly
  --debug                     ACCELERATE_DEBUG_MODE=true
  -h, --help                  show this help and exit

  --deepspeed_config_file FILE
                              accepted and unused, as accelerate does on a
                              launch that is not a DeepSpeed launch

Not supported (an error): accelerate's TPU, DeepSpeed (use ddprun-deepspeed),
Megatron-LM, SageMaker and mpirun paths and their flags (a config file's
mpirun_config with an mpirun_hostfile included).

environment: PYTHON_EXEC (interpreter, default python3), HF_HOME /
XDG_CACHE_HOME (default config file), OMP_NUM_THREADS, LOGLEVEL.
)";
}

}  // namespace ddprun::agent
