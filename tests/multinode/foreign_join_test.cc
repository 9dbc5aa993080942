// Requests for another rendezvous id against a running static job (issue
// 39): two ddprun agents on loopback (--nnodes=2 --node_rank=0/1
// --master_port=P), node 0's agent serving the rendezvous and the workers'
// c10d store on P, Debian's torch 1.13 Gloo workers. A made-up rdzv_id's
// one-node Join used to complete a round there, whose store reset dropped
// every key and closed every worker's store connection; now it is refused
// and the job finishes untouched.

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <unistd.h>

#include <fstream>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "tests/multinode/multinode_util.h"

namespace ddprun::multinode {
namespace {

namespace v1 = ::ddprun::rendezvous::v1;

// A one-node Join for `rdzv_id` from a process nobody knows.
grpc::Status ForeignJoin(int port, const std::string& rdzv_id, int nodes,
                         int instance) {
  auto stub = v1::Rendezvous::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  v1::JoinRequest req;
  req.set_rdzv_id(rdzv_id);
  req.mutable_config()->set_min_nodes(nodes);
  req.mutable_config()->set_max_nodes(nodes);
  v1::NodeInfo* n = req.mutable_node();
  n->set_node_id("intruder");
  n->set_instance(instance);
  n->set_local_world_size(1);
  n->set_addr("127.0.0.1");
  n->set_master_port(1);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::JoinResponse resp;
  return stub->Join(&ctx, req, &resp);
}

TEST_CASE(
    "static job: a Join for another rendezvous id leaves the running "
    "job's store keys and connections intact",
    "[multinode][python][agent_store][hostile]") {
  if (!HaveTorch()) DDPRUN_SKIP("no torch for /usr/bin/python3");
  TempDir dir;
  const int port = FreeLoopbackPort();
  const std::map<std::string, std::string> env = {
      {"MN_OUT", dir.path()},
      {"PYTHON_EXEC", "/usr/bin/python3"},
      {"OMP_NUM_THREADS", "1"}};
  std::vector<std::unique_ptr<Child>> agents;
  for (int rank : {1, 0}) {
    std::vector<std::string> argv = Ddprun(
        {"--nnodes=2", "--nproc_per_node=1",
         "--node_rank=" + std::to_string(rank), "--master_addr=127.0.0.1",
         "--master_port=" + std::to_string(port), "/usr/bin/python3", "-u",
         kData + "/store_probe_job.py"});
    agents.push_back(std::make_unique<Child>(
        dir.path(), "node" + std::to_string(rank), argv, env));
  }
  const bool ready = WaitUntil(
      [&] {
        return access((dir.path() + "/ready_0").c_str(), F_OK) == 0 &&
               access((dir.path() + "/ready_1").c_str(), F_OK) == 0;
      },
      150s);
  INFO("node 0:\n"
       << agents[1]->Output() << "\nnode 1:\n"
       << agents[0]->Output());
  REQUIRE(ready);
  // The attack, repeated with fresh instance ids (its rate bucket): a
  // made-up job, and this job's id with another node count.
  for (int i = 1; i <= 3; ++i) {
    grpc::Status foreign =
        ForeignJoin(port, "intruder" + std::to_string(i), 1, 100 + i);
    CHECK(foreign.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK(foreign.error_message().find("serves only that job") !=
          std::string::npos);
  }
  grpc::Status own = ForeignJoin(port, "none", 1, 200);
  CHECK(own.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  std::ofstream(dir.path() + "/go").close();
  const int code1 = agents[0]->Wait(120s);
  const int code0 = agents[1]->Wait(30s);
  INFO("node 0:\n"
       << agents[1]->Output() << "\nnode 1:\n"
       << agents[0]->Output());
  // No round of another job emptied the store.
  CHECK(agents[1]->Output().find("rendezvous 'intruder") == std::string::npos);
  REQUIRE(code0 == 0);
  REQUIRE(code1 == 0);
  for (int r = 0; r < 2; ++r) {
    const std::string text =
        ReadFile(dir.path() + "/probe_" + std::to_string(r) + ".json");
    INFO("rank " << r << ": " << text);
    REQUIRE(!text.empty());
    nlohmann::json j = nlohmann::json::parse(text);
    CHECK(j["values"] == nlohmann::json::array({"from rank 0", "from rank 1"}));
    CHECK(j["sum"].get<double>() == 3.0);
  }
}

}  // namespace
}  // namespace ddprun::multinode
