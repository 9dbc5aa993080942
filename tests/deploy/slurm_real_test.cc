// docker/slurm/ddprun.sbatch submitted with `sbatch --wait` to a real SLURM
// (Debian's slurm-wlm: munged, slurmctld and two slurmd on this host) in a
// private network namespace, so every packet stays on 127.0.0.1. Root only;
// skipped with a message when not root or when slurm-wlm is not installed.
#include <filesystem>
#include <map>
#include <regex>
#include <string>

#include "ddprun_catch.h"
#include "ddprun_skip.h"

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

  // Starts the cluster (REQUIREs it up). Call only when `skipped` is empty
  // (the test case skips otherwise).
  void Start() {
    Status up = cluster->Start(kNodes, 2, 20s);
    INFO(up.ToString());
    REQUIRE(up.ok());
  }
};

struct JobResult {
  std::string id;
  int sbatch_code = -1;
  std::string sbatch_out;
  // From the completion log; "" until the job has finished.
  std::string state, exit_code, start, end;
  std::string output;  // the script's --output file
};

// Submits the script with `env` and script arguments `args`. With `wait`,
// blocks until the job ends (sbatch --wait) and fills in the result;
// otherwise returns once it is queued. SLURM's own time limit (2 min) is
// the backstop. The script asks for GPUs and 16 CPUs per task: the command
// line overrides those for this CPU-only cluster, as a user without GPUs
// would.
JobResult Submit(SlurmCluster& cluster, const std::string& dir,
                 std::map<std::string, std::string> env,
                 const std::vector<std::string>& args, bool wait) {
  const std::string job_dir = dir + "/job";
  fs::create_directories(job_dir);
  std::vector<std::string> argv = {"sbatch",
                                   "--parsable",
                                   "--nodes=" + std::to_string(kNodes),
                                   "--gpus-per-node=0",
                                   "--cpus-per-task=1",
                                   "--time=2",
                                   "--chdir=" + job_dir};
  if (wait) argv.push_back("--wait");
  argv.push_back(kScript);
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
  if (std::regex_search(sbatch.out, m, std::regex("^([0-9]+)"))) job.id = m[1];
  return job;
}

// Fills in what the completion log and the output file say about `job`.
void ReadFinished(SlurmCluster& cluster, const std::string& dir,
                  JobResult* job) {
  if (job->id.empty()) return;
  const std::string record = cluster.FinishedJob(job->id);
  const std::pair<const char*, std::string*> fields[] = {
      {"JobState", &job->state},
      {"ExitCode", &job->exit_code},
      {"StartTime", &job->start},
      {"EndTime", &job->end}};
  for (const auto& [name, value] : fields) {
    std::smatch m;
    if (std::regex_search(record, m,
                          std::regex(std::string(" ") + name + "=(\\S+)"))) {
      *value = m[1];
    }
  }
  job->output = multinode::ReadFile(dir + "/job/ddprun-" + job->id + ".out");
}

JobResult SubmitAndWait(SlurmCluster& cluster, const std::string& dir,
                        std::map<std::string, std::string> env,
                        const std::vector<std::string>& args) {
  JobResult job = Submit(cluster, dir, std::move(env), args, /*wait=*/true);
  ReadFinished(cluster, dir, &job);
  return job;
}

std::string Describe(const JobResult& job) {
  return "job " + job.id + " sbatch: " + job.sbatch_out + "\noutput:\n" +
         job.output;
}

// How many lines of `output` say "<who>rank R/W local_rank L/P" for rank r.
long RankLines(const std::string& output, const std::string& who, int r) {
  const int world = kNodes * kProcPerNode;
  const std::regex line(who + std::to_string(r) + "/" + std::to_string(world) +
                        " local_rank " + std::to_string(r % kProcPerNode) +
                        "/" + std::to_string(kProcPerNode) + "\\b");
  return std::distance(std::sregex_iterator(output.begin(), output.end(), line),
                       std::sregex_iterator());
}

