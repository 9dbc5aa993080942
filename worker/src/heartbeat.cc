#include "ddprun/worker/heartbeat.h"

#include "ddprun/worker/stack_dump.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::worker {
namespace {

constexpr int64_t kMinIntervalNs = 100 * 1000 * 1000;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

const std::string& HeartbeatPath() {
  static const std::string* path = [] {
    const char* p = std::getenv("DDPRUN_WATCHDOG_FILE");
    return new std::string(p != nullptr ? p : "");
  }();
  return *path;
}

const std::string& StepPath() {
  static const std::string* path = [] {
    const char* p = std::getenv("DDPRUN_STEP_FILE");
    return new std::string(p != nullptr ? p : "");
  }();
  return *path;
}

// What ReportScalar / ReportTotalSteps set, written with the count.
struct Reported {
  std::mutex mu;
  std::vector<std::pair<std::string, double>> scalars;  // at most 8
  int64_t total_steps = 0;
};

Reported& TheReported() {
  static Reported* r = new Reported;
  return *r;
}

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 32) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                    c == ':' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// DDPRUN_STEP_FILE's text (agent/watch/step_file.h): the count, the
// total, the scalars, padded with spaces to the length written before so
// that one pwrite at offset 0 always covers the old text; the file stays
// open.
void WriteSteps(const std::string& path, int64_t steps) {
  static const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  static size_t written = 0;  // callers are serialised by Heartbeat()
  if (fd < 0) return;
  std::string text = std::to_string(steps) + "\n";
  {
    Reported& r = TheReported();
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.total_steps > 0) {
      text += "total_steps " + std::to_string(r.total_steps) + "\n";
    }
    char value[40];
    for (const auto& [name, v] : r.scalars) {
      std::snprintf(value, sizeof(value), "%.9g", v);
      text += name + " " + value + "\n";
    }
  }
  if (text.size() < written) text.append(written - text.size(), ' ');
  written = text.size();
  (void)::pwrite(fd, text.data(), text.size(), 0);
}

// Sets the mtime to now; creates the file when it does not exist yet.
void Touch(const std::string& path) {
  if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) == 0) return;
  if (errno != ENOENT) return;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
}

}  // namespace

void ReportScalar(const std::string& name, double value) {
  if (!std::isfinite(value) || !ValidName(name)) return;
  Reported& r = TheReported();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& [known, v] : r.scalars) {
    if (known == name) {
      v = value;
      return;
    }
  }
  if (r.scalars.size() < 8) r.scalars.emplace_back(name, value);
}

void ReportTotalSteps(int64_t total) {
  Reported& r = TheReported();
  std::lock_guard<std::mutex> lock(r.mu);
  r.total_steps = total > 0 ? total : 0;
}

void Heartbeat() {
  // A heartbeat is a step: the stack dump shows the count, and a worker
  // that only calls Heartbeat() still answers ddprun's stack requests.
  NoteStep();
  (void)InstallStackDumpHandler();
  const std::string& path = HeartbeatPath();
  const std::string& steps = StepPath();
  if (path.empty() && steps.empty()) return;
  static std::atomic<int64_t> last_ns{0};
  const int64_t now = NowNs();
  int64_t last = last_ns.load(std::memory_order_relaxed);
  if (last != 0 && now - last < kMinIntervalNs) return;
  if (!last_ns.compare_exchange_strong(last, now)) return;  // another thread
  if (!path.empty()) Touch(path);
  // The straggler check's step count (ddprun reads it once a second).
  if (!steps.empty()) WriteSteps(steps, Steps());
}

}  // namespace ddprun::worker
