// The single-node rendezvous, driven on a manual loop: answers arrive on
// the loop, never inside the call.
#include "ddprun_catch.h"

#include <optional>

#include "rendezvous/client/local_rendezvous_client.h"
#include "tests/common/can_bind.h"
#include "tests/common/manual_event_loop.h"

namespace ddprun::rendezvous {
namespace {

using ddprun::testing::ManualEventLoop;

JoinRequest Request(int nproc, int max_restarts) {
  JoinRequest r;
  r.run_id = "job";
  r.local_world_size = nproc;
  r.max_restarts = max_restarts;
  return r;
}

// Calls of one client, each answered by running the loop.
struct Driver {
  explicit Driver(LocalRendezvousClient::Options options)
      : client(std::move(options), &loop) {}

  StatusOr<RendezvousResult> Join(const JoinRequest& request) {
    std::optional<StatusOr<RendezvousResult>> answer;
    client.Join(request, loop.clock()->Now(),
                [&](StatusOr<RendezvousResult> r) { answer = std::move(r); });
    CHECK_FALSE(answer.has_value());  // never inside the call
    loop.RunUntilIdle();
    REQUIRE(answer.has_value());
    return *answer;
  }
  bool ReportFailure(int64_t round) {
    std::optional<StatusOr<bool>> answer;
    client.ReportFailure(round, "x", true,
                         [&](StatusOr<bool> again) { answer = again; });
    loop.RunUntilIdle();
    REQUIRE(answer.has_value());
    REQUIRE(answer->ok());
    return **answer;
  }

  ManualEventLoop loop;
  LocalRendezvousClient client;
};

}  // namespace

TEST_CASE("LocalRendezvousClient: one node, world = nproc", "[agent]") {
  Driver d({"standalone", "127.0.0.1", std::nullopt});
  auto r = d.Join(Request(4, 0));
  REQUIRE(r.ok());
  CHECK(r->group_rank == 0);
  CHECK(r->group_world_size == 1);
  CHECK(r->rank_offset == 0);
  CHECK(r->world_size == 4);
  CHECK(r->role_world_size == 4);
  CHECK(r->master_addr == "127.0.0.1");
  CHECK(r->master_port > 0);
  CHECK(testing::CanBind(r->master_port));
  CHECK(r->restart_count == 0);
  CHECK(d.client.Backend() == "standalone");
  std::optional<Status> barrier;
  d.client.ReportSuccess(r->round, std::chrono::seconds(300),
                         [&](Status s) { barrier = s; });
  d.loop.RunUntilIdle();
  REQUIRE(barrier.has_value());
  CHECK(barrier->ok());
  bool left = false;
  d.client.Leave([&] { left = true; });
  d.loop.RunUntilIdle();
  CHECK(left);
}

TEST_CASE("LocalRendezvousClient: restart budget counted locally", "[agent]") {
  Driver d({"static", "10.0.0.1", 29555});
  auto r0 = d.Join(Request(2, 2));
  REQUIRE(r0.ok());
  CHECK(r0->master_port == 29555);  // --master_port is kept as given
  CHECK(r0->master_addr == "10.0.0.1");
  REQUIRE(d.ReportFailure(r0->round));
  auto r1 = d.Join(Request(2, 2));
  CHECK(r1->restart_count == 1);
  CHECK(r1->round == r0->round + 1);
  REQUIRE(d.ReportFailure(r1->round));
  auto r2 = d.Join(Request(2, 2));
  CHECK(r2->restart_count == 2);
  CHECK_FALSE(d.ReportFailure(r2->round));
}

}  // namespace ddprun::rendezvous
