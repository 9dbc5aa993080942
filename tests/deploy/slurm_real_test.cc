// docker/slurm/ddprun.sbatch submitted with `sbatch --wait` to a real SLURM
// (Debian's slurm-wlm: munged, slurmctld and two slurmd on this host) in a
// private network namespace, so every packet stays on 127.0.0.1. Root only;
// skipped with a message when not root or when slurm-wlm is not installed.
#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include <catch2/catch.hpp>

#include "tests/deploy/loopback_namespace.h"
#include "tests/deploy/slurm_cluster.h"

namespace ddprun::deploy {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kScript = DDPRUN_SOURCE_DIR "/docker/slurm/ddprun.sbatch";
constexpr int kNodes = 2;
constexpr int kProcPerNode = 2;

// One SLURM cluster in a loopback-only namespace, torn down (jobs, daemons,
// leftovers, namespace, files) in reverse order of construction even when
// an assertion fails.
struct Fixture {
  multinode::TempDir tmp;
  std::unique_ptr<LoopbackNamespace> ns;
  std::unique_ptr<SlurmCluster> cluster;
  std::string skipped;  // why not, when this machine cannot run it

  Fixture() {
    skipped = SlurmCluster::Unavailable();
    if (!skipped.empty()) return;
    auto entered = LoopbackNamespace::Enter("localhost");
    if (!entered.ok()) {
      skipped = entered.status().ToString();
      return;
    }
    ns = std::move(entered).value();
    cluster = std::make_unique<SlurmCluster>(tmp.path());
  }
  ~Fixture() {
    cluster.reset();  // stops every process inside the namespace first
    ns.reset();
  }
};

struct JobResult {
  int sbatch_code = -1;
  std::string sbatch_out;
  std::string state, exit_code;  // from the completion log
  std::string output;            // the script's --output file
};

// Submits the script with `env` and script arguments `args`; waits for the
// job to end (sbatch --wait, SLURM's own time limit 2 min as a backstop).
// The script asks for GPUs and 16 CPUs per task: the command line
// overrides those for this CPU-only cluster, as a user without GPUs would.
JobResult SubmitAndWait(SlurmCluster& cluster, const std::string& dir,
                        std::map<std::string, std::string> env,
                        const std::vector<std::string>& args) {
  const std::string job_dir = dir + "/job";
  fs::create_directories(job_dir);
  std::vector<std::string> argv = {"sbatch",
                                   "--wait",
                                   "--parsable",
                                   "--nodes=" + std::to_string(kNodes),
                                   "--gpus-per-node=0",
                                   "--cpus-per-task=1",
                                   "--time=2",
                                   "--chdir=" + job_dir,
                                   kScript};
  argv.insert(argv.end(), args.begin(), args.end());
  env.emplace("DDPRUN_BIN", DDPRUN_BIN_DIR "/ddprun");
  env.emplace("NPROC_PER_NODE", std::to_string(kProcPerNode));
  env.emplace("MAX_RESTARTS", "0");
  env.emplace("OMP_NUM_THREADS", "1");
  JobResult job;
  SlurmCluster::Result sbatch = cluster.Run(argv, env, 45s);
  job.sbatch_code = sbatch.code;
  job.sbatch_out = sbatch.out;
  std::smatch m;
  if (!std::regex_search(sbatch.out, m, std::regex("^([0-9]+)"))) return job;
  const std::string id = m[1];
  const std::string record = cluster.FinishedJob(id);
  if (std::regex_search(record, m, std::regex(" JobState=(\\S+)"))) {
    job.state = m[1];
  }
  if (std::regex_search(record, m, std::regex(" ExitCode=(\\S+)"))) {
    job.exit_code = m[1];
  }
  job.output = multinode::ReadFile(job_dir + "/ddprun-" + id + ".out");
  return job;
}

TEST_CASE("SLURM script: runs a 2-node job on a real slurmctld+slurmd",
          "[deploy][slurm]") {
  Fixture f;
  if (!f.skipped.empty()) {
    WARN("skipped: " << f.skipped);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  Status up = f.cluster->Start(kNodes, 2, 20s);
  INFO(up.ToString());
  REQUIRE(up.ok());
  const auto ready = std::chrono::steady_clock::now();

#ifdef DDPRUN_DDP_DEMO
  // The C++ demo: rank report, a Gloo all-reduce and a short DDP fit.
  const std::map<std::string, std::string> env = {{"TRAINER", DDPRUN_DDP_DEMO}};
  const std::vector<std::string> args = {"--steps", "3"};
  const std::string who = "\\[ddp_demo\\] rank ";
#else
  // Without LibTorch: a compiled program reporting the env ddprun gave it.
  const std::map<std::string, std::string> env = {{"TRAINER", "/bin/sh"}};
  const std::vector<std::string> args = {
      "-c",
      "echo \"[sh] rank $RANK/$WORLD_SIZE local_rank "
      "$LOCAL_RANK/$LOCAL_WORLD_SIZE\""};
  const std::string who = "\\[sh\\] rank ";
#endif
  JobResult job = SubmitAndWait(*f.cluster, f.tmp.path(), env, args);
  const auto done = std::chrono::steady_clock::now();
  WARN("SLURM cluster up in "
       << std::chrono::duration<double>(ready - start).count()
       << " s; sbatch --wait took "
       << std::chrono::duration<double>(done - ready).count() << " s");
  INFO("sbatch: " << job.sbatch_out << "\njob output:\n"
                  << job.output << "\ndaemons:\n"
                  << f.cluster->DaemonOutput());
  CHECK(job.sbatch_code == 0);
  CHECK(job.state == "COMPLETED");
  CHECK(job.exit_code == "0:0");
  // Every rank of the 2 x 2 world ran once, with its node-local rank.
  const int world = kNodes * kProcPerNode;
  for (int r = 0; r < world; ++r) {
    const std::regex line(who + std::to_string(r) + "/" +
                          std::to_string(world) + " local_rank " +
                          std::to_string(r % kProcPerNode) + "/" +
                          std::to_string(kProcPerNode) + "\\b");
    CHECK(std::distance(
              std::sregex_iterator(job.output.begin(), job.output.end(), line),
              std::sregex_iterator()) == 1);
  }
#ifdef DDPRUN_DDP_DEMO
  const std::regex ok("rank [0-9] weight .* OK");
  CHECK(std::distance(
            std::sregex_iterator(job.output.begin(), job.output.end(), ok),
            std::sregex_iterator()) == world);
#endif
}

TEST_CASE("SLURM script: a failing trainer fails the SLURM job",
          "[deploy][slurm]") {
  Fixture f;
  if (!f.skipped.empty()) {
    WARN("skipped: " << f.skipped);
    return;
  }
  Status up = f.cluster->Start(kNodes, 2, 20s);
  INFO(up.ToString());
  REQUIRE(up.ok());
  // Rank 3 exits 7; with MAX_RESTARTS=0 its agent gives up, srun
  // --kill-on-bad-exit ends the other node's agent, the batch script fails.
  JobResult job =
      SubmitAndWait(*f.cluster, f.tmp.path(), {{"TRAINER", "/bin/sh"}},
                    {"-c", "[ \"$RANK\" = 3 ] && exit 7; sleep 30"});
  INFO("sbatch: " << job.sbatch_out << "\njob output:\n"
                  << job.output << "\ndaemons:\n"
                  << f.cluster->DaemonOutput());
  CHECK(job.sbatch_code != 0);
  CHECK(job.sbatch_code != -1);  // ended, not stuck until the deadline
  CHECK(job.state == "FAILED");
  CHECK(job.exit_code != "0:0");
}

}  // namespace
}  // namespace ddprun::deploy
