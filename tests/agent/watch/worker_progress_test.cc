// What an agent tells the rendezvous about its workers for the live view:
// the step file a worker writes (agent/watch/step_file.h), each
// worker's progress and state (StragglerWatch), and the agent's own
// liveness endpoint (TORCHELASTIC_HEALTH_CHECK_PORT, LivenessEndpoint). A
// manual loop on a FakeClock; files in a temp folder.
#include <unistd.h>

#include <fstream>

#include "agent/process/liveness_endpoint.h"
#include "agent/watch/step_file.h"
#include "agent/watch/straggler_watch.h"
#include "ddprun_catch.h"
#include "tests/agent/agent_fakes.h"
#include "tests/common/manual_event_loop.h"
#include "tests/support/http_client.h"
#include "tests/support/process.h"

namespace ddprun::agent {
namespace {

using std::chrono::seconds;
using State = rendezvous::RankStepRate::State;

TEST_CASE(
    "ParseStepFile: the count, the total, the scalars, and bad lines "
    "skipped",
    "[agent][progress]") {
  StepFile f = ParseStepFile(
      "42\ntotal_steps 1000\nloss 0.25\nsamples_per_s 812.5\n     ");
  CHECK(f.steps == 42);
  CHECK(f.total_steps == 1000);
  REQUIRE(f.scalars.size() == 2);
  CHECK(f.scalars[0] == std::make_pair(std::string("loss"), 0.25));
  CHECK(f.scalars[1].second == Approx(812.5));
  // An older worker's file: the count only.
  CHECK(ParseStepFile("7\n").steps == 7);
  CHECK(ParseStepFile("7").steps == 7);
  CHECK(ParseStepFile("").steps == -1);
  CHECK(ParseStepFile("x\n").steps == -1);
  // Names outside the alphabet, values that are no finite number, a
  // repeated name, a ninth scalar: skipped, never an error.
  std::string text = "3\n<b> 1\nloss nan\nloss inf\nloss 1e999\nx 1 2\n";
  for (int i = 0; i < 10; ++i) text += "s" + std::to_string(i) + " 1\n";
  text += "s0 5\n" + std::string(33, 'n') + " 1\n";
  StepFile bad = ParseStepFile(text);
  CHECK(bad.steps == 3);
  REQUIRE(bad.scalars.size() == kMaxScalars);
  CHECK(bad.scalars[0].first == "s0");
  CHECK(bad.scalars[0].second == 1);
  CHECK(ValidScalarName("a.b/c:d-e_f"));
  CHECK_FALSE(ValidScalarName(""));
  CHECK_FALSE(ValidScalarName("a b"));
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

TEST_CASE(
    "StragglerWatch: every worker's pid, state, rate and scalars go "
    "with the heartbeats",
    "[agent][progress]") {
  ddprun::testing::TempDir dir;
  ddprun::testing::ManualEventLoop loop;
  agent::testing::RecordingRendezvous client;
  StragglerPolicy policy;
  policy.slow_for = seconds(2);
  StragglerWatch watch(&loop, policy, &client);
  const std::string f0 = dir.path() + "/0", f1 = dir.path() + "/1";
  watch.Start({{4, 0, 100, f0}, {5, 1, 101, f1}, {6, 2, 102, ""}});
  // At once: every worker, running, no counts yet.
  REQUIRE(client.rates.size() == 3);
  CHECK(client.rates[2].pid == 102);
  CHECK(client.rates[2].state == State::kRunning);
  CHECK(client.rates[0].per_s < 0);
  CHECK(client.restarts == 0);
  for (int t = 1; t <= 6; ++t) {
    Write(f0, std::to_string(10 * t) + "\ntotal_steps 100\nloss 0." +
                  std::to_string(9 - t) + "\n");
    Write(f1, std::to_string(t) + "\n");
    loop.Advance(seconds(1));
  }
  REQUIRE(client.rates.size() == 3);
  const auto& r0 = client.rates[0];
  CHECK(r0.rank == 4);
  CHECK(r0.local_rank == 0);
  CHECK(r0.steps == 60);
  CHECK(r0.per_s == Approx(10.0));
  CHECK(r0.total_steps == 100);
  REQUIRE(r0.scalars.size() == 1);
  CHECK(r0.scalars[0].first == "loss");
  CHECK(r0.scalars[0].second == Approx(0.3));
  // Rank 5 runs at a tenth of the median: a straggler, marked as one.
  CHECK(client.rates[1].straggler);
  CHECK_FALSE(r0.straggler);
  CHECK(client.rates[2].steps == 0);
  // A worker exits: its state goes at once; the group stops: the others
  // are stopped, without a rate.
  watch.NoteExit(5, /*succeeded=*/false);
  CHECK(client.rates[1].state == State::kFailed);
  watch.Stop();
  CHECK(client.rates[0].state == State::kStopped);
  CHECK(client.rates[0].per_s < 0);
  CHECK(client.rates[0].steps == 60);
  CHECK(client.rates[1].state == State::kFailed);
  // The next group: one restart of this node's workers.
  watch.Start({{4, 0, 200, f0}});
  CHECK(client.restarts == 1);
  REQUIRE(client.rates.size() == 1);
  CHECK(client.rates[0].pid == 200);
  CHECK(client.rates[0].state == State::kRunning);
}

TEST_CASE(
    "StragglerWatch: scalars beyond the heartbeat's budget are left "
    "out",
    "[agent][progress]") {
  ddprun::testing::TempDir dir;
  ddprun::testing::ManualEventLoop loop;
  agent::testing::RecordingRendezvous client;
  StragglerWatch watch(&loop, StragglerPolicy{}, &client);
  std::vector<StragglerWatch::Target> targets;
  std::string text = "1\n";
  for (int i = 0; i < 8; ++i) {
    text += std::string(30, 'a') + std::to_string(i) + " 1\n";
  }
  for (int rank = 0; rank < 128; ++rank) {
    const std::string path = dir.path() + "/" + std::to_string(rank);
    Write(path, text);
    targets.push_back({rank, rank, 1000 + rank, path});
  }
  watch.Start(targets);
  loop.Advance(seconds(1));
  size_t bytes = 0, scalars = 0;
  for (const auto& r : client.rates) {
    for (const auto& [name, v] : r.scalars) bytes += name.size() + 16;
    scalars += r.scalars.size();
  }
  CHECK(bytes <= StragglerWatch::kScalarBudget);
  CHECK(scalars > 100);  // the first ranks keep theirs
  CHECK(client.rates.size() == 128);
  CHECK(client.rates.back().scalars.empty());
}

TEST_CASE(
    "LivenessEndpoint: 200 while the agent's loop runs, 503 once it has "
    "not for the timeout",
    "[agent][health]") {
  ddprun::testing::ManualEventLoop loop;
  std::string state = "rendezvous";
  LivenessEndpoint health(
      &loop, [&state] { return state; }, seconds(60));
  StatusOr<int> port = health.Start("127.0.0.1", 0);
  REQUIRE(port.ok());
  loop.RunUntilIdle();
  ddprun::testing::HttpAnswer a =
      ddprun::testing::HttpCall(*port, "GET", "/healthz");
  CHECK(a.status == 200);
  CHECK_THAT(a.body, Catch::Contains("\"status\": \"ok\""));
  CHECK_THAT(a.body, Catch::Contains("\"state\": \"rendezvous\""));
  CHECK(ddprun::testing::HttpCall(*port, "GET", "/").status == 200);
  CHECK(ddprun::testing::HttpCall(*port, "GET", "/other").status == 404);
  CHECK(ddprun::testing::HttpCall(*port, "POST", "/").status == 405);
  // The loop keeps beating: healthy however long the rendezvous takes.
  state = "running";
  loop.Advance(seconds(120));
  a = ddprun::testing::HttpCall(*port, "GET", "/healthz");
  CHECK(a.status == 200);
  CHECK_THAT(a.body, Catch::Contains("\"state\": \"running\""));
  // The loop is stuck (time passes, no timer runs): unhealthy after 60 s.
  auto* clock = static_cast<FakeClock*>(loop.clock());
  clock->Advance(seconds(59));
  CHECK(ddprun::testing::HttpCall(*port, "GET", "/healthz").status == 200);
  clock->Advance(seconds(2));
  a = ddprun::testing::HttpCall(*port, "GET", "/healthz");
  CHECK(a.status == 503);
  CHECK_THAT(a.body, Catch::Contains("unhealthy"));
  health.Stop();
  CHECK(ddprun::testing::HttpCall(*port, "GET", "/healthz").status == 0);
}

TEST_CASE("HealthCheckPort: torch's rule for the variable's value",
          "[agent][health]") {
  std::string why;
  CHECK(HealthCheckPort("8080", &why) == 8080);
  CHECK_FALSE(HealthCheckPort("http", &why).has_value());
  CHECK_THAT(why, Catch::Contains("Invalid healthcheck port value: 'http'"));
  CHECK_FALSE(HealthCheckPort("70000", &why).has_value());
  CHECK_FALSE(HealthCheckPort("", &why).has_value());
}

}  // namespace
}  // namespace ddprun::agent
