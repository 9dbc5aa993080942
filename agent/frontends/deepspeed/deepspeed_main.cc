#include "agent/frontends/deepspeed/deepspeed_main.h"

#include <iostream>
#include <sstream>

#include "agent/frontends/deepspeed/deepspeed_cli.h"
#include "agent/frontends/deepspeed/deepspeed_remote.h"
#include "agent/frontends/deepspeed/node_fanout.h"
#include "agent/cli/nproc_resolver.h"
#include "agent/process/run_capture.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "rendezvous/options/endpoint.h"

namespace ddprun::agent {
namespace {

constexpr const char* kProg = "ddprun-deepspeed";
constexpr std::chrono::seconds kSshTimeout{30};

int BadInput(const Status& s) {
  std::cerr << kProg << ": error: " << s.message() << "\n";
  return 2;
}

int RuntimeError(const std::string& message) {
  std::cerr << kProg << ": error: " << message << "\n";
  return 1;
}

// The first word `hostname -I` prints on `host` (this host: run directly).
StatusOr<std::string> FirstAddress(const DeepSpeedArgs& args,
                                   const std::string& host, bool local,
                                   const EnvMap& env) {
  std::vector<std::string> argv = {"hostname", "-I"};
  if (!local) {
    DDP_ASSIGN_OR_RETURN(argv, SshArgv(args, host, "hostname -I"));
  }
  DDP_ASSIGN_OR_RETURN(CaptureResult r, RunAndCapture(argv, env, kSshTimeout));
  std::istringstream words(r.out);
  std::string first;
  if (r.exit_code != 0 || !(words >> first)) {
    return UnavailableError(
        "Unable to detect suitable master address via `hostname -I` on " +
        host + ", please manually specify one via --master_addr");
  }
  return first;
}

int RunNodes(const DeepSpeedArgs& args, const DeepSpeedPlan& plan,
             const EnvMap& env) {
  const auto& resources = plan.resources;
  std::vector<bool> local;
  for (const auto& [host, slots] : resources) {
    local.push_back(rendezvous::IsThisHost(host));
  }
  // runner.py checks that the first host answers over ssh.
  if (!args.no_ssh_check) {
    for (std::size_t i = 0; i < resources.size(); ++i) {
      if (local[i]) continue;
      StatusOr<std::vector<std::string>> check =
          SshArgv(args, resources[i].first, "hostname");
      if (!check.ok()) return BadInput(check.status());
      check->insert(check->begin() + 1, {"-o", "PasswordAuthentication=no"});
      StatusOr<CaptureResult> r = RunAndCapture(*check, env, kSshTimeout);
      if (!r.ok() || r->exit_code != 0) {
        return RuntimeError("Using hostfile at " + plan.hostfile +
                            " but host=" + resources[i].first +
                            " was not reachable via ssh. If you are running "
                            "with a single node please remove " +
                            plan.hostfile + " or setup passwordless ssh.");
      }
      break;
    }
  }
  std::string master_addr = plan.master_addr;
  if (master_addr.empty()) {
    StatusOr<std::string> first =
        FirstAddress(args, resources[0].first, local[0], env);
    if (!first.ok()) return RuntimeError(first.status().message());
    master_addr = *first;
    DDP_LOG(INFO) << "Using IP address of " << master_addr << " for node "
                  << resources[0].first;
  }
  const std::string cwd = CurrentDir();
  auto home = env.find("HOME");
  StatusOr<std::map<std::string, std::string>> exports =
      DeepSpeedExports(env, cwd, home == env.end() ? "" : home->second);
  if (!exports.ok()) return BadInput(exports.status());
  const std::string self = RealPath("/proc/self/exe");
  const std::string remote_program = Dirname(self) + "/" + kProg;
  const std::string world_info = EncodeWorldInfo(resources);
  std::vector<NodeProcess> nodes;
  for (std::size_t i = 0; i < resources.size(); ++i) {
    NodeProcess node;
    const std::string& host = resources[i].first;
    node.name = "node " + std::to_string(i) + " (" + host + ")";
    std::vector<std::string> node_args = DeepSpeedNodeArgs(
        args, world_info, static_cast<int>(i), master_addr, !local[i]);
    if (local[i] && !args.venv_script.empty()) {
      // deepspeed's pdsh sources --venv_script on every node, this one too.
      std::vector<std::string> program = {remote_program};
      program.insert(program.end(), node_args.begin(), node_args.end());
      node.argv = {
          "/bin/sh", "-c",
          RemoteShellCommand(cwd, *exports, program, args.venv_script)};
      node.env = env;
    } else if (local[i]) {
      node.argv = {kProg};
      node.argv.insert(node.argv.end(), node_args.begin(), node_args.end());
      node.exec_path = self;
      node.env = env;
      for (const auto& [k, v] : *exports) node.env[k] = v;
    } else {
      std::vector<std::string> remote = {remote_program};
      remote.insert(remote.end(), node_args.begin(), node_args.end());
      StatusOr<std::vector<std::string>> ssh =
          SshArgv(args, host,
                  RemoteShellCommand(cwd, *exports, remote, args.venv_script));
      if (!ssh.ok()) return BadInput(ssh.status());
      node.argv = std::move(ssh).value();
      node.env = env;
      node.stop_by_closing_stdin = true;
    }
    DDP_LOG(INFO) << node.name << ": " << (local[i] ? "here" : "over ssh")
                  << ", slots " << resources[i].second.size();
    nodes.push_back(std::move(node));
  }
  return RunNodeProcesses(nodes, FanOutTimeouts{});
}

}  // namespace

int RunDeepSpeed(const std::vector<std::string>& argv, EnvMap env,
                 const RunAgentFn& run_agent) {
  StatusOr<DeepSpeedArgs> args = ParseDeepSpeedArgs(argv);
  if (!args.ok()) return BadInput(args.status());
  if (args->help) {
    std::cout << DeepSpeedHelpText();
    return 0;
  }
  // runner.py's set_log_level_from_string: the launcher's own messages
  // (critical: errors only, as ddprun has no higher level).
  if (!args->log_level.empty()) {
    const std::string& l = args->log_level;
    SetMinLogLevel(l == "debug"     ? LogLevel::kDebug
                   : l == "info"    ? LogLevel::kInfo
                   : l == "warning" ? LogLevel::kWarning
                                    : LogLevel::kError);
  }
  if (args->launcher != "pdsh") {
    DDP_LOG(WARNING) << "--launcher=" << args->launcher
                     << ": ddprun-deepspeed starts every node over OpenSSH, "
                        "as with pdsh";
  }
  if (!args->world_info.empty()) {
    // One node of a multi-node launch (deepspeed.launcher.launch).
    StatusOr<ActiveResources> world = DecodeWorldInfo(args->world_info);
    if (!world.ok()) return BadInput(world.status());
    StatusOr<CommandLine> cl = DeepSpeedNodeCommandLine(
        *args, *world, args->node_rank < 0 ? 0 : args->node_rank,
        args->master_addr, env);
    if (!cl.ok()) return BadInput(cl.status());
    cl->stop_on_stdin_eof = args->stop_on_stdin_eof;
    return run_agent(std::move(cl).value(), std::move(env));
  }
  // runner.py deletes CUDA_VISIBLE_DEVICES before it counts this host's
  // devices (it becomes --include, or is ignored for -i/-e/--num_gpus):
  // the slots are the physical devices.
  EnvMap unmasked = env;
  unmasked.erase("CUDA_VISIBLE_DEVICES");
  const int devices =
      DeepSpeedDeviceCount(VisibleGpus(ProbeHostDevices(), unmasked), env);
  StatusOr<DeepSpeedPlan> plan = PlanDeepSpeedLaunch(*args, env, devices);
  if (!plan.ok()) return BadInput(plan.status());
  for (const std::string& w : plan->warnings) DDP_LOG(WARNING) << w;
  if (plan->drop_visible_devices) env.erase("CUDA_VISIBLE_DEVICES");
  if (plan->multi_node) return RunNodes(*args, *plan, env);
  if (!args->venv_script.empty()) {
    DDP_LOG(INFO) << "--venv_script " << args->venv_script
                  << " is not sourced: one node started here, as deepspeed "
                     "sources it only on nodes its launcher starts";
  }
  StatusOr<CommandLine> cl = DeepSpeedNodeCommandLine(
      *args, plan->resources, plan->node_rank, plan->master_addr, env);
  if (!cl.ok()) return BadInput(cl.status());
  return run_agent(std::move(cl).value(), std::move(env));
}

std::string DeepSpeedHelpText() {
  return R"(usage: ddprun-deepspeed [options] USER_SCRIPT [USER_ARGS...]

Drop-in replacement for the `deepspeed` launcher (deepspeed/launcher/runner.py
and launch.py of DeepSpeed 0.19.6) on ddprun's agent. Each worker gets what
deepspeed's launch gives it: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, CROSS_RANK, CROSS_SIZE, LOCAL_SIZE, CUDA_VISIBLE_DEVICES = its
node's slots, and `--local_rank=N` after the script (unless --no_local_rank).
Without a hostfile the job runs on this host with one slot per GPU (one slot
on a machine without GPUs, as deepspeed's CPU accelerator). With a hostfile of
several hosts, ddprun-deepspeed starts this host's node here and every other
node with OpenSSH (`ssh HOST ddprun-deepspeed ...`, same directory, same
binary path; deepspeed's exported variables and .deepspeed_env), and stops
them all when one fails or when it is interrupted.

options (an unambiguous prefix of a long option is accepted):
  -H, --hostfile HOSTFILE  MPI-style hostfile: `HOST slots=N` lines (default
                           /job/hostfile; absent = this host only)
  -i, --include SPEC       Use only these resources: NAME[:SLOT[,SLOT...]]
                           joined by @, e.g. worker-0@worker-1:0,2
  -e, --exclude SPEC       Use everything but these resources (same format)
  --num_nodes N            Use the first N hosts of the hostfile
  --num_gpus N, --num_accelerators N
                           Use slots 0..N-1 on every host
  --master_addr ADDR       Address of node 0 (default: 127.0.0.1 on one
                           node, else the first word of `hostname -I` on the
                           first host)
  --master_port PORT       Port of node 0 (default 29500), the workers'
                           MASTER_PORT. On several nodes node 0's agent
                           serves the rendezvous and the workers' c10d store
                           on it
  --node_rank N            With --no_ssh: this node's rank in the hostfile
  --no_ssh                 Run this node only (start every node yourself)
  --no_ssh_check           Do not check that the first remote host answers
  --force_multi            Start the nodes over ssh even for one host
  --launcher NAME          pdsh (default), openmpi, mpich, impi, mvapich:
                           all start nodes over OpenSSH here
  --launcher_args ARGS     With pdsh: extra ssh arguments, split like a
                           shell (e.g. "-F ssh_config -i key"); with an MPI
                           launcher on several nodes: an error (they would
                           be mpirun's arguments)
  --ssh_port PORT          ssh port of the other hosts
  --venv_script FILE       Sourced before each node's launch when the nodes
                           are started from here (several nodes)
  --log_level LEVEL        debug, info (default), warning, error, critical:
                           this launcher's own messages
  -q, --quiet              Same as --log_level error
  --module                 Run USER_SCRIPT as a Python module (python -m)
  --no_python              Execute USER_SCRIPT directly, without Python
  --no_local_rank          Do not append --local_rank=N to USER_ARGS
  --elastic_training       Elastic job through ddprun's rendezvous at
                           MASTER_ADDR:MASTER_PORT (needs --master_addr)
  --min_elastic_nodes N    Elastic: at least N nodes (default 1)
  --max_elastic_nodes N    Elastic: at most N nodes (default: the hostfile's)
  -h, --help               Show this help and exit

Not supported (an error): --autotuning, --save_pid, --enable_each_rank_log,
--bind_cores_to_rank, --bind_core_list, --launcher=slurm.

environment: PYTHON_EXEC (worker interpreter, default python3), DS_ENV_FILE
(name of the .deepspeed_env file), ELASTIC_RUN_ID, LOGLEVEL.
)";
}

}  // namespace ddprun::agent
