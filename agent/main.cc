// ddprun: torchrun's launcher and local elastic agent. Invoked as
// `ddprun-launch` it behaves as the legacy torch.distributed.launch.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "agent/cli/cli_parser.h"
#include "agent/cli/cli_values.h"
#include "agent/elastic/agent_options.h"
#include "agent/elastic/elastic_agent.h"
#include "agent/elastic/health_check.h"
#include "agent/elastic/log_dir.h"
#include "agent/elastic/worker_env.h"
#include "agent/elastic/worker_store.h"
#include "agent/frontends/accelerate/accelerate_main.h"
#include "agent/frontends/deepspeed/deepspeed_main.h"
#include "agent/hosting/remote_worker_store.h"
#include "agent/hosting/rendezvous_factory.h"
#include "agent/hosting/worker_store_host.h"
#include "agent/process/asio_event_loop.h"
#include "agent/process/boost_process_launcher.h"
#include "agent/process/console.h"
#include "agent/process/liveness_endpoint.h"
#include "agent/process/numa_binding.h"
#include "agent/process/signal_watcher.h"
#include "agent/torch_probe/accelerator_count.h"
#include "agent/torch_probe/python_sys_path.h"
#include "agent/torch_probe/torch_version_probe.h"
#include "agent/watch/stack_collector.h"
#include "common/file_util.h"
#include "common/logging.h"
#include "common/process_group_guard.h"

namespace ddprun::agent {
namespace {

// The agent's view (agent/elastic/worker_store.h) of the store hosting
// serves (agent/hosting/worker_store_host.h): two floors that do not see
// each other, met here.
// The workers' store as the agent sees it each round: the one this node
// serves, or a client of the node that serves it.
class HostedWorkerStore : public WorkerStore {
 public:
  explicit HostedWorkerStore(RendezvousHost* static_host)
      : host_(static_host) {}
  StatusOr<bool> StartRound(
      const rendezvous::RendezvousResult& round) override {
    DDP_ASSIGN_OR_RETURN(serving_, host_.StartRound(round));
    if (serving_) return true;
    // Only a node that does not serve the store needs the client's thread.
    if (remote_ == nullptr) remote_ = std::make_unique<RemoteWorkerStore>();
    Status pointed = remote_->StartRound(round);
    if (!pointed.ok()) {
      DDP_LOG(WARNING) << "--restart_scope failed: the workers' store of "
                          "round "
                       << round.round << " cannot be reached ("
                       << pointed.message()
                       << "); a failure of this node restarts the group";
      return false;
    }
    return true;
  }
  void Set(const std::string& key, std::string value) override {
    if (serving_) {
      host_.Set(key, std::move(value));
    } else if (remote_ != nullptr) {
      remote_->Set(key, std::move(value));
    }
  }
  std::optional<std::string> Get(const std::string& key) const override {
    if (serving_) return host_.Get(key);
    return remote_ != nullptr ? remote_->Get(key) : std::nullopt;
  }

