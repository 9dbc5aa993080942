#include "agent/elastic/health_check.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "agent/process/run_capture.h"
#include "common/file_util.h"
#include "common/logging.h"

namespace ddprun::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

Status Unhealthy(const std::string& why) {
  return FailedPreconditionError(why);
}

std::string Mb(double mb) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f MiB", mb);
  return buf;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string Trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

// The last non-empty line of a command's output, for a one-line reason.
std::string LastLine(const std::string& text) {
  std::string last;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    line = Trim(line);
    if (!line.empty()) last = line;
  }
  return last.substr(0, 300);
}

std::string Get(const std::map<std::string, std::string>& env,
                const std::string& key) {
  auto it = env.find(key);
  return it == env.end() ? "" : it->second;
}

}  // namespace

Status CheckShm(const std::string& path, double min_mb) {
  struct statvfs fs;
  if (::statvfs(path.c_str(), &fs) != 0) {
    return Unhealthy(path + ": " + std::strerror(errno));
  }
  const double mb = static_cast<double>(fs.f_blocks) *
                    static_cast<double>(fs.f_frsize) / (1024.0 * 1024.0);
  if (mb < min_mb) {
    return Unhealthy(path + " is " + Mb(mb) + ", less than " +
                     "--health_check_shm_mb=" + Number(min_mb) +
                     " (docker run --shm-size, or a larger emptyDir "
                     "medium: Memory)");
  }
  return Status::Ok();
}

Status CheckWritableDir(const std::string& dir) {
  std::string path = dir + "/.ddprun_health_XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) {
    return Unhealthy("the log directory " + dir +
                     " is not writable: " + std::strerror(errno));
  }
  const bool wrote = ::write(fd, "ok\n", 3) == 3;
  const int e = errno;
  ::close(fd);
  ::unlink(path.c_str());
  if (!wrote) {
    return Unhealthy("the log directory " + dir +
                     " takes no data: " + std::strerror(e));
  }
  return Status::Ok();
}

