// The ddprun-rendezvous executable as a user runs it, and TLS on loopback.
#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "tests/rendezvous/rendezvous_fixture.h"
#include "tests/rendezvous/server_process.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

JoinRequest Solo(const std::string& node) {
  JoinRequest r;
  r.run_id = "solo";
  r.node_id = node;
  r.local_addr = "127.0.0.1";
  return r;
}

TEST_CASE("ddprun-rendezvous: serves on the port it logs, stops on SIGTERM",
          "[rendezvous][process]") {
  const std::string token_file =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
      "/ddprun_rdzv_token_" + std::to_string(getpid());
  std::ofstream(token_file) << "tok3n\n";
  chmod(token_file.c_str(), 0600);
  ServerProcess server(
      {"--host", "127.0.0.1", "--port", "0", "--token_file", token_file});
  const std::string port =
      server.WaitFor("listening on 127\\.0\\.0\\.1:([0-9]+)", seconds(10));
  std::remove(token_file.c_str());
  REQUIRE_FALSE(port.empty());
  CHECK_THAT(server.log(), Catch::Contains("token required"));

  GrpcClientOptions o;
  o.endpoint = "127.0.0.1:" + port;
  o.rendezvous.token =
      "tok3n";  // the file's trailing newline is not part of it
  auto client = testing::SyncClient::Grpc(o);
  REQUIRE(client.ok());
  auto r = (*client)->Join(Solo("n0"), Steady::now() + seconds(10));
  REQUIRE(r.ok());
  CHECK(r->group_world_size == 1);
  CHECK(server.Terminate() == 0);
}

TEST_CASE("ddprun-rendezvous: a busy port is a one-line error",
          "[rendezvous][process]") {
  testing::RendezvousFixture holder;
  ServerProcess server(
      {"--host", "127.0.0.1", "--port", std::to_string(holder.port())});
  CHECK(server.WaitExit() == 1);
  CHECK_THAT(server.log(), Catch::Contains("cannot listen on 127.0.0.1:" +
                                           std::to_string(holder.port())));
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_CASE("RendezvousServer: TLS with a CA-verified server certificate",
          "[rendezvous][grpc]") {
  char dir_template[] = "/tmp/ddprun_tls_XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  const std::string cmd =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    DDPRUN_SKIP_UNLESS_CI("openssl could not make the certificates");
  }
  ServerOptions options;
  options.tls_cert_pem = ReadAll(dir + "/cert.pem");
  options.tls_key_pem = ReadAll(dir + "/key.pem");
  testing::RendezvousFixture rdzv(options);

  GrpcClientOptions o = rdzv.ClientOptions();
  o.rendezvous.tls_ca_pem = options.tls_cert_pem;  // self-signed: its own CA
  auto client = rdzv.Client(o);
  auto r = client->Join(Solo("tls"), Steady::now() + seconds(10));
  REQUIRE(r.ok());

  auto insecure = rdzv.Client(rdzv.ClientOptions());
  auto refused = insecure->Join(Solo("plain"), Steady::now() + seconds(2));
  CHECK_FALSE(refused.ok());
  std::system(("rm -rf " + dir).c_str());
}

// The gRPC status of each of the seven rpcs, called with `token` (empty:
// no token metadata) and minimal requests.
std::vector<grpc::StatusCode> CallEveryRpc(const std::string& port,
                                           const std::string& token) {
  auto stub = v1::Rendezvous::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + port, grpc::InsecureChannelCredentials()));
  std::vector<grpc::StatusCode> codes;
  auto call = [&](auto method, auto request, auto response) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    if (!token.empty()) ctx.AddMetadata("x-ddprun-token", token);
    codes.push_back(((*stub).*method)(&ctx, request, &response).error_code());
  };
  using R = v1::Rendezvous::Stub;
  call(&R::Join, v1::JoinRequest(), v1::JoinResponse());
  call(&R::Heartbeat, v1::HeartbeatRequest(), v1::HeartbeatResponse());
  call(&R::ReportFailure, v1::ReportFailureRequest(),
       v1::ReportFailureResponse());
  call(&R::ReportSuccess, v1::ReportSuccessRequest(),
       v1::ReportSuccessResponse());
  call(&R::Leave, v1::LeaveRequest(), v1::LeaveResponse());
  call(&R::Close, v1::CloseRequest(), v1::CloseResponse());
  call(&R::Status, v1::StatusRequest(), v1::StatusResponse());
  return codes;
}

