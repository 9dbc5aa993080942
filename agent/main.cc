// ddprun: torchrun's launcher and local elastic agent. Invoked as
// `ddprun-launch` it behaves as the legacy torch.distributed.launch.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <boost/asio/signal_set.hpp>

#include "agent/asio_event_loop.h"
#include "agent/boost_process_launcher.h"
#include "agent/cli_parser.h"
#include "agent/console.h"
#include "agent/elastic_agent.h"
#include "agent/local_rendezvous_client.h"
#include "agent/log_dir.h"
#include "agent/worker_env.h"
#include "common/logging.h"

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

// The rendezvous for this launch. One node (--standalone, or --nnodes=1 with
// any backend) uses the local rendezvous: MASTER_ADDR is --local_addr or
// 127.0.0.1 under --standalone and --master_addr otherwise; MASTER_PORT is
// --master_port when given (static), else a verified-free port.
// Errors: kUnimplemented for several nodes (the grpc rendezvous plugs in
// here).
StatusOr<std::unique_ptr<RendezvousClient>> MakeRendezvousClient(
    const LaunchOptions& options) {
  if (options.max_nodes > 1) {
    return Status(StatusCode::kUnimplemented,
                  "--nnodes=" + std::to_string(options.min_nodes) + ":" +
                      std::to_string(options.max_nodes) +
                      " is not yet supported in this build: multi-node needs "
                      "the grpc rendezvous");
  }
  LocalRendezvousClient::Options rdzv;
  if (options.standalone) {
    rdzv.backend = "standalone";
    rdzv.master_addr =
        options.local_addr.empty() ? "127.0.0.1" : options.local_addr;
  } else {
    rdzv.backend = options.rdzv_backend;
    rdzv.master_addr = options.master_addr;
    if (options.master_port.has_value() && *options.master_port != 0) {
      rdzv.master_port = options.master_port;
    }
  }
  return std::unique_ptr<RendezvousClient>(new LocalRendezvousClient(rdzv));
}

// Re-arms after every delivery so that a second signal is seen too.
void WaitForSignals(boost::asio::signal_set* signals, ElasticAgent* agent) {
  signals->async_wait(
      [signals, agent](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        agent->OnSignal(sig);
        WaitForSignals(signals, agent);
      });
}

int Run(int argc, char** argv) {
  SetLogTag("ddprun");
  bool legacy = Basename(argv[0]) == "ddprun-launch";
  std::vector<std::string> args(argv + 1, argv + argc);
  EnvMap env = CurrentEnvironment();
  StatusOr<CommandLine> cl = ParseCommandLine(args, env, legacy);
  std::string prog = legacy ? "ddprun-launch" : "ddprun";
  if (!cl.ok()) {
    std::cerr << prog << ": error: " << cl.status().message() << "\n";
    return 2;
  }
  if (cl->show_help) {
    std::cout << HelpText(legacy);
    return 0;
  }
  LaunchOptions options = std::move(cl->options);
  StatusOr<std::unique_ptr<RendezvousClient>> rendezvous =
      MakeRendezvousClient(options);
  if (!rendezvous.ok()) {
    std::cerr << prog << ": error: " << rendezvous.status().message() << "\n";
    return 2;
  }

  if (NeedsOmpDefault(options, env)) {
    FdConsole().Write(Console::Stream::kErr, OmpWarningBanner());
  }

  AgentConfig config;
  config.run_id = options.rdzv_id;
  // config.hostname stays empty: the agent resolves it only for a failure
  // table, so a slow resolver never delays a launch.
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  config.node_id = NodeId(host);
  auto own_error_file = env.find("TORCHELASTIC_ERROR_FILE");
  if (own_error_file != env.end()) {
    config.agent_error_file = own_error_file->second;
  }
  auto join_timeout = options.rdzv_conf.find("join_timeout");
  if (join_timeout != options.rdzv_conf.end()) {
    config.join_timeout = std::chrono::seconds(
        std::max(1L, std::strtol(join_timeout->second.c_str(), nullptr, 10)));
  }
  StatusOr<std::string> run_dir = MakeRunLogDir(options.log_dir, config.run_id);
  if (!run_dir.ok()) {
    std::cerr << prog << ": error: " << run_dir.status().message() << "\n";
    return 1;
  }
  config.run_log_dir = *run_dir;
  DDP_LOG(DEBUG) << "log directory set to: " << config.run_log_dir;

  // Writing to a closed console must not kill the agent (and its workers).
  ::signal(SIGPIPE, SIG_IGN);
  config.parent_env = std::move(env);
  config.options = std::move(options);

  AsioEventLoop loop;
  BoostProcessLauncher launcher(loop.io_context());
  FdConsole console;
  std::vector<int> handled = config.options.signals_to_handle;
  if (handled.empty()) handled = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
  boost::asio::signal_set signals(loop.io_context());
  for (int sig : handled) {
    boost::system::error_code ec;
    signals.add(sig, ec);
    if (ec)
      DDP_LOG(WARNING) << "cannot handle signal " << sig << ": "
                       << ec.message();
  }
  ElasticAgent agent(std::move(config), &loop, &launcher, rendezvous->get(),
                     &console);
  WaitForSignals(&signals, &agent);
  int exit_code = 1;
  agent.Start([&](int code) {
    exit_code = code;
    loop.Stop();
  });
  loop.Run();
  return exit_code;
}

}  // namespace
}  // namespace ddprun::agent

int main(int argc, char** argv) { return ddprun::agent::Run(argc, argv); }
