// Where node 0's agent serves the rendezvous and the workers' store
// (agent/hosting/rendezvous_factory.h, HostedBindAddress): a loopback
// --master_addr keeps both on the loopback, out of other hosts' reach.

#include "ddprun_catch.h"
#include "tests/agent/process_harness.h"

namespace ddprun::test {
namespace {

TEST_CASE(
    "ddprun: --master_addr=localhost serves the rendezvous and the agent "
    "store on the loopback only",
    "[agent][process][agent_store]") {
  TempDir dir;
  const int port = FreeLoopbackPort();
  // Node 0 of 2 hosts both and gives up on node 1 after a second.
  Ddprun run(dir, {"--nnodes=2", "--node_rank=0", "--master_addr=localhost",
                   "--master_port=" + std::to_string(port),
                   "--rdzv_conf=join_timeout=1", "--no_python", "true"});
  REQUIRE(run.Wait(20s) == 1);
  INFO(run.Stderr());
  CHECK(run.Stderr().find("listening on 127.0.0.1:" + std::to_string(port)) !=
        std::string::npos);
}

}  // namespace
}  // namespace ddprun::test
