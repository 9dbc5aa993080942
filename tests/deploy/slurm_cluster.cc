#include "tests/deploy/slurm_cluster.h"

#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace ddprun::deploy {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using multinode::Child;
using multinode::FreeLoopbackPort;
using multinode::ReadFile;
using multinode::WaitUntil;
using SteadyClock = std::chrono::steady_clock;

const char* const kPrograms[] = {"munged",   "slurmctld", "slurmd",
                                 "sinfo",    "sbatch",    "srun",
                                 "scontrol", "scancel",   "squeue"};

// Full path of `name` (daemons live in sbin, often not on a user's PATH);
// "" when absent.
std::string FindProgram(const std::string& name) {
  std::string dirs = "/usr/sbin:/usr/bin:/sbin:/bin";
  if (const char* path = getenv("PATH")) dirs += std::string(":") + path;
  std::istringstream in(dirs);
  for (std::string d; std::getline(in, d, ':');) {
    const std::string p = d + "/" + name;
    if (!d.empty() && access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// A munge key: 1 KiB from the kernel's CSPRNG, readable by root only
// (munged refuses a key others can read).
Status WriteMungeKey(const std::string& path) {
  std::ifstream rnd("/dev/urandom", std::ios::binary);
  std::string key(1024, '\0');
  if (!rnd.read(key.data(), key.size())) {
    return InternalError("reading /dev/urandom for the munge key failed");
  }
  std::ofstream(path, std::ios::binary) << key;
  if (chmod(path.c_str(), 0400) != 0) {
    return ErrnoStatus("chmod " + path, errno);
  }
  return Status();
}

}  // namespace

std::string SlurmCluster::Unavailable() {
  if (geteuid() != 0) {
    return "needs root (slurmctld/slurmd run as SlurmUser=root here)";
  }
  std::string missing;
  for (const char* p : kPrograms) {
    if (FindProgram(p).empty()) missing += std::string(" ") + p;
  }
  if (!missing.empty()) {
    return "missing" + missing +
           " (Debian: slurmctld slurmd slurm-client munge, scripts/setup.sh)";
  }
  return "";
}

SlurmCluster::SlurmCluster(std::string dir)
    : dir_(std::move(dir)),
      conf_(dir_ + "/slurm.conf"),
      munge_socket_(dir_ + "/run/munge.sock") {}

SlurmCluster::~SlurmCluster() { Stop(); }

std::map<std::string, std::string> SlurmCluster::Env() const {
  return {{"SLURM_CONF", conf_}};
}

void SlurmCluster::AddDaemon(const std::string& name,
                             std::vector<std::string> argv) {
  // Killed with this process even when it dies without tearing down (a
  // ctest timeout): setpriv sets the parent-death signal, then execs.
  const std::string setpriv = FindProgram("setpriv");
  if (!setpriv.empty()) {
    argv.insert(argv.begin(), {setpriv, "--pdeathsig=KILL", "--"});
  }
  daemons_.push_back(
      std::make_unique<Child>(dir_ + "/log", name, std::move(argv), Env()));
}

Status SlurmCluster::StartMunge(SteadyClock::time_point deadline) {
  // munged insists that every directory above its socket is searchable by
  // all and that the key's directory is private.
  for (const char* d : {"munge", "run", "state", "log"}) {
    fs::create_directories(dir_ + "/" + d);
  }
  chmod(dir_.c_str(), 0755);
  chmod((dir_ + "/run").c_str(), 0755);
  chmod((dir_ + "/munge").c_str(), 0700);
  const std::string key = dir_ + "/munge/munge.key";
  DDP_RETURN_IF_ERROR(WriteMungeKey(key));
  AddDaemon("munged", {FindProgram("munged"), "--foreground",
                       "--key-file=" + key, "--socket=" + munge_socket_,
                       "--pid-file=" + dir_ + "/run/munged.pid",
                       "--log-file=" + dir_ + "/log/munged.log",
                       "--seed-file=" + dir_ + "/munge/munged.seed"});
  const bool up = WaitUntil(
      [&] { return fs::exists(munge_socket_) || !daemons_.back()->Running(); },
      std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - SteadyClock::now()));
  if (!up || !fs::exists(munge_socket_)) {
    return UnavailableError("munged did not create " + munge_socket_ + "\n" +
                            DaemonOutput());
  }
  return Status();
}

void SlurmCluster::WriteConfig(int nodes, int cpus) {
  std::string ports;
  for (int i = 0; i < nodes; ++i) {
    ports += (i ? "," : "") + std::to_string(FreeLoopbackPort());
  }
  char host[HOST_NAME_MAX + 1] = {0};
  gethostname(host, sizeof(host) - 1);  // slurmctld must run on this host
  std::ofstream c(conf_);
  c << "ClusterName=ddprun\n"
    << "SlurmctldHost=" << host << "(127.0.0.1)\n"
    << "SlurmctldPort=" << FreeLoopbackPort() << "\n"
    << "SlurmUser=root\nSlurmdUser=root\n"
    << "AuthType=auth/munge\nCredType=cred/munge\n"
    << "AuthInfo=socket=" << munge_socket_
    << "\n"
    // Listen on the node/controller address, not the wildcard.
    << "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny\n"
    << "MpiDefault=none\n"
    // No cgroups: linuxproc tracks steps by parent pid, task/none binds
    // nothing; works in containers and on machines without cgroup v2 access.
    << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
    << "JobAcctGatherType=jobacct_gather/none\n"
    << "AccountingStorageType=accounting_storage/none\n"
    << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
    << "ReturnToService=2\n"
    // Several slurmd share this host's CPUs: trust the configured count.
    << "SlurmdParameters=config_overrides\n"
    // sbatch --wait polls every 2 s only while that is under MinJobAge/2
    // (then 8 s, 32 s): a short MinJobAge keeps it prompt. Finished jobs
    // then vanish from slurmctld within seconds; the completion log keeps
    // their final state.
    << "MinJobAge=4\nKillWait=2\nInactiveLimit=0\n"
    << "JobCompType=jobcomp/filetxt\nJobCompLoc=" << dir_ << "/log/jobcomp\n"
    << "StateSaveLocation=" << dir_ << "/state\n"
    << "SlurmdSpoolDir=" << dir_ << "/spool/%n\n"
    << "SlurmctldPidFile=" << dir_ << "/run/slurmctld.pid\n"
    << "SlurmdPidFile=" << dir_ << "/run/slurmd-%n.pid\n"
    << "SlurmctldLogFile=" << dir_ << "/log/slurmctld.log\n"
    << "SlurmdLogFile=" << dir_ << "/log/slurmd-%n.log\n"
    << "NodeName=127.0.0.[1-" << nodes << "] NodeAddr=127.0.0.1 Port=" << ports
    << " CPUs=" << cpus << " State=UNKNOWN\n"
    << "PartitionName=ddprun Nodes=ALL Default=YES MaxTime=10 State=UP\n";
}

Status SlurmCluster::Start(int nodes, int cpus,
                           std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  DDP_RETURN_IF_ERROR(StartMunge(deadline));
  WriteConfig(nodes, cpus);
  AddDaemon("slurmctld", {FindProgram("slurmctld"), "-D", "-i", "-f", conf_});
  ctld_up_ = true;
  for (int i = 1; i <= nodes; ++i) {
    const std::string name = "127.0.0." + std::to_string(i);
    fs::create_directories(dir_ + "/spool/" + name);
    AddDaemon("slurmd-" + name,
              {FindProgram("slurmd"), "-D", "-N", name, "-f", conf_});
  }
  bool idle = false, daemon_exited = false;
  WaitUntil(
      [&] {
        if (NodesIdle(nodes)) return idle = true;
        for (auto& d : daemons_) daemon_exited = daemon_exited || !d->Running();
        return daemon_exited;
      },
      std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - SteadyClock::now()),
      200ms);
  if (idle) return Status();
  if (daemon_exited) {
    return UnavailableError("a SLURM daemon exited during startup\n" +
                            DaemonOutput());
  }
  return DeadlineExceededError("SLURM nodes not idle within the deadline\n" +
                               DaemonOutput());
}

