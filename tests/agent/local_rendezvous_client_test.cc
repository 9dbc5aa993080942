#include "ddprun_catch.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "agent/local_rendezvous_client.h"

using ddprun::Clock;
using ddprun::agent::FindFreePort;
using ddprun::agent::JoinRequest;
using ddprun::agent::LocalRendezvousClient;

namespace {

JoinRequest Request(int nproc, int max_restarts) {
  JoinRequest r;
  r.run_id = "job";
  r.local_world_size = nproc;
  r.max_restarts = max_restarts;
  return r;
}

// True when a TCP socket can bind `port` on all interfaces right now.
bool CanBind(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace

TEST_CASE("LocalRendezvousClient: one node, world = nproc", "[agent]") {
  LocalRendezvousClient client({"standalone", "127.0.0.1", std::nullopt});
  auto r = client.Join(Request(4, 0), Clock::Real()->Now());
  REQUIRE(r.ok());
  CHECK(r->group_rank == 0);
  CHECK(r->group_world_size == 1);
  CHECK(r->rank_offset == 0);
  CHECK(r->world_size == 4);
  CHECK(r->role_world_size == 4);
  CHECK(r->master_addr == "127.0.0.1");
  CHECK(r->master_port > 0);
  CHECK(CanBind(r->master_port));
  CHECK(r->restart_count == 0);
  CHECK(client.Backend() == "standalone");
  CHECK(client.ReportSuccess(r->round, std::chrono::seconds(300)).ok());
}

TEST_CASE("LocalRendezvousClient: restart budget counted locally", "[agent]") {
  LocalRendezvousClient client({"static", "10.0.0.1", 29555});
  auto r0 = client.Join(Request(2, 2), Clock::Real()->Now());
  REQUIRE(r0.ok());
  CHECK(r0->master_port == 29555);  // --master_port is kept as given
  CHECK(r0->master_addr == "10.0.0.1");
  REQUIRE(client.ReportFailure(r0->round, "x", true).value());
  auto r1 = client.Join(Request(2, 2), Clock::Real()->Now());
  CHECK(r1->restart_count == 1);
  CHECK(r1->round == r0->round + 1);
  REQUIRE(client.ReportFailure(r1->round, "x", true).value());
  auto r2 = client.Join(Request(2, 2), Clock::Real()->Now());
  CHECK(r2->restart_count == 2);
  CHECK_FALSE(client.ReportFailure(r2->round, "x", true).value());
}

TEST_CASE("FindFreePort: returns a bindable port", "[agent]") {
  auto port = FindFreePort();
  REQUIRE(port.ok());
  CHECK(*port > 0);
  CHECK(*port < 65536);
  CHECK(CanBind(*port));
}
