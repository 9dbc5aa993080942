#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// --numa_binding: which CPUs each worker may run on, chosen as torch >= 2.8
// chooses them (torch/numa/binding.py, _get_logical_cpus_to_bind_to for
// gpu_index = the worker's local rank), applied by the launcher in the
// child between fork and exec (ProcessSpec::cpu_affinity), where torchrun
// wraps the command in `numactl --physcpubind=<cpus>`. Like torch, ddprun
// binds CPUs only and sets no memory policy: with every CPU of the worker
// on the chosen node(s), the kernel's default (local) policy places the
// memory it first touches there, and NCCL >= 2.30, which restores the
// affinity a process was born with, restores this one.

enum class NumaMode { kNode, kSocket, kExclusive, kCoreComplex };

// "node", "socket", "exclusive", "core-complex". Errors: kInvalidArgument.
StatusOr<NumaMode> ParseNumaMode(const std::string& text);
const char* NumaModeName(NumaMode mode);

// What sysfs says about this host's NUMA nodes, CPUs and GPUs.
struct NumaTopology {
  // /sys/devices/system/node/possible, each with nodeN/cpulist (empty for a
  // node without CPUs, e.g. memory-only).
  std::map<int, std::set<int>> node_cpus;
  struct Cpu {
    int socket = 0;  // topology/physical_package_id
    int core = -1;   // min of topology/thread_siblings_list
    int cache = -1;  // min CPU sharing its highest-level data or unified
                     // cache (cache/index*/shared_cpu_list); -1 = unknown
  };
  std::map<int, Cpu> cpus;
  // NVIDIA GPUs in PCI address order (nvidia-smi's and, on a node of one
  // GPU model, CUDA's order): from /proc/driver/nvidia/gpus/<address>
  // (what a container was given), else PCI devices of vendor 0x10de and
  // class 0x0300/0x0302. `numa_node` is the device's numa_node, -1 read
  // as 0 (torch: "in systems with only one NUMA node, this will often be
  // saved as -1").
  struct Gpu {
    std::string pci_address;  // "0000:1b:00.0"
    int numa_node = 0;
    std::string uuid;  // "GPU-..." from the driver's information file
  };
  std::vector<Gpu> gpus;
};

// Reads the topology under `root` (tests point DDPRUN_SYSFS_ROOT at a fake
// tree; "" = the real /sys, with /proc/driver/nvidia). Errors: no NUMA node
// is listed.
StatusOr<NumaTopology> ReadNumaTopology(const std::string& root);

// The binding of one launch: CPUs per local rank, and what it was made of.
struct NumaPlan {
  NumaMode mode = NumaMode::kNode;
  bool by_gpu = true;  // false: no GPU, local ranks spread over the nodes
  std::vector<int> device_nodes;         // NUMA node of device (GPU) i
  std::vector<std::set<int>> rank_cpus;  // CPUs of local rank r
  // Two lines for the log: the device -> node map, and every rank's CPUs.
  std::vector<std::string> Describe() const;
};

// torch's choice for local ranks 0..nproc-1. `allowed` is the agent's own
// affinity (torch intersects every node's CPUs with it). `visible` is
// CUDA_VISIBLE_DEVICES (null: unset, every GPU): GPU i of the workers is
// its i-th entry (an index into topology.gpus, or a GPU- UUID prefix), up
// to the first invalid entry, as CUDA reads it.
// Without GPUs (none found, or all hidden) ddprun binds local rank r as if
// GPU r were on NUMA node block r * nodes / nproc of the nodes with CPUs
// (torch fails there: it asks CUDA for the GPU's PCI address).
// Errors (kFailedPrecondition, one line): a local rank beyond the visible
// GPUs, a CUDA_VISIBLE_DEVICES entry that names no GPU found, exclusive
// with fewer physical cores than GPUs on a node, core-complex without
// cache information, an empty CPU set.
StatusOr<NumaPlan> PlanNumaBinding(NumaMode mode, const NumaTopology& topology,
                                   const std::set<int>& allowed,
                                   const std::string* visible, int nproc);

// PlanNumaBinding for this host: the topology under $DDPRUN_SYSFS_ROOT
// (else /), the calling thread's affinity, env's CUDA_VISIBLE_DEVICES.
StatusOr<NumaPlan> PlanNumaBindingForHost(
    const std::string& mode, int nproc,
    const std::map<std::string, std::string>& env);

// "0-3,8,10-11".
std::string CpuListText(const std::set<int>& cpus);
// Parses a sysfs CPU list ("0-3,8\n"). Errors: kInvalidArgument.
StatusOr<std::set<int>> ParseCpuList(const std::string& text);

}  // namespace ddprun::agent
