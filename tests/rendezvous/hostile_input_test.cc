// Hostile input against the rendezvous server over real sockets on
// loopback: a flood of idle connections at the descriptor limit, an
// impostor's heartbeats, out-of-range rounds, huge and forged reasons, and
// bad command lines and tokens of ddprun-rendezvous.

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "tests/rendezvous/rendezvous_fixture.h"
#include "tests/rendezvous/server_process.h"
#include "tests/support/process.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

std::unique_ptr<v1::Rendezvous::Stub> Stub(const std::string& port) {
  return v1::Rendezvous::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + port, grpc::InsecureChannelCredentials()));
}

// A Status call on a fresh channel: does the server accept and answer?
bool Answers(const std::string& port) {
  auto stub = Stub(port);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(2));
  v1::StatusRequest req;
  v1::StatusResponse resp;
  return stub->Status(&ctx, req, &resp).ok();
}

bool AnswersWithin(const std::string& port, Steady::duration timeout) {
  return ddprun::testing::WaitUntil(
      [&] { return Answers(port); },
      std::chrono::duration_cast<milliseconds>(timeout), milliseconds(200));
}

// `n` TCP connections to 127.0.0.1:port that never send a byte.
std::vector<int> IdleConnections(int port, int n) {
  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      close(fd);
      break;
    }
    fds.push_back(fd);
  }
  return fds;
}

void CloseAll(std::vector<int>* fds) {
  for (int fd : *fds) close(fd);
  fds->clear();
}

// The port `server` logs that it listens on (on 127.0.0.1), within 10 s.
std::string ListeningPort(ServerProcess& server) {
  const std::string port =
      server.WaitFor("listening on 127\\.0\\.0\\.1:([0-9]+)", seconds(10));
  REQUIRE_FALSE(port.empty());
  return port;
}

v1::JobConfig OneToTwo() {
  v1::JobConfig c;
  c.set_min_nodes(1);
  c.set_max_nodes(2);
  c.set_heartbeat_timeout_ms(2000);
  c.set_last_call_timeout_ms(100);
  return c;
}

v1::NodeInfo Node(const std::string& id, uint64_t instance) {
  v1::NodeInfo n;
  n.set_node_id(id);
  n.set_instance(instance);
  n.set_local_world_size(1);
  n.set_addr("127.0.0.1");
  n.set_master_port(29500);
  return n;
}

grpc::Status Join(v1::Rendezvous::Stub* stub, const v1::JoinRequest& req,
                  v1::JoinResponse* resp, seconds timeout = seconds(5)) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  return stub->Join(&ctx, req, resp);
}

grpc::Status Heartbeat(v1::Rendezvous::Stub* stub, const std::string& job,
                       const v1::NodeInfo& node, const v1::Assignment& current,
                       v1::HeartbeatResponse* resp = nullptr) {
  v1::HeartbeatRequest req;
  req.set_rdzv_id(job);
  *req.mutable_config() = OneToTwo();
  *req.mutable_node() = node;
  *req.mutable_current() = current;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(2));
  v1::HeartbeatResponse ignored;
  return stub->Heartbeat(&ctx, req, resp != nullptr ? resp : &ignored);
}

v1::JobStatus JobStatusOf(v1::Rendezvous::Stub* stub, const std::string& job) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(2));
  v1::StatusRequest req;
  req.set_rdzv_id(job);
  v1::StatusResponse resp;
  REQUIRE(stub->Status(&ctx, req, &resp).ok());
  REQUIRE(resp.jobs_size() == 1);
  return resp.jobs(0);
}

