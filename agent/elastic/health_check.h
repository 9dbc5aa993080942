#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/event_loop.h"
#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// --health_check / --health_check_cmd (ddprun addition, after NVIDIA's
// resiliency launcher): before each rendezvous round the node checks
// itself; a node that fails does not join (the agent says why in one
// line, tells the rendezvous' bad-host policy and exits 1).
struct HealthCheckOptions {
  bool builtins = false;  // --health_check: the checks below
  // --health_check_cmd: run with `sh -c` in the workers' environment;
  // exit 0 = healthy. "" = none.
  std::string command;
  // --health_check_paths: each must exist.
  std::vector<std::string> paths;
  // --health_check_gpu_mem_mb: most GPU memory (MiB) a visible GPU may
  // have in use before the workers start (another job's, or a previous
  // attempt's not yet released).
  double max_gpu_used_mb = 1024;
  // --health_check_shm_mb: least size (MiB) of /dev/shm (Docker's default
  // 64 MiB breaks DataLoader workers and NCCL's shared-memory transport).
  double min_shm_mb = 256;
  // --health_check_timeout: bound on each command (nvidia-smi, the user's)
  // and on the wait for a previous attempt's GPU memory.
  std::chrono::milliseconds timeout{30000};
  // Where the run's logs go ("" = none: not checked).
  std::string log_dir;
  std::string shm_path = "/dev/shm";
  // The workers' environment: PATH (for nvidia-smi), CUDA_VISIBLE_DEVICES,
  // and the command's environment.
  std::map<std::string, std::string> env;
  // Between two nvidia-smi queries while waiting for GPU memory.
  std::chrono::milliseconds gpu_poll{500};
};

// One visible GPU as nvidia-smi reports it.
struct GpuMemory {
  int index = 0;
  std::string uuid;
  double used_mb = 0;
  double total_mb = 0;
};

// The checks, each returning OK or kFailedPrecondition with one line why.
// Blocking; any thread.
Status CheckShm(const std::string& path, double min_mb);
Status CheckWritableDir(const std::string& dir);
Status CheckPathsExist(const std::vector<std::string>& paths);
// `nvidia-smi --query-gpu=index,uuid,memory.used,memory.total
// --format=csv,noheader,nounits`, parsed.
StatusOr<std::vector<GpuMemory>> QueryGpuMemory(
    const std::string& nvidia_smi,
    const std::map<std::string, std::string>& env,
    std::chrono::milliseconds timeout);
// The GPUs CUDA_VISIBLE_DEVICES (null: unset) lets the workers see: an
// entry that names no GPU nvidia-smi lists is an error (the GPU is gone).
StatusOr<std::vector<GpuMemory>> VisibleGpuMemory(
    const std::vector<GpuMemory>& gpus, const std::string* visible);
Status CheckGpuMemory(const std::vector<GpuMemory>& visible,
                      double max_used_mb);
Status RunHealthCommand(const std::string& command,
                        const std::map<std::string, std::string>& env,
                        std::chrono::milliseconds timeout);

// Every check of `options`, in order: log dir, /dev/shm, paths, GPUs
// (skipped when nvidia-smi is not on PATH), the command. `restart`: the
// workers of an earlier round may still hold GPU memory; the GPU check
// then waits up to options.timeout for it to drop below the threshold
// (a "waiting" line once). `cancelled` ends a wait early (the result is
// then kCancelled). On success `summary` gets one line of what passed.
Status RunHealthChecks(const HealthCheckOptions& options, bool restart,
                       const std::atomic<bool>& cancelled,
                       std::string* summary);

// The agent's view: checks this node before a round, asynchronously.
class HealthChecker {
 public:
  virtual ~HealthChecker() = default;
  // `done` runs once, on the agent's loop, with OK or one line why the node
  // is unhealthy. At most one check is in flight.
  virtual void Check(bool restart, std::function<void(Status)> done) = 0;
};

// RunHealthChecks on a thread of its own (the checks block: nvidia-smi,
// the user's command, a GPU memory wait), the answer posted to `loop`.
// The destructor cancels a wait and joins the thread.
class ThreadHealthChecker : public HealthChecker {
 public:
  ThreadHealthChecker(EventLoop* loop, HealthCheckOptions options);
  ~ThreadHealthChecker() override;
  void Check(bool restart, std::function<void(Status)> done) override;

 private:
  EventLoop* loop_;
  const HealthCheckOptions options_;
  std::atomic<bool> cancelled_{false};
  std::thread thread_;
};

}  // namespace ddprun::agent
