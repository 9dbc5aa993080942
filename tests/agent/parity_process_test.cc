// torchrun's flags that ddprun used to accept without effect, and the node
// health checks, on the real ddprun binary: the FileTimer server (with
// torch's own FileTimerClient), --numa_binding on fake and real sysfs,
// --duplicate_std*_filters, the extra prefix placeholders,
// --nproc_per_node=xpu, --health_check*, --max_restarts_without_progress,
// the shared --shutdown_timeout window and the job-wide restart count.

#include "ddprun_catch.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "ddprun_skip.h"
#include "tests/agent/process_harness.h"

namespace ddprun::test {
namespace {

const std::string kPython = "/usr/bin/python3";
const std::string kTimerWorker =
    DDPRUN_SOURCE_DIR "/tests/compat/timer_worker.py";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

int Count(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto at = text.find(part); at != std::string::npos;
       at = text.find(part, at + 1)) {
    ++n;
  }
  return n;
}

std::string Hostname() {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  return host;
}

// The one attempt_<k> directory of a run under `logs`.
std::string AttemptDir(const std::string& logs, int k) {
  return Trimmed(
      ShellStdout("ls -d " + logs + "/*/attempt_" + std::to_string(k)));
}

// ---------------------------------------------------------------------------
// Line prefixes and filtered logs.

TEST_CASE(
    "ddprun: ${hostname}, ${node_rank} and ${local_world_size} in the "
    "line prefix",
    "[agent][process][parity]") {
  TempDir dir;
  Ddprun run(dir, {"--nproc_per_node=2", "--no_python", kData + "/env_dump.sh"},
             {{"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE",
               "[${hostname}:${node_rank}:${local_world_size}:${rank}]:"}});
  REQUIRE(run.Wait() == 0);
  const std::string host = Hostname();
  CHECK(Contains(run.Stdout(), "[" + host + ":0:2:0]:hello from 0\n"));
  CHECK(Contains(run.Stdout(), "[" + host + ":0:2:1]:hello from 1\n"));
}

TEST_CASE("ddprun: --duplicate_stdout_filters copies tee'd lines as torchrun",
          "[agent][process][parity]") {
  TempDir dir;
  const std::string logs = dir.path() + "/logs";
  // torchrun copies the tee'd streams only: rank 0 tees both, rank 1
  // nothing. ",," escapes a comma: the stdout filters are "loss,x", "acc".
  Ddprun run(dir, {"--nproc_per_node=2", "--log_dir", logs, "-t", "0:3",
                   "--duplicate-stdout-filters", "loss,,x,acc",
                   "--duplicate_stderr_filters=Error", "--no_python",
                   kData + "/filter_worker.sh"});
  REQUIRE(run.Wait() == 0);
  const std::string attempt = AttemptDir(logs, 0);
  REQUIRE_FALSE(attempt.empty());
  CHECK(ReadFile(attempt + "/filtered_stdout.log") ==
        "[default0]:epoch 1 loss,x=3 rank 0\n"
        "[default0]:acc 0.5 rank 0\n");
  CHECK(ReadFile(attempt + "/filtered_stderr.log") ==
        "[default0]:Error: disk full rank 0\n");
  // The console and the per-rank files are as without the filters.
  CHECK(Contains(run.Stdout(), "[default1]:loss 1.0 rank 1\n"));
  CHECK(Contains(ReadFile(attempt + "/0/stdout.log"), "noise rank 0\n"));
  // PET_ form; an empty list copies nothing and writes no file.
  TempDir dir2;
  const std::string logs2 = dir2.path() + "/logs";
  Ddprun env_run(dir2,
                 {"--log_dir", logs2, "-t", "3", "--no_python",
                  kData + "/filter_worker.sh"},
                 {{"PET_DUPLICATE_STDOUT_FILTERS", "noise"},
                  {"PET_DUPLICATE_STDERR_FILTERS", ""}});
  REQUIRE(env_run.Wait() == 0);
  const std::string attempt2 = AttemptDir(logs2, 0);
  CHECK(ReadFile(attempt2 + "/filtered_stdout.log") ==
        "[default0]:noise rank 0\n");
  CHECK_FALSE(Exists(attempt2 + "/filtered_stderr.log"));
}

// ---------------------------------------------------------------------------
// --nproc_per_node for other accelerators.

// A stand-in for the workers' interpreter that answers the device count.
std::string FakeInterpreter(const TempDir& dir, const std::string& answer) {
  const std::string path = dir.path() + "/python3";
  std::ofstream(path) << "#!/bin/sh\necho \"$@\" > \"" << dir.path()
                      << "/asked\"\necho '" << answer << "'\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

TEST_CASE("ddprun: --nproc_per_node=xpu is counted by the workers' torch",
          "[agent][process][parity]") {
  TempDir dir;
  Ddprun run(dir,
             {"--nproc-per-node=xpu", "--no_python", kData + "/env_dump.sh"},
             {{"PYTHON_EXEC", FakeInterpreter(dir, "count 3")}});
  REQUIRE(run.Wait() == 0);
  for (int r = 0; r < 3; ++r) {
    CHECK(ParseEnv(ReadFile(dir.path() + "/env_" +
                            std::to_string(r)))["LOCAL_WORLD_SIZE"] == "3");
  }
  CHECK(Contains(ReadFile(dir.path() + "/asked"), "xpu"));
  // A count of 0 and an unavailable device are one clear error line.
  TempDir none;
  std::string err;
  {
    Ddprun zero(none, {"--nproc_per_node=xpu", "--no_python", "true"},
                {{"PYTHON_EXEC", FakeInterpreter(none, "count 0")}});
    CHECK(zero.Wait() == 2);
    err = zero.Stderr();
  }
  CHECK(err == "ddprun: error: --nproc_per_node=xpu: the workers' torch (" +
                   none.path() + "/python3) counts 0 xpu devices\n");
  TempDir off;
  Ddprun unavailable(off, {"--nproc_per_node=npu", "--no_python", "true"},
                     {{"PYTHON_EXEC", FakeInterpreter(off, "unavailable")}});
  CHECK(unavailable.Wait() == 2);
  CHECK(Contains(unavailable.Stderr(),
                 "--nproc_per_node=npu: npu is not available"));
  // Numbers and cpu never ask the interpreter.
  TempDir plain;
  Ddprun two(plain, {"--nproc_per_node=2", "--no_python", "true"},
             {{"PYTHON_EXEC", FakeInterpreter(plain, "count 7")}});
  CHECK(two.Wait() == 0);
  CHECK_FALSE(Exists(plain.path() + "/asked"));
}

TEST_CASE("ddprun: --nproc_per_node=xpu under Debian's torch 1.13",
          "[agent][process][parity]") {
  if (ShellStdout(kPython + " -c 'import torch' 2>/dev/null && echo yes") !=
      "yes\n") {
    DDPRUN_SKIP(kPython << " has no torch");
  }
  // torch 1.13 has neither torch.xpu nor a privateuse1 backend name:
  // torchrun 1.13 says "Unsupported nproc_per_node value: xpu".
  TempDir dir;
  Ddprun run(dir, {"--nproc_per_node=xpu", "--no_python", "true"},
             {{"PYTHON_EXEC", kPython}});
  CHECK(run.Wait(90s) == 2);  // importing torch takes seconds under load
  CHECK(Contains(run.Stderr(),
                 "--nproc_per_node=xpu: Unsupported nproc_per_node value"));
}

// ---------------------------------------------------------------------------
// --numa_binding.

// A fake sysfs tree (DDPRUN_SYSFS_ROOT) whose CPUs exist on this machine
// (0 and 1), so that the kernel takes the binding.
class FakeSysfs {
 public:
  explicit FakeSysfs(const TempDir& dir) : root_(dir.path() + "/sysfs") {}
  const std::string& root() const { return root_; }

  void Node(int node, const std::string& cpus) {
    Write("/sys/devices/system/node/node" + std::to_string(node) + "/cpulist",
          cpus);
  }
  // CPU `cpu` on socket `socket`, its hyperthread siblings and the CPUs
  // sharing its L3.
  void Cpu(int cpu, int socket, const std::string& siblings,
           const std::string& l3) {
    const std::string d = "/sys/devices/system/cpu/cpu" + std::to_string(cpu);
    Write(d + "/topology/physical_package_id", std::to_string(socket));
    Write(d + "/topology/thread_siblings_list", siblings);
    Write(d + "/cache/index3/type", "Unified");
    Write(d + "/cache/index3/level", "3");
    Write(d + "/cache/index3/shared_cpu_list", l3);
  }
  // GPUs (NVIDIA 3D controllers) on the given NUMA nodes, in PCI order.
  void Gpus(const std::vector<int>& nodes) {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      char addr[32];
      std::snprintf(addr, sizeof(addr), "0000:%02zx:00.0", 0x18 + i);
      const std::string d = std::string("/sys/bus/pci/devices/") + addr;
      Write(d + "/vendor", "0x10de");
      Write(d + "/class", "0x030200");
      Write(d + "/numa_node", std::to_string(nodes[i]));
    }
  }

 private:
  void Write(const std::string& path, const std::string& text) {
    const std::string full = root_ + path;
    ShellStdout("mkdir -p \"$(dirname '" + full + "')\"");
    std::ofstream(full) << text << "\n";
  }
  std::string root_;
};

struct Binding {
  std::string cpus, mems, policy;
};

// Runs numa_dump.sh under --numa_binding=`mode` and reads every worker's
// binding as the kernel reports it.
std::vector<Binding> RunBound(const std::string& mode, int nproc,
                              const std::string& sysfs_root,
                              std::string* err = nullptr) {
  TempDir dir;
  std::map<std::string, std::string> env = {{"-CUDA_VISIBLE_DEVICES", ""}};
  if (!sysfs_root.empty()) env["DDPRUN_SYSFS_ROOT"] = sysfs_root;
  Ddprun run(
      dir,
      {"--numa-binding=" + mode, "--nproc_per_node=" + std::to_string(nproc),
       "--no_python", kData + "/numa_dump.sh"},
      env);
  const int code = run.Wait(30s);
  if (err != nullptr) *err = run.Stderr();
  INFO(run.Stderr());
  REQUIRE(code == 0);
  std::vector<Binding> out;
  for (int r = 0; r < nproc; ++r) {
    Binding b;
    std::stringstream ss(ReadFile(dir.path() + "/numa_" + std::to_string(r)));
    for (std::string line; std::getline(ss, line);) {
      const auto tab = line.find_first_of(":");
      std::string value = line.substr(tab + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      if (line.rfind("Cpus_allowed_list", 0) == 0) b.cpus = value;
      if (line.rfind("Mems_allowed_list", 0) == 0) b.mems = value;
      if (line.rfind("policy", 0) == 0) b.policy = value;
    }
    out.push_back(b);
  }
  return out;
}

std::string OwnMems() {
  std::stringstream ss(ReadFile("/proc/self/status"));
  for (std::string line; std::getline(ss, line);) {
    if (line.rfind("Mems_allowed_list:", 0) == 0) {
      std::string v = line.substr(18);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  }
  return "";
}

bool HaveTwoCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_ISSET(0, &set) &&
         CPU_ISSET(1, &set);
}

TEST_CASE("ddprun: --numa_binding=node on a 2-socket, 8-GPU host",
          "[agent][process][parity][numa]") {
  if (!HaveTwoCpus()) DDPRUN_SKIP("CPUs 0 and 1 are not both usable here");
  TempDir dir;
  FakeSysfs fs(dir);
  fs.Node(0, "0");  // socket 0
  fs.Node(1, "1");  // socket 1
  fs.Cpu(0, 0, "0", "0");
  fs.Cpu(1, 1, "1", "1");
  fs.Gpus({0, 0, 0, 0, 1, 1, 1, 1});
  std::string err;
  const std::vector<Binding> b = RunBound("node", 8, fs.root(), &err);
  for (int r = 0; r < 8; ++r) {
    INFO("local rank " << r);
    CHECK(b[r].cpus == (r < 4 ? "0" : "1"));
    // torch binds CPUs only (numactl --physcpubind): no memory policy,
    // the cpuset's memory nodes unchanged.
    CHECK(b[r].policy == "default");
    CHECK(b[r].mems == OwnMems());
  }
  // The map, printed once at start.
  CHECK(Count(err,
              "--numa_binding=node: GPU -> NUMA node 0->0, 1->0, 2->0, "
              "3->0, 4->1, 5->1, 6->1, 7->1") == 1);
  CHECK(Count(err, "--numa_binding=node: local rank -> CPUs 0: 0,") == 1);
  CHECK_FALSE(Contains(err, "no effect"));
  // socket: one NUMA node per socket here, the same choice.
  const std::vector<Binding> s = RunBound("socket", 8, fs.root());
  for (int r = 0; r < 8; ++r) CHECK(s[r].cpus == (r < 4 ? "0" : "1"));
}

TEST_CASE("ddprun: --numa_binding=socket spans the socket's NUMA nodes",
          "[agent][process][parity][numa]") {
  if (!HaveTwoCpus()) DDPRUN_SKIP("CPUs 0 and 1 are not both usable here");
  TempDir dir;
  FakeSysfs fs(dir);
  fs.Node(0, "0");  // one socket, two NUMA nodes (sub-NUMA clustering)
  fs.Node(1, "1");
  fs.Cpu(0, 0, "0", "0");
  fs.Cpu(1, 0, "1", "1");
  fs.Gpus({0, 1});
  const std::vector<Binding> node = RunBound("node", 2, fs.root());
  CHECK(node[0].cpus == "0");
  CHECK(node[1].cpus == "1");
  const std::vector<Binding> socket = RunBound("socket", 2, fs.root());
  CHECK(socket[0].cpus == "0-1");
  CHECK(socket[1].cpus == "0-1");
}

TEST_CASE("ddprun: --numa_binding=exclusive and core-complex split a node",
          "[agent][process][parity][numa]") {
  if (!HaveTwoCpus()) DDPRUN_SKIP("CPUs 0 and 1 are not both usable here");
  TempDir dir;
  FakeSysfs fs(dir);
  fs.Node(0, "0-1");  // two cores, each with its own L3
  fs.Cpu(0, 0, "0", "0");
  fs.Cpu(1, 0, "1", "1");
  fs.Gpus({0, 0});  // two GPUs share the node's cores out, one each
  const std::vector<Binding> x = RunBound("exclusive", 2, fs.root());
  CHECK(x[0].cpus == "0");
  CHECK(x[1].cpus == "1");
  fs.Gpus({0, 0, 0});  // a third GPU: one L3 each, round robin
  const std::vector<Binding> c = RunBound("core-complex", 3, fs.root());
  CHECK(c[0].cpus == "0");
  CHECK(c[1].cpus == "1");
  CHECK(c[2].cpus == "0");  // more GPUs than complexes: round robin
  // One physical core (hyperthreads 0 and 1) for three GPUs: torch raises,
  // ddprun fails before starting anything.
  fs.Cpu(0, 0, "0-1", "0-1");
  fs.Cpu(1, 0, "0-1", "0-1");
  TempDir run_dir;
  Ddprun run(run_dir,
             {"--numa_binding=exclusive", "--nproc_per_node=3", "--no_python",
              kData + "/numa_dump.sh"},
             {{"DDPRUN_SYSFS_ROOT", fs.root()}, {"-CUDA_VISIBLE_DEVICES", ""}});
  CHECK(run.Wait() == 1);
  CHECK(Contains(run.Stderr(),
                 "ddprun: error: --numa_binding=exclusive: GPU 0 (NUMA node "
                 "0): exclusive needs a physical core per GPU, but the node "
                 "has 1 physical cores for 3 GPUs"));
  CHECK_FALSE(Exists(run_dir.path() + "/numa_0"));
}

TEST_CASE("ddprun: --numa_binding without GPUs spreads local ranks",
          "[agent][process][parity][numa]") {
  if (!HaveTwoCpus()) DDPRUN_SKIP("CPUs 0 and 1 are not both usable here");
  TempDir dir;
  FakeSysfs fs(dir);
  fs.Node(0, "0");
  fs.Node(1, "1");
  fs.Cpu(0, 0, "0", "0");
  fs.Cpu(1, 1, "1", "1");
  const std::vector<Binding> b = RunBound("node", 4, fs.root());
  CHECK(b[0].cpus == "0");
  CHECK(b[1].cpus == "0");
  CHECK(b[2].cpus == "1");
  CHECK(b[3].cpus == "1");
}

TEST_CASE("ddprun: --numa_binding=node on this machine's own topology",
          "[agent][process][parity][numa]") {
  // Every worker runs on the CPUs of one NUMA node of this machine (a
  // one-node VM: all of them), as the kernel reports them.
  std::set<std::string> node_cpus;
  for (const std::string& name : testing::ListDir("/sys/devices/system/node")) {
    if (name.rfind("node", 0) == 0 && name.size() > 4 &&
        std::isdigit(static_cast<unsigned char>(name[4]))) {
      const std::string list =
          Trimmed(ReadFile("/sys/devices/system/node/" + name + "/cpulist"));
      if (!list.empty()) node_cpus.insert(list);
    }
  }
  if (node_cpus.empty()) DDPRUN_SKIP("no NUMA node in /sys");
  std::string err;
  const std::vector<Binding> b = RunBound("node", 2, "", &err);
  INFO(err);
  for (const Binding& w : b) {
    INFO(w.cpus);
    CHECK(node_cpus.count(w.cpus) == 1);
    CHECK(w.policy == "default");
  }
  CHECK(Count(err, "--numa_binding=node: local rank -> CPUs") == 1);
}

// ---------------------------------------------------------------------------
// torch's FileTimer.

TEST_CASE(
    "ddprun: TORCHELASTIC_ENABLE_FILE_TIMER kills an expired scope's "
    "worker after the hang diagnosis",
    "[agent][process][parity][filetimer]") {
  if (ShellStdout(kPython +
                  " -c 'import torch.distributed.elastic.timer' 2>/dev/null "
                  "&& echo yes") != "yes\n") {
    DDPRUN_SKIP(kPython << " has no torch");
  }
  TempDir dir;
  const std::string logs = dir.path() + "/logs";
  Ddprun run(
      dir,
      {"--standalone", "--nproc_per_node=2", "--log_dir", logs, kTimerWorker},
      {{"PYTHON_EXEC", kPython},
       {"TORCHELASTIC_ENABLE_FILE_TIMER", "1"},
       {"TIMER_RANK", "1"},
       {"OMP_NUM_THREADS", "1"}});
  REQUIRE(WaitForFiles({dir.path() + "/started_1"}, 90s));
  const auto started = Clock::now();
  REQUIRE(run.Wait(60s) == 1);
  const double took =
      std::chrono::duration<double>(Clock::now() - started).count();
  std::printf(
      "[agent] FileTimer: expires(after=1) worker killed, job ended "
      "%.2f s after the scope began\n",
      took);
  const std::string err = run.Stderr();
  INFO(err);
  CHECK(took < 5.5);  // not the 6 s of the sleep
  CHECK_FALSE(Exists(dir.path() + "/survived_1"));
  CHECK(Contains(err, "FileTimer: local_rank 1 (pid "));
  // torch names the scope after expires()'s caller: under 1.13 that is
  // contextlib's frame (expires is a @contextmanager).
  CHECK(Contains(err, "its FileTimer scope '"));
  CHECK(Contains(err, "(torch.distributed.elastic.timer)"));
  // ddprun's hang diagnosis before the kill: the expired rank's stack and
  // where the other waits.
  CHECK(Contains(err, "hang diagnosis: "));
  CHECK(Contains(err, "wait_for_peers"));
  CHECK(Contains(err, "every thread's stack: "));
  // The failure table: SIGKILL, as torch reaps it.
  CHECK(Contains(err, "  exitcode  : -9 (pid: "));
  CHECK(Contains(err, "traceback : killed by the FileTimer server: "));
  // The pipe is gone with the agent.
  const auto at = err.find("FileTimer server on ");
  REQUIRE(at != std::string::npos);
  const std::string pipe =
      err.substr(at + 20, err.find(' ', at + 20) - at - 20);
  CHECK(Contains(pipe, "/watchdog_timer_"));
  CHECK_FALSE(Exists(pipe));
}

// ---------------------------------------------------------------------------
// --health_check.

TEST_CASE("ddprun: a node that fails its health check does not join",
          "[agent][process][parity][health]") {
  TempDir dir;
  Ddprun run(dir,
             {"--standalone", "--health_check", "--health-check-shm-mb=1e9",
              "--no_python", kData + "/env_dump.sh"});
  CHECK(run.Wait() == 1);
  const std::string err = run.Stderr();
  INFO(err);
  // One line says why; the rendezvous (here in-process) counted the host
  // for its bad-host policy; no worker ran.
  CHECK(Contains(err,
                 "health check failed, this node does not join: "
                 "/dev/shm is "));
  CHECK(Contains(err, "less than --health_check_shm_mb=1e+09"));
  CHECK(Contains(err, "failed its health check and does not join"));
  CHECK_FALSE(Exists(dir.path() + "/env_0"));
  // The user's command and paths, also through PET_*.
  TempDir cmd_dir;
  Ddprun cmd(cmd_dir, {"--no_python", kData + "/env_dump.sh"},
             {{"PET_HEALTH_CHECK_CMD", "echo disk missing >&2; exit 3"}});
  CHECK(cmd.Wait() == 1);
  CHECK(Contains(cmd.Stderr(),
                 "health check failed, this node does not join: "
                 "--health_check_cmd 'echo disk missing >&2; exit 3' exited "
                 "3: disk missing"));
  TempDir paths_dir;
  Ddprun paths(paths_dir,
               {"--health_check", "--health_check_paths", "/,/nonexistent/ds",
                "--no_python", kData + "/env_dump.sh"});
  CHECK(paths.Wait() == 1);
  CHECK(Contains(paths.Stderr(),
                 "/nonexistent/ds (--health_check_paths): No "
                 "such file or directory"));
  // A healthy node runs, and says what it checked.
  TempDir ok_dir;
  Ddprun ok(ok_dir,
            {"--health_check", "--health_check_cmd", "true",
             "--health_check_shm_mb=1", "--no_python", kData + "/env_dump.sh"});
  CHECK(ok.Wait() == 0);
  CHECK(Contains(ok.Stderr(), "health check passed in "));
  CHECK(Exists(ok_dir.path() + "/env_0"));
}

// ddprun with the fake nvidia-smi first on PATH.
std::map<std::string, std::string> FakeSmiEnv(const TempDir& dir) {
  const char* path = std::getenv("PATH");
  return {{"PATH", kData + "/fake_smi:" + (path ? path : "/usr/bin:/bin")},
          {"FAKE_SMI_DIR", dir.path()},
          {"-CUDA_VISIBLE_DEVICES", ""}};
}

TEST_CASE(
    "ddprun: before a restart the health check waits for the GPU "
    "memory",
    "[agent][process][parity][health]") {
  TempDir dir;
  Ddprun run(dir,
             {"--health_check", "--health_check_shm_mb=1",
              "--health_check_gpu_mem_mb=100", "--max_restarts=1",
              "--no_python", kData + "/gpu_release_worker.sh"},
             FakeSmiEnv(dir));
  CHECK(run.Wait(30s) == 0);
  const std::string err = run.Stderr();
  INFO(err);
  CHECK(Contains(run.Stdout(), "attempt 1 ran"));
  CHECK(Contains(err,
                 "health check: GPU 0 has 900 MiB of 81559 MiB in use, "
                 "more than --health_check_gpu_mem_mb=100; waiting for "
                 "the previous workers' GPU memory to be released"));
  CHECK(Count(err, "health check passed in ") == 2);
  // One query before attempt 0, four (three busy) before the restart.
  CHECK(Count(ReadFile(dir.path() + "/calls"), "query") == 5);
}

TEST_CASE("ddprun: GPU memory that stays in use fails the node",
          "[agent][process][parity][health]") {
  TempDir dir;
  std::ofstream(dir.path() + "/used") << "5000\n";
  // Before the first round: no wait, another job holds the GPU.
  Ddprun first(dir,
               {"--health_check", "--health_check_shm_mb=1", "--no_python",
                kData + "/env_dump.sh"},
               FakeSmiEnv(dir));
  CHECK(first.Wait() == 1);
  CHECK(Contains(first.Stderr(),
                 "health check failed, this node does not join: GPU 0 has "
                 "5000 MiB of 81559 MiB in use, more than "
                 "--health_check_gpu_mem_mb=1024"));
  // CUDA_VISIBLE_DEVICES=1 hides GPU 0; a GPU that is gone is named.
  auto env = FakeSmiEnv(dir);
  env["CUDA_VISIBLE_DEVICES"] = "1";
  TempDir one_dir;
  Ddprun one(one_dir,
             {"--health_check", "--health_check_shm_mb=1", "--no_python",
              kData + "/env_dump.sh"},
             env);
  CHECK(one.Wait() == 0);
  env["CUDA_VISIBLE_DEVICES"] = "1,4";
  TempDir gone_dir;
  Ddprun gone(gone_dir,
              {"--health_check", "--health_check_shm_mb=1", "--no_python",
               kData + "/env_dump.sh"},
              env);
  CHECK(gone.Wait() == 1);
  CHECK(Contains(gone.Stderr(),
                 "CUDA_VISIBLE_DEVICES names GPU 4, which "
                 "nvidia-smi does not list (2 GPUs)"));
  // A driver that does not answer.
  std::ofstream(dir.path() + "/fail") << "\n";
  TempDir broken_dir;
  Ddprun broken(broken_dir,
                {"--health_check", "--health_check_shm_mb=1", "--no_python",
                 kData + "/env_dump.sh"},
                FakeSmiEnv(dir));
  CHECK(broken.Wait() == 1);
  CHECK(Contains(broken.Stderr(),
                 "nvidia-smi exited 9: NVIDIA-SMI has failed because it "
                 "couldn't communicate with the NVIDIA driver."));
}

TEST_CASE("ddprun: a restart whose GPU memory is never released stops",
          "[agent][process][parity][health]") {
  TempDir dir;
  // The worker leaves 900 MiB that the fake driver frees only after 1000
  // queries: the wait ends at --health_check_timeout.
  Ddprun run(dir,
             {"--health_check", "--health_check_shm_mb=1",
              "--health_check_gpu_mem_mb=100", "--health_check_timeout=2",
              "--max_restarts=3", "--no_python", "sh", "-c",
              "echo 900 > \"$FAKE_SMI_DIR/used\"; "
              "echo 1000 > \"$FAKE_SMI_DIR/release_after\"; exit 1"},
             FakeSmiEnv(dir));
  const auto start = Clock::now();
  CHECK(run.Wait(30s) == 1);
  const double took =
      std::chrono::duration<double>(Clock::now() - start).count();
  CHECK(took < 10);
  CHECK(Contains(run.Stderr(),
                 "GPU 0 has 900 MiB of 81559 MiB in use, more than "
                 "--health_check_gpu_mem_mb=100, still after waiting 2 s for "
                 "the previous workers' GPU memory"));
}

// ---------------------------------------------------------------------------
// --max_restarts_without_progress.

TEST_CASE("ddprun: restarts that advance no rank stop the job",
          "[agent][process][parity][progress]") {
  TempDir dir;
  Ddprun run(
      dir,
      {"--nproc_per_node=2", "--max_restarts=10",
       "--max-restarts-without-progress=2", kData + "/progress_worker.py"},
      {{"PYTHON_EXEC", "python3"}});
  CHECK(run.Wait(60s) == 1);
  const std::string err = run.Stderr();
  INFO(err);
  CHECK(Contains(err,
                 "not restarted: 2 restarts in a row made no progress "
                 "(no rank advanced its step counter; "
                 "--max_restarts_without_progress=2)"));
  // Attempts 0, 1, 2 ran, not the 11 --max_restarts allows.
  CHECK(Contains(err, "worker group restarted (attempt 2)"));
  CHECK_FALSE(Contains(err, "(attempt 3)"));
}

// ---------------------------------------------------------------------------
// Stopping and restarting, as torch does.

TEST_CASE(
    "ddprun: --shutdown_timeout is one window for all of a node's "
    "ranks",
    "[agent][process][parity]") {
  // Ranks 1 and 2 ignore SIGTERM; rank 0 fails once both are up. torch's
  // PContext.close sends the signal to every worker and then waits one
  // shared deadline before SIGKILL: 2 s in all, not 2 s per rank.
  TempDir dir;
  const std::string script =
      "if [ \"$LOCAL_RANK\" = 0 ]; then "
      "  while [ ! -f \"$DDPRUN_TEST_OUT/up_1\" ] || "
      "        [ ! -f \"$DDPRUN_TEST_OUT/up_2\" ]; do sleep 0.05; done; "
      "  date +%s.%N > \"$DDPRUN_TEST_OUT/failed_at\"; exit 1; "
      "fi; "
      "trap '' TERM; touch \"$DDPRUN_TEST_OUT/up_$LOCAL_RANK\"; "
      "while :; do sleep 0.1; done";
  Ddprun run(dir, {"--nproc_per_node=3", "--shutdown_timeout=2", "--no_python",
                   "sh", "-c", script});
  REQUIRE(WaitForFiles({dir.path() + "/failed_at"}, 20s));
  const auto failed = Clock::now();
  CHECK(run.Wait(20s) == 1);
  const double took =
      std::chrono::duration<double>(Clock::now() - failed).count();
  std::printf(
      "[agent] shutdown: 2 ranks ignoring SIGTERM, "
      "--shutdown_timeout=2: stopped %.2f s after the failure\n",
      took);
  CHECK(took >= 1.9);
  CHECK(took < 3.5);  // per rank would be 4 s
  CHECK(Count(run.Stderr(), "did not stop in time: sending SIGKILL") == 2);
}

TEST_CASE(
    "ddprun: TORCHELASTIC_RESTART_COUNT is the same on every node "
    "after a restart",
    "[agent][process][parity][multinode]") {
  // pytorch#108158: torchrun counts restarts per agent, so after node 1's
  // worker failed, node 1's workers see 1 and node 0's see 0. ddprun's
  // count is the job's.
  TempDir a, b;
  const int port = FreeLoopbackPort();
  REQUIRE(port > 0);
  // Attempt 0: global rank 1 (node 0) fails once every rank is up; the
  // others would run on (they are restarted). Later attempts report their
  // count and end.
  static const char* kScript =
      "echo \"attempt $TORCHELASTIC_RESTART_COUNT rank $RANK\"; "
      "[ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ] || exit 0; "
      "touch \"$DDPRUN_TEST_OUT/up_$RANK\"; "
      "if [ \"$RANK\" = 1 ]; then sleep 1; exit 3; fi; sleep 60";
  auto agent = [&](const TempDir& dir, int node) {
    return std::make_unique<Ddprun>(
        dir, std::vector<std::string>{
                 "--nnodes=2", "--nproc_per_node=2",
                 "--node_rank=" + std::to_string(node), "--rdzv_backend=c10d",
                 "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
                 "--rdzv_id=restart_count", "--max_restarts=2", "--no_python",
                 "sh", "-c", kScript});
  };
  auto node0 = agent(a, 0);
  REQUIRE(testing::WaitForPort(port, 30s));
  auto node1 = agent(b, 1);
  const int rc0 = node0->Wait(60s);
  const int rc1 = node1->Wait(60s);
  INFO("node 0:\n"
       << node0->Stdout() << node0->Stderr() << "\nnode 1:\n"
       << node1->Stdout() << node1->Stderr());
  CHECK(rc0 == 0);
  CHECK(rc1 == 0);
  for (const Ddprun* node : {node0.get(), node1.get()}) {
    const std::string out = node->Stdout();
    CHECK(Contains(out, "attempt 1 rank"));
    CHECK_FALSE(Contains(out, "attempt 2 rank"));
  }
  // Node 1's workers, which never failed, restarted with count 1 too.
  CHECK(Count(node1->Stdout(), "attempt 1 rank") == 2);
  CHECK(Count(node0->Stdout(), "attempt 1 rank") == 2);
}

}  // namespace
}  // namespace ddprun::test
