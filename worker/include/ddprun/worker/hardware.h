#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::worker {

struct GpuInfo {
  int index = 0;
  std::string name;
  int64_t total_memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
};

struct HardwareInfo {
  // CUDA devices visible to this process: through Torch when it was built
  // with CUDA, otherwise through `nvidia-smi` when present (then
  // torch_cuda is false: the GPUs exist but this Torch cannot use them).
  std::vector<GpuInfo> gpus;
  bool torch_cuda = false;
  int cpu_cores = 1;                // usable by this process (affinity)
  int64_t ram_total_bytes = 0;      // MemTotal
  int64_t ram_available_bytes = 0;  // MemAvailable
};

// Detects the machine. Never throws; fields it cannot read stay default.
HardwareInfo DetectHardware();

// Parses /proc/meminfo text into total/available bytes.
StatusOr<std::pair<int64_t, int64_t>> ParseMemInfo(const std::string& text);

struct AutoSettings {
  std::string device;  // "cuda" or "cpu"
  int per_device_batch = 1;
  int grad_accum_steps = 1;
  int effective_batch = 1;  // per_device_batch * grad_accum * world_size
  int cpu_threads = 1;      // intra-op threads per process
  bool mixed_precision = false;
  std::string reason;  // one line: which row of the table and why
};

// The MIMIC-CXR guide's table for a per-GPU memory of `gpu_memory_gb`:
// >=20 GB: 16 x accum 4; 14-20: 12 x 5; 10-14: 8 x 8; 6-10: 4 x 16;
// <6: 2 x 32 (effective 256 on 4 GPUs). Generalised: the batch comes from the
// row; accumulation = max(1, round(target / (batch * world_size))).
AutoSettings RecommendForGpuMemory(double gpu_memory_gb, int world_size,
                                   int target_effective_batch = 256);

// For the detected machine: GPU rows above using the smallest GPU; on CPU,
// batch 8 (4 below 16 GB of RAM), threads = cores / local_world_size, fp32.
AutoSettings RecommendSettings(const HardwareInfo& hw, int world_size,
                               int local_world_size,
                               int target_effective_batch = 256);

// Multi-line human report (what ddp-hwinfo prints).
std::string FormatHardwareReport(const HardwareInfo& hw,
                                 const AutoSettings& settings);

}  // namespace ddprun::worker
