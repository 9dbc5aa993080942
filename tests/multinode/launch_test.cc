// How ddprun picks and reaches the rendezvous, seen from real processes on
// loopback: torchrun's is_host rule, tokens, static node ranks, and signals
// while an agent is blocked in the exit barrier.

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <signal.h>

#include <algorithm>
#include <thread>

#include "tests/multinode/multinode_util.h"

namespace ddprun::multinode {
namespace {

using Env = std::map<std::string, std::string>;

std::vector<std::string> EnvWorker(std::vector<std::string> args) {
  args.push_back("--no_python");
  args.push_back(kData + "/env_worker.sh");
  return Ddprun(args);
}

TEST_CASE(
    "multinode: on the endpoint's host the first agent hosts, the next "
    "joins",
    "[multinode][launch]") {
  TempDir dir;
  const std::string ep = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  std::vector<std::string> args = {"--nnodes=2", "--rdzv_backend=c10d",
                                   "--rdzv_id=auto", "--rdzv_endpoint=" + ep};
  Env env = {{"MN_OUT", dir.path()}, {"MN_SLEEP", "0"}};
  env["MN_NODE"] = "a";
  Child a(dir.path(), "a", EnvWorker(args), env);
  REQUIRE(WaitUntil(
      [&] { return a.Stderr().find("listening on") != std::string::npos; },
      10s));
  env["MN_NODE"] = "b";
  Child b(dir.path(), "b", EnvWorker(args), env);
  INFO(a.Output() + b.Output());
  CHECK(a.Wait(15s) == 0);
  CHECK(b.Wait(15s) == 0);
  CHECK(b.Stderr().find("already served on this host: joining it") !=
        std::string::npos);
  CHECK(ReadWorkerStarts(dir.path()).size() == 2);
}

TEST_CASE("multinode: the hosted rendezvous requires the host's token",
          "[multinode][launch]") {
  TempDir dir;
  const std::string ep = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  std::vector<std::string> args = {"--nnodes=2", "--rdzv_backend=grpc",
                                   "--rdzv_id=tok", "--rdzv_endpoint=" + ep};
  Env env = {{"MN_OUT", dir.path()}, {"MN_NODE", "h"}};
  env["DDPRUN_RDZV_TOKEN"] = "right";
  Child host(dir.path(), "host", EnvWorker(args), env);
  REQUIRE(WaitUntil(
      [&] { return host.Stderr().find("token required") != std::string::npos; },
      10s));
  std::vector<std::string> bad = args;
  bad.push_back("--rdzv_conf=token=wrong,is_host=false");
  Child guest(dir.path(), "guest", EnvWorker(bad), env);
  INFO(guest.Output());
  CHECK(guest.Wait(15s) == 1);
  CHECK(guest.Stderr().find("token") != std::string::npos);
  CHECK(ReadWorkerStarts(dir.path()).empty());
}

TEST_CASE("multinode: static nodes sharing a --node_rank fail clearly",
          "[multinode][launch]") {
  TempDir dir;
  const std::string port = std::to_string(FreeLoopbackPort());
  auto node = [&](const std::string& rank, const std::string& name) {
    return std::make_unique<Child>(
        dir.path(), name,
        EnvWorker({"--nnodes=3", "--node_rank=" + rank,
                   "--master_addr=127.0.0.1", "--master_port=" + port,
                   "--rdzv_conf=join_timeout=20"}),
        Env{{"MN_OUT", dir.path()}, {"MN_NODE", name}});
  };
  auto n0 = node("0", "n0");
  REQUIRE(WaitUntil(
      [&] { return n0->Stderr().find("listening on") != std::string::npos; },
      10s));
  auto n1 = node("1", "n1");
  auto dup = node("1", "dup");
  // Whichever of the two rank-1 nodes lost the rank stops with one line.
  REQUIRE(WaitUntil([&] { return !n1->Running() || !dup->Running(); }, 15s));
  Child& loser = n1->Running() ? *dup : *n1;
  INFO(loser.Output());
  CHECK(loser.Wait(1s) == 1);
  CHECK(loser.Stderr().find("does another node use --node_rank=1?") !=
        std::string::npos);
}

TEST_CASE("multinode: SIGTERM in the exit barrier stops the agent at once",
          "[multinode][launch]") {
  TempDir dir;
  RendezvousServerProcess server(dir.path(), 0);
  REQUIRE(server.port() > 0);
  std::vector<std::string> args = {
      "--nnodes=2", "--rdzv_backend=grpc", "--rdzv_id=barrier",
      "--rdzv_endpoint=127.0.0.1:" + std::to_string(server.port())};
  // Node "fast" finishes at once and waits in the exit barrier for "slow".
  Child fast(dir.path(), "fast", EnvWorker(args),
             {{"MN_OUT", dir.path()}, {"MN_NODE", "fast"}, {"MN_SLEEP", "0"}});
  Child slow(dir.path(), "slow", EnvWorker(args),
             {{"MN_OUT", dir.path()}, {"MN_NODE", "slow"}, {"MN_SLEEP", "30"}});
  INFO(fast.Output() + slow.Output());
  REQUIRE(
      WaitUntil([&] { return ReadWorkerStarts(dir.path()).size() == 2; }, 15s));
  // fast's worker exits and its agent enters the exit barrier: a fixed
  // pause, as the agent shows no sign (no log line, no state in the
  // server's --status) of being in the barrier rather than about to be.
  std::this_thread::sleep_for(500ms);
  REQUIRE(fast.Running());
  const auto start = SteadyClock::now();
  fast.Kill(SIGTERM);
  CHECK(fast.Wait(5s) == 143);
  CHECK(SteadyClock::now() - start < 3s);
  CHECK(fast.Stderr().find("received SIGTERM while waiting for the "
                           "rendezvous") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::multinode

namespace ddprun::multinode {
namespace {

TEST_CASE("multinode: bad rendezvous flags are one line and exit 2",
          "[multinode][launch]") {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--nnodes=2", "--rdzv_backend=grpc"}, "needs --rdzv_endpoint"},
      {{"--nnodes=2", "--rdzv_backend=grpc", "--rdzv_endpoint=127.0.0.1:0",
        "--rdzv_conf=is_host=false"},
       "port 0 needs this agent to host"},
      {{"--nnodes=2", "--rdzv_backend=grpc", "--rdzv_endpoint=127.0.0.1:1",
        "--rdzv_conf=is_host=maybe"},
       "is_host=maybe: expected true or false"},
      {{"--nnodes=1:2", "--node_rank=0", "--master_port=1"},
       "static backend needs a fixed node count"},
  };
  for (const Case& c : cases) {
    Child run(dir.path(), "bad", EnvWorker(c.args), {{"MN_OUT", dir.path()}});
    INFO(run.Output());
    CHECK(run.Wait(10s) == 2);
    const std::string err = run.Stderr();
    CHECK(err.find(c.says) != std::string::npos);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
  CHECK(ReadWorkerStarts(dir.path()).empty());
}

TEST_CASE("multinode: --standalone hosts the rendezvous server in-process",
          "[multinode][launch]") {
  TempDir dir;
  // A proxy set for the outside world must not capture the rendezvous
  // connection (gRPC honours http_proxy unless told not to): 127.0.0.1:1
  // refuses connections, so a proxied rendezvous would never complete.
  Env env = {{"MN_OUT", dir.path()},
             {"MN_NODE", "s"},
             {"MN_SLEEP", "0"},
             {"http_proxy", "http://127.0.0.1:1"},
             {"https_proxy", "http://127.0.0.1:1"},
             {"grpc_proxy", "http://127.0.0.1:1"}};
  Child run(dir.path(), "s", EnvWorker({"--standalone", "--nproc_per_node=2"}),
            env);
  INFO(run.Output());
  REQUIRE(run.Wait(15s) == 0);
  CHECK(run.Stderr().find("rendezvous server listening on 127.0.0.1:") !=
        std::string::npos);
  CHECK(run.Stderr().find("succeeded: all 1 nodes of round 1") !=
        std::string::npos);
  CHECK(ReadWorkerStarts(dir.path()).size() == 2);
}

TEST_CASE("multinode: a standalone job out of restarts ends without waiting",
          "[multinode][launch]") {
  // One node: no node loss can explain the failure, so the server decides
  // at once instead of after heartbeat_timeout + 0.5 s, and the agent does
  // not linger for other agents that cannot exist. A long heartbeat_timeout
  // tells the two apart on a machine of any load.
  const double heartbeat_timeout_s = 20;
  TempDir dir;
  Env env = {{"MN_OUT", dir.path()}, {"MN_NODE", "s"}, {"MN_FAIL", "always"}};
  const auto start = SteadyClock::now();
  Child run(dir.path(), "s",
            EnvWorker({"--standalone", "--nproc_per_node=1", "--max_restarts=1",
                       "--rdzv_conf=heartbeat_timeout=20"}),
            env);
  INFO(run.Output());
  REQUIRE(run.Wait(40s) == 1);
  const double seconds =
      std::chrono::duration<double>(SteadyClock::now() - start).count();
  CHECK(ReadWorkerStarts(dir.path()).size() == 2);
  CHECK(run.Stderr().find("restart budget exhausted (max_restarts=1)") !=
        std::string::npos);
  // Two worker runs of ~0.3 s each; the old wait alone was
  // heartbeat_timeout + 0.5 s + 2 s.
  CHECK(seconds < heartbeat_timeout_s);
}

TEST_CASE("multinode: an unreachable rendezvous server is reported",
          "[multinode][launch]") {
  TempDir dir;
  const std::string ep = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  Child run(
      dir.path(), "lonely",
      EnvWorker({"--nnodes=2", "--rdzv_backend=grpc", "--rdzv_endpoint=" + ep,
                 "--rdzv_conf=is_host=false,join_timeout=7"}),
      {{"MN_OUT", dir.path()}});
  INFO(run.Output());
  REQUIRE(WaitUntil(
      [&] { return run.Stderr().find("not reachable") != std::string::npos; },
      10s));
  CHECK(run.Stderr().find("rendezvous server " + ep + " not reachable") !=
        std::string::npos);
  CHECK(run.Wait(15s) == 1);
  CHECK(ReadWorkerStarts(dir.path()).empty());
}

TEST_CASE("multinode: a hosting agent serves mutual TLS with its own cert",
          "[multinode][launch]") {
  TempDir dir;
  const std::string& d = dir.path();
  const std::string req = "openssl req -newkey rsa:2048 -nodes -subj ";
  const std::string sign =
      "openssl x509 -req -days 1 -CA ca.pem -CAkey "
      "ca.key -CAcreateserial -extfile san.ext";
  // One CA; each node gets a certificate valid for 127.0.0.1.
  const std::string cmd =
      "cd " + d + " && (" +
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=ca "
      "-keyout ca.key -out ca.pem && " +
      "echo subjectAltName=IP:127.0.0.1 > san.ext && " + req +
      "/CN=node-a -keyout a.key -out a.csr && " + sign +
      " -in a.csr -out a.pem && " + req +
      "/CN=node-b -keyout b.key -out b.csr && " + sign +
      " -in b.csr -out b.pem) >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    DDPRUN_SKIP_UNLESS_CI("openssl could not make the certificates");
  }
  const std::string ep = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  auto args = [&](const std::string& node) {
    return EnvWorker({"--nnodes=2", "--rdzv_backend=grpc", "--rdzv_id=tls",
                      "--rdzv_endpoint=" + ep,
                      "--rdzv_conf=tls_ca=" + d + "/ca.pem,tls_cert=" + d +
                          "/" + node + ".pem,tls_key=" + d + "/" + node +
                          ".key"});
  };
  Env env = {{"MN_OUT", d}, {"MN_SLEEP", "0"}, {"MN_NODE", "a"}};
  Child a(d, "a", args("a"), env);
  REQUIRE(WaitUntil(
      [&] { return a.Stderr().find("listening on") != std::string::npos; },
      10s));
  env["MN_NODE"] = "b";
  Child b(d, "b", args("b"), env);
  INFO(a.Output() + b.Output());
  CHECK(a.Wait(20s) == 0);
  CHECK(b.Wait(20s) == 0);
  CHECK(a.Stderr().find("TLS") != std::string::npos);
  CHECK(ReadWorkerStarts(d).size() == 2);

  // A hosting agent without its own certificate cannot serve TLS.
  Child half(d, "half",
             EnvWorker({"--nnodes=2", "--rdzv_backend=grpc",
                        "--rdzv_endpoint=127.0.0.1:0",
                        "--rdzv_conf=tls_ca=" + d + "/ca.pem"}),
             {{"MN_OUT", d}});
  CHECK(half.Wait(10s) == 2);
  CHECK(half.Stderr().find("needs all of tls_ca, tls_cert and tls_key") !=
        std::string::npos);
}

}  // namespace
}  // namespace ddprun::multinode
