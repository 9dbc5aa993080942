// A network partition: the server and two agents each run in a network
// namespace of their own, joined by veth pairs to a bridge in a fourth
// namespace (10.231.8.0/24 exists only inside these namespaces; nothing
// touches the root namespace's interfaces or routes). Node b's link goes
// down mid-training and comes back. Needs root and `ip`; skipped otherwise.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tests/chaos/chaos_job.h"

namespace ddprun::chaos {
namespace {

const char* kIp = "/usr/sbin/ip";

int Sh(const std::string& cmd) {
  return std::system((cmd + " >/dev/null 2>&1").c_str());
}

// The namespaces and links of one test, deleted by the destructor
// (deleting a namespace deletes its veth ends and the bridge).
class Testbed {
 public:
  Testbed() {
    const std::string p = "ddpch" + std::to_string(::getpid());
    sw_ = p + "sw";
    hosts_ = {p + "srv", p + "a", p + "b"};
    ok_ = Sh(std::string(kIp) + " netns add " + sw_) == 0 &&
          Run(sw_, "link add br0 type bridge") && Run(sw_, "link set br0 up");
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
    return "10.231.8." + std::to_string(i + 1);
  }
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

// First start event after `t0` for which `pred` holds.
std::optional<Event> StartAfterWhere(
    const Scenario& s, double t0,
    const std::function<bool(const Event&)>& pred) {
  for (const Event& e : ReadEvents(s.out())) {
    if (e.kind == "start" && e.t > t0 && pred(e)) return e;
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("chaos: network partition of one node (link down, then up)",
          "[chaos][netns][root]") {
  if (::geteuid() != 0 || ::access(kIp, X_OK) != 0) {
    WARN("skipped: network namespaces need root and " << kIp);
    return;
  }
  Testbed net;
  if (!net.ok()) {
    WARN("skipped: `ip netns` / veth / bridge setup failed on this machine");
    return;
  }
  Scenario s("partition");
  // Gloo advertises the address of the host name by default (loopback
  // here); the namespaces reach each other over eth0 only.
  s.SetEnv("GLOO_SOCKET_IFNAME", "eth0");
  Workload w;
  w.steps = 100;  // 10 s of training: b is back before the end
  w.step_ms = 100;
  REQUIRE(Baseline(2, w.steps).has_value());
  auto& server = s.StartServer(0, net.Exec(0), Testbed::Addr(0));
  REQUIRE(server.port() > 0);
  TwoNodes nodes;
  nodes.port = server.port();
  nodes.nnodes = "1:2";
  nodes.host = Testbed::Addr(0);
  nodes.rdzv_conf = kNodeLossRdzvConf;
  nodes.prefixes = {net.Exec(1), net.Exec(2)};
  StartTwoNodes(s, nodes, w);
  if (!s.WaitForEvents(
          [](const std::vector<Event>& events) {
            bool together = false;
            for (const Event& e : events) {
              if (e.kind == "start") together = e.world == 2;
              if (together && e.kind == "saved" && e.step >= 10) return true;
            }
            return false;
          },
          30s)) {
    FAIL("not training together\n" << s.Logs());
  }
  const double cut = WallNow();
  const int64_t saved_before = s.LastSaved();
  REQUIRE(net.Run(net.Host(2), "link set eth0 down"));
  // a notices (b's heartbeats stop reaching the server) and goes on alone.
  const bool alone = s.WaitForEvents(
      [&](const std::vector<Event>&) {
        return StartAfterWhere(s, cut,
                               [](const Event& e) { return e.world == 1; })
            .has_value();
      },
      20s);
  const double down_for = 5.0;
  std::this_thread::sleep_for(
      std::chrono::duration<double>(std::max(0.0, cut + down_for - WallNow())));
  const double up = WallNow();
  REQUIRE(net.Run(net.Host(2), "link set eth0 up"));
  // b comes back: the job scales up to both nodes again.
  const bool rejoined = s.WaitForEvents(
      [&](const std::vector<Event>&) {
        return StartAfterWhere(s, up,
                               [](const Event& e) { return e.world == 2; })
            .has_value();
      },
      20s);
  const int code_a = s.agent(0).Wait(40s), code_b = s.agent(1).Wait(15s);
  INFO(s.Logs());
  REQUIRE(alone);
  CHECK(rejoined);
  CHECK(code_a == 0);
  CHECK(code_b == 0);
  std::optional<Event> alone_start =
      StartAfterWhere(s, cut, [](const Event& e) { return e.world == 1; });
  REQUIRE(alone_start.has_value());
  CHECK(alone_start->step >= saved_before);
  std::optional<Result> got = ReadResult(s.out());
  REQUIRE(got.has_value());
  // The world size went 2 -> 1 -> 2: equal up to float rounding.
  CHECK(MaxAbsDiff(*got, *Baseline(2, w.steps)) <= 1e-4);
  CHECK(s.NoOrphans());
  PrintRecovery("network partition (node a going on alone)",
                alone_start->t - cut);
  if (std::optional<Event> back =
          StartAfterWhere(s, up, [](const Event& e) { return e.world == 2; })) {
    std::printf(
        "chaos: network partition healed: both nodes train again "
        "%.2f s after the link came back up\n",
        back->t - up);
  }
}

}  // namespace ddprun::chaos
