// Node loss by a cut network link: the server and two agents each run in a
// network namespace of their own, joined by veth pairs to a bridge in a
// fourth namespace (10.231.7.0/24, which exists only inside these
// namespaces: nothing touches the root namespace's interfaces or routes).
// Needs root and `ip netns`; skipped with a message otherwise.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <set>

#include "tests/multinode/multinode_util.h"

namespace ddprun::multinode {
namespace {

const char* kIp = "/usr/sbin/ip";

int Sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

// The namespaces and links of one test; everything is deleted by the
// destructor (deleting a namespace deletes its veth ends and the bridge).
class Testbed {
 public:
  Testbed() {
    const std::string p = "ddpmn" + std::to_string(getpid());
    sw_ = p + "sw";
    hosts_ = {p + "srv", p + "a", p + "b"};
    ok_ = Sh(std::string(kIp) + " netns add " + sw_) == 0;
    if (!ok_) return;
    ok_ = Run(sw_, "link add br0 type bridge") && Run(sw_, "link set br0 up");
    for (size_t i = 0; ok_ && i < hosts_.size(); ++i) {
      const std::string h = hosts_[i], port = "p" + std::to_string(i);
      ok_ = Sh(std::string(kIp) + " netns add " + h) == 0 &&
            Sh(std::string(kIp) + " link add eth0 netns " + h +
               " type veth peer name " + port + " netns " + sw_) == 0 &&
            Run(sw_, "link set " + port + " master br0") &&
            Run(sw_, "link set " + port + " up") &&
            Run(h, "addr add " + Addr(i) + "/24 dev eth0") &&
            Run(h, "link set eth0 up") && Run(h, "link set lo up");
    }
  }
  ~Testbed() {
    for (const auto& h : hosts_) Sh(std::string(kIp) + " netns del " + h);
    Sh(std::string(kIp) + " netns del " + sw_);
  }

  bool ok() const { return ok_; }
  // Host i: 0 the server, 1 and 2 the agents.
  const std::string& Host(size_t i) const { return hosts_[i]; }
  static std::string Addr(size_t i) {
    return "10.231.7." + std::to_string(i + 1);
  }
  // `ip -n <ns> <args>` succeeded.
  bool Run(const std::string& ns, const std::string& args) {
    return Sh(std::string(kIp) + " -n " + ns + " " + args) == 0;
  }
  std::vector<std::string> Exec(size_t i) const {
    return {kIp, "netns", "exec", hosts_[i]};
  }

 private:
  std::string sw_;
  std::vector<std::string> hosts_;
  bool ok_ = false;
};

TEST_CASE("multinode: a node whose link is cut is dropped, the other goes on",
          "[multinode][netns]") {
  if (geteuid() != 0) {
    WARN("skipped: network namespaces need root");
    return;
  }
  Testbed net;
  if (!net.ok()) {
    WARN("skipped: `ip netns` / veth / bridge setup failed on this machine");
    return;
  }
  TempDir dir;
  RendezvousServerProcess server(dir.path(), 0, net.Exec(0), Testbed::Addr(0));
  INFO(server.child().Output());
  REQUIRE(server.port() > 0);
  std::vector<std::unique_ptr<Child>> agents;
  for (size_t i = 1; i <= 2; ++i) {
    std::vector<std::string> argv = net.Exec(i);
    for (const std::string& a :
         Ddprun({"--nnodes=1:2", "--rdzv_backend=grpc", "--rdzv_id=netns",
                 "--rdzv_endpoint=" + Testbed::Addr(0) + ":" +
                     std::to_string(server.port()),
                 "--rdzv_conf=connection_lost_timeout=4", "--no_python",
                 kData + "/env_worker.sh"})) {
      argv.push_back(a);
    }
    std::string node = i == 1 ? "a" : "b";
    agents.push_back(std::make_unique<Child>(
        dir.path(), node, argv,
        std::map<std::string, std::string>{
            {"MN_OUT", dir.path()}, {"MN_NODE", node}, {"MN_FINISH_WS", "1"}}));
  }
  INFO(agents[0]->Output() + agents[1]->Output());
  auto count = [&](const std::function<bool(const WorkerStart&)>& pred) {
    int n = 0;
    for (const WorkerStart& s : ReadWorkerStarts(dir.path())) n += pred(s);
    return n;
  };
  REQUIRE(WaitUntil(
      [&] { return count([](auto& s) { return s.world_size == 2; }) == 2; },
      20s));
  // The nodes reached the server over the namespaces' link, and MASTER_ADDR
  // is a node's own namespace address.
  CHECK(server.child().Stderr().find("master 10.231.7.") != std::string::npos);
  CHECK(agents[0]->Running());
  REQUIRE(net.Run(net.Host(2), "link set eth0 down"));
  const auto cut = SteadyClock::now();
  REQUIRE(WaitUntil(
      [&] {
        return count([](auto& s) {
                 return s.node == "a" && s.world_size == 1;
               }) == 1;
      },
      15s));
  std::printf(
      "[multinode] node a restarted alone %.2f s after b's link went "
      "down\n",
      std::chrono::duration<double>(SteadyClock::now() - cut).count());
  CHECK(agents[0]->Wait(10s) == 0);
  // The cut-off node gives up once the server was unreachable for
  // connection_lost_timeout, instead of hanging with its workers.
  const int cut_off = agents[1]->Wait(15s);
  std::printf("[multinode] node b exited %d, %.2f s after its link went down\n",
              cut_off,
              std::chrono::duration<double>(SteadyClock::now() - cut).count());
  CHECK(cut_off == 1);
}

}  // namespace
}  // namespace ddprun::multinode
