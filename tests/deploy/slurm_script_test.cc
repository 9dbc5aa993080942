// docker/slurm/ddprun.sbatch runs for real with stand-ins for srun and
// scontrol on PATH: the command it hands srun must be one that ddprun's parser
// accepts under SLURM's environment, with the first host as rendezvous.
#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun_catch.h"

#include "agent/cli/cli_parser.h"

namespace ddprun {
namespace {

namespace fs = std::filesystem;

void WriteExecutable(const fs::path& p, const std::string& body) {
  std::ofstream(p) << body;
  fs::permissions(p, fs::perms::owner_all);
}

// Runs the script with `extra_env` and returns the ddprun arguments it gave
// srun (after `--kill-on-bad-exit=1 ddprun`).
std::vector<std::string> SrunArgs(const std::string& extra_env) {
  char tmpl[] = "/tmp/ddprun_slurm_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const fs::path dir(tmpl);
  const fs::path bin = dir / "bin";
  fs::create_directories(bin);
  // srun records its arguments one per line; scontrol expands the node list.
  WriteExecutable(bin / "srun",
                  "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > " +
                      (dir / "srun.args").string() + "\n");
  WriteExecutable(bin / "scontrol",
                  "#!/bin/sh\n[ \"$1 $2\" = \"show hostnames\" ] || exit 3\n"
                  "echo gpu-node-07\necho gpu-node-08\n");
  const std::string script =
      (fs::path(DDPRUN_SOURCE_DIR) / "docker/slurm/ddprun.sbatch").string();
  const std::string cmd = "env PATH=" + bin.string() +
                          ":/usr/bin:/bin SLURM_JOB_NODELIST='gpu-node-[07-08]'"
                          " SLURM_JOB_ID=4242"
                          " NPROC_PER_NODE=2 TRAINER=/bin/true"
                          " DDPRUN_RDZV_TOKEN=t0k " +
                          extra_env + " bash " + script + " --epochs 3";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(dir / "srun.args");
  std::vector<std::string> argv;
  for (std::string line; std::getline(in, line);) argv.push_back(line);
  fs::remove_all(dir);
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);
  REQUIRE(argv.size() > 3);
  CHECK(argv[0] == "--kill-on-bad-exit=1");
  CHECK(argv[1] == "ddprun");
  return {argv.begin() + 2, argv.end()};
}

// Parses `args` under what srun's environment gives each of the two tasks
// (node 1 here).
agent::LaunchOptions ParseUnderSrun(const std::vector<std::string>& args) {
  const std::map<std::string, std::string> env = {
      {"PATH", "/usr/bin:/bin"}, {"SLURM_NNODES", "2"},
      {"SLURM_NTASKS", "2"},     {"SLURM_STEP_ID", "0"},
      {"SLURM_NODEID", "1"},     {"SLURM_PROCID", "1"},
      {"SLURM_JOB_ID", "4242"},  {"SLURM_JOB_NODELIST", "gpu-node-[07-08]"}};
  auto parsed = agent::ParseCommandLine(args, env, /*legacy=*/false);
  INFO(parsed.status().ToString());
  REQUIRE(parsed.ok());
  return parsed->options;
}

TEST_CASE("SLURM script: srun gets a ddprun command ddprun accepts",
          "[deploy]") {
  const std::vector<std::string> args = SrunArgs("");
  // ddprun derives the endpoint itself: the script does not repeat it.
  for (const std::string& a : args) {
    CHECK(a.rfind("--rdzv_endpoint", 0) == std::string::npos);
  }
  const agent::LaunchOptions o = ParseUnderSrun(args);
  CHECK(o.rdzv_backend == "grpc");
  CHECK(o.rdzv_endpoint == "gpu-node-07:24242");  // first host, per-job port
  CHECK(o.min_nodes == 2);
  CHECK(o.max_nodes == 2);
  CHECK(o.node_rank == 1);
  CHECK(o.rdzv_id == "4242");
  CHECK(o.nproc_per_node == 2);
  CHECK(o.no_python);  // a compiled trainer, looked up on PATH
  CHECK(o.entrypoint == "/bin/true");
  CHECK(o.entrypoint_args == std::vector<std::string>{"--epochs", "3"});
}

TEST_CASE("SLURM script: RDZV_PORT pins the rendezvous port", "[deploy]") {
  const agent::LaunchOptions o = ParseUnderSrun(SrunArgs("RDZV_PORT=29400"));
  CHECK(o.rdzv_backend == "grpc");
  CHECK(o.rdzv_endpoint == "gpu-node-07:29400");
  CHECK(o.node_rank == 1);
  CHECK(o.entrypoint == "/bin/true");
}

}  // namespace
}  // namespace ddprun