bool SlurmCluster::NodesIdle(int nodes) {
  Result r = Run({"sinfo", "--noheader", "--Node", "--format=%N %t"}, {}, 5s);
  if (r.code != 0) return false;
  std::istringstream in(r.out);
  int idle = 0;
  for (std::string node, state; in >> node >> state;) idle += state == "idle";
  return idle == nodes;
}

SlurmCluster::Result SlurmCluster::Run(std::vector<std::string> argv,
                                       std::map<std::string, std::string> env,
                                       std::chrono::milliseconds timeout) {
  argv[0] = FindProgram(argv[0]);
  for (const auto& [k, v] : Env()) env.emplace(k, v);
  Child child(dir_ + "/log", "cmd" + std::to_string(run_count_++), argv, env);
  Result r;
  r.code = child.Wait(timeout);
  r.out = child.Stdout() + child.Stderr();
  return r;  // ~Child kills it if it outlived `timeout`
}

std::string SlurmCluster::FinishedJob(const std::string& id) const {
  std::istringstream in(ReadFile(dir_ + "/log/jobcomp"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("JobId=" + id + " ", 0) == 0) return line;
  }
  return "";
}

std::string SlurmCluster::DaemonOutput() const {
  std::string all;
  for (const auto& d : daemons_) all += d->Output();
  return all;
}

void SlurmCluster::Stop() {
  if (ctld_up_ && daemons_.size() > 1 && daemons_[1]->Running()) {
    Run({"scancel", "--quiet", "--user=root"}, {}, 5s);
    WaitUntil(
        [&] {
          Result r = Run({"squeue", "--noheader"}, {}, 2s);
          return r.code != 0 || r.out.empty();
        },
        10s);
  }
  ctld_up_ = false;
  // slurmd first (it reports to slurmctld on the way out), munged last.
  for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) {
    (*it)->Kill(SIGTERM);
    if ((*it)->Wait(3s) == -1) (*it)->Kill(SIGKILL);
  }
  daemons_.clear();  // ~Child: SIGKILL to the process group, reap
  KillClusterProcesses();
}

// Job steps (slurmstepd, the batch shell, srun, ddprun and its workers) are
// not our children; all of them, and the daemons, carry this cluster's
// SLURM_CONF in their environment (sbatch exports it to the job).
void SlurmCluster::KillClusterProcesses() {
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return;
  const std::string mark = "SLURM_CONF=" + conf_;
  while (dirent* e = readdir(proc)) {
    char* end = nullptr;
    const long pid = strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/environ");
    for (std::string var; std::getline(in, var, '\0');) {
      if (var == mark) {
        kill(pid, SIGKILL);
        break;
      }
    }
  }
  closedir(proc);
}

}  // namespace ddprun::deploy
