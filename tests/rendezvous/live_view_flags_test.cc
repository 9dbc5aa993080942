// The live view's flags on the real binaries: bad ones are one error line
// and exit 2, a busy --http_port is one line and exit 1 (nothing served),
// and --http_port 0 serves on a free port that the log line names.
#include <algorithm>
#include <string>
#include <vector>

#include "ddprun_catch.h"
#include "tests/rendezvous/server_process.h"
#include "tests/support/http_client.h"

namespace ddprun::rendezvous {
namespace {

using std::chrono::seconds;

TEST_CASE(
    "ddprun-rendezvous: bad live view flags are one error line and "
    "exit 2",
    "[rendezvous][process][http]") {
  struct Case {
    std::vector<std::string> args;
    std::vector<std::pair<std::string, std::string>> env;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--http_port", "70000"}, {}, "--http_port"},
      {{"--http_port", "0", "--http_host", "0.0.0.0"}, {}, "--http_token"},
      {{"--http_port", "0", "--http_token", "t", "--http_admin_token", "t"},
       {},
       "must differ"},
      {{"--http_token", ""}, {}, "--http_token gives an empty token"},
      {{}, {{"DDPRUN_HTTP_ADMIN_TOKEN", ""}}, "DDPRUN_HTTP_ADMIN_TOKEN"},
      {{"--http_port", "0", "--http_host", "no.such.host"},
       {{"DDPRUN_HTTP_TOKEN", "t"}},
       "is not a numeric address"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"--host", "127.0.0.1", "--port", "0"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    ServerProcess server(args, c.env);
    const int code = server.WaitExit();
    const std::string& err = server.log();
    INFO(c.says << ": " << err);
    CHECK(code == 2);
    CHECK_THAT(err, Catch::Contains(c.says));
    CHECK(err.rfind("ddprun-rendezvous: error: ", 0) == 0);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
}

TEST_CASE(
    "ddprun-rendezvous: --http_port 0 serves the live view, a busy "
    "one is exit 1",
    "[rendezvous][process][http]") {
  ServerProcess server(
      {"--host", "127.0.0.1", "--port", "0", "--http_port", "0"});
  const std::string port = server.WaitFor(
      "live view at http://127\\.0\\.0\\.1:(\\d+)/", seconds(10));
  REQUIRE_FALSE(port.empty());
  testing::HttpAnswer a =
      testing::HttpCall(std::stoi(port), "GET", "/api/v1/jobs");
  CHECK(a.status == 200);
  CHECK_THAT(a.body, Catch::Contains("\"jobs\":[]"));
  CHECK(testing::HttpCall(std::stoi(port), "GET", "/readyz").status == 200);
  // The same port again: taken.
  ServerProcess second(
      {"--host", "127.0.0.1", "--port", "0", "--http_port", port});
  CHECK(second.WaitExit() == 1);
  CHECK_THAT(second.log(), Catch::Contains("live view: cannot listen on"));
  CHECK(server.Terminate() == 0);
}

}  // namespace
}  // namespace ddprun::rendezvous