TEST_CASE("SLURM script: runs a 2-node job on a real slurmctld+slurmd",
          "[deploy][slurm]") {
  Fixture f;
  const auto start = std::chrono::steady_clock::now();
  if (!f.skipped.empty()) DDPRUN_SKIP_UNLESS_CI(f.skipped);
  f.Start();
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
  INFO(Describe(job) << "\ndaemons:\n" << f.cluster->DaemonOutput());
  CHECK(job.sbatch_code == 0);
  CHECK(job.state == "COMPLETED");
  CHECK(job.exit_code == "0:0");
  // Every rank of the 2 x 2 world ran once, with its node-local rank.
  for (int r = 0; r < kNodes * kProcPerNode; ++r) {
    CHECK(RankLines(job.output, who, r) == 1);
  }
#ifdef DDPRUN_DDP_DEMO
  const std::regex ok("rank [0-9] weight .* OK");
  CHECK(std::distance(
            std::sregex_iterator(job.output.begin(), job.output.end(), ok),
            std::sregex_iterator()) == kNodes * kProcPerNode);
#endif
}

TEST_CASE("SLURM script: a failing trainer fails the SLURM job",
          "[deploy][slurm]") {
  Fixture f;
  if (!f.skipped.empty()) DDPRUN_SKIP_UNLESS_CI(f.skipped);
  f.Start();
  // Rank 3 exits 7; with MAX_RESTARTS=0 its agent gives up, srun
  // --kill-on-bad-exit ends the other node's agent, the batch script fails.
  JobResult job =
      SubmitAndWait(*f.cluster, f.tmp.path(), {{"TRAINER", "/bin/sh"}},
                    {"-c", "[ \"$RANK\" = 3 ] && exit 7; sleep 30"});
  INFO(Describe(job) << "\ndaemons:\n" << f.cluster->DaemonOutput());
  CHECK(job.sbatch_code != 0);
  CHECK(job.sbatch_code != -1);  // ended, not stuck until the deadline
  CHECK(job.state == "FAILED");
  CHECK(job.exit_code != "0:0");
}

TEST_CASE("SLURM script: two jobs sharing a head node keep apart",
          "[deploy][slurm]") {
  Fixture f;
  if (!f.skipped.empty()) DDPRUN_SKIP_UNLESS_CI(f.skipped);
  f.Start();
  // Each job takes one of the two CPUs of each node, so both run at once
  // with the same first node, as on a cluster that shares nodes; the
  // workers stay up long enough for the two to overlap.
  const std::vector<std::string> args = {
      "-c",
      "sleep 3; echo \"[sh] rank $RANK/$WORLD_SIZE local_rank "
      "$LOCAL_RANK/$LOCAL_WORLD_SIZE\""};
  const std::map<std::string, std::string> env = {{"TRAINER", "/bin/sh"}};
  JobResult a = Submit(*f.cluster, f.tmp.path(), env, args, /*wait=*/false);
  JobResult b = Submit(*f.cluster, f.tmp.path(), env, args, /*wait=*/false);
  INFO(a.sbatch_out << b.sbatch_out);
  REQUIRE(!a.id.empty());
  REQUIRE(!b.id.empty());
  const bool ended = multinode::WaitUntil(
      [&] {
        return !f.cluster->FinishedJob(a.id).empty() &&
               !f.cluster->FinishedJob(b.id).empty();
      },
      45s);
  ReadFinished(*f.cluster, f.tmp.path(), &a);
  ReadFinished(*f.cluster, f.tmp.path(), &b);
  INFO(Describe(a) << "\n" << Describe(b));
  REQUIRE(ended);
  CHECK((a.start <= b.end && b.start <= a.end));  // they did overlap
  for (const JobResult* job : {&a, &b}) {
    CHECK(job->state == "COMPLETED");
    CHECK(job->exit_code == "0:0");
    for (int r = 0; r < kNodes * kProcPerNode; ++r) {
      CHECK(RankLines(job->output, "\\[sh\\] rank ", r) == 1);
    }
  }
}

}  // namespace
}  // namespace ddprun::deploy
