#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include "ddprun/worker/env.h"
#include "ddprun/worker/generation.h"

namespace at {
class Tensor;
}
namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace ddprun::worker {

class SharedMemoryGroup;

enum class ReduceOp { kSum, kAvg, kMax, kMin };

struct InitOptions {
  // "auto" (NCCL when Torch has CUDA and a device is visible, else Gloo;
  // Gloo on CUDA when this node has more ranks than visible GPUs), "gloo"
  // or "nccl". "nccl" on a CPU-only Torch build, or with more local ranks
  // than visible GPUs, is a ConfigError (backend_choice.h).
  std::string backend = "auto";
  // How long rank 0 waits for all peers at the store, and how long a
  // client tries to reach the store. A peer that never arrives gives a
  // CollectiveError naming the missing ranks' count, never a hang.
  std::chrono::milliseconds store_timeout = std::chrono::seconds(300);
  // Timeout of every collective of the process group.
  std::chrono::milliseconds collective_timeout = std::chrono::seconds(1800);
  // Where the model, the batches and the collectives live
  // (World::device()): "auto" (CUDA under NCCL, CPU under Gloo), "cpu", or
  // "cuda": cuda:LOCAL_RANK (mod visible devices) also under Gloo, which
  // then reduces CUDA tensors; that is how several ranks share one GPU
  // (NCCL refuses two ranks on one device). "cpu" with NCCL, or "cuda"
  // without a visible CUDA device, is a ConfigError.
  std::string device = "auto";
  // Pin the CUDA device to LOCAL_RANK (mod visible devices) on CUDA.
  bool pin_cuda_device = true;
  // Each rank was given its own GPU by its launcher (a CUDA_VISIBLE_DEVICES
  // of one entry per rank): more local ranks than visible GPUs then do not
  // share one. DDPRUN_GPU_PER_RANK=1 sets it.
  bool gpu_per_rank = false;
  // Gloo worker threads (0: Torch's default, 2).
  int gloo_threads = 0;
  // DDPRUN_RESTART_SCOPE=failed: how long a survivor waits for the agent's
  // next generation and for every rank of it to arrive, and a replacement
  // for its peers (World::Reform). Past it the worker throws
  // CollectiveError, so the agent restarts the group.
  std::chrono::milliseconds heal_timeout = std::chrono::seconds(120);
  // InitFromEnv keeps freed memory in glibc's heap (TuneHostAllocator in
  // host_allocator.h; DDPRUN_MALLOC_TUNING=0 or your own malloc settings
  // turn it off) so steady-state steps do not page-fault.
  bool tune_host_allocator = true;
};

// Applies overrides from the environment: DDPRUN_BACKEND, DDPRUN_DEVICE,
// DDPRUN_GPU_PER_RANK, DDPRUN_STORE_TIMEOUT_S, DDPRUN_COLLECTIVE_TIMEOUT_S,
// DDPRUN_HEAL_TIMEOUT_S.
// Returns the result.
InitOptions InitOptionsFromEnv(InitOptions base = {});

// One process's view of the job: its ranks, the store and the process
// group. Cheap to copy (shared state). Collectives are blocking, must be
// called by every rank in the same order, and throw CollectiveError when a
// peer fails or the timeout passes. A World with world_size()==1 and no
// process group (standalone) makes every collective a no-op, so trainers run
// alone unchanged. Not thread-safe: call collectives from one thread.
class World {
 public:
  World();  // standalone single-process world on CPU

  int rank() const;
  int world_size() const;
  int local_rank() const;
  int local_world_size() const;
  bool is_main() const { return rank() == 0; }
  bool distributed() const { return world_size() > 1; }
  const WorkerEnv& env() const;
  // "gloo", "nccl" or "none" (standalone).
  const std::string& backend() const;
  // Why the backend is not what "auto" picks on a GPU machine (e.g. Gloo on
  // CUDA for ranks sharing a GPU), or empty.
  const std::string& backend_note() const;
  // Device the collectives run on: CPU for Gloo, cuda:LOCAL_RANK for NCCL
  // (the current CUDA device when pin_cuda_device is off). Tensors on
  // another device are accepted by every collective below: they travel on a
  // copy on device() and results come back on the caller's device (a CPU
  // RNG state gathers fine under NCCL), at the cost of two copies.
  c10::Device device() const;
  // InitOptions::collective_timeout this world was made with.
  std::chrono::milliseconds collective_timeout() const;

  // Every collective below waits at most collective_timeout() (NCCL too:
  // its work is waited for on the host with that timeout), then throws
  // CollectiveError.
  // In-place all-reduce of `t`.
  void AllReduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum) const;
  // In-place broadcast of `t` from `root` to every rank.
  void Broadcast(at::Tensor& t, int root = 0) const;
  // Every rank's `t` (same shape on all ranks), index = rank.
  std::vector<at::Tensor> AllGather(const at::Tensor& t) const;
  // Concatenation along dim 0 of every rank's `t` in rank order; the sizes
  // along dim 0 may differ between ranks (other dims must match).
  at::Tensor AllGatherVariable(const at::Tensor& t) const;
  // Reduce-scatter (sum): `input` is 1-D with numel a multiple of
  // world_size(), the same length on every rank; returns this rank's chunk
  // (numel/world_size elements at rank()*numel/world_size) of the sum over
  // ranks. NCCL: c10d reduce_scatter. Gloo: ProcessGroupGloo in Torch 1.13
  // throws "does not support reduce_scatter", so this runs a ring over
  // send/recv (world_size-1 steps, each rank sends (world_size-1)/world_size
  // of the input's bytes, half of what an all-reduce moves); with a shared
  // memory group attached, a sum through it. Standalone: a copy of `input`.
  at::Tensor ReduceScatter(const at::Tensor& input) const;
  // Barrier across all ranks.
  void Barrier() const;

  // From now on, AllReduce with kSum or kAvg of a contiguous float32/float64
  // CPU tensor, Broadcast of a contiguous CPU tensor, AllGather(Variable)
  // of a CPU tensor and ReduceScatter of a contiguous float32/float64 CPU
  // tensor go through
  // `group` (a host's ranks, shared_memory_join.h) instead of the process
  // group: microseconds instead of Gloo's loopback round trips, which sync
  // batch norm pays twice per layer per step (issue 14). Everything else
  // stays on the process group. Affects every copy of this World (shared state).
  // Every rank must attach at the same point of its sequence of collectives
  // (DDP attaches the group it joins, in its collective constructor). A
  // failure in the group is a CollectiveError like the process group's.
  // Null detaches.
  void AttachSharedMemory(std::shared_ptr<SharedMemoryGroup> group);
  // The attached group, or null.
  std::shared_ptr<SharedMemoryGroup> shared_memory() const;

  // Escape hatches for code that drives c10d directly (DDP, ZeRO). Null in
  // a standalone world. Under restart scope "failed" store() is the current
  // generation's (every key it sees is under GenerationPrefix(generation()))
  // and both change at Reform(): take them anew after one.
  c10::intrusive_ptr<c10d::ProcessGroup> process_group() const;
  c10::intrusive_ptr<c10d::Store> store() const;

  // --- restart scope "failed" (docs/restart_scope.md) ---------------------
  // True when this world re-forms after a failure instead of leaving it to
  // a group restart: DDPRUN_RESTART_SCOPE=failed and the agent's store
  // (TORCHELASTIC_USE_AGENT_STORE=True: a store that outlives every worker;
  // without it "failed" is refused with one warning and the world behaves
  // as under "group").
  bool reforms() const;
  // The generation the process group belongs to (0 at a group start).
  int64_t generation() const;
  // The agent's record of generation() (empty `replaced` for generation 0).
  const GenerationRecord& generation_record() const;
  // The newest generation the agent has announced (kGenerationKey; 0 when
  // none), read from the store now. Throws CollectiveError when the store
  // fails.
  int64_t LatestGeneration() const;
  // A new connection to the store with store()'s prefix, for a wait with a
  // timeout (after a timed-out wait a LibTorch 1.13 client is unusable: the
  // late answer lands on its next query). Throws CollectiveError.
  c10::intrusive_ptr<c10d::Store> ConnectStore() const;
  // Re-forms in place after `why` (a CollectiveError's message): drops the
  // process group without a clean shutdown (NCCL: its abort) and aborts
  // the attached shared memory group (detached: DDP joins a new one), waits
  // until the agent announces a newer generation, then joins it: every rank
  // of that generation arrives at a barrier under its prefix, and a new
  // process group forms under "<prefix>/pg". If the generation moves again
  // meanwhile, the newest one is formed. Returns its record. Waits at most
  // InitOptions::heal_timeout, then throws CollectiveError (as it does
  // when reforms() is false). Affects every copy of this World; objects
  // that hold the old process group (DDP's reducer) must be rebuilt.
  const GenerationRecord& Reform(const std::string& why);
  // Tells the agent that every rank of generation() has its state
  // (GenerationHealedKey; the source rank calls it). Throws
  // CollectiveError when the store fails.
  void MarkHealed() const;

  struct Impl;
  explicit World(std::shared_ptr<Impl> impl);

 private:
  std::shared_ptr<Impl> impl_;
};

// Reads the env contract (env.h) and builds the world: TCPStore (rank 0
// hosts it at MASTER_ADDR:MASTER_PORT unless TORCHELASTIC_USE_AGENT_STORE
// == "True"), then the process group. Blocks until all WORLD_SIZE ranks
// have joined or options.store_timeout passes. Under restart scope
// "failed" (World::reforms()) the group forms generation DDPRUN_GENERATION
// on its prefix (a replacement: at most options.heal_timeout, and the
// newest generation if it moved meanwhile). Throws ConfigError for a bad
// environment or backend and CollectiveError when the store or the peers
// cannot be reached in time. With no RANK/WORLD_SIZE/MASTER_* set returns a
// standalone world. Applies TuneHostAllocator() first when
// options.tune_host_allocator (a bad DDPRUN_MALLOC_TUNING is a ConfigError).
// A world of several ranks sets SIGPIPE to ignored unless the program
// handles it: a write to a peer that died fails (CollectiveError) instead of
// killing this rank.
World InitFromEnv(const InitOptions& options = InitOptionsFromEnv());

// Same from an already parsed environment (tests).
World InitWorld(const WorkerEnv& env, const InitOptions& options);

}  // namespace ddprun::worker
