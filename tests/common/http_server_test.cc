// common/http_server.h on loopback: answers, keep-alive, the size and time
// limits that keep a hostile client from holding the server, the
// connection limit.
#include "common/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "ddprun_catch.h"
#include "tests/support/http_client.h"

namespace ddprun {
namespace {

using testing::HttpAnswer;
using testing::HttpCall;
using testing::HttpExchange;

HttpResponse Echo(const HttpRequest& r) {
  HttpResponse out;
  out.body = r.method + " " + r.path + " q=" + r.query +
             " x=" + r.Header("x-test") + " body=" + r.body;
  out.headers.emplace_back("X-Answer", "1");
  return out;
}

int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  return fd;
}

// Reads until the peer closes or `ms` pass; true when it closed.
bool ClosedWithin(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return false;
  }
}

TEST_CASE("HttpServer: answers GET and POST, headers and query", "[http]") {
  HttpServer server;
  StatusOr<int> port = server.Start("127.0.0.1", 0, Echo);
  REQUIRE(port.ok());
  HttpAnswer a = HttpCall(*port, "GET", "/a/b?c=d", {{"X-Test", "yes"}});
  REQUIRE(a.status == 200);
  CHECK(a.body == "GET /a/b q=c=d x=yes body=");
  CHECK(a.Header("x-answer") == "1");
  CHECK(a.Header("content-type") == "text/plain; charset=utf-8");
  HttpAnswer p = HttpCall(*port, "POST", "/p", {}, "token=abc");
  CHECK(p.body == "POST /p q= x= body=token=abc");
  HttpAnswer h = HttpCall(*port, "HEAD", "/a");
  CHECK(h.status == 200);
  CHECK(h.body.empty());
  // HEAD: the length GET would have, no body.
  CHECK(h.Header("content-length") ==
        std::to_string(std::string("HEAD /a q= x= body=").size()));
}

TEST_CASE("HttpServer: keep-alive serves several requests on one connection",
          "[http]") {
  HttpServer server;
  StatusOr<int> port = server.Start("127.0.0.1", 0, Echo);
  REQUIRE(port.ok());
  const std::string one = "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string two =
      "GET /2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const int fd = ConnectLoopback(*port);
  REQUIRE(::send(fd, (one + two).data(), one.size() + two.size(), 0) > 0);
  std::string all;
  char buf[4096];
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
    all.append(buf, n);
  ::close(fd);
  CHECK(all.find("GET /1 q=") != std::string::npos);
  CHECK(all.find("GET /2 q=") != std::string::npos);
}

TEST_CASE(
    "HttpServer: oversized headers and bodies are refused, garbage is "
    "a 400",
    "[http]") {
  HttpServer server;
  HttpServerOptions o;
  o.max_header_bytes = 1024;
  o.max_body_bytes = 64;
  StatusOr<int> port = server.Start("127.0.0.1", 0, Echo, o);
  REQUIRE(port.ok());
  CHECK(
      HttpCall(*port, "GET", "/", {{"X-Big", std::string(4000, 'a')}}).status ==
      431);
  CHECK(HttpCall(*port, "POST", "/", {}, std::string(65, 'b')).status == 413);
  CHECK(HttpExchange(*port, "NOT HTTP AT ALL\r\n\r\n").status == 400);
  // The server still answers.
  CHECK(HttpCall(*port, "GET", "/ok").status == 200);
}

TEST_CASE(
    "HttpServer: a client that sends nothing is closed after the read "
    "timeout",
    "[http]") {
  HttpServer server;
  HttpServerOptions o;
  o.read_timeout = std::chrono::milliseconds(300);
  StatusOr<int> port = server.Start("127.0.0.1", 0, Echo, o);
  REQUIRE(port.ok());
  const int fd = ConnectLoopback(*port);
  const auto start = std::chrono::steady_clock::now();
  CHECK(ClosedWithin(fd, 5000));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(3));
  ::close(fd);
}

TEST_CASE(
    "HttpServer: beyond max_connections new connections are closed, "
    "and served again once others go",
    "[http]") {
  HttpServer server;
  HttpServerOptions o;
  o.max_connections = 4;
  StatusOr<int> port = server.Start("127.0.0.1", 0, Echo, o);
  REQUIRE(port.ok());
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(ConnectLoopback(*port));
  // Let the server accept them.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int extra = ConnectLoopback(*port);
  CHECK(ClosedWithin(extra, 3000));
  ::close(extra);
  for (int fd : held) ::close(fd);
  bool served = false;
  for (int i = 0; i < 50 && !served; ++i) {
    served = HttpCall(*port, "GET", "/").status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CHECK(served);
}

TEST_CASE("HttpServer: bad addresses and a busy port are clear errors",
          "[http]") {
  HttpServer a;
  StatusOr<int> port = a.Start("127.0.0.1", 0, Echo);
  REQUIRE(port.ok());
  HttpServer b;
  StatusOr<int> busy = b.Start("127.0.0.1", *port, Echo);
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.status().code() == StatusCode::kUnavailable);
  CHECK_THAT(
      busy.status().message(),
      Catch::Contains("cannot listen on 127.0.0.1:" + std::to_string(*port)));
  HttpServer c;
  StatusOr<int> name = c.Start("no.such.host", 0, Echo);
  REQUIRE_FALSE(name.ok());
  CHECK(name.status().code() == StatusCode::kInvalidArgument);
  // Stop is idempotent, and a stopped server's port is free again.
  a.Stop();
  a.Stop();
  HttpServer d;
  CHECK(d.Start("127.0.0.1", *port, Echo).ok());
}

}  // namespace
}  // namespace ddprun