TEST_CASE("ddprun-rendezvous: DDPRUN_RDZV_TOKEN guards every rpc",
          "[rendezvous][process]") {
  ServerProcess server({"--host", "127.0.0.1", "--port", "0"},
                       {{"DDPRUN_RDZV_TOKEN", "envtok"}});
  const std::string port =
      server.WaitFor("listening on 127\\.0\\.0\\.1:([0-9]+)", seconds(10));
  REQUIRE_FALSE(port.empty());
  CHECK_THAT(server.log(), Catch::Contains("token required"));
  const std::vector<grpc::StatusCode> refused(
      7, grpc::StatusCode::UNAUTHENTICATED);
  CHECK(CallEveryRpc(port, "") == refused);
  CHECK(CallEveryRpc(port, "envtoX") == refused);  // same length, last byte
  CHECK(CallEveryRpc(port, "envtok2") == refused);
  // With the token the requests reach the handlers (which refuse them as
  // malformed or unknown), and Status answers.
  const auto admitted = CallEveryRpc(port, "envtok");
  CHECK(admitted.back() == grpc::StatusCode::OK);
  for (grpc::StatusCode code : admitted) {
    CHECK(code != grpc::StatusCode::UNAUTHENTICATED);
  }
  CHECK(server.Terminate() == 0);
}

TEST_CASE("ddprun-rendezvous: a non-loopback bind without token or TLS warns",
          "[rendezvous][process]") {
  // 0.0.0.0 only inside a network namespace of our own (nothing outside
  // can reach it).
  if (std::system("unshare -rn true >/dev/null 2>&1") != 0) {
    DDPRUN_SKIP_UNLESS_CI("`unshare -rn` is not permitted here");
  }
  const std::string warning = "has neither a token nor TLS";
  {
    ServerProcess server({"--host", "0.0.0.0", "--port", "0"}, {},
                         {"unshare", "-rn"});
    REQUIRE_FALSE(
        server.WaitFor("listening on 0\\.0\\.0\\.0:([0-9]+)", seconds(10))
            .empty());
    CHECK_FALSE(server.WaitFor("(" + warning + ")", seconds(2)).empty());
    CHECK(server.Terminate() == 0);
  }
  {
    ServerProcess server({"--host", "0.0.0.0", "--port", "0"},
                         {{"DDPRUN_RDZV_TOKEN", "t"}}, {"unshare", "-rn"});
    REQUIRE_FALSE(
        server.WaitFor("listening on 0\\.0\\.0\\.0:([0-9]+)", seconds(10))
            .empty());
    CHECK(server.Terminate() == 0);
    CHECK_THAT(server.log(), !Catch::Contains(warning));
  }
  {
    ServerProcess server({"--host", "127.0.0.1", "--port", "0"});
    REQUIRE_FALSE(
        server.WaitFor("listening on 127\\.0\\.0\\.1:([0-9]+)", seconds(10))
            .empty());
    CHECK(server.Terminate() == 0);
    CHECK_THAT(server.log(), !Catch::Contains(warning));
  }
}

TEST_CASE("ddprun-rendezvous: --max_nodes_per_job refuses one node more",
          "[rendezvous][process]") {
  ServerProcess server(
      {"--host", "127.0.0.1", "--port", "0", "--max_nodes_per_job", "1"});
  const std::string port =
      server.WaitFor("listening on 127\\.0\\.0\\.1:([0-9]+)", seconds(10));
  REQUIRE_FALSE(port.empty());
  auto stub = v1::Rendezvous::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + port, grpc::InsecureChannelCredentials()));
  auto join = [&](const std::string& node) {
    v1::JoinRequest r;
    r.set_rdzv_id("job");
    r.mutable_config()->set_min_nodes(1);
    r.mutable_config()->set_max_nodes(1);
    r.mutable_node()->set_node_id(node);
    r.mutable_node()->set_instance(1);
    r.mutable_node()->set_local_world_size(1);
    r.mutable_node()->set_addr("127.0.0.1");
    r.mutable_node()->set_master_port(29500);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + seconds(5));
    v1::JoinResponse resp;
    return stub->Join(&ctx, r, &resp);
  };
  REQUIRE(join("a").ok());
  grpc::Status refused = join("b");
  CHECK(refused.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK_THAT(refused.error_message(), Catch::Contains("max_nodes_per_job"));
  CHECK(server.Terminate() == 0);
}

