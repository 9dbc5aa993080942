#include "agent/frontends/deepspeed/deepspeed_cli.h"

#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "agent/cli/cli_entrypoint.h"
#include "agent/cli/option_tokenizer.h"

namespace ddprun::agent {
namespace {

using K = OptionKind;

const std::vector<OptionSpec>& Specs() {
  static const std::vector<OptionSpec>* specs = new std::vector<OptionSpec>{
      {"help", {"-h", "--help"}, K::kHelp},
      {"hostfile", {"-H", "--hostfile"}, K::kValue},
      {"include", {"-i", "--include"}, K::kValue},
      {"exclude", {"-e", "--exclude"}, K::kValue},
      {"num_nodes", {"--num_nodes"}, K::kValue},
      {"min_elastic_nodes", {"--min_elastic_nodes"}, K::kValue},
      {"max_elastic_nodes", {"--max_elastic_nodes"}, K::kValue},
      {"num_gpus", {"--num_gpus", "--num_accelerators"}, K::kValue},
      {"master_port", {"--master_port"}, K::kValue},
      {"master_addr", {"--master_addr"}, K::kValue},
      {"node_rank", {"--node_rank"}, K::kValue},
      {"launcher", {"--launcher"}, K::kValue},
      {"launcher_args", {"--launcher_args"}, K::kValue},
      {"module", {"--module"}, K::kFlag},
      {"no_python", {"--no_python"}, K::kFlag},
      {"no_local_rank", {"--no_local_rank"}, K::kFlag},
      {"no_ssh", {"--no_ssh"}, K::kFlag},
      {"no_ssh_check", {"--no_ssh_check"}, K::kFlag},
      {"force_multi", {"--force_multi"}, K::kFlag},
      {"save_pid", {"--save_pid"}, K::kFlag},
      {"enable_each_rank_log", {"--enable_each_rank_log"}, K::kValue},
      {"autotuning", {"--autotuning"}, K::kValue},
      {"elastic_training", {"--elastic_training"}, K::kFlag},
      {"bind_cores_to_rank", {"--bind_cores_to_rank"}, K::kFlag},
      {"bind_core_list", {"--bind_core_list"}, K::kValue},
      {"ssh_port", {"--ssh_port"}, K::kValue},
      {"venv_script", {"--venv_script"}, K::kValue},
      {"log_level", {"--log_level"}, K::kValue},
      {"quiet", {"-q", "--quiet"}, K::kFlag},
      // Internal: what the multi-node launch passes to every node.
      {"world_info", {"--world_info"}, K::kValue},
      {"stop_on_stdin_eof", {"--stop_on_stdin_eof"}, K::kFlag},
  };
  return *specs;
}

StatusOr<int> IntOption(const TokenizedArgs& t, const std::string& dest,
                        int def) {
  DDP_ASSIGN_OR_RETURN(long v, OptionInt(t, dest, def));
  if (v < std::numeric_limits<int>::min() ||
      v > std::numeric_limits<int>::max()) {
    return InvalidArgumentError(t.Name(dest) + ": invalid value '" +
                                t.Get(dest, "") + "' (out of range)");
  }
  return static_cast<int>(v);
}

std::string Join(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : sep) + std::to_string(x);
  return out;
}

// This host's slot ids without a hostfile: the device ids
// CUDA_VISIBLE_DEVICES lists when it lists plain ids (runner.py turns the
// list into --include=localhost:LIST, so its ids are the slots), else
// 0..device_count-1.
std::vector<int> VisibleDeviceIds(const std::map<std::string, std::string>& env,
                                  int device_count) {
  std::vector<int> ids;
  auto visible = env.find("CUDA_VISIBLE_DEVICES");
  if (visible != env.end() && !visible->second.empty()) {
    std::stringstream ss(visible->second);
    bool plain = true;
    for (std::string entry; std::getline(ss, entry, ',');) {
      const auto b = entry.find_first_not_of(" \t");
      const auto e = entry.find_last_not_of(" \t");
      entry = b == std::string::npos ? "" : entry.substr(b, e - b + 1);
      if (entry.empty() || entry.size() > 6 ||
          entry.find_first_not_of("0123456789") != std::string::npos) {
        plain = false;
        break;
      }
      const int id = std::stoi(entry);
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
    if (plain && !ids.empty()) return ids;
    ids.clear();
  }
  for (int i = 0; i < device_count; ++i) ids.push_back(i);
  return ids;
}

bool ReadFile(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
  return true;
}

}  // namespace

StatusOr<DeepSpeedArgs> ParseDeepSpeedArgs(
    const std::vector<std::string>& args) {
  DDP_ASSIGN_OR_RETURN(TokenizedArgs t,
                       TokenizeOptions(args, Specs(), /*allow_abbrev=*/true));
  DeepSpeedArgs a;
  if (t.help) {
    a.help = true;
    return a;
  }
  for (const char* dest : {"save_pid", "enable_each_rank_log", "autotuning",
                           "bind_cores_to_rank", "bind_core_list"}) {
    if (t.Has(dest)) {
      return InvalidArgumentError(t.Name(dest) +
                                  " is not supported by ddprun-deepspeed");
    }
  }
  a.hostfile_given = t.Has("hostfile");
  a.hostfile = t.Get("hostfile", a.hostfile);
  a.include = t.Get("include", "");
  a.exclude = t.Get("exclude", "");
  DDP_ASSIGN_OR_RETURN(a.num_nodes, IntOption(t, "num_nodes", -1));
  DDP_ASSIGN_OR_RETURN(a.num_gpus, IntOption(t, "num_gpus", -1));
  DDP_ASSIGN_OR_RETURN(a.min_elastic_nodes,
                       IntOption(t, "min_elastic_nodes", -1));
  DDP_ASSIGN_OR_RETURN(a.max_elastic_nodes,
                       IntOption(t, "max_elastic_nodes", -1));
  DDP_ASSIGN_OR_RETURN(a.master_port, IntOption(t, "master_port", 29500));
  if (a.master_port < 1 || a.master_port > 65535) {
    return InvalidArgumentError(t.Name("master_port") + ": invalid value '" +
                                t.Get("master_port", "") +
                                "' (must be 1..65535)");
  }
  a.master_addr = t.Get("master_addr", "");
  DDP_ASSIGN_OR_RETURN(a.node_rank, IntOption(t, "node_rank", -1));
  a.launcher = t.Get("launcher", a.launcher);
  std::string lower;
  for (char c : a.launcher) lower += static_cast<char>(std::tolower(c));
  if (lower == "slurm") {
    return InvalidArgumentError(
        "--launcher=slurm is not supported by ddprun-deepspeed: run `srun "
        "ddprun-deepspeed --no_ssh --node_rank=$SLURM_NODEID ...` on every "
        "node");
  }
  if (lower != "pdsh" && lower != "openmpi" && lower != "mpich" &&
      lower != "impi" && lower != "mvapich") {
    return InvalidArgumentError(t.Name("launcher") + ": unknown launcher '" +
                                a.launcher +
                                "' (choose from pdsh, openmpi, mpich, impi, "
                                "mvapich)");
  }
  a.launcher = lower;
  a.launcher_args = t.Get("launcher_args", "");
  if (t.Has("ssh_port")) {
    DDP_ASSIGN_OR_RETURN(int port, IntOption(t, "ssh_port", 22));
    if (port < 1 || port > 65535) {
      return InvalidArgumentError(t.Name("ssh_port") + ": invalid value '" +
                                  t.Get("ssh_port", "") +
                                  "' (must be 1..65535)");
    }
    a.ssh_port = port;
  }
  if (t.Has("log_level")) {
    a.log_level = t.Get("log_level", "");
    const char* const levels[] = {"debug", "info", "warning", "error",
                                  "critical"};
    if (std::find(std::begin(levels), std::end(levels), a.log_level) ==
        std::end(levels)) {
      return InvalidArgumentError(t.Name("log_level") + ": invalid choice '" +
                                  a.log_level +
                                  "' (choose from debug, info, warning, "
                                  "error, critical)");
    }
  }
  a.quiet = t.Has("quiet");
  if (a.quiet) a.log_level = "error";  // runner.py: an alias
  a.venv_script = t.Get("venv_script", "");
  a.module = t.Has("module");
  a.no_python = t.Has("no_python");
  a.no_local_rank = t.Has("no_local_rank");
  a.no_ssh = t.Has("no_ssh");
  a.no_ssh_check = t.Has("no_ssh_check");
  a.force_multi = t.Has("force_multi");
  a.elastic_training = t.Has("elastic_training");
  a.world_info = t.Get("world_info", "");
  a.stop_on_stdin_eof = t.Has("stop_on_stdin_eof");
  if (a.module && a.no_python) {
    return InvalidArgumentError(
        "--no_python and --module cannot be used together");
  }
  if (a.elastic_training && a.no_local_rank) {
    return InvalidArgumentError(
        "--no_local_rank is not supported with --elastic_training");
  }
  if (!t.has_entrypoint || t.entrypoint.empty()) {
    return InvalidArgumentError(
        "missing user script: usage is ddprun-deepspeed [options] "
        "USER_SCRIPT [args...]");
  }
  a.user_script = t.entrypoint;
  a.user_args = t.rest;
  return a;
}

int DeepSpeedDeviceCount(int visible_gpus,
                         const std::map<std::string, std::string>& env,
                         const std::string& root) {
  if (visible_gpus > 0) return visible_gpus;
  auto it = env.find("LOCAL_SIZE");
  if (it != env.end()) {
    const int n = std::atoi(it->second.c_str());
    if (n > 0) return n;
  }
  int numa = 0;
  const std::string dir = root + "/sys/devices/system/node";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.compare(0, 4, "node") != 0 || name.size() == 4) continue;
      std::string cpus;
      if (ReadFile(dir + "/" + name + "/cpulist", &cpus) &&
          cpus.find_first_not_of(" \n") != std::string::npos) {
        ++numa;
      }
    }
    ::closedir(d);
  }
  return numa > 0 ? numa : 1;
}

