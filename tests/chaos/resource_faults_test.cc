// Resource faults: the checkpoint disk fills up during a save (a small tmpfs,
// root only), and 20 consecutive worker failures must not leak descriptors,
// listening sockets, threads or processes in the agent.

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tests/chaos/chaos_job.h"

namespace ddprun::chaos {
namespace {

using multinode::ListDir;
using multinode::ReadFile;

// A tmpfs of `size` mounted on `dir` for the scope (lazily unmounted).
class Tmpfs {
 public:
  Tmpfs(const std::string& dir, const std::string& size) : dir_(dir) {
    ok_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + size).c_str()) ==
          0;
    if (!ok_) error_ = std::strerror(errno);
  }
  ~Tmpfs() {
    if (ok_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }

 private:
  std::string dir_;
  bool ok_ = false;
  std::string error_;
};

// Writes `path` until the file system is full. Returns the bytes written.
size_t FillDisk(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return 0;
  std::string block(4096, 'x');
  size_t total = 0;
  for (;;) {
    ssize_t n = ::write(fd, block.data(), block.size());
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
  ::close(fd);
  return total;
}

bool IsAlive(int pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() &&
         stat[paren + 2] != 'Z' && stat[paren + 2] != 'X';
}

// The agent's resources while the worker `pid` of attempt `attempt` runs.
std::optional<ProcessResources> SnapshotDuring(Scenario& s, int agent_pid,
                                               int attempt) {
  const bool started = s.WaitForEvents(
      [attempt](const std::vector<Event>& events) {
        for (const Event& e : events) {
          if (e.kind == "start" && e.attempt == attempt) return true;
        }
        return false;
      },
      60s);
  if (!started) return std::nullopt;
  const int worker = s.WorkerPid("a", 0, 5s);
  if (worker == 0 || !IsAlive(worker)) return std::nullopt;
  ProcessResources r = ResourcesOf(agent_pid);
  if (!IsAlive(worker)) return std::nullopt;  // measured across a restart
  return r;
}

// The checkpoint disk fills up between checkpoint 10 and 20 (a 256 KiB tmpfs,
// checkpoints are ~16 KB). The failed write must leave no temp file behind.
void DiskFullScenario() {
  if (::geteuid() != 0) {
    DDPRUN_SKIP_UNLESS_CI("mounting a tmpfs needs root");
  }
  Scenario s("diskfull");
  Workload w;
  w.step_ms = 100;  // 1 s between checkpoints to fill the disk in
  REQUIRE(Baseline(2, w.steps).has_value());
  Tmpfs tmpfs(s.ckpt(), "256k");
  if (!tmpfs.ok()) {
    DDPRUN_SKIP_UNLESS_CI("cannot mount a tmpfs: " << tmpfs.error());
  }
  Child& run = s.StartAgent(
      "a", {"--standalone", "--nproc_per_node=2", "--max_restarts=1"}, w);
  if (!s.WaitSaved(10)) FAIL("no checkpoint 10\n" << s.Logs());
  const std::string filler = s.ckpt() + "/filler";
  REQUIRE(FillDisk(filler) > 0);
  const auto full = SteadyClock::now();
  // The save at step 20 fails; the restart resumes from 10 and fails there
  // again; the job fails.
  const int code = run.Wait(40s);
  const double took =
      std::chrono::duration<double>(SteadyClock::now() - full).count();
  INFO(s.Logs());
  REQUIRE(code == 1);
  const std::string err = ReadFile(s.dir() + "/a.err");
  CHECK(err.find("No space left on device") != std::string::npos);
  CHECK(err.find(s.ckpt() + "/ckpt-000000000020.pt") != std::string::npos);
  // The previous checkpoint survives (and is loaded below).
  std::vector<std::string> files = ListDir(s.ckpt());
  CHECK(std::count(files.begin(), files.end(), "ckpt-000000000010.pt") == 1);
  for (const std::string& f : files) {
    INFO(f);
    CHECK(f.find(".tmp") == std::string::npos);
  }
  int restarted_from = -1;
  for (const Event& e : ReadEvents(s.out())) {
    if (e.kind == "start" && e.attempt == 1) restarted_from = e.step;
  }
  CHECK(restarted_from == 10);
  CHECK(s.NoOrphans());
  std::printf("chaos: disk full failed the job cleanly in %.2f s\n", took);
  // Space again: a resubmitted job resumes from step 10 and finishes right.
  ::unlink(filler.c_str());
  const double t = WallNow();
  Child& again =
      s.StartAgent("resubmitted", {"--standalone", "--nproc_per_node=2"}, w);
  REQUIRE(again.Wait(40s) == 0);
  std::optional<Event> start = s.StartAfter(t);
  REQUIRE(start.has_value());
  CHECK(start->step == 10);
  std::optional<Result> got = ReadResult(s.out());
  REQUIRE(got.has_value());
  CHECK(Fnv(*got) == Fnv(*Baseline(2, w.steps)));
  CHECK(s.NoOrphans());
}

}  // namespace

TEST_CASE("chaos: disk full while writing a checkpoint", "[chaos][root]") {
  DiskFullScenario();
}

TEST_CASE("chaos: 20 consecutive worker failures leak nothing", "[chaos]") {
  Scenario s("leaks");
  Workload w;
  w.step_ms = 100;
  // Each attempt fails at step 13, after checkpoint 10: each restart must
  // resume from 10, not from scratch.
  const int64_t fail_step = w.ckpt_every + 3;
  w.extra = {"--fail_step",     std::to_string(fail_step),
             "--fail_rank",     "0",
             "--fail_mode",     "exit",
             "--fail_attempts", "20"};
  REQUIRE(Baseline(1, w.steps).has_value());
  Child& run = s.StartAgent(
      "a", {"--standalone", "--nproc_per_node=1", "--max_restarts=20"}, w);
  std::optional<ProcessResources> before = SnapshotDuring(s, run.pid(), 0);
  std::optional<ProcessResources> after = SnapshotDuring(s, run.pid(), 20);
  const int code = run.Wait(60s);
  INFO(s.Logs());
  REQUIRE(code == 0);
  REQUIRE(before.has_value());
  REQUIRE(after.has_value());
  std::printf(
      "chaos: agent resources, attempt 0 -> attempt 20: fds %d -> %d, "
      "listening %d -> %d, threads %d -> %d, children %d -> %d\n",
      before->fds, after->fds, before->listening_tcp, after->listening_tcp,
      before->threads, after->threads, before->children, after->children);
  CHECK(after->fds == before->fds);
  CHECK(after->listening_tcp == before->listening_tcp);
  CHECK(after->threads <= before->threads + 2);  // gRPC pools breathe
  // The worker, and the agent's ddprun-guard process (it kills what the
  // workers leave in their process groups should the agent be killed).
  CHECK(after->children == 2);
  CHECK(before->children == 2);
  // Every failure was restarted, losing at most one checkpoint interval:
  // from the newest checkpoint saved before the failure (checkpoint 10 of
  // the first attempt), and the last attempt finished right.
  std::vector<Event> events = ReadEvents(s.out());
  double recovery_sum = 0;
  int recoveries = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind != "fail") continue;
    for (size_t j = i + 1; j < events.size(); ++j) {
      if (events[j].kind == "start") {
        INFO("restart " << events[j].attempt);
        CHECK(SavedBefore(events, events[i].t) ==
              fail_step / w.ckpt_every * w.ckpt_every);
        CHECK(events[j].step == SavedBefore(events, events[i].t));
        CHECK(events[i].step - events[j].step <= w.ckpt_every);
        recovery_sum += events[j].t - events[i].t;
        ++recoveries;
        break;
      }
    }
  }
  CHECK(recoveries == 20);
  std::optional<Result> got = ReadResult(s.out());
  REQUIRE(got.has_value());
  CHECK(Fnv(*got) == Fnv(*Baseline(1, w.steps)));
  CHECK(s.NoOrphans());
  if (recoveries > 0) {
    PrintRecovery("each of 20 consecutive worker failures (mean)",
                  recovery_sum / recoveries);
  }
}

}  // namespace ddprun::chaos