TEST_CASE("RendezvousServer: mutual TLS needs a client cert signed by the CA",
          "[rendezvous][grpc]") {
  char dir_template[] = "/tmp/ddprun_mtls_XXXXXX";
  REQUIRE(mkdtemp(dir_template) != nullptr);
  const std::string d = dir_template;
  const std::string req = "openssl req -newkey rsa:2048 -nodes -subj ";
  const std::string sign = "openssl x509 -req -days 1 -CA " + d +
                           "/ca.pem -CAkey " + d + "/ca.key -CAcreateserial";
  const std::string cmd =
      "cd " + d + " && (" +
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=test-ca "
      "-keyout ca.key -out ca.pem && " +
      req + "/CN=localhost -keyout server.key -out server.csr && " +
      "echo subjectAltName=IP:127.0.0.1,DNS:localhost > san.ext && " + sign +
      " -extfile san.ext -in server.csr -out server.pem && " + req +
      "/CN=agent -keyout client.key -out client.csr && " + sign +
      " -in client.csr -out client.pem && " +
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=rogue "
      "-keyout rogue.key -out rogue.pem) >/dev/null 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  ServerOptions options;
  options.tls_cert_pem = ReadAll(d + "/server.pem");
  options.tls_key_pem = ReadAll(d + "/server.key");
  options.tls_ca_pem = ReadAll(d + "/ca.pem");
  testing::RendezvousFixture rdzv(options);

  GrpcClientOptions o = rdzv.ClientOptions();
  o.rendezvous.tls_ca_pem = options.tls_ca_pem;
  auto join = [&](const GrpcClientOptions& opts, const std::string& node) {
    return rdzv.Client(opts)->Join(Solo(node), Steady::now() + seconds(2)).ok();
  };
  CHECK_FALSE(join(o, "no-cert"));
  GrpcClientOptions rogue = o;
  rogue.rendezvous.tls_cert_pem = ReadAll(d + "/rogue.pem");
  rogue.rendezvous.tls_key_pem = ReadAll(d + "/rogue.key");
  CHECK_FALSE(join(rogue, "rogue"));
  GrpcClientOptions agent = o;
  agent.rendezvous.tls_cert_pem = ReadAll(d + "/client.pem");
  agent.rendezvous.tls_key_pem = ReadAll(d + "/client.key");
  CHECK(join(agent, "agent"));
  std::system(("rm -rf " + d).c_str());
}

TEST_CASE("GrpcRendezvous: a rate-limited Join is retried after a backoff",
          "[rendezvous][grpc]") {
  ServerOptions options;
  options.limits.join_burst = 1;
  options.limits.join_rate_per_s = 4;  // one more Join every 250 ms
  testing::RendezvousFixture rdzv(options);
  auto client = rdzv.Client(rdzv.ClientOptions());
  auto first = client->Join(Solo("n0"), Steady::now() + seconds(10));
  REQUIRE(first.ok());
  // At once again (a new round): refused by the server's limit, retried by
  // the client, admitted once the bucket refilled.
  const auto start = Steady::now();
  JoinRequest again = Solo("n0");
  auto second = client->Join(again, Steady::now() + seconds(10));
  REQUIRE(second.ok());
  CHECK(second->round > first->round);
  CHECK(Steady::now() - start >= milliseconds(100));
  CHECK(Steady::now() - start < seconds(3));
}

}  // namespace
}  // namespace ddprun::rendezvous
