// TORCHELASTIC_HEALTH_CHECK_PORT on the real ddprun: a scheduler's liveness
// probe (one GET with a 1 s timeout, as a Kubernetes httpGet probe) during
// a rendezvous that waits for a second node, while the workers run, and
// against an agent that is stopped (SIGSTOP): no answer, so the probe
// fails.
#include "ddprun_catch.h"
#include "tests/agent/process_harness.h"
#include "tests/support/http_client.h"

namespace ddprun::test {
namespace {

testing::HttpAnswer Probe(int port) {
  return testing::HttpCall(port, "GET", "/healthz", {}, "", 1000ms);
}

TEST_CASE(
    "ddprun: TORCHELASTIC_HEALTH_CHECK_PORT answers a scheduler's "
    "probe during a rendezvous that waits for a second node",
    "[process][health]") {
  TempDir dir;
  const int rdzv = FreeLoopbackPort();
  const int health = FreeLoopbackPort();
  REQUIRE(rdzv > 0);
  REQUIRE(health > 0);
  const std::vector<std::string> args = {
      "--nnodes=2",
      "--nproc_per_node=1",
      "--rdzv_backend=grpc",
      "--rdzv_endpoint=127.0.0.1:" + std::to_string(rdzv),
      "--rdzv_id=health",
      "--no_python",
      "/bin/sh",
      "-c",
      "sleep 3"};
  Ddprun first(dir, args,
               {{"TORCHELASTIC_HEALTH_CHECK_PORT", std::to_string(health)},
                {"DDPRUN_HEALTH_CHECK_HOST", "127.0.0.1"}});
  testing::HttpAnswer a;
  REQUIRE(testing::WaitUntil(
      [&] {
        a = Probe(health);
        return a.status == 200;
      },
      10s, 100ms));
  CHECK_THAT(a.body, Catch::Contains("\"state\": \"rendezvous\""));
  CHECK(first.WaitForOutput("health check server", 1s));
  // The rendezvous waits (nnodes=2, one agent): the probe keeps passing.
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(1s);
    a = Probe(health);
    CHECK(a.status == 200);
    CHECK_THAT(a.body, Catch::Contains("\"state\": \"rendezvous\""));
  }
  REQUIRE(first.Running());
  // A stopped agent does not answer: the probe fails (it would be
  // restarted), and answers again once it runs.
  first.Signal(SIGSTOP);
  // Stopped once every thread is (state T).
  REQUIRE(testing::WaitUntil(
      [&] {
        const std::string stat =
            ReadFile("/proc/" + std::to_string(first.pid()) + "/stat");
        const size_t paren = stat.rfind(')');
        return paren != std::string::npos && stat.size() > paren + 2 &&
               stat[paren + 2] == 'T';
      },
      5s));
  std::this_thread::sleep_for(100ms);
  const auto start = Clock::now();
  CHECK(Probe(health).status == 0);
  CHECK(Clock::now() - start < 3s);
  first.Signal(SIGCONT);
  CHECK(testing::WaitUntil([&] { return Probe(health).status == 200; }, 5s,
                           100ms));
  // The second node comes: the workers run, the probe says so.
  TempDir dir2;
  Ddprun second(dir2, args);
  REQUIRE(testing::WaitUntil(
      [&] {
        a = Probe(health);
        return a.body.find("\"state\": \"running\"") != std::string::npos;
      },
      20s, 100ms));
  CHECK(first.Wait(30s) == 0);
  CHECK(second.Wait(30s) == 0);
  // The agent is gone, and so is its endpoint.
  CHECK(Probe(health).status == 0);
}

TEST_CASE(
    "ddprun: a TORCHELASTIC_HEALTH_CHECK_PORT that is no port is a "
    "warning, as torch's, and the job runs",
    "[process][health]") {
  TempDir dir;
  Ddprun run(dir, {"--standalone", "--nproc_per_node=1", "--no_python", "true"},
             {{"TORCHELASTIC_HEALTH_CHECK_PORT", "http"}});
  CHECK(run.Wait(30s) == 0);
  CHECK_THAT(run.Output(),
             Catch::Contains("Invalid healthcheck port value: 'http'"));
}

}  // namespace
}  // namespace ddprun::test