StatusOr<DeepSpeedPlan> PlanDeepSpeedLaunch(
    const DeepSpeedArgs& args, const std::map<std::string, std::string>& env,
    int device_count) {
  DeepSpeedPlan plan;
  if (args.elastic_training && args.master_addr.empty()) {
    return InvalidArgumentError(
        "--master_addr is required with --elastic_training");
  }
  ResourcePool pool;
  std::string text;
  if (ReadFile(args.hostfile, &text)) {
    DDP_ASSIGN_OR_RETURN(pool, ParseHostfile(args.hostfile, text));
    plan.hostfile = args.hostfile;
  } else if (args.hostfile_given) {
    plan.warnings.push_back("Unable to find hostfile " + args.hostfile +
                            ", will proceed with training with local "
                            "resources only.");
  }
  std::string include = args.include;
  auto visible = env.find("CUDA_VISIBLE_DEVICES");
  bool mask_ignored = false;
  if (pool.empty() && visible != env.end() && !visible->second.empty()) {
    const std::string detected = "Detected VISIBLE_DEVICES=" + visible->second;
    if (!args.include.empty() || !args.exclude.empty() || args.num_nodes > 1 ||
        args.num_gpus > 0) {
      mask_ignored = true;
      plan.warnings.push_back(
          detected +
          " but ignoring it because one or several of "
          "--include/--exclude/--num_gpus/--num_nodes cl args were used. If "
          "you want to use CUDA_VISIBLE_DEVICES don't pass any of these "
          "arguments to deepspeed.");
    } else {
      include = "localhost:" + visible->second;
      plan.warnings.push_back(detected + ": setting --include=" + include);
    }
    plan.drop_visible_devices = true;
  }
  if ((args.num_nodes >= 0 || args.num_gpus >= 0) &&
      (!args.include.empty() || !args.exclude.empty())) {
    return InvalidArgumentError(
        "Cannot specify --num_nodes/--num_gpus with --include/--exclude");
  }
  bool multi_node = true;
  std::string master_addr = args.master_addr;
  ActiveResources host_info;
  for (const auto& [host, count] : pool) {
    std::vector<int> ids;
    for (int i = 0; i < count; ++i) ids.push_back(i);
    host_info.emplace_back(host, std::move(ids));
  }
  if (pool.empty()) {
    // This host alone: the ids CUDA_VISIBLE_DEVICES lists when it became
    // --include (deepspeed's main() runs on them unchecked), else every
    // device, numbered without the mask: runner.py deleted it before
    // counting, so -i localhost:2 with CUDA_VISIBLE_DEVICES=0,1 is GPU 2.
    std::vector<int> ids = VisibleDeviceIds(
        mask_ignored ? std::map<std::string, std::string>{} : env,
        device_count);
    master_addr = "127.0.0.1";
    multi_node = false;
    host_info.emplace_back("localhost", std::move(ids));
  }
  if (!multi_node && args.num_nodes > 1) {
    return InvalidArgumentError(
        "--num_nodes is greater than 1 but there is no hostfile listing "
        "other nodes");
  }
  DDP_ASSIGN_OR_RETURN(ActiveResources active,
                       FilterResources(host_info, include, args.exclude));
  if (args.num_nodes > 0 &&
      static_cast<std::size_t>(args.num_nodes) < active.size()) {
    active.resize(static_cast<std::size_t>(args.num_nodes));
  }
  if (args.num_gpus > 0) {
    std::vector<int> slots;
    for (int i = 0; i < args.num_gpus; ++i) slots.push_back(i);
    for (auto& host : active) host.second = slots;
  }
  if (active.empty()) {
    return InvalidArgumentError("no host has a slot left to run on");
  }
  if (args.no_ssh && (args.node_rank < 0 ||
                      args.node_rank >= static_cast<int>(active.size()))) {
    return InvalidArgumentError("--no_ssh needs --node_rank between 0 and " +
                                std::to_string(active.size() - 1) + " (got " +
                                std::to_string(args.node_rank) + ")");
  }
  plan.resources = std::move(active);
  plan.multi_node =
      (args.force_multi || plan.resources.size() > 1) && !args.no_ssh;
  if (plan.multi_node && args.launcher != "pdsh" &&
      !args.launcher_args.empty()) {
    return InvalidArgumentError(
        "--launcher_args '" + args.launcher_args +
        "': with --launcher=" + args.launcher +
        " they are that MPI launcher's arguments, but ddprun-deepspeed "
        "starts every node over OpenSSH, not with " +
        args.launcher +
        "; drop --launcher_args (with --launcher=pdsh they are given to "
        "ssh)");
  }
  plan.node_rank = args.no_ssh ? args.node_rank : 0;
  plan.master_addr = master_addr;
  if (!plan.multi_node && plan.master_addr.empty() &&
      plan.resources.size() == 1) {
    // One node started here (deepspeed.launcher.launch's default).
    plan.master_addr = "127.0.0.1";
  }
  if (!plan.multi_node && plan.master_addr.empty()) {
    return InvalidArgumentError(
        "--master_addr is required with --no_ssh on several nodes");
  }
  return plan;
}