Status CheckPathsExist(const std::vector<std::string>& paths) {
  for (const std::string& p : paths) {
    struct stat st;
    if (::stat(p.c_str(), &st) != 0) {
      return Unhealthy(p + " (--health_check_paths): " + std::strerror(errno));
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<GpuMemory>> QueryGpuMemory(
    const std::string& nvidia_smi,
    const std::map<std::string, std::string>& env,
    std::chrono::milliseconds timeout) {
  StatusOr<CaptureResult> r = RunAndCapture(
      {nvidia_smi, "--query-gpu=index,uuid,memory.used,memory.total",
       "--format=csv,noheader,nounits"},
      env, timeout);
  if (!r.ok()) {
    return Unhealthy("nvidia-smi: " + r.status().message());
  }
  if (r->exit_code != 0) {
    std::string why = LastLine(r->out + "\n" + r->err);
    return Unhealthy("nvidia-smi exited " + std::to_string(r->exit_code) +
                     (why.empty() ? "" : ": " + why));
  }
  std::vector<GpuMemory> gpus;
  std::stringstream ss(r->out);
  for (std::string line; std::getline(ss, line);) {
    if (Trim(line).empty()) continue;
    std::vector<std::string> fields;
    std::stringstream fs(line);
    for (std::string f; std::getline(fs, f, ',');) fields.push_back(Trim(f));
    GpuMemory g;
    char* end = nullptr;
    bool ok = fields.size() == 4;
    if (ok) {
      g.index = static_cast<int>(std::strtol(fields[0].c_str(), &end, 10));
      ok = *end == '\0' && !fields[0].empty();
      g.uuid = fields[1];
      g.used_mb = std::strtod(fields[2].c_str(), &end);
      ok = ok && *end == '\0' && !fields[2].empty();
      g.total_mb = std::strtod(fields[3].c_str(), &end);
      ok = ok && *end == '\0' && !fields[3].empty();
    }
    if (!ok) {
      return Unhealthy("nvidia-smi printed '" + Trim(line).substr(0, 200) +
                       "' (expected: index, uuid, used MiB, total MiB)");
    }
    gpus.push_back(g);
  }
  return gpus;
}

StatusOr<std::vector<GpuMemory>> VisibleGpuMemory(
    const std::vector<GpuMemory>& gpus, const std::string* visible) {
  if (visible == nullptr) return gpus;
  std::vector<GpuMemory> out;
  std::stringstream ss(*visible);
  for (std::string entry; std::getline(ss, entry, ',');) {
    entry = Trim(entry);
    if (entry.empty() || entry == "-1") break;  // CUDA stops here
    const GpuMemory* found = nullptr;
    const bool numeric =
        entry.find_first_not_of("0123456789") == std::string::npos;
    for (const GpuMemory& g : gpus) {
      if (numeric ? std::to_string(g.index) == entry
                  : g.uuid.compare(0, entry.size(), entry) == 0) {
        found = &g;
      }
    }
    if (found == nullptr) {
      if (!numeric && entry.compare(0, 4, "GPU-") != 0) break;  // not a GPU
      return Unhealthy("CUDA_VISIBLE_DEVICES names GPU " + entry +
                       ", which nvidia-smi does not list (" +
                       std::to_string(gpus.size()) + " GPUs)");
    }
    out.push_back(*found);
  }
  return out;
}

Status CheckGpuMemory(const std::vector<GpuMemory>& visible,
                      double max_used_mb) {
  for (const GpuMemory& g : visible) {
    if (g.used_mb > max_used_mb) {
      return Unhealthy("GPU " + std::to_string(g.index) + " has " +
                       Mb(g.used_mb) + " of " + Mb(g.total_mb) +
                       " in use, more than --health_check_gpu_mem_mb=" +
                       Number(max_used_mb));
    }
  }
  return Status::Ok();
}

Status RunHealthCommand(const std::string& command,
                        const std::map<std::string, std::string>& env,
                        std::chrono::milliseconds timeout) {
  StatusOr<CaptureResult> r =
      RunAndCapture({"/bin/sh", "-c", command}, env, timeout);
  if (!r.ok()) {
    return Unhealthy("--health_check_cmd '" + command +
                     "': " + r.status().message());
  }
  if (r->exit_code != 0) {
    const std::string why = LastLine(r->out + "\n" + r->err);
    return Unhealthy("--health_check_cmd '" + command + "' exited " +
                     std::to_string(r->exit_code) +
                     (why.empty() ? "" : ": " + why));
  }
  return Status::Ok();
}

Status RunHealthChecks(const HealthCheckOptions& o, bool restart,
                       const std::atomic<bool>& cancelled,
                       std::string* summary) {
  std::vector<std::string> passed;
  if (o.builtins) {
    if (!o.log_dir.empty()) {
      DDP_RETURN_IF_ERROR(CheckWritableDir(o.log_dir));
      passed.push_back("log dir writable");
    }
    DDP_RETURN_IF_ERROR(CheckShm(o.shm_path, o.min_shm_mb));
    passed.push_back(o.shm_path);
    const std::string smi = FindOnPath("nvidia-smi", Get(o.env, "PATH"));
    if (smi.empty()) {
      passed.push_back("no nvidia-smi: GPUs not checked");
    } else {
      auto visible_it = o.env.find("CUDA_VISIBLE_DEVICES");
      const std::string* visible =
          visible_it == o.env.end() ? nullptr : &visible_it->second;
      const auto deadline = SteadyClock::now() + o.timeout;
      bool waiting = false;
      while (true) {
        DDP_ASSIGN_OR_RETURN(std::vector<GpuMemory> all,
                             QueryGpuMemory(smi, o.env, o.timeout));
        DDP_ASSIGN_OR_RETURN(std::vector<GpuMemory> gpus,
                             VisibleGpuMemory(all, visible));
        Status memory = CheckGpuMemory(gpus, o.max_gpu_used_mb);
        if (memory.ok()) {
          passed.push_back(std::to_string(gpus.size()) + " GPUs");
          break;
        }
        // Before a restart the previous workers' memory may still be
        // freed by the driver: wait for it (bounded) instead of failing.
        if (!restart || SteadyClock::now() >= deadline) {
          if (!waiting) return memory;
          return Unhealthy(
              memory.message() + ", still after waiting " +
              std::to_string(
                  std::chrono::duration_cast<std::chrono::seconds>(o.timeout)
                      .count()) +
              " s for the previous workers' GPU memory");
        }
        if (!waiting) {
          DDP_LOG(INFO) << "health check: " << memory.message()
                        << "; waiting for the previous workers' GPU memory "
                           "to be released before restarting";
          waiting = true;
        }
        for (auto until = SteadyClock::now() + o.gpu_poll;
             SteadyClock::now() < until;) {
          if (cancelled) return CancelledError("health check cancelled");
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
      }
    }
    DDP_RETURN_IF_ERROR(CheckPathsExist(o.paths));
    if (!o.paths.empty()) {
      passed.push_back(std::to_string(o.paths.size()) + " paths");
    }
  }
  if (!o.command.empty()) {
    DDP_RETURN_IF_ERROR(RunHealthCommand(o.command, o.env, o.timeout));
    passed.push_back("--health_check_cmd");
  }
  if (summary != nullptr) {
    summary->clear();
    for (const std::string& p : passed) {
      *summary += (summary->empty() ? "" : ", ") + p;
    }
  }
  return Status::Ok();
}

ThreadHealthChecker::ThreadHealthChecker(EventLoop* loop,
                                         HealthCheckOptions options)
    : loop_(loop), options_(std::move(options)) {}

ThreadHealthChecker::~ThreadHealthChecker() {
  cancelled_ = true;
  if (thread_.joinable()) thread_.join();
}

void ThreadHealthChecker::Check(bool restart,
                                std::function<void(Status)> done) {
  if (thread_.joinable()) thread_.join();  // the previous one has answered
  thread_ = std::thread([this, restart, done = std::move(done)]() mutable {
    const auto start = SteadyClock::now();
    std::string summary;
    Status s = RunHealthChecks(options_, restart, cancelled_, &summary);
    if (s.ok()) {
      const double ms =
          std::chrono::duration<double, std::milli>(SteadyClock::now() - start)
              .count();
      DDP_LOG(INFO) << "health check passed in " << static_cast<int>(ms)
                    << " ms (" << summary << ")";
    }
    loop_->Post([done = std::move(done), s] { done(s); });
  });
}

}  // namespace ddprun::agent
