#pragma once

#include <functional>
#include <map>
#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// What this host offers for --nproc_per_node=cpu|gpu|auto.
struct HostDevices {
  int online_cpus = 1;
  // NVIDIA GPUs the driver exposes, counted without CUDA libraries (the
  // launcher never links CUDA): entries of /proc/driver/nvidia/gpus/, else
  // /dev/nvidia<N> device nodes. 0 when there is no NVIDIA driver.
  int nvidia_gpus = 0;
};

// Probes the host. `root` prefixes /proc and /dev so tests can point it at a
// fake tree; "" = the real filesystem. Never fails: unreadable = 0 GPUs.
HostDevices ProbeHostDevices(const std::string& root = "");

// GPUs a CUDA program started with this environment can use: nvidia_gpus,
// limited by CUDA_VISIBLE_DEVICES when set (entries up to the first invalid
// one, as CUDA reads it; "" or "-1" hides every GPU). MIG-/GPU- UUID entries
// count as one device each.
int VisibleGpus(const HostDevices& host,
                const std::map<std::string, std::string>& env);

// Counts the devices of a named accelerator (xpu, the privateuse1
// backend) as the workers' torch counts them (main() passes
// CountAccelerators, agent/torch_probe/accelerator_count.h). Errors name
// `source`.
using AcceleratorCounter = std::function<StatusOr<int>(
    const std::string& source, const std::string& name)>;

// Resolves a --nproc_per_node value: an int >= 1, "cpu" (online CPUs),
// "gpu" (visible GPUs; error when none) or "auto" (visible GPUs if any, else
// CPUs), or any other name (a Python identifier: xpu, a privateuse1
// backend such as npu), which only `count_accelerators` can answer (null:
// such names are errors). `source` names the flag or env var for error
// messages. Errors: kInvalidArgument, one line.
StatusOr<int> ResolveNprocPerNode(
    const std::string& source, const std::string& spec, const HostDevices& host,
    const std::map<std::string, std::string>& env,
    const AcceleratorCounter& count_accelerators = nullptr);

}  // namespace ddprun::agent