StatusOr<CommandLine> DeepSpeedNodeCommandLine(
    const DeepSpeedArgs& args, const ActiveResources& resources, int node_rank,
    const std::string& master_addr,
    const std::map<std::string, std::string>& env) {
  if (node_rank < 0 || node_rank >= static_cast<int>(resources.size())) {
    return InvalidArgumentError("--node_rank " + std::to_string(node_rank) +
                                " is not a node of the world (" +
                                std::to_string(resources.size()) + " nodes)");
  }
  CommandLine cl;
  LaunchOptions& o = cl.options;
  const std::vector<int>& slots = resources[node_rank].second;
  const int nnodes = static_cast<int>(resources.size());
  o.nproc_per_node = static_cast<int>(slots.size());
  o.nproc_per_node_spec = std::to_string(o.nproc_per_node);
  o.node_rank = node_rank;
  o.node_rank_given = true;
  o.master_addr = master_addr.empty() ? "127.0.0.1" : master_addr;
  o.master_port = args.master_port;
  o.module = args.module;
  o.no_python = args.no_python;
  o.entrypoint = args.user_script;
  o.entrypoint_args = args.user_args;
  cl.env_overrides["CUDA_VISIBLE_DEVICES"] = Join(slots, ",");
  if (args.elastic_training) {
    // deepspeed's DSElasticAgent: torch elastic (c10d) at the master, with
    // launch.py's own variables underneath.
    o.min_nodes = args.min_elastic_nodes == -1 ? 1 : args.min_elastic_nodes;
    o.max_nodes =
        args.max_elastic_nodes == -1 ? nnodes : args.max_elastic_nodes;
    if (o.min_nodes <= 0 || o.max_nodes <= 0 || o.min_nodes > o.max_nodes) {
      return InvalidArgumentError(
          "--min_elastic_nodes/--max_elastic_nodes: need 0 < MIN <= MAX (got " +
          std::to_string(o.min_nodes) + ":" + std::to_string(o.max_nodes) +
          ")");
    }
    o.rdzv_backend = "c10d";
    o.rdzv_endpoint = o.master_addr + ":" + std::to_string(args.master_port);
    auto run_id = env.find("ELASTIC_RUN_ID");
    o.rdzv_id = run_id != env.end() && !run_id->second.empty() ? run_id->second
                                                               : "123456789";
    o.role = "trainer";
    o.max_restarts = 100;
    o.omp_default = false;
    o.master_port.reset();
    o.node_rank_given = false;
    cl.env_overrides["CROSS_RANK"] = std::to_string(node_rank);
    cl.env_overrides["CROSS_SIZE"] = std::to_string(nnodes);
    cl.env_overrides["LOCAL_SIZE"] = std::to_string(o.nproc_per_node);
  } else {
    o.min_nodes = o.max_nodes = nnodes;
    o.rdzv_backend = "static";
    o.contract = WorkerContract::kDeepSpeed;
    o.deepspeed_local_rank_arg = !args.no_local_rank;
  }
  DDP_RETURN_IF_ERROR(CheckEntrypoint(o, env));
  return cl;
}

}  // namespace ddprun::agent
