// SLURM host lists and the defaults ddprun takes from `srun`'s environment.
#include "agent/cli/slurm_env.h"

#include "ddprun_catch.h"
#include <map>
#include <string>
#include <vector>

#include "agent/cli/cli_parser.h"

namespace ddprun::agent {
namespace {

using Hosts = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

Hosts Expand(const std::string& list) {
  auto r = ExpandSlurmNodelist("SLURM_JOB_NODELIST", list);
  INFO(list << ": " << r.status().ToString());
  REQUIRE(r.ok());
  return *r;
}

std::string ExpandErr(const std::string& list, std::size_t max_hosts = 100000) {
  auto r = ExpandSlurmNodelist("SLURM_JOB_NODELIST", list, max_hosts);
  INFO(list);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kInvalidArgument);
  CHECK(r.status().message().find("SLURM_JOB_NODELIST: invalid value '" + list +
                                  "'") == 0);
  return r.status().message();
}

TEST_CASE("SLURM nodelist: compressed forms expand in order", "[slurm]") {
  CHECK(Expand("gpu5") == Hosts{"gpu5"});
  CHECK(Expand("node[01-03,07],gpu5") ==
        Hosts{"node01", "node02", "node03", "node07", "gpu5"});
  CHECK(Expand("a,b,c") == Hosts{"a", "b", "c"});
  // Padding follows the lower bound; widths grow past it.
  CHECK(Expand("n[8-10]") == Hosts{"n8", "n9", "n10"});
  CHECK(Expand("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});
  // Suffixes and several groups (leftmost outermost).
  CHECK(Expand("r[1-2]-n[3,5].ib") ==
        Hosts{"r1-n3.ib", "r1-n5.ib", "r2-n3.ib", "r2-n5.ib"});
  CHECK(Expand("x[7],y[2-3]z") == Hosts{"x7", "y2z", "y3z"});
}

TEST_CASE("SLURM nodelist: malformed lists name the variable", "[slurm]") {
  CHECK(ExpandErr("").find("empty host name") != std::string::npos);
  CHECK(ExpandErr("a,,b").find("empty host name") != std::string::npos);
  CHECK(ExpandErr("n[1-3").find("unbalanced") != std::string::npos);
  CHECK(ExpandErr("n1-3]").find("unbalanced") != std::string::npos);
  CHECK(ExpandErr("n[[1]]").find("unbalanced") != std::string::npos);
  CHECK(ExpandErr("n[]").find("empty brackets") != std::string::npos);
  CHECK(ExpandErr("n[a-b]").find("'a-b' is not a number") != std::string::npos);
  CHECK(ExpandErr("n[1-]").find("'1-'") != std::string::npos);
  CHECK(ExpandErr("n[5-3]").find("descends") != std::string::npos);
  CHECK(ExpandErr("n[0-99999999999]").find("more than") != std::string::npos);
  CHECK(ExpandErr("a[1-10]b[1-10]", 50).find("more than 50") !=
        std::string::npos);
  CHECK(ExpandErr("a[1-40],b[1-40]", 50).find("more than 50") !=
        std::string::npos);
}

TEST_CASE("SLURM rendezvous endpoint: first host, per-job port", "[slurm]") {
  CHECK(SlurmRendezvousPort(4242) == 24242);
  CHECK(SlurmRendezvousPort(1234567) == 24567);
  CHECK(SlurmRendezvousPort(10000) == 20000);
  auto ep = SlurmRendezvousEndpoint("node[07-08],gpu1", "31337");
  REQUIRE(ep.ok());
  CHECK(*ep == "node07:21337");
  auto bad = SlurmRendezvousEndpoint("node1", "12_3");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("SLURM_JOB_ID: invalid value '12_3'") == 0);
}

// What srun gives node 1 of a 3-node job with one task per node.
Env Srun() {
  return {
      {"PATH", "/usr/bin:/bin"},  {"SLURM_STEP_ID", "0"},
      {"SLURM_NNODES", "3"},      {"SLURM_NTASKS", "3"},
      {"SLURM_NODEID", "1"},      {"SLURM_PROCID", "1"},
      {"SLURM_JOB_ID", "987654"}, {"SLURM_JOB_NODELIST", "node[01-02],gpu5"}};
}

StatusOr<CommandLine> Parse(std::vector<std::string> flags, const Env& env) {
  flags.insert(flags.end(), {"--no_python", "true"});
  return ParseCommandLine(flags, env, /*legacy=*/false);
}

LaunchOptions ParseOk(std::vector<std::string> flags, const Env& env) {
  auto r = Parse(std::move(flags), env);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return r->options;
}

TEST_CASE("CliParser: srun without rendezvous flags takes them from SLURM",
          "[slurm][cli]") {
  LaunchOptions o = ParseOk({"--rdzv_backend=grpc"}, Srun());
  CHECK(o.rdzv_endpoint == "node01:27654");
  CHECK(o.rdzv_id == "987654");
  CHECK(o.node_rank == 1);
  CHECK(o.node_rank_given);
  CHECK(o.min_nodes == 3);
  CHECK(o.max_nodes == 3);
  // The static backend: the endpoint is the master, as with torchrun.
  o = ParseOk({}, Srun());
  CHECK(o.master_addr == "node01");
  CHECK(o.master_port == 27654);
  // SLURM_PROCID stands in for a missing SLURM_NODEID.
  Env procid = Srun();
  procid.erase("SLURM_NODEID");
  procid["SLURM_PROCID"] = "2";
  CHECK(ParseOk({}, procid).node_rank == 2);
}

TEST_CASE("CliParser: explicit rendezvous flags beat SLURM", "[slurm][cli]") {
  LaunchOptions o = ParseOk({"--rdzv_backend=grpc", "--rdzv_endpoint=head:1",
                             "--rdzv_id=mine", "--node_rank=0", "--nnodes=1:4"},
                            Srun());
  CHECK(o.rdzv_endpoint == "head:1");
  CHECK(o.rdzv_id == "mine");
  CHECK(o.node_rank == 0);
  CHECK(o.min_nodes == 1);
  CHECK(o.max_nodes == 4);
  Env pet = Srun();
  pet["PET_RDZV_ENDPOINT"] = "pet-host:2";
  CHECK(ParseOk({"--rdzv_backend=grpc"}, pet).rdzv_endpoint == "pet-host:2");
  // An explicit endpoint means a malformed SLURM list is never looked at.
  Env broken = Srun();
  broken["SLURM_JOB_NODELIST"] = "node[01-";
  CHECK(ParseOk({"--rdzv_endpoint=head:1"}, broken).rdzv_endpoint == "head:1");
  // ...but is one clear error when it is used.
  auto err = Parse({}, broken);
  REQUIRE_FALSE(err.ok());
  CHECK(err.status().message().find("SLURM_JOB_NODELIST: invalid value") == 0);
  // Outside a one-task-per-node step, or under --standalone: no SLURM
  // defaults at all.
  Env batch = Srun();
  batch.erase("SLURM_STEP_ID");
  CHECK(ParseOk({"--rdzv_backend=grpc"}, batch).rdzv_endpoint.empty());
  CHECK(ParseOk({"--standalone"}, Srun()).rdzv_endpoint == "localhost:0");
}

}  // namespace
}  // namespace ddprun::agent