TEST_CASE(
    "ddprun-rendezvous: at the descriptor limit it sheds connections, says "
    "so, and serves again",
    "[rendezvous][process][hostile]") {
  if (std::system("prlimit --version >/dev/null 2>&1") != 0) {
    DDPRUN_SKIP_UNLESS_CI("no prlimit (util-linux)");
  }
  // The flood below needs ~300 descriptors of our own.
  rlimit own{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &own) == 0);
  if (own.rlim_cur < 512 && own.rlim_max >= 512) {
    own.rlim_cur = 512;
    REQUIRE(setrlimit(RLIMIT_NOFILE, &own) == 0);
  }
  if (own.rlim_cur < 512) {
    DDPRUN_SKIP_UNLESS_CI("open-file limit below 512 (ulimit -Hn)");
  }
  ServerProcess server({"--host", "127.0.0.1", "--port", "0"}, {},
                       {"prlimit", "--nofile=128"});
  const std::string port = ListeningPort(server);

  // 200 idle connections against a limit of 128: the server keeps
  // descriptors for itself and sheds the rest (before the fix gRPC's
  // listener died at EMFILE and never accepted again).
  std::vector<int> flood = IdleConnections(std::stoi(port), 200);
  CHECK(flood.size() == 200);
  CHECK_FALSE(
      server.WaitFor("(refused [0-9]+ connection)", seconds(10)).empty());
  CloseAll(&flood);
  CHECK(AnswersWithin(port, seconds(10)));
  CHECK_FALSE(
      server.WaitFor("(accepting connections again)", seconds(5)).empty());

  // Held open this time: connections that never speak HTTP/2 are closed
  // after 10 s, so the server serves again while the flood is still held.
  flood = IdleConnections(std::stoi(port), 200);
  const auto flooded = Steady::now();
  CHECK(AnswersWithin(port, seconds(20)));
  std::printf("[rendezvous] served again %.1f s into a held flood\n",
              std::chrono::duration<double>(Steady::now() - flooded).count());
  CloseAll(&flood);
  CHECK(server.Terminate() == 0);
}

