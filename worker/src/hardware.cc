#include "ddprun/worker/hardware.h"

#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <torch/cuda.h>
#if DDPRUN_WORKER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace ddprun::worker {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void DetectGpusWithNvidiaSmi(HardwareInfo* hw) {
  FILE* p = ::popen(
      "nvidia-smi --query-gpu=index,name,memory.total,compute_cap "
      "--format=csv,noheader,nounits 2>/dev/null",
      "r");
  if (p == nullptr) return;
  char line[512];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    std::stringstream ss(line);
    std::string idx, name, mem, cap;
    if (!std::getline(ss, idx, ',') || !std::getline(ss, name, ',') ||
        !std::getline(ss, mem, ',')) {
      continue;
    }
    std::getline(ss, cap);
    GpuInfo g;
    try {
      g.index = std::stoi(idx);
      g.total_memory_bytes =
          static_cast<int64_t>(std::stod(mem) * 1024 * 1024);  // MiB
      if (!cap.empty()) {
        double c = std::stod(cap);
        g.compute_major = static_cast<int>(c);
        g.compute_minor =
            static_cast<int>(std::lround((c - g.compute_major) * 10));
      }
    } catch (...) {
      continue;
    }
    g.name = name.substr(name.find_first_not_of(' '));
    hw->gpus.push_back(g);
  }
  ::pclose(p);
}

std::string Gb(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", bytes / kGiB);
  return buf;
}

}  // namespace

StatusOr<std::pair<int64_t, int64_t>> ParseMemInfo(const std::string& text) {
  std::istringstream in(text);
  std::string key, unit;
  int64_t value = 0, total = -1, available = -1;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemTotal:") total = value * 1024;
    if (key == "MemAvailable:") available = value * 1024;
  }
  if (total < 0) return InvalidArgumentError("meminfo has no MemTotal line");
  if (available < 0) available = total;
  return std::make_pair(total, available);
}

HardwareInfo DetectHardware() {
  HardwareInfo hw;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    hw.cpu_cores = CPU_COUNT(&set);
  } else {
    hw.cpu_cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  }
  std::ifstream meminfo("/proc/meminfo");
  std::stringstream ss;
  ss << meminfo.rdbuf();
  auto mem = ParseMemInfo(ss.str());
  if (mem.ok()) {
    hw.ram_total_bytes = mem->first;
    hw.ram_available_bytes = mem->second;
  }
#if DDPRUN_WORKER_WITH_CUDA
  if (torch::cuda::is_available()) {
    hw.torch_cuda = true;
    for (int i = 0; i < static_cast<int>(torch::cuda::device_count()); ++i) {
      cudaDeviceProp prop;
      if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
      hw.gpus.push_back({i, prop.name,
                         static_cast<int64_t>(prop.totalGlobalMem), prop.major,
                         prop.minor});
    }
    return hw;
  }
#endif
  hw.torch_cuda = false;
  DetectGpusWithNvidiaSmi(&hw);
  return hw;
}

AutoSettings RecommendForGpuMemory(double gb, int world_size,
                                   int target_effective_batch) {
  struct Row {
    double min_gb;
    int batch;
    const char* label;
  };
  // The MIMIC-CXR guide's table (accumulation there is for 4 GPUs).
  static const Row kRows[] = {{20, 16, ">=20 GB"},
                              {14, 12, "14-20 GB"},
                              {10, 8, "10-14 GB"},
                              {6, 4, "6-10 GB"},
                              {0, 2, "<6 GB"}};
  AutoSettings s;
  s.device = "cuda";
  s.mixed_precision = true;
  const Row* row = &kRows[4];
  for (const Row& r : kRows) {
    if (gb >= r.min_gb) {
      row = &r;
      break;
    }
  }
  world_size = std::max(1, world_size);
  s.per_device_batch = row->batch;
  s.grad_accum_steps = std::max(
      1,
      static_cast<int>(std::lround(static_cast<double>(target_effective_batch) /
                                   (row->batch * world_size))));
  s.effective_batch = s.per_device_batch * s.grad_accum_steps * world_size;
  char buf[160];
  std::snprintf(buf, sizeof(buf),
                "GPU memory %.1f GB: row %s -> batch %d per GPU, accumulate "
                "%d steps on %d GPU(s) for ~%d",
                gb, row->label, s.per_device_batch, s.grad_accum_steps,
                world_size, target_effective_batch);
  s.reason = buf;
  return s;
}

AutoSettings RecommendSettings(const HardwareInfo& hw, int world_size,
                               int local_world_size,
                               int target_effective_batch) {
  local_world_size = std::max(1, local_world_size);
  AutoSettings s;
  if (hw.torch_cuda && !hw.gpus.empty()) {
    int64_t smallest = hw.gpus[0].total_memory_bytes;
    for (auto& g : hw.gpus) smallest = std::min(smallest, g.total_memory_bytes);
    s = RecommendForGpuMemory(smallest / 1e9, world_size,
                              target_effective_batch);
    s.cpu_threads = std::max(1, hw.cpu_cores / local_world_size);
    return s;
  }
  s.device = "cpu";
  s.mixed_precision = false;  // bf16 autocast on CPU is opt-in: often slower
  s.per_device_batch =
      hw.ram_total_bytes > 0 && hw.ram_total_bytes < 16 * kGiB ? 4 : 8;
  world_size = std::max(1, world_size);
  s.grad_accum_steps = std::max(
      1,
      static_cast<int>(std::lround(static_cast<double>(target_effective_batch) /
                                   (s.per_device_batch * world_size))));
  s.effective_batch = s.per_device_batch * s.grad_accum_steps * world_size;
  s.cpu_threads = std::max(1, hw.cpu_cores / local_world_size);
  char buf[200];
  std::snprintf(
      buf, sizeof(buf),
      "no CUDA in this Torch%s: CPU batch %d per process, accumulate "
      "%d steps on %d process(es) for ~%d, %d threads each",
      hw.gpus.empty() ? "" : " (GPUs seen by nvidia-smi are unusable)",
      s.per_device_batch, s.grad_accum_steps, world_size,
      target_effective_batch, s.cpu_threads);
  s.reason = buf;
  return s;
}

std::string FormatHardwareReport(const HardwareInfo& hw,
                                 const AutoSettings& s) {
  std::ostringstream os;
  os << "CPU cores: " << hw.cpu_cores << "\n";
  os << "RAM: " << Gb(hw.ram_total_bytes) << " total, "
     << Gb(hw.ram_available_bytes) << " available\n";
  os << "Torch CUDA: " << (hw.torch_cuda ? "yes" : "no") << "\n";
  os << "GPUs: " << hw.gpus.size() << "\n";
  for (auto& g : hw.gpus) {
    os << "  [" << g.index << "] " << g.name << ", " << Gb(g.total_memory_bytes)
       << ", compute capability " << g.compute_major << "." << g.compute_minor
       << "\n";
  }
  os << "Recommended: device " << s.device << ", batch " << s.per_device_batch
     << " per process, grad accumulation " << s.grad_accum_steps
     << ", effective batch " << s.effective_batch << ", threads "
     << s.cpu_threads << ", mixed precision "
     << (s.mixed_precision ? "on" : "off") << "\n";
  os << "Why: " << s.reason << "\n";
  return os.str();
}

}  // namespace ddprun::worker
