// The ddprun-rendezvous executable as a user runs it, and TLS on loopback.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "rendezvous/grpc_rendezvous_client.h"
#include "rendezvous/rendezvous_server.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Steady = std::chrono::steady_clock;

agent::JoinRequest Solo(const std::string& node) {
  agent::JoinRequest r;
  r.run_id = "solo";
  r.node_id = node;
  r.local_addr = "127.0.0.1";
  return r;
}

// ddprun-rendezvous started with `args`; stderr read through a pipe.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& args) {
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(fds[1], 2);
      std::vector<char*> argv;
      std::string bin = std::string(DDPRUN_BIN_DIR) + "/ddprun-rendezvous";
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (auto& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    err_ = fds[0];
  }
  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(err_);
  }

  // Reads stderr until `pattern` matches (group 1 returned) or timeout.
  std::string WaitFor(const std::string& pattern, Clock::Duration timeout) {
    const std::regex re(pattern);
    const auto deadline = Steady::now() + timeout;
    std::smatch m;
    while (Steady::now() < deadline) {
      if (std::regex_search(log_, m, re)) return m[1];
      pollfd p{err_, POLLIN, 0};
      if (poll(&p, 1, 100) > 0) {
        char buf[1024];
        const ssize_t n = read(err_, buf, sizeof(buf));
        if (n <= 0) break;
        log_.append(buf, n);
      }
    }
    return "";
  }

  // SIGTERM, then the exit code (or -1 if it did not exit within 5 s).
  int Terminate() {
    kill(pid_, SIGTERM);
    return WaitExit();
  }

  // The exit code, or -1 if it did not exit within 5 s (or by a signal).
  int WaitExit() {
    const auto deadline = Steady::now() + seconds(5);
    int status = 0;
    while (Steady::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        WaitFor("(\\n)$", milliseconds(200));  // drain what it wrote
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
    return -1;
  }

  const std::string& log() const { return log_; }

 private:
  pid_t pid_ = -1;
  int err_ = -1;
  std::string log_;
};

TEST_CASE("ddprun-rendezvous: serves on the port it logs, stops on SIGTERM",
          "[rendezvous][process]") {
  const std::string token_file =
      std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
      "/ddprun_rdzv_token_" + std::to_string(getpid());
  std::ofstream(token_file) << "tok3n\n";
  ServerProcess server(
      {"--host", "127.0.0.1", "--port", "0", "--token_file", token_file});
  const std::string port =
      server.WaitFor("listening on 127\\.0\\.0\\.1:([0-9]+)", seconds(10));
  std::remove(token_file.c_str());
  REQUIRE_FALSE(port.empty());
  CHECK_THAT(server.log(), Catch::Contains("token required"));

  GrpcClientOptions o;
  o.endpoint = "127.0.0.1:" + port;
  o.token = "tok3n";  // the file's trailing newline is not part of it
  auto client = CreateGrpcRendezvousClient(o);
  REQUIRE(client.ok());
  auto r = (*client)->Join(Solo("n0"), Steady::now() + seconds(10));
  REQUIRE(r.ok());
  CHECK(r->group_world_size == 1);
  CHECK(server.Terminate() == 0);
}

TEST_CASE("ddprun-rendezvous: a busy port is a one-line error",
          "[rendezvous][process]") {
  RendezvousServer holder;
  auto port = holder.Start("127.0.0.1", 0, ServerOptions());
  REQUIRE(port.ok());
  ServerProcess server(
      {"--host", "127.0.0.1", "--port", std::to_string(*port)});
  CHECK(server.WaitExit() == 1);
  CHECK_THAT(server.log(), Catch::Contains("cannot listen on 127.0.0.1:" +
                                           std::to_string(*port)));
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
    WARN("openssl not available: TLS test skipped");
    return;
  }
  ServerOptions options;
  options.tls_cert_pem = ReadAll(dir + "/cert.pem");
  options.tls_key_pem = ReadAll(dir + "/key.pem");
  RendezvousServer server;
  auto port = server.Start("127.0.0.1", 0, options);
  REQUIRE(port.ok());

  GrpcClientOptions o;
  o.endpoint = "127.0.0.1:" + std::to_string(*port);
  o.tls_ca_pem = options.tls_cert_pem;  // self-signed: its own CA
  auto client = CreateGrpcRendezvousClient(o);
  REQUIRE(client.ok());
  auto r = (*client)->Join(Solo("tls"), Steady::now() + seconds(10));
  REQUIRE(r.ok());

  GrpcClientOptions plain;
  plain.endpoint = o.endpoint;
  auto insecure = CreateGrpcRendezvousClient(plain);
  REQUIRE(insecure.ok());
  auto refused = (*insecure)->Join(Solo("plain"), Steady::now() + seconds(2));
  CHECK_FALSE(refused.ok());
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace ddprun::rendezvous
