#include "agent/watch/stack_collector.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "common/logging.h"

namespace ddprun::agent {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(25);
constexpr int kStablePolls = 2;

int64_t FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_size);
}

std::string ReadFrom(const std::string& path, int64_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(offset);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool AppendLine(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::write(fd, line.data(), line.size());
  ::close(fd);
  return n == static_cast<ssize_t>(line.size());
}

std::string UtcNow() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool Alive(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM); }

constexpr char kDumpHeader[] = "# ddprun stack dump: ";

}  // namespace

std::string StackDumpHeader(int rank, int pid, const std::string& why,
                            const std::string& stamp) {
  return kDumpHeader +
         EscapeControlChars("rank " + std::to_string(rank) + " (pid " +
                            std::to_string(pid) + "), " + why + ", " + stamp) +
         "\n";
}

bool TrimStacksFile(const std::string& path, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return false;
  }
  if (st.st_size <= max_bytes) {
    ::close(fd);
    return true;
  }
  // The newest half: from its first dump header on.
  const int64_t keep = max_bytes / 2;
  const int64_t from = st.st_size - keep;
  std::string tail(static_cast<size_t>(keep), '\0');
  ssize_t got = ::pread(fd, tail.data(), tail.size(), from);
  bool ok = got == static_cast<ssize_t>(tail.size());
  size_t start = std::string::npos;
  if (ok) {
    // A header at the start of a line (the byte before `from` is checked).
    char before = '\n';
    if (from > 0 && ::pread(fd, &before, 1, from - 1) != 1) ok = false;
    if (before == '\n' &&
        tail.compare(0, sizeof(kDumpHeader) - 1, kDumpHeader) == 0) {
      start = 0;
    } else {
      const size_t at = tail.find(std::string("\n") + kDumpHeader);
      if (at != std::string::npos) start = at + 1;
    }
  }
  if (ok) {
    const std::string kept =
        start == std::string::npos ? std::string() : tail.substr(start);
    // pwrite on a descriptor without O_APPEND writes where it is told.
    ok = ::pwrite(fd, kept.data(), kept.size(), 0) ==
             static_cast<ssize_t>(kept.size()) &&
         ::ftruncate(fd, static_cast<off_t>(kept.size())) == 0;
  }
  ::close(fd);
  return ok;
}

int StackDumpSignal() { return SIGRTMAX - 2; }

std::string PythonStackHelperDir() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "";
  exe[n] = '\0';
  std::string dir(exe);
  size_t slash = dir.rfind('/');
  if (slash == std::string::npos) return "";
  dir = dir.substr(0, slash) + "/../lib/ddprun/python";
  char real[PATH_MAX];
  if (::realpath(dir.c_str(), real) == nullptr) return "";
  std::string helper = std::string(real) + "/sitecustomize.py";
  if (::access(helper.c_str(), R_OK) != 0) return "";
  return real;
}

bool CatchesSignal(int pid, int sig) {
  if (pid <= 0 || sig <= 0 || sig > 64) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (mask >> (sig - 1)) & 1ULL;
  }
  return false;
}

SignalStackCollector::SignalStackCollector(EventLoop* loop)
    : loop_(loop), probe_(MakeProcWorkerProbe()) {}

SignalStackCollector::~SignalStackCollector() {
  if (armed_) loop_->Cancel(timer_);
}

bool SignalStackCollector::Collect(std::vector<StackTarget> targets,
                                   const std::string& why,
                                   Clock::Duration limit, Done done) {
  if (busy_) return false;
  busy_ = true;
  done_ = std::move(done);
  limit_ = limit;
  deadline_ = loop_->clock()->Now() + limit;
  pending_.clear();
  const int sig = StackDumpSignal();
  const std::string stamp = UtcNow();
  for (StackTarget& t : targets) {
    Pending p;
    p.result.target = std::move(t);
    const StackTarget& target = p.result.target;
    if (!Alive(target.pid)) {
      p.result.missing = "exited";
    } else if (probe_->IsStopped(target.pid)) {
      p.result.missing = "stopped (state T), cannot answer";
    } else if (target.path.empty() || !CatchesSignal(target.pid, sig)) {
      p.result.missing =
          "no stack handler: not a Python worker, Python without its site "
          "hook (-S, -I), or DDPRUN_STACKS=0";
    } else if (!TrimStacksFile(target.path) ||
               !AppendLine(target.path, StackDumpHeader(target.rank, target.pid,
                                                        why, stamp))) {
      p.result.missing = "cannot write " + target.path;
    } else {
      p.start = FileSize(target.path);
      if (::syscall(SYS_tgkill, target.pid, target.pid, sig) != 0) {
        p.result.missing = std::string("cannot signal it: ") +
                           std::strerror(errno);
      }
    }
    p.finished = !p.result.missing.empty();
    pending_.push_back(std::move(p));
  }
  armed_ = true;
  timer_ = loop_->RunAt(loop_->clock()->Now() + kPollInterval, [this] {
    armed_ = false;
    Poll();
  });
  return true;
}

void SignalStackCollector::Poll() {
  const bool late = loop_->clock()->Now() >= deadline_;
  bool all = true;
  for (Pending& p : pending_) {
    if (p.finished) continue;
    const int64_t size = FileSize(p.result.target.path);
    if (size > p.start && size == p.last) {
      if (++p.stable >= kStablePolls) {
        // A C++ worker's handler pauses between threads: its dump is
        // complete at its end line.
        std::string dump = ReadFrom(p.result.target.path, p.start);
        p.finished = dump.find(diagnosis::kNativeHeader) == std::string::npos ||
                     dump.find(diagnosis::kNativeEnd) != std::string::npos;
      }
    } else {
      p.stable = 0;
    }
    p.last = size;
    if (!p.finished && late) {
      p.finished = true;
      // A partial dump is kept; it says as much.
      if (size <= p.start) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "did not answer within %.1f s",
                      std::chrono::duration<double>(limit_).count());
        p.result.missing =
            Alive(p.result.target.pid) ? buf : "exited before answering";
      }
    }
    if (p.finished && p.result.missing.empty()) {
      p.result.dump = ReadFrom(p.result.target.path, p.start);
    }
    all = all && p.finished;
  }
  if (all) {
    Complete();
    return;
  }
  armed_ = true;
  timer_ = loop_->RunAt(loop_->clock()->Now() + kPollInterval, [this] {
    armed_ = false;
    Poll();
  });
}

void SignalStackCollector::Complete() {
  std::vector<StackResult> results;
  for (Pending& p : pending_) results.push_back(std::move(p.result));
  pending_.clear();
  busy_ = false;
  Done done = std::move(done_);
  done_ = nullptr;
  if (done) done(std::move(results));
}

diagnosis::RankStacks ToRankStacks(const StackResult& result) {
  diagnosis::RankStacks rank;
  rank.rank = result.target.rank;
  rank.pid = result.target.pid;
  rank.missing = result.missing;
  if (result.missing.empty()) {
    rank.threads = diagnosis::ParseFaulthandlerDump(result.dump);
    rank.native = diagnosis::ParseNativeDump(result.dump);
  }
  return rank;
}

}  // namespace ddprun::agent
