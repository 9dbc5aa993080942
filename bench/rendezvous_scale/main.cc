// rendezvous_scale: N simulated agents complete one rendezvous round against
// a real ddprun rendezvous server on loopback, then the same N against
// torch's c10d rendezvous (Python), printed side by side.
//
//   rendezvous_scale [--n 256,1024,4096] [--c10d_timeout 60] [--no_c10d]
//                    [--python /usr/bin/python3]
//
// Each simulated agent is one asynchronous Join call (gRPC callback API)
// carrying its own node id, as the real agent sends it; agents are spread
// over up to 64 TCP connections. min_nodes = max_nodes = N, so the round
// completes when the last agent has joined. The time is from the first Join
// sent to the last assignment received; connection setup is excluded on both
// sides (c10d: TCPStore clients connect before the clock starts).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/logging.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/server/rendezvous_server.h"

namespace ddprun::rendezvous {
namespace {

using Steady = std::chrono::steady_clock;

struct Result {
  bool ok = false;
  double seconds = 0;
  std::string error;
};

Result RunDdprun(int n) {
  RendezvousServer server;
  ServerOptions options;
  auto port = server.Start("127.0.0.1", 0, options);
  if (!port.ok()) return {false, 0, port.status().ToString()};
  const std::string target = "127.0.0.1:" + std::to_string(*port);

  const int connections = std::min(n, 64);
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs;
  for (int c = 0; c < connections; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // own connection
    args.SetInt("ddprun.bench.connection", c);
    auto ch = grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), args);
    if (!ch->WaitForConnected(std::chrono::system_clock::now() +
                              std::chrono::seconds(10))) {
      return {false, 0, "cannot connect to " + target};
    }
    stubs.push_back(v1::Rendezvous::NewStub(ch));
    channels.push_back(std::move(ch));
  }

  struct Call {
    grpc::ClientContext ctx;
    v1::JoinRequest request;
    v1::JoinResponse response;
    grpc::Status status;
  };
  std::vector<std::unique_ptr<Call>> calls(n);
  for (int i = 0; i < n; ++i) {
    calls[i] = std::make_unique<Call>();
    Call& c = *calls[i];
    c.ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(120));
    c.request.set_rdzv_id("bench");
    c.request.mutable_config()->set_min_nodes(n);
    c.request.mutable_config()->set_max_nodes(n);
    v1::NodeInfo* node = c.request.mutable_node();
    node->set_node_id("node-" + std::to_string(i) + ":" +
                      std::to_string(getpid()));
    node->set_instance(1000 + i);
    node->set_role("default");
    node->set_local_world_size(8);
    node->set_node_rank_hint(-1);
    node->set_addr("127.0.0.1");
    node->set_master_port(20000 + i % 40000);
  }

  std::mutex mu;
  std::condition_variable cv;
  int remaining = n;
  Steady::time_point last_done;
  const Steady::time_point start = Steady::now();
  for (int i = 0; i < n; ++i) {
    Call* c = calls[i].get();
    stubs[i % connections]->async()->Join(
        &c->ctx, &c->request, &c->response, [&, c](grpc::Status s) {
          c->status = std::move(s);
          std::lock_guard<std::mutex> lock(mu);
          last_done = Steady::now();
          if (--remaining == 0) cv.notify_all();
        });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return remaining == 0; });
  }
  Result r;
  r.seconds = std::chrono::duration<double>(last_done - start).count();
  // The round is only a success if every agent got a distinct rank.
  std::set<int> ranks;
  for (auto& c : calls) {
    if (!c->status.ok()) {
      r.error = c->status.error_message();
      return r;
    }
    ranks.insert(c->response.assignment().group_rank());
  }
  if (static_cast<int>(ranks.size()) != n) {
    r.error = "ranks are not a permutation";
    return r;
  }
  r.ok = true;
  server.Shutdown(std::chrono::seconds(1));
  return r;
}

