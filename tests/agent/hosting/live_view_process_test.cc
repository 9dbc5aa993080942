// ddprun --http_port: the agent that hosts the rendezvous serves its live
// view (here --standalone), with every worker's pid and state; bad flags
// are one error line and exit 2.
#include <fstream>

#include "ddprun_catch.h"
#include "tests/agent/process_harness.h"
#include "tests/support/http_client.h"

namespace ddprun::test {
namespace {

// The port of the live view a ddprun logged ("... at http://127.0.0.1:P/").
int ViewPort(Ddprun& run) {
  REQUIRE(run.WaitForOutput("live view of the rendezvous at", 10s));
  const std::string out = run.Output();
  const size_t at = out.find("http://127.0.0.1:");
  REQUIRE(at != std::string::npos);
  return std::atoi(out.c_str() + at + 17);
}

// Waits until /api/v1/jobs shows a rank with a loss, its total steps and a
// rate; returns the body.
std::string WaitForProgress(int port, const std::string& total) {
  std::string body;
  testing::WaitUntil(
      [&] {
        body = testing::HttpCall(port, "GET", "/api/v1/jobs").body;
        return body.find("\"scalars\":{\"loss\":") != std::string::npos &&
               body.find("\"total_steps\":" + total) != std::string::npos &&
               body.find("\"steps_per_s\":null") == std::string::npos;
      },
      20s, 200ms);
  return body;
}

TEST_CASE(
    "ddprun: --standalone --http_port 0 serves the job's live view "
    "with every worker",
    "[process][http]") {
  TempDir dir;
  Ddprun run(dir, {"--standalone", "--nproc_per_node=2", "--http_port", "0",
                   "--no_python", "/bin/sh", "-c", "sleep 4"});
  const int port = ViewPort(run);
  REQUIRE(port > 0);
  testing::HttpAnswer a;
  REQUIRE(testing::WaitUntil(
      [&] {
        a = testing::HttpCall(port, "GET", "/api/v1/jobs");
        return a.body.find("\"pid\":") != std::string::npos &&
               a.body.find("\"local_rank\":1") != std::string::npos;
      },
      10s, 100ms));
  CHECK_THAT(a.body, Catch::Contains("\"state\":\"running\""));
  CHECK_THAT(a.body, Catch::Contains("\"world_size\":2"));
  CHECK(testing::HttpCall(port, "GET", "/metrics").status == 200);
  CHECK(run.Wait(30s) == 0);
  // The view goes with the agent.
  CHECK(testing::HttpCall(port, "GET", "/healthz").status == 0);
}

TEST_CASE("ddprun: a C++ worker's loss and total steps reach the live view",
          "[process][http]") {
  TempDir dir;
  Ddprun run(dir,
             {"--standalone", "--nproc_per_node=2", "--http_port", "0",
              "--no_python", DDPRUN_BIN_DIR "/native_progress_worker"},
             {{"STEPS", "200"}});
  const int port = ViewPort(run);
  const std::string body = WaitForProgress(port, "200");
  INFO(body);
  CHECK_THAT(body, Catch::Contains("\"scalars\":{\"loss\":"));
  CHECK_THAT(body, Catch::Contains("\"total_steps\":200"));
  CHECK_THAT(body, Catch::Contains("\"eta_s\":"));
  CHECK(body.find("\"steps_per_s\":null") == std::string::npos);
  CHECK(body.find("bad name") == std::string::npos);
  CHECK_THAT(testing::HttpCall(port, "GET", "/metrics").body,
             Catch::Contains("name=\"loss\"}"));
  CHECK(run.Wait(60s) == 0);
}

TEST_CASE(
    "ddprun: ddprun_steps.step(loss=...) of a Python worker reaches "
    "the live view",
    "[process][http]") {
  TempDir dir;
  const std::string script = dir.path() + "/steps.py";
  std::ofstream(script) << "import time\n"
                           "import ddprun_steps\n"
                           "for i in range(200):\n"
                           "    ddprun_steps.step(loss=1.0 / (i + 1), "
                           "samples_per_s=64.0, total_steps=200,\n"
                           "                      **{'bad name': 1})\n"
                           "    time.sleep(0.05)\n";
  Ddprun run(dir,
             {"--standalone", "--nproc_per_node=2", "--http_port", "0", script},
             {{"PYTHON_EXEC", "/usr/bin/python3"}});
  const int port = ViewPort(run);
  const std::string body = WaitForProgress(port, "200");
  INFO(body);
  CHECK_THAT(body, Catch::Contains("\"samples_per_s\":64.0"));
  CHECK(body.find("\"steps_per_s\":null") == std::string::npos);
  CHECK(body.find("bad name") == std::string::npos);
  CHECK(run.Wait(60s) == 0);
}

TEST_CASE(
    "ddprun: a live view on a non-loopback address without "
    "--http_token is one error line, exit 2",
    "[process][http]") {
  TempDir dir;
  Ddprun run(dir, {"--standalone", "--http_port", "0", "--http_host", "0.0.0.0",
                   "--no_python", "true"});
  CHECK(run.Wait(30s) == 2);
  CHECK_THAT(run.Stderr(),
             Catch::Matchers::StartsWith("ddprun: error: --http_host "
                                         "0.0.0.0 is not a loopback"));
  TempDir dir2;
  Ddprun empty(dir2,
               {"--standalone", "--http_port", "0", "--no_python", "true"},
               {{"DDPRUN_HTTP_TOKEN", ""}});
  CHECK(empty.Wait(30s) == 2);
  CHECK_THAT(empty.Stderr(), Catch::Contains("DDPRUN_HTTP_TOKEN: empty token"));
}

}  // namespace
}  // namespace ddprun::test
