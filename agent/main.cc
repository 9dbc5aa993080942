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
#include <string>
#include <thread>
#include <vector>

#include "agent/accelerate_main.h"
#include "agent/asio_event_loop.h"
#include "agent/boost_process_launcher.h"
#include "agent/cli_parser.h"
#include "agent/console.h"
#include "agent/deepspeed_main.h"
#include "agent/elastic_agent.h"
#include "agent/interruptible_rendezvous.h"
#include "agent/log_dir.h"
#include "agent/python_sys_path.h"
#include "agent/rendezvous_factory.h"
#include "agent/signal_watcher.h"
#include "agent/torch_version_probe.h"
#include "agent/worker_env.h"
#include "common/logging.h"
#include "common/process_group_guard.h"
#include "rendezvous/rdzv_conf.h"

namespace ddprun::agent {
namespace {

std::string Basename(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string NodeId(const std::string& host) {
  std::random_device rd;
  return host + ":" + std::to_string(::getpid()) + ":" +
         std::to_string(rd() & 0xffff);
}

// Exits at once, from any thread (the signal watcher): no destructors, which
// could wait for the loop thread blocked in a rendezvous call.
void ExitNow(int exit_code) {
  std::fflush(nullptr);
  ::_exit(exit_code);
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

// Runs one node's agent for a parsed command line: the torchrun front end
// and the per-node part of the others. `prog` prefixes error lines.
int RunAgent(CommandLine cl, EnvMap env, const std::string& prog) {
  LaunchOptions options = std::move(cl.options);
  // The log directory is input too: a bad --log_dir is one error line
  // before anything else is printed.
  StatusOr<RunLogDir> run_dir = MakeRunLogDir(options.log_dir, options.rdzv_id);
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
  const bool temp_dir_disposable =
      !run_dir->temp_root.empty() && !WritesLogFiles(options);
  StatusOr<std::unique_ptr<ProcessGroupGuard>> guard = ProcessGroupGuard::Start(
      temp_dir_disposable ? run_dir->temp_root : std::string());
  if (!guard.ok()) {
    DDP_LOG(WARNING) << guard.status().message()
                     << ": workers' children may outlive a killed agent";
  }

  // Signals go to a watcher thread, not to the loop: the loop thread may sit
  // in a blocking rendezvous call (Join, exit barrier) for minutes. Started
  // before any other thread (gRPC's) so that every thread inherits the mask.
  std::vector<int> handled = options.signals_to_handle;
  if (handled.empty()) handled = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  AsioEventLoop loop;
  std::atomic<InterruptibleRendezvous*> interruptible{nullptr};
  std::atomic<ElasticAgent*> running_agent{nullptr};
  SignalWatcher watcher;
  Status watching = watcher.Start(handled, [&](int sig) {
    ElasticAgent* agent = running_agent.load();
    if (agent == nullptr) ExitNow(128 + sig);  // nothing started yet
    InterruptibleRendezvous* rdzv = interruptible.load();
    if (rdzv != nullptr && rdzv->Interrupt(sig)) return;  // not reached
    loop.Post([agent, sig] { agent->OnSignal(sig); });
  });
  if (!watching.ok()) DDP_LOG(WARNING) << watching.message();
  if (cl.stop_on_stdin_eof) {
    // A node started over ssh: when the connection goes (the launching
    // ddprun-deepspeed stopped or died), sshd closes our stdin. Stop as on
    // SIGHUP, a hung-up terminal: the signal goes through the watcher, so
    // this thread touches nothing that the end of RunAgent destroys.
    const int sig = std::find(handled.begin(), handled.end(), SIGHUP) !=
                            handled.end()
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

  if (!options.torch_version.known() &&
      options.contract == WorkerContract::kTorchrun) {
    // Cached: a launch after the first costs a few stat() calls.
    TorchProbeOptions probe;
    probe.cache_dir = DefaultCacheDir(env);
    std::string why;
    options.torch_version = DetectWorkerTorchVersion(options, env, probe, &why);
    if (options.torch_version.known()) {
      DDP_LOG(DEBUG) << "workers run torch " << options.torch_version.text
                     << " (" << options.torch_version.source << ")";
    } else {
      DDP_LOG(DEBUG) << "torch version of the workers unknown (" << why
                     << "): giving them what the newest torchrun does; "
                        "--torch_version sets it";
    }
  }

  StatusOr<RendezvousSetup> setup = MakeRendezvous(options, env);
  if (!setup.ok()) {
    // Flags that contradict each other are bad input (2); a rendezvous that
    // cannot be hosted or reached is a runtime failure (1).
    std::cerr << prog << ": error: " << setup.status().message() << "\n";
    DisposeTempLogDir(*run_dir, false, 0, nullptr);  // nothing in it yet
    return setup.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (!setup->local_addr.empty()) options.local_addr = setup->local_addr;
  InterruptibleRendezvous rendezvous(setup->client.get(), ExitNow);
  interruptible = &rendezvous;

  if (NeedsOmpDefault(options, env)) {
    FdConsole().Write(Console::Stream::kErr, OmpWarningBanner());
  }

  AgentConfig config;
  config.run_id = options.rdzv_id;
  if (setup->static_node_rank) {
    options.node_rank_given = true;
    config.node_rank_exact = true;
  }
  // config.hostname stays empty: the agent resolves it only for a failure
  // table, so a slow resolver never delays a launch.
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  config.node_id = NodeId(host);
  auto own_error_file = env.find("TORCHELASTIC_ERROR_FILE");
  if (own_error_file != env.end()) {
    config.agent_error_file = own_error_file->second;
  }
  // Checked by the parser: the value is a positive number of seconds.
  StatusOr<std::optional<std::chrono::milliseconds>> join_timeout =
      rendezvous::RdzvConfSeconds(options.rdzv_conf, "join_timeout");
  if (join_timeout.ok() && join_timeout->has_value()) {
    config.join_timeout = std::max<Clock::Duration>(
        std::chrono::milliseconds(100), **join_timeout);
  }
  config.run_log_dir = run_dir->path;
  DDP_LOG(DEBUG) << "log directory set to: " << config.run_log_dir;

  // Writing to a closed console must not kill the agent (and its workers).
  ::signal(SIGPIPE, SIG_IGN);
  config.parent_env = std::move(env);
  const int max_nodes = options.max_nodes;
  const bool options_logs = WritesLogFiles(options);
  config.options = std::move(options);

  BoostProcessLauncher launcher(loop.io_context(),
                                guard.ok() ? guard->get() : nullptr);
  FdConsole console;
  ElasticAgent agent(std::move(config), &loop, &launcher, &rendezvous,
                     &console);
  running_agent = &agent;
  int exit_code = 1;
  agent.Start([&](int code) {
    exit_code = code;
    loop.Stop();
  });
  loop.Run();
  watcher.Stop();
  if (setup->server != nullptr) {
    if (setup->server->serving() && exit_code != 0 && max_nodes > 1) {
      // The other agents learn that the job failed (or that this node left)
      // at their next heartbeat (1 s): keep serving briefly so that they do
      // not wait connection_lost_timeout for a server that is gone.
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    setup->server->Shutdown(std::chrono::seconds(1));
  }
  DisposeTempLogDir(*run_dir, options_logs, exit_code,
                    guard.ok() ? guard->get() : nullptr);
  return exit_code;
}

int RunTorchrun(const std::vector<std::string>& args, EnvMap env, bool legacy) {
  const std::string prog = legacy ? "ddprun-launch" : "ddprun";
  StatusOr<CommandLine> cl = ParseCommandLine(args, env, legacy);
  if (!cl.ok()) {
    std::cerr << prog << ": error: " << cl.status().message() << "\n";
    return 2;
  }
  if (cl->show_help) {
    std::cout << HelpText(legacy);
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
