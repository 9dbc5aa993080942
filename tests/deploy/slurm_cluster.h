#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/common/status.h"
#include "tests/multinode/multinode_util.h"

namespace ddprun::deploy {

// A throwaway SLURM cluster on this host, built from Debian's slurm-wlm:
// its own munged (key, socket and state in `dir`), one slurmctld and N
// slurmd daemons (Debian builds slurmd with MULTIPLE_SLURMD, so several run
// on one host, each on its own port), every file and port private to the
// cluster. The nodes are named 127.0.0.1 .. 127.0.0.N (all NodeAddr
// 127.0.0.1): a job's SLURM_JOB_NODELIST then holds names that resolve to
// loopback everywhere, which is what the sbatch script hands ddprun as its
// rendezvous host. slurmctld and slurmd listen on 127.0.0.1, srun and
// sbatch on the address of this host's name, the job wherever it likes:
// run it inside a LoopbackNamespace, where lo is the only interface.
// Not thread-safe. The destructor tears everything down (see Stop).
class SlurmCluster {
 public:
  // Empty when this machine can run a cluster; otherwise one line saying
  // why not (not root, which programs are missing).
  static std::string Unavailable();

  // `dir` exists, is owned by the caller and outlives this object.
  explicit SlurmCluster(std::string dir);
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // Starts munged, slurmctld and `nodes` slurmd (each with `cpus` CPUs) and
  // blocks until sinfo shows every node idle or `timeout` passes
  // (DEADLINE_EXCEEDED, with the daemons' output). Call once.
  Status Start(int nodes, int cpus, std::chrono::milliseconds timeout);

  // Environment that points SLURM commands (and the jobs they submit) at
  // this cluster.
  std::map<std::string, std::string> Env() const;

  struct Result {
    int code = -1;    // exit code; -1 when it outlived its timeout (killed)
    std::string out;  // stdout, then stderr
  };
  // Runs a SLURM client command (argv[0] a name such as "sbatch") against
  // this cluster with Env() plus `env`. Blocks up to `timeout`.
  Result Run(std::vector<std::string> argv,
             std::map<std::string, std::string> env,
             std::chrono::milliseconds timeout);

  // The completion-log record of finished job `id` ("JobId=<id> ...
  // JobState=COMPLETED ... ExitCode=0:0"); "" while it has not finished.
  std::string FinishedJob(const std::string& id) const;

  // The daemons' stdout and stderr, for failure messages.
  std::string DaemonOutput() const;

  // Cancels every job, waits (bounded) for them to end, stops the daemons
  // (SIGTERM, then SIGKILL after a grace period) and kills any process left
  // that carries this cluster's SLURM_CONF (job steps of a hung job).
  // Idempotent; blocks at most ~20 s.
  void Stop();

 private:
  // Starts `argv` (SLURM_CONF set) as a daemon that dies with this process.
  void AddDaemon(const std::string& name, std::vector<std::string> argv);
  Status StartMunge(std::chrono::steady_clock::time_point deadline);
  void WriteConfig(int nodes, int cpus);
  bool NodesIdle(int nodes);
  void KillClusterProcesses();

  std::string dir_;
  std::string conf_;  // slurm.conf
  std::string munge_socket_;
  int run_count_ = 0;  // names client output files
  bool ctld_up_ = false;
  // munged, slurmctld, then the slurmd daemons; stopped in reverse.
  std::vector<std::unique_ptr<multinode::Child>> daemons_;
};

}  // namespace ddprun::deploy
