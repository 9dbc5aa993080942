// common/net.h against real sockets on loopback.
#include "ddprun_catch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/net.h"
#include "tests/common/can_bind.h"

namespace ddprun {
namespace {

// A listening socket on 127.0.0.1 and a kernel-chosen port, closed at the
// end of the scope.
class Listener {
 public:
  Listener() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(listen(fd_, 4) == 0);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
  }
  ~Listener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

}  // namespace

TEST_CASE("FreePort: returns a bindable port", "[common][net]") {
  auto port = FreePort();
  REQUIRE(port.ok());
  CHECK(*port > 0);
  CHECK(*port < 65536);
  CHECK(testing::CanBind(*port));
}

TEST_CASE("FreePort: on a given address, and falls back when not bindable",
          "[common][net]") {
  StatusOr<int> local = FreePort("127.0.0.1");
  REQUIRE(local.ok());
  CHECK(*local > 0);
  // TEST-NET-1 is never this host's: any local port will do.
  StatusOr<int> foreign = FreePort("192.0.2.1");
  REQUIRE(foreign.ok());
  CHECK(testing::CanBind(*foreign));
}

TEST_CASE("PortInUse: a listener's port is in use, a free one is not",
          "[common][net]") {
  Listener listener;
  StatusOr<bool> taken = PortInUse("127.0.0.1", listener.port());
  REQUIRE(taken.ok());
  CHECK(*taken);
  StatusOr<bool> wildcard = PortInUse("0.0.0.0", listener.port());
  REQUIRE(wildcard.ok());
  CHECK(*wildcard);
  StatusOr<int> free_port = FreePort("127.0.0.1");
  REQUIRE(free_port.ok());
  StatusOr<bool> free = PortInUse("127.0.0.1", *free_port);
  REQUIRE(free.ok());
  CHECK_FALSE(*free);
  StatusOr<bool> bad = PortInUse("no-such-host.invalid", 80);
  CHECK(bad.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("LoopbackPortAccepts: true only while something listens",
          "[common][net]") {
  int port = 0;
  {
    Listener listener;
    port = listener.port();
    CHECK(LoopbackPortAccepts(port));
  }
  CHECK_FALSE(LoopbackPortAccepts(port));
}

TEST_CASE(
    "ConnectRefused: only a port nothing listens on, on a host that is up",
    "[common][net]") {
  int port = 0;
  {
    Listener listener;
    port = listener.port();
    // Something listens: accepted, not refused.
    CHECK_FALSE(ConnectRefused("127.0.0.1", port, std::chrono::seconds(1)));
  }
  // The listener is gone: the host answers with a reset.
  CHECK(ConnectRefused("127.0.0.1", port, std::chrono::seconds(1)));
  CHECK_FALSE(
      ConnectRefused("no-such-host.invalid", port, std::chrono::seconds(1)));
}

TEST_CASE("SourceAddressTowards: the local address that reaches a host",
          "[common][net]") {
  StatusOr<std::string> loopback = SourceAddressTowards("127.0.0.1", 29400);
  REQUIRE(loopback.ok());
  CHECK(*loopback == "127.0.0.1");
  StatusOr<std::string> unknown =
      SourceAddressTowards("no-such-host.invalid", 29400);
  CHECK(unknown.status().code() == StatusCode::kNotFound);
  CHECK(unknown.status().message().find("no-such-host.invalid") !=
        std::string::npos);
}

}  // namespace ddprun