TEST_CASE(
    "RendezvousServer: an impostor's refused heartbeats do not starve the "
    "node it impersonates",
    "[rendezvous][grpc][hostile]") {
  testing::RendezvousFixture rdzv;  // no token: anyone may call
  auto stub = rdzv.Stub();
  v1::JoinRequest join;
  join.set_rdzv_id("starve");
  *join.mutable_config() = OneToTwo();
  *join.mutable_node() = Node("victim", 7);
  v1::JoinResponse joined;
  REQUIRE(Join(stub.get(), join, &joined).ok());
  const v1::Assignment round = joined.assignment();
  REQUIRE(round.round() == 1);

  // The impostor hammers the victim's node id (another instance) for
  // longer than heartbeat_timeout (2 s), while the victim heartbeats every
  // 200 ms. Before the fix the refused calls spent the victim's allowance:
  // its heartbeats were refused, it was declared lost and the job restarted.
  std::atomic<bool> stop{false};
  std::atomic<int> impostor_calls{0};
  std::thread impostor([&] {
    auto own = rdzv.Stub();
    while (!stop) {
      Heartbeat(own.get(), "starve", Node("victim", 666), round);
      ++impostor_calls;
    }
  });
  // 3 s of heartbeats on purpose: none may be refused during the flood.
  int refused = 0;
  const auto until = Steady::now() + seconds(3);
  while (Steady::now() < until) {
    if (!Heartbeat(stub.get(), "starve", Node("victim", 7), round).ok()) {
      ++refused;
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
  stop = true;
  impostor.join();
  CHECK(impostor_calls > 100);
  CHECK(refused == 0);
  const v1::JobStatus job = JobStatusOf(stub.get(), "starve");
  CHECK(job.round() == 1);
  REQUIRE(job.nodes_size() == 1);
  CHECK(job.nodes(0).state() == v1::NodeStatus::STATE_RUNNING);
}

TEST_CASE(
    "RendezvousServer: out-of-range rounds and oversized reasons are refused "
    "and change nothing",
    "[rendezvous][grpc][hostile]") {
  testing::RendezvousFixture rdzv;
  auto stub = rdzv.Stub();
  v1::JoinRequest join;
  join.set_rdzv_id("range");
  *join.mutable_config() = OneToTwo();
  *join.mutable_node() = Node("a", 1);
  join.mutable_previous()->set_round(LLONG_MAX);  // round + 1 overflowed
  v1::JoinResponse resp;
  grpc::Status s = Join(stub.get(), join, &resp);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(s.error_message(), Catch::Contains("out of range"));
  v1::Assignment huge;
  huge.set_round(LLONG_MAX);
  huge.set_group_world_size(1);
  CHECK(Heartbeat(stub.get(), "range", Node("a", 1), huge).error_code() ==
        grpc::StatusCode::INVALID_ARGUMENT);

  // A parked spare (max 1 node, the round is full) must get its answer
  // when the job is closed; a 60 KB reason used to be stored and break the
  // spare's call ("received initial metadata size exceeds limit").
  join.mutable_previous()->set_round(0);
  join.mutable_config()->set_max_nodes(1);
  REQUIRE(Join(stub.get(), join, &resp).ok());
  v1::JoinRequest spare = join;
  *spare.mutable_node() = Node("spare", 2);
  grpc::Status spare_status;
  std::thread parked([&] {
    auto own = rdzv.Stub();
    v1::JoinResponse r;
    spare_status = Join(own.get(), spare, &r, seconds(20));
  });
  // A fixed pause: --status does not list a parked spare, so nothing shows
  // that its Join arrived (a Close before it would fail it differently).
  std::this_thread::sleep_for(milliseconds(500));
  auto close = [&](const std::string& reason) {
    v1::CloseRequest req;
    req.set_rdzv_id("range");
    req.set_reason(reason);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    v1::CloseResponse r;
    return stub->Close(&ctx, req, &r);
  };
  grpc::Status big = close(std::string(60000, 'x'));
  CHECK(big.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(JobStatusOf(stub.get(), "range").state() ==
        v1::JobStatus::STATE_RUNNING);
  REQUIRE(close("operator stop").ok());
  parked.join();
  CHECK(spare_status.error_code() == grpc::StatusCode::ABORTED);
  CHECK_THAT(spare_status.error_message(), Catch::Contains("operator stop"));
}

TEST_CASE(
    "ddprun-rendezvous: ids and reasons cannot forge log lines or drive the "
    "terminal",
    "[rendezvous][process][hostile]") {
  ServerProcess server({"--host", "127.0.0.1", "--port", "0"});
  const std::string port = ListeningPort(server);
  auto stub = Stub(port);
  const std::string forged = "\n[rdzv E 00:00:00.000 forged.cc:1] pwned";
  v1::JoinRequest join;
  join.set_rdzv_id("evil" + forged);
  *join.mutable_config() = OneToTwo();
  *join.mutable_node() = Node("a", 1);
  v1::JoinResponse resp;
  REQUIRE(Join(stub.get(), join, &resp).ok());
  v1::CloseRequest close;
  close.set_rdzv_id(join.rdzv_id());
  close.set_reason("bye\x1b[2J" + forged);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
  v1::CloseResponse closed;
  REQUIRE(stub->Close(&ctx, close, &closed).ok());
  CHECK_FALSE(server.WaitFor("(failed: bye)", seconds(5)).empty());
  CHECK(server.Terminate() == 0);
  CHECK_THAT(server.log(), !Catch::Contains("\n[rdzv E 00:00:00.000"));
  CHECK_THAT(server.log(), !Catch::Contains("\x1b"));
  CHECK_THAT(server.log(), Catch::Contains("evil\\n[rdzv E"));
  CHECK_THAT(server.log(), Catch::Contains("bye\\x1b[2J"));
}

TEST_CASE(
    "ddprun-rendezvous --stacks: another node's stack text cannot forge "
    "lines or drive the terminal",
    "[rendezvous][process][hostile]") {
  // Issue 39: --status escaped what came from the network, --stacks did
  // not.
  ServerProcess server({"--host", "127.0.0.1", "--port", "0"});
  const std::string port = ListeningPort(server);
  auto stub = Stub(port);
  v1::JoinRequest join;
  join.set_rdzv_id("job");
  *join.mutable_config() = OneToTwo();  // 1:2, last call 0.1 s
  *join.mutable_node() = Node("a", 1);
  v1::JoinResponse joined;
  REQUIRE(Join(stub.get(), join, &joined).ok());
  ddprun::testing::ProcessOptions o;
  o.argv = {std::string(DDPRUN_BIN_DIR) + "/ddprun-rendezvous", "--stacks",
            "127.0.0.1:" + port, "--rdzv_id", "job", "--stacks_timeout", "10"};
  ddprun::testing::Process stacks(o);
  // The node learns of the dump in a heartbeat and answers with text meant
  // to forge a rank's line and clear the screen.
  uint64_t request = 0;
  REQUIRE(ddprun::testing::WaitUntil(
      [&] {
        v1::HeartbeatResponse beat;
        if (!Heartbeat(stub.get(), "job", join.node(), joined.assignment(),
                       &beat)
                 .ok()) {
          return false;
        }
        request = beat.stacks_request();
        return request != 0;
      },
      milliseconds(10000), milliseconds(100)));
  v1::StacksRequest answer;
  answer.set_rdzv_id("job");
  answer.set_request_id(request);
  answer.set_node_id("a");
  answer.set_instance(1);
  v1::RankStack* rank = answer.add_ranks();
  rank->set_rank(0);
  rank->set_pid(7);
  rank->set_host("b\n  rank 9 (pid 1): forged");
  rank->set_stack(
      "Current thread 0x1 (most recent call first):\n"
      "  File \"x.py\", line 1 in f\x1b[2J\r  rank 8 (pid 1): forged\n");
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    v1::StacksResponse resp;
    REQUIRE(stub->Stacks(&ctx, answer, &resp).ok());
  }
  const int code = stacks.Wait(seconds(15));
  const std::string out = stacks.Stdout();
  INFO(stacks.Output());
  CHECK(code == 0);
  CHECK_THAT(out, !Catch::Contains("\x1b"));
  CHECK_THAT(out, !Catch::Contains("\r"));
  CHECK_THAT(out, !Catch::Contains("\n  rank 9"));
  CHECK_THAT(out, Catch::Contains("b\\n  rank 9 (pid 1): forged"));
  CHECK_THAT(out, Catch::Contains("f\\x1b[2J\\r  rank 8"));
  CHECK(server.Terminate() == 0);
}

// Runs ddprun-rendezvous to its exit; stderr in `*err`.
int RunServer(const std::vector<std::string>& args,
              const std::vector<std::pair<std::string, std::string>>& env,
              std::string* err) {
  ServerProcess server(args, env);
  const int code = server.WaitExit();
  *err = server.log();
  return code;
}

TEST_CASE(
    "ddprun-rendezvous: bad flags and empty tokens are one error line and "
    "exit 2",
    "[rendezvous][process][hostile]") {
  const std::string empty_file =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
      "/ddprun_empty_token_" + std::to_string(getpid());
  std::ofstream(empty_file) << "\n";
  chmod(empty_file.c_str(), 0600);
  // A token others may read (issue 39): refused as ssh refuses such a key.
  const std::string open_file = empty_file + ".open";
  std::ofstream(open_file) << "s3cret\n";
  chmod(open_file.c_str(), 0644);
  struct Case {
    std::vector<std::string> args;
    std::vector<std::pair<std::string, std::string>> env;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--port", "70000"}, {}, "--port"},
      {{"--port", "-1"}, {}, "--port"},
      {{"--join_timeout", "-1"}, {}, "--join_timeout"},
      {{"--heartbeat_timeout", "0"}, {}, "--heartbeat_timeout"},
      {{"--heartbeat_timeout", "nan"}, {}, "--heartbeat_timeout"},
      {{"--heartbeat_timeout", "1e30"}, {}, "--heartbeat_timeout"},
      {{"--last_call_timeout", "inf"}, {}, "--last_call_timeout"},
      {{"--heartbeat_rate", "nan"}, {}, "--heartbeat_rate"},
      {{"--max_jobs", "0"}, {}, "--max_jobs"},
      {{"--no_such_flag"}, {}, "--no_such_flag"},
      {{"--token", ""}, {}, "empty token"},
      {{"--token_file", empty_file}, {}, "empty token"},
      {{}, {{"DDPRUN_RDZV_TOKEN", ""}}, "empty token"},
      {{}, {{"DDPRUN_RDZV_TOKEN_FILE", empty_file}}, "empty token"},
      {{"--token_file", open_file}, {}, "permissions 0644 are too open"},
      {{}, {{"DDPRUN_RDZV_TOKEN_FILE", open_file}}, "chmod 600"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--host", "127.0.0.1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::string err;
    const int code = RunServer(args, c.env, &err);
    INFO(c.says << ": " << err);
    CHECK(code == 2);
    CHECK(err.rfind("ddprun-rendezvous: error: ", 0) == 0);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    CHECK_THAT(err, Catch::Contains(c.says));
  }
  std::remove(empty_file.c_str());
  std::remove(open_file.c_str());
}

}  // namespace
}  // namespace ddprun::rendezvous
