// StoreClient (agent/hosting/store_client.h) against torch's own TCPStore
// server: Debian's python3 with torch 1.13 serves a store on port 0 and
// checks, with its own client, what ours wrote; ours checks what it wrote.
// Keys carry torch's "/" (TorchClientKey) so that both name the same keys.

#include <chrono>
#include <string>

#include "agent/hosting/store_client.h"
#include "agent/hosting/store_protocol.h"
#include "ddprun_catch.h"
#include "ddprun_skip.h"
#include "tests/support/process.h"
#include "torch_python.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using Clock = StoreClient::Clock;

// Sets and adds, prints the port, waits for our keys, checks them, adds
// again, and waits for our last key before it exits (the server dies with
// it). Each line it prints is a step the test waits for.
constexpr char kScript[] = R"(
import datetime, sys, torch.distributed as dist
s = dist.TCPStore('127.0.0.1', 0, 1, True, datetime.timedelta(seconds=30))
s.set('from_torch', b'to\x00rch')
s.add('counter', 5)
print('port %d' % s.port, flush=True)
s.wait(['from_ddprun'])
print('got %r' % s.get('from_ddprun'), flush=True)
print('counter %d' % s.add('counter', 7), flush=True)
s.set('after', 'torch added')
s.wait(['bye'])
print('bye', flush=True)
)";

TEST_CASE("StoreClient: torch 1.13's TCPStore server reads what it writes",
          "[agent][store_client][torch]") {
  const std::string& python = store_test::TorchPython();
  if (!store_test::HasTorchDistributed()) {
    DDPRUN_SKIP_UNLESS_CI(python << " has no torch.distributed");
  }
  testing::ProcessOptions p;
  p.argv = {python, "-c", kScript};
  testing::Process torch(p);
  REQUIRE(torch.WaitForOutput("port ", 90s));
  REQUIRE(torch.WaitForOutput("\n", 5s));
  const std::string out = torch.Stdout();
  const int port = std::stoi(out.substr(out.find("port ") + 5));
  INFO(torch.Output());

  StoreClient c;
  REQUIRE(c.Connect("127.0.0.1", port, Clock::now() + 10s).ok());
  StatusOr<std::optional<std::string>> v =
      c.Peek(TorchClientKey("from_torch"), Clock::now() + 10s);
  REQUIRE(v.ok());
  CHECK(*v == std::optional<std::string>(std::string("to\0rch", 6)));
  v = c.Peek(TorchClientKey("missing"), Clock::now() + 10s);
  REQUIRE(v.ok());
  CHECK(!v->has_value());

  StatusOr<int64_t> n = c.Add(TorchClientKey("counter"), 3, Clock::now() + 10s);
  REQUIRE(n.ok());
  CHECK(*n == 8);
  REQUIRE(c.Set(TorchClientKey("from_ddprun"), std::string("dd\0p", 4),
                Clock::now() + 10s)
              .ok());
  REQUIRE(torch.WaitForOutput("counter ", 30s));
  CHECK(torch.Stdout().find("got b'dd\\x00p'") != std::string::npos);
  CHECK(torch.Stdout().find("counter 15") != std::string::npos);

  // What torch added, as a value and through ADD.
  v = c.Peek(TorchClientKey("counter"), Clock::now() + 10s);
  REQUIRE(v.ok());
  CHECK(*v == std::optional<std::string>("15"));
  n = c.Add(TorchClientKey("counter"), 0, Clock::now() + 10s);
  REQUIRE(n.ok());
  CHECK(*n == 15);
  v = c.Peek(TorchClientKey("after"), Clock::now() + 10s);
  REQUIRE(v.ok());
  CHECK(*v == std::optional<std::string>("torch added"));

  REQUIRE(c.Set(TorchClientKey("bye"), "1", Clock::now() + 10s).ok());
  CHECK(torch.Wait(30s) == 0);
  CHECK(torch.Stdout().find("bye") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::agent
