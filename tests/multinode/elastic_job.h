#pragma once

// ElasticJob: an external ddprun-rendezvous plus ddprun agents running
// data/env_worker.sh on loopback, for the multi-node tests. Test code only.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ddprun_catch.h"
#include "tests/multinode/multinode_util.h"

namespace ddprun::multinode {

using Env = std::map<std::string, std::string>;

// Seconds since the epoch, comparable with WorkerStart::wall_time.
inline double WallNow() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// kill -9 of `agent` (the one hosting the rendezvous, in the failover
// tests), requiring it dead within 5 s; returns the wall time of the kill.
inline double KillHostingAgent(Child& agent) {
  const double killed_at = WallNow();
  agent.Kill(SIGKILL);
  REQUIRE(agent.Wait(std::chrono::seconds(5)) == 128 + SIGKILL);
  return killed_at;
}

// The wall time of the first start of `node` with `world_size` (0: none).
inline double StartedAt(const std::vector<WorkerStart>& starts,
                        const std::string& node, int world_size) {
  for (const WorkerStart& s : starts) {
    if (s.node == node && s.world_size == world_size) return s.wall_time;
  }
  return 0;
}

// An external server plus agents running env_worker.sh (MN_OUT is its
// directory; `env` adds the worker's other MN_* settings). Without the
// external server (`external_server` false) the agents' endpoint is a free
// port on 127.0.0.1: the first agent started hosts the rendezvous there.
class ElasticJob {
 public:
  explicit ElasticJob(std::map<std::string, std::string> env,
                      bool external_server = true)
      : env_(std::move(env)) {
    if (external_server) {
      server_ = std::make_unique<RendezvousServerProcess>(dir_.path(), 0);
    } else {
      embedded_port_ = FreeLoopbackPort();
    }
    env_["MN_OUT"] = dir_.path();
  }

  int port() const { return server_ ? server_->port() : embedded_port_; }
  const TempDir& dir() const { return dir_; }

  // Starts agent `node` with `args` plus the endpoint and the worker;
  // `extra` adds to (or overrides) the job's worker environment.
  Child& Start(const std::string& node, std::vector<std::string> args,
               const Env& extra = {}) {
    args.push_back("--rdzv_backend=grpc");
    args.push_back("--rdzv_endpoint=127.0.0.1:" + std::to_string(port()));
    args.push_back("--no_python");
    args.push_back(kData + "/env_worker.sh");
    std::map<std::string, std::string> env = env_;
    for (const auto& [key, value] : extra) env[key] = value;
    env["MN_NODE"] = node;
    agents_.push_back(
        std::make_unique<Child>(dir_.path(), node, Ddprun(args), env));
    return *agents_.back();
  }

  std::vector<WorkerStart> Starts() const {
    return ReadWorkerStarts(dir_.path());
  }

  // Waits until `n` starts satisfy `pred`.
  bool WaitStarts(size_t n, const std::function<bool(const WorkerStart&)>& pred,
                  std::chrono::milliseconds timeout) {
    return WaitUntil(
        [&] {
          auto s = Starts();
          return static_cast<size_t>(std::count_if(s.begin(), s.end(), pred)) >=
                 n;
        },
        timeout);
  }

  void RestartServer() {
    const int port = server_->port();
    server_->child().Kill(SIGKILL);
    server_->child().Wait(5s);
    server_ = std::make_unique<RendezvousServerProcess>(dir_.path(), port);
  }
  RendezvousServerProcess& server() { return *server_; }

  // `ddprun-rendezvous --status <server> --rdzv_id <id> --json`: the job's
  // live state as the server's JSON ("" if the command failed).
  std::string StatusJson(const std::string& rdzv_id) const {
    const std::string cmd = kBinDir + "/ddprun-rendezvous --status 127.0.0.1:" +
                            std::to_string(port()) + " --rdzv_id " + rdzv_id +
                            " --json 2>/dev/null";
    const testing::CommandResult r = testing::RunShell(cmd, 30s);
    return r.exit_code == 0 ? r.output : "";
  }

  std::string Outputs() const {
    std::string all;
    for (const auto& a : agents_) all += a->Output();
    return all;
  }

 private:
  TempDir dir_;
  std::map<std::string, std::string> env_;
  std::unique_ptr<RendezvousServerProcess> server_;  // null: embedded
  int embedded_port_ = 0;
  std::vector<std::unique_ptr<Child>> agents_;
};

}  // namespace ddprun::multinode
