#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/cli/cli_parser.h"
#include "agent/frontends/deepspeed/deepspeed_hosts.h"
#include "ddprun/common/status_or.h"

// ddprun-deepspeed: the `deepspeed` launcher's command line
// (deepspeed/launcher/runner.py) and its per-node launch
// (deepspeed/launcher/launch.py) on top of ddprun's agent.
namespace ddprun::agent {

// The flags of `deepspeed`, plus two internal ones the multi-node launch
// passes to each node (as runner.py passes --world_info and --node_rank to
// deepspeed.launcher.launch).
struct DeepSpeedArgs {
  bool help = false;
  std::string hostfile = "/job/hostfile";  // -H/--hostfile
  bool hostfile_given = false;
  std::string include, exclude;  // -i/--include, -e/--exclude
  int num_nodes = -1;
  int num_gpus = -1;  // --num_gpus/--num_accelerators
  int min_elastic_nodes = -1, max_elastic_nodes = -1;
  bool elastic_training = false;
  int master_port = 29500;
  std::string master_addr;  // "" = 127.0.0.1 on one node, else detected
  int node_rank = -1;       // with --no_ssh: this node's rank
  std::string launcher = "pdsh";
  std::string launcher_args;  // extra ssh arguments (split like a shell)
  std::optional<int> ssh_port;
  bool module = false, no_python = false, no_local_rank = false;
  bool no_ssh = false, no_ssh_check = false, force_multi = false;
  // --log_level (debug, info, warning, error, critical; "" = not given)
  // and -q/--quiet (= error): the launcher's own log, passed on to every
  // node's launch as runner.py passes them to launch.py.
  std::string log_level;
  bool quiet = false;
  // --venv_script: sourced before each node's launch when the nodes are
  // started by ddprun-deepspeed (deepspeed: by pdsh); "" = none.
  std::string venv_script;
  // Internal: run node `node_rank` of this world (base64 world info), and
  // stop when stdin closes (the ssh connection that started it went away).
  std::string world_info;
  bool stop_on_stdin_eof = false;

  std::string user_script;
  std::vector<std::string> user_args;
};

// Parses the command line as runner.py's argparse would (any unambiguous
// prefix of a long flag; '-' or '_'), as of DeepSpeed 0.19.6. Flags
// deepspeed has but ddprun does
// not implement (--autotuning, --save_pid, --enable_each_rank_log,
// --bind_cores_to_rank, --bind_core_list) and --launcher=slurm are errors
// naming the flag. Errors: kInvalidArgument, one line.
StatusOr<DeepSpeedArgs> ParseDeepSpeedArgs(
    const std::vector<std::string>& args);

// Where the workers run, decided as runner.py decides it.
struct DeepSpeedPlan {
  ActiveResources resources;  // hosts in hostfile order and their slots
  // runner.py's multi_node_exec: start every node (local ones as a child
  // process, the others over ssh); false = run node `node_rank` here.
  bool multi_node = false;
  int node_rank = 0;
  std::string master_addr;  // "" = ask the first host (`hostname -I`)
  std::string hostfile;     // the hostfile read, "" = none
  // (--launcher_args with an MPI --launcher on several nodes is an error:
  // they are mpirun's arguments, and ddprun-deepspeed starts nodes with
  // ssh.)
  // CUDA_VISIBLE_DEVICES of the launcher's environment became --include and
  // is removed from the environment (runner.py deletes it).
  bool drop_visible_devices = false;
  std::vector<std::string> warnings;  // messages deepspeed prints
};

// runner.py's main() up to the launch: reads the hostfile (absent: this
// host alone, with `device_count` devices: its GPUs counted without
// CUDA_VISIBLE_DEVICES, which runner.py deletes before counting, or what
// deepspeed's CPU accelerator counts), applies CUDA_VISIBLE_DEVICES (as
// --include, its ids then being the host's slots, when no
// -i/-e/--num_gpus/--num_nodes is given; else ignored, the slots being
// 0..device_count-1, so `-i localhost:2` with CUDA_VISIBLE_DEVICES=0,1 runs
// on GPU 2), --include/--exclude, --num_nodes and --num_gpus, and checks
// --node_rank. Reads the hostfile only. Errors: kInvalidArgument, one
// line.
StatusOr<DeepSpeedPlan> PlanDeepSpeedLaunch(
    const DeepSpeedArgs& args, const std::map<std::string, std::string>& env,
    int device_count);

// The devices deepspeed counts on this host without a hostfile: GPUs the
// environment lets CUDA see; without GPUs, deepspeed's CPU accelerator:
// $LOCAL_SIZE if positive, else NUMA nodes with CPUs (sysfs under `root`),
// at least 1.
int DeepSpeedDeviceCount(int visible_gpus,
                         const std::map<std::string, std::string>& env,
                         const std::string& root = "");

// What launch.py does on node `node_rank` of `resources`, as a ddprun
// launch: its slots become nproc_per_node and CUDA_VISIBLE_DEVICES; the
// nodes of `resources` form a static job (node rank = position) at
// master_addr:master_port, with deepspeed's worker contract and
// `--local_rank=N` unless --no_local_rank. With --elastic_training: torch
// elastic at master_addr:master_port (nnodes min:max, run id
// $ELASTIC_RUN_ID or 123456789, role trainer, 100 restarts, no
// --local_rank), as deepspeed's DSElasticAgent. Checks the entrypoint.
// Errors: kInvalidArgument, one line.
StatusOr<CommandLine> DeepSpeedNodeCommandLine(
    const DeepSpeedArgs& args, const ActiveResources& resources, int node_rank,
    const std::string& master_addr,
    const std::map<std::string, std::string>& env);

}  // namespace ddprun::agent