 private:
  WorkerStoreHost host_;
  std::unique_ptr<RemoteWorkerStore> remote_;  // made for the first round
                                               // this node does not serve
  bool serving_ = false;
};

std::string NodeId(const std::string& host) {
  std::random_device rd;
  return host + ":" + std::to_string(::getpid()) + ":" +
         std::to_string(rd() & 0xffff);
}

// -r/-t put worker logs into the run directory.
bool WritesLogFiles(const LaunchOptions& o) {
  auto any = [](const StdSpec& spec) {
    if (spec.all != StdStreams::kNone) return true;
    for (const auto& [rank, streams] : spec.per_rank) {
      if (streams != StdStreams::kNone) return true;
    }
    return false;
  };
  return any(o.redirects) || any(o.tee);
}

// Without --log_dir the run directory is a fresh /tmp/torchelastic_*: it
// goes when the run ends, unless it holds what the user was shown or may
// want (worker logs from -r/-t, or the error files a failure table names).
void DisposeTempLogDir(const RunLogDir& dir, bool logs, int exit_code,
                       const ProcessGroupGuard* guard) {
  if (dir.temp_root.empty()) return;
  if (logs || (exit_code != 0 && HasErrorFile(dir.path))) {
    if (guard != nullptr) guard->KeepCleanupDir();
    DDP_LOG(INFO) << "worker " << (logs ? "logs" : "error files")
                  << " are kept in " << dir.path
                  << " (--log_dir chooses where they go)";
    return;
  }
  RemoveTree(dir.temp_root);
}

// The torch the workers run: --torch_version, else what their interpreter
// has (cached: a launch after the first costs a few stat() calls).
TorchVersion WorkerTorch(const LaunchOptions& launch, const EnvMap& env) {
  if (launch.torch_version.known() ||
      launch.contract != WorkerContract::kTorchrun) {
    return launch.torch_version;
  }
  TorchProbeOptions probe;
  probe.cache_dir = DefaultCacheDir(env);
  std::string why, torchless;
  TorchVersion found =
      DetectWorkerTorchVersion(launch, env, probe, &why, &torchless);
  if (!torchless.empty()) {
    // torchrun cannot meet this (it runs in torch's own interpreter); a
    // ddprun installed apart from torch can, and the workers' tracebacks
    // would say only "No module named 'torch'".
    DDP_LOG(WARNING) << "the workers' Python " << torchless
                     << " has no torch on its sys.path: a script that "
                        "imports torch will fail; activate the environment "
                        "that has torch, or set PYTHON_EXEC to its python";
  }
  if (found.known()) {
    DDP_LOG(DEBUG) << "workers run torch " << found.text << " (" << found.source
                   << ")";
  } else {
    DDP_LOG(DEBUG) << "torch version of the workers unknown (" << why
                   << "): giving them what the newest torchrun does; "
                      "--torch_version sets it";
  }
  return found;
}

// Starts a thread that stops the agent as on SIGHUP (a hung-up terminal)
// when stdin reaches EOF: a node started over ssh, whose connection went
// with the launching ddprun-deepspeed. The signal goes through the
// watcher, so this thread touches nothing that RunAgent destroys.
void StopOnStdinEof(const std::vector<int>& handled) {
  const int sig =
      std::find(handled.begin(), handled.end(), SIGHUP) != handled.end()
          ? SIGHUP
          : handled.front();
  std::thread([sig] {
    char buf[256];
    while (true) {
      const ssize_t n = ::read(0, buf, sizeof(buf));
      if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
    DDP_LOG(WARNING) << "stdin closed: the launching node is gone, "
                        "stopping the workers";
    ::kill(::getpid(), sig);
  }).detach();
}

// The agent's options, wired from the command line, the environment it
// passes on, the rendezvous setup and the run directory.
AgentOptions MakeAgentOptions(const LaunchOptions& launch, EnvMap env,
                              TorchVersion worker_torch,
                              const RendezvousSetup& setup,
                              const std::string& run_log_dir) {
  AgentOptions options;
  options.launch = launch;
  options.worker_torch = std::move(worker_torch);
  options.run_id = launch.rdzv_id;
  options.run_log_dir = run_log_dir;
  // hostname stays empty: the agent resolves it only for a failure table,
  // so a slow resolver never delays a launch.
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  options.node_id = NodeId(host);
  options.node_host = host;
  options.local_addr =
      setup.local_addr.empty() ? launch.local_addr : setup.local_addr;
  const bool hint = launch.node_rank_given || setup.static_node_rank;
  options.node_rank_hint = hint ? launch.node_rank : -1;
  options.node_rank_exact = setup.static_node_rank;
  options.join_timeout = std::max<Clock::Duration>(
      std::chrono::milliseconds(100), launch.rendezvous.join_timeout);
  if (auto own = env.find("TORCHELASTIC_ERROR_FILE"); own != env.end()) {
    options.agent_error_file = own->second;
  }
  options.parent_env = std::move(env);
  options.python_stack_helper_dir = PythonStackHelperDir();
  return options;
}

// TORCHELASTIC_HEALTH_CHECK_PORT (torchrun's variable; its open-source
// server does nothing): the agent's liveness endpoint on that port, on
// every interface (a scheduler probes the node's address) unless
// DDPRUN_HEALTH_CHECK_HOST names one. Null when the variable is unset, bad
// (a warning, as torch's) or the port cannot be bound (a warning: the job
// runs without it).
std::unique_ptr<LivenessEndpoint> StartLivenessEndpoint(
    const EnvMap& env, EventLoop* loop, const ElasticAgent* agent) {
  auto value = env.find("TORCHELASTIC_HEALTH_CHECK_PORT");
  if (value == env.end()) return nullptr;
  std::string why;
  std::optional<int> port = HealthCheckPort(value->second, &why);
  if (!port) {
    DDP_LOG(WARNING) << why;
    return nullptr;
  }
  auto host_it = env.find("DDPRUN_HEALTH_CHECK_HOST");
  const std::string host = host_it == env.end() || host_it->second.empty()
                               ? "0.0.0.0"
                               : host_it->second;
  auto health = std::make_unique<LivenessEndpoint>(loop, [agent] {
    switch (agent->state()) {
      case WorkerState::kInit:
        return std::string("rendezvous");
      case WorkerState::kHealthy:
        return std::string("running");
      case WorkerState::kUnhealthy:
        return std::string("restarting");
      case WorkerState::kStopped:
        return std::string("stopped");
      case WorkerState::kSucceeded:
        return std::string("succeeded");
      case WorkerState::kFailed:
        return std::string("failed");
    }
    return std::string("unknown");
  });
  StatusOr<int> bound = health->Start(host, *port);
  if (!bound.ok()) {
    DDP_LOG(WARNING) << "TORCHELASTIC_HEALTH_CHECK_PORT=" << value->second
                     << ": " << bound.status().message()
                     << "; running without a health check server";
    return nullptr;
  }
  DDP_LOG(INFO) << "health check server (TORCHELASTIC_HEALTH_CHECK_PORT) on "
                << host << ":" << *bound;
  return health;
}

// Runs one node's agent for a parsed command line: the torchrun front end
// and the per-node part of the others. `prog` prefixes error lines.
int RunAgent(CommandLine cl, EnvMap env, const std::string& prog) {
  const LaunchOptions& launch = cl.options;
  // The log directory is input too: a bad --log_dir is one error line
  // before anything else is printed.
  StatusOr<RunLogDir> run_dir = MakeRunLogDir(launch.log_dir, launch.rdzv_id);
  if (!run_dir.ok()) {
    std::cerr << prog << ": error: " << run_dir.status().message() << "\n";
    return run_dir.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  for (const std::string& warning : cl.warnings) DDP_LOG(WARNING) << warning;
  // What a front end's original launcher puts into its workers' inherited
  // environment (accelerate's ACCELERATE_*, deepspeed's
  // CUDA_VISIBLE_DEVICES).
  for (const std::string& name : cl.env_removed) env.erase(name);
  for (const auto& [name, value] : cl.env_overrides) env[name] = value;
  // Before any thread: the guard is a fork of this process. It kills what
  // workers left in their process groups if this process dies (kill -9),
  // and removes a temporary log directory that holds no worker logs.
  const bool logs = WritesLogFiles(launch);
  const bool temp_dir_disposable = !run_dir->temp_root.empty() && !logs;
  StatusOr<std::unique_ptr<ProcessGroupGuard>> guard = ProcessGroupGuard::Start(
      temp_dir_disposable ? run_dir->temp_root : std::string());
  if (!guard.ok()) {
    DDP_LOG(WARNING) << guard.status().message()
                     << ": workers' children may outlive a killed agent";
  }

  // Signals go to a watcher thread (signalfd) and from there to the loop,
  // which nothing blocks: a signal reaches the agent at once, also while a
  // rendezvous call is in flight. Started before any other thread (gRPC's)
  // so that every thread inherits the mask. A signal before the loop runs
  // is delivered when it starts (the agent then finishes without a
  // rendezvous), or ends the launch after the slow steps below.
  std::vector<int> handled = launch.signals_to_handle;
  if (handled.empty()) handled = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  // SIGUSR2 asks for a stack dump of the running workers (the job goes on),
  // unless --signals_to_handle names it: then it is forwarded as asked.
  const bool dump_on_request = std::find(handled.begin(), handled.end(),
                                         kDumpRequestSignal) == handled.end();
  std::vector<int> watched = handled;
  if (dump_on_request) watched.push_back(kDumpRequestSignal);
  AsioEventLoop loop;
  ElasticAgent* agent = nullptr;  // set before the loop runs
  std::atomic<int> early_signal{0};
  SignalWatcher watcher;
  Status watching = watcher.Start(
      watched, [&loop, &agent, &early_signal, dump_on_request](int sig) {
        if (dump_on_request && sig == kDumpRequestSignal) {
          // Before the agent exists there is nothing to dump.
          loop.Post([&agent] {
            if (agent != nullptr) agent->DumpStacks();
          });
          return;
        }
        int none = 0;
        early_signal.compare_exchange_strong(none, sig);
        loop.Post([&agent, sig] { agent->OnSignal(sig); });
      });
  if (!watching.ok()) DDP_LOG(WARNING) << watching.message();
  if (cl.stop_on_stdin_eof) StopOnStdinEof(handled);

  const TorchVersion worker_torch = WorkerTorch(launch, env);
  if (const int sig = early_signal.load(); sig != 0) {
    DisposeTempLogDir(*run_dir, false, 0, nullptr);  // nothing in it yet
    return 128 + sig;
  }
  std::vector<std::vector<int>> worker_cpus;
  if (!launch.numa_binding.empty()) {
    // torchrun fails when it cannot compute the binding; so does ddprun.
    StatusOr<NumaPlan> numa =
        PlanNumaBindingForHost(launch.numa_binding, launch.nproc_per_node, env);
    if (!numa.ok()) {
      std::cerr << prog << ": error: --numa_binding=" << launch.numa_binding
                << ": " << numa.status().message() << "\n";
      DisposeTempLogDir(*run_dir, false, 0, nullptr);  // nothing in it yet
      return 1;
    }
    for (const std::string& line : numa->Describe()) DDP_LOG(INFO) << line;
    for (const std::set<int>& cpus : numa->rank_cpus) {
      worker_cpus.emplace_back(cpus.begin(), cpus.end());
    }
  }
  StatusOr<RendezvousSetup> setup = MakeRendezvous(launch, &loop);
  if (!setup.ok()) {
    // Flags that contradict each other are bad input (2); a rendezvous that
    // cannot be hosted or reached is a runtime failure (1).
    std::cerr << prog << ": error: " << setup.status().message() << "\n";
    DisposeTempLogDir(*run_dir, false, 0, nullptr);  // nothing in it yet
    return setup.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (NeedsOmpDefault(launch, env)) {
    FdConsole().Write(Console::Stream::kErr, OmpWarningBanner());
  }
  const EnvMap agent_env = env;
  AgentOptions options = MakeAgentOptions(launch, std::move(env), worker_torch,
                                          *setup, run_dir->path);
  options.worker_cpus = std::move(worker_cpus);
  std::unique_ptr<HostedWorkerStore> worker_store;
  if (auto sig = agent_env.find("DDPRUN_GENERATION_SIGNAL");
      sig != agent_env.end() && !sig->second.empty() &&
      ReplacesFailedRanks(launch)) {
    StatusOr<std::vector<int>> parsed =
        ParseSignalList("DDPRUN_GENERATION_SIGNAL", sig->second);
    if (!parsed.ok() || parsed->size() != 1) {
      std::cerr << prog << ": error: DDPRUN_GENERATION_SIGNAL: invalid value '"
                << sig->second << "' (one signal name, such as SIGUSR1)\n";
      DisposeTempLogDir(*run_dir, false, 0, nullptr);
      return 2;
    }
    options.generation_signal = parsed->front();
  }
  if (ReplacesFailedRanks(launch)) {
    worker_store = std::make_unique<HostedWorkerStore>(
        UsesAgentStore(launch) ? setup->server.get() : nullptr);
    options.worker_store = worker_store.get();
  } else if (launch.restart_scope == LaunchOptions::RestartScope::kFailed) {
    DDP_LOG(WARNING) << "--restart_scope failed: with rdzv_conf TLS the "
                        "static backend's workers serve their own store, "
                        "which dies with them; a failure restarts the "
                        "group";
  }
  std::unique_ptr<ThreadHealthChecker> health;
  if (launch.health_check || !launch.health_check_cmd.empty()) {
    HealthCheckOptions checks;
    checks.builtins = launch.health_check;
    checks.command = launch.health_check_cmd;
    checks.paths = launch.health_check_paths;
    checks.max_gpu_used_mb = launch.health_check_gpu_mem_mb;
    checks.min_shm_mb = launch.health_check_shm_mb;
    checks.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(launch.health_check_timeout_s * 1000));
    checks.log_dir = options.run_log_dir;
    checks.env = options.parent_env;
    health = std::make_unique<ThreadHealthChecker>(&loop, std::move(checks));
    options.health = health.get();
  }
  DDP_LOG(DEBUG) << "log directory set to: " << options.run_log_dir;

  // Writing to a closed console must not kill the agent (and its workers).
  ::signal(SIGPIPE, SIG_IGN);
  BoostProcessLauncher launcher(loop.io_context(),
                                guard.ok() ? guard->get() : nullptr);
  FdConsole console;
  ElasticAgent elastic(std::move(options), &loop, &launcher,
                       setup->client.get(), &console);
  agent = &elastic;
  std::unique_ptr<LivenessEndpoint> liveness =
      StartLivenessEndpoint(agent_env, &loop, &elastic);
  int exit_code = 1;
  elastic.Start([&](int code) {
    exit_code = code;
    loop.Stop();
  });
  loop.Run();
  if (liveness) liveness->Stop();
  watcher.Stop();
  if (setup->server != nullptr) {
    if (setup->server->serving() && exit_code != 0 && launch.max_nodes > 1) {
      // The other agents learn the news (the job failed, or this node left)
      // from this server at their next heartbeat: serve until each of them
      // has, at most two heartbeat intervals (2 s by default).
      const Clock::Duration bound = std::max<Clock::Duration>(
          std::chrono::seconds(2), 2 * launch.rendezvous.heartbeat_interval);
      setup->server->WaitUntilAllHeard(std::chrono::steady_clock::now() +
                                       bound);
    }
    setup->server->Shutdown(std::chrono::seconds(1));
  }
  DisposeTempLogDir(*run_dir, logs, exit_code,
                    guard.ok() ? guard->get() : nullptr);
  return exit_code;
}

int RunTorchrun(const std::vector<std::string>& args, EnvMap env, bool legacy) {
  const std::string prog = legacy ? "ddprun-launch" : "ddprun";
  // xpu and privateuse1 names: only the workers' torch can count them.
  auto count_accelerators = [&env](const std::string& source,
                                   const std::string& name) {
    return CountAccelerators(source, name, env, std::chrono::seconds(60));
  };
  StatusOr<CommandLine> cl =
      ParseCommandLine(args, env, legacy, count_accelerators);
  if (!cl.ok()) {
    std::cerr << prog << ": error: " << cl.status().message() << "\n";
    return 2;
  }
  if (cl->show_help) {
    std::cout << HelpText(legacy);
    return 0;
  }
  if (cl->show_version) {
    std::cout << "ddprun " << DDPRUN_VERSION << "\n";
    return 0;
  }
  return RunAgent(std::move(cl).value(), std::move(env), prog);
}

// argv[0] picks the front end: ddprun (torchrun), ddprun-launch
// (torch.distributed.launch), ddprun-accelerate (`accelerate launch`),
// ddprun-deepspeed (`deepspeed`).
int Main(int argc, char** argv) {
  SetLogTag("ddprun");
  const std::string name = Basename(argv[0]);
  std::vector<std::string> args(argv + 1, argv + argc);
  EnvMap env = CurrentEnvironment();
  auto run_agent = [&name](CommandLine cl, EnvMap agent_env) {
    return RunAgent(std::move(cl), std::move(agent_env), name);
  };
  if (name == "ddprun-deepspeed") {
    return RunDeepSpeed(args, std::move(env), run_agent);
  }
  if (name == "ddprun-accelerate") {
    return RunAccelerate(args, std::move(env), run_agent);
  }
  return RunTorchrun(args, std::move(env), name == "ddprun-launch");
}

}  // namespace
}  // namespace ddprun::agent

int main(int argc, char** argv) { return ddprun::agent::Main(argc, argv); }