Result RunC10d(const std::string& python, const std::string& script, int n,
               int timeout_s) {
  const std::string cmd = "timeout " + std::to_string(timeout_s + 60) + " " +
                          python + " " + script + " " + std::to_string(n) +
                          " " + std::to_string(timeout_s) + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {false, 0, "cannot run " + python};
  std::string out;
  char buf[1024];
  size_t got;
  while ((got = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, got);
  pclose(p);
  Result r;
  const size_t at = out.find("seconds=");
  if (at != std::string::npos) {
    r.ok = true;
    r.seconds = std::atof(out.c_str() + at + 8);
  } else {
    r.error = out.empty()
                  ? "did not finish in " + std::to_string(timeout_s) +
                        " s (killed after " + std::to_string(timeout_s + 60) +
                        " s, still creating its agents)"
                  : out.substr(0, out.find('\n'));
  }
  return r;
}

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoi(item.c_str()));
  return out;
}

}  // namespace
}  // namespace ddprun::rendezvous

int main(int argc, char** argv) {
  using namespace ddprun::rendezvous;
  ddprun::SetMinLogLevel(ddprun::LogLevel::kWarning);
  std::vector<int> sizes = {256, 1024, 4096};
  int c10d_timeout = 60;
  bool c10d = true;
  std::string python = "/usr/bin/python3";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--n" && i + 1 < argc) {
      sizes = ParseList(argv[++i]);
    } else if (a == "--c10d_timeout" && i + 1 < argc) {
      c10d_timeout = std::atoi(argv[++i]);
    } else if (a == "--no_c10d") {
      c10d = false;
    } else if (a == "--python" && i + 1 < argc) {
      python = argv[++i];
    } else {
      fprintf(stderr,
              "usage: %s [--n 256,1024,4096] [--c10d_timeout S] [--no_c10d] "
              "[--python PATH]\n",
              argv[0]);
      return 2;
    }
  }
  // The server (default options, like ddprun-rendezvous) refuses a job's
  // node beyond max_nodes_per_job: such an N cannot complete a round.
  const size_t max_n = JobDefaults().max_nodes_per_job;
  for (int n : sizes) {
    if (n < 1 || static_cast<size_t>(n) > max_n) {
      fprintf(stderr,
              "%s: --n %d: must be 1..%zu (the server's per-job node limit, "
              "--max_nodes_per_job)\n",
              argv[0], n, max_n);
      return 2;
    }
  }
  const std::string script = std::string(DDPRUN_SOURCE_DIR) +
                             "/bench/rendezvous_scale/c10d_rendezvous.py";
  printf("%-6s %-12s %-12s %-10s %s\n", "N", "ddprun_s", "c10d_s", "ratio",
         "goal");
  int rc = 0;
  for (int n : sizes) {
    Result ours = RunDdprun(n);
    Result theirs;
    if (c10d) theirs = RunC10d(python, script, n, c10d_timeout);
    const double goal = n <= 1024 ? 1.0 : 3.0;
    char ours_s[32], theirs_s[64], ratio[32];
    snprintf(ours_s, sizeof(ours_s), ours.ok ? "%.3f" : "FAILED", ours.seconds);
    if (!c10d) {
      snprintf(theirs_s, sizeof(theirs_s), "skipped");
      snprintf(ratio, sizeof(ratio), "-");
    } else if (theirs.ok) {
      snprintf(theirs_s, sizeof(theirs_s), "%.3f", theirs.seconds);
      snprintf(ratio, sizeof(ratio), "%.1fx",
               ours.ok && ours.seconds > 0 ? theirs.seconds / ours.seconds : 0);
    } else {
      snprintf(theirs_s, sizeof(theirs_s), ">%d", c10d_timeout);
      snprintf(ratio, sizeof(ratio), ">%.0fx",
               ours.ok && ours.seconds > 0 ? c10d_timeout / ours.seconds : 0);
    }
    const bool met = ours.ok && ours.seconds <= goal;
    printf("%-6d %-12s %-12s %-10s %s\n", n, ours_s, theirs_s, ratio,
           met ? "met" : "MISSED");
    if (!ours.ok) printf("  ddprun N=%d failed: %s\n", n, ours.error.c_str());
    if (c10d && !theirs.ok) {
      printf("  c10d N=%d: %s\n", n, theirs.error.c_str());
    }
    fflush(stdout);
    if (!ours.ok) rc = 1;
  }
  return rc;
}
