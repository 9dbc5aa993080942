#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/worker/world.h"

namespace torch::nn {
class Module;
}

namespace ddprun::worker {

struct DdpOptions {
  // Gradient bucket size; buckets are all-reduced as soon as every gradient
  // in them is ready, overlapping communication with the rest of backward.
  double bucket_cap_mb = 25.0;
  // First bucket is smaller so communication starts early (Python's 1 MB).
  double first_bucket_cap_mb = 1.0;
  // Set when some parameters may get no gradient in a step (branches,
  // frozen heads): the autograd graph is traversed after forward and those
  // parameters are marked ready with a zero contribution. Costs a graph walk
  // per step. Without it, an unused parameter makes the next step throw.
  bool find_unused_parameters = false;
  // Broadcast rank 0's buffers (batch-norm running stats) after every
  // synchronised backward so all ranks keep identical buffers.
  bool broadcast_buffers = true;
  // When every rank is on this host, CPU gradients (float32/float64) and
  // buffers travel through a shared memory segment (SharedMemoryGroup)
  // instead of the process group: on a small CPU model Gloo's TCP loopback
  // hand-offs cost milliseconds per step. Results equal the process group's
  // up to the order of the fp32 sums. DDPRUN_SHM_ALLREDUCE=0 in the
  // environment turns it off for the job ("1" or unset: on; anything else is
  // a ConfigError). Ignored for CUDA tensors (NCCL or Gloo move those).
  bool shared_memory = true;
  // The constructor broadcasts rank 0's parameters and buffers. false: the
  // caller guarantees that every rank's are equal already (restart scope
  // "failed": after a heal, survivors and replacement build their DDP
  // anew without sending the model once more).
  bool broadcast_initial_state = true;
  // >= 0: the gradient buckets are not computed but taken from rank
  // `layout_root`'s `layout` (parameter indices per bucket, as
  // bucket_layout() gives them), sent to every rank by a broadcast in the
  // constructor; the other ranks' `layout` is ignored. A Gloo all-reduce's
  // float sums depend on where each gradient lies in its bucket, so a DDP
  // rebuilt after a heal reduces as the one it replaces did (bit for bit),
  // and not as a fresh DDP, whose buckets are rebuilt after its first step.
  // < 0 with a non-empty `layout`: every rank's own, the same on every
  // rank (a resumed checkpoint's TrainState::bucket_layout), no broadcast;
  // one that does not name each parameter once is ignored with a warning
  // (the buckets are computed), as every rank decides alike.
  int layout_root = -1;
  std::vector<std::vector<size_t>> layout;
};

// A bucket layout as one 1-D int64 tensor: the bucket count, each bucket's
// size, then the indices bucket by bucket (what checkpoints store and
// SharedLayout broadcasts).
at::Tensor EncodeBucketLayout(const std::vector<std::vector<size_t>>& layout);
// The layout `encoded` holds, or nullopt unless it is such a tensor naming
// each of `params` parameters exactly once.
std::optional<std::vector<std::vector<size_t>>> DecodeBucketLayout(
    const at::Tensor& encoded, size_t params);

// Distributed data parallel for a torch::nn::Module, built on c10d's
// Reducer (the engine under Python's DistributedDataParallel).
//  - The constructor broadcasts rank 0's parameters and buffers (collective:
//    every rank constructs its DDP at the same point) and registers
//    autograd hooks on every parameter that requires grad. It binds to the
//    world's process group of the moment: after World::Reform destroy it
//    (before the re-form: its reducer keeps the old group's connections
//    open) and construct a new one.
//  - Backward(loss) runs loss.backward() with gradient averaging: gradients
//    are grouped in buckets in reverse parameter order and each bucket is
//    all-reduced (sum / world_size) while backward continues. On return every
//    rank's .grad holds the average over ranks. Use Backward(), not
//    loss.backward(): a plain backward accumulates local gradients only.
//  - Inside a NoSync scope Backward() only accumulates local gradients; the
//    first Backward() after the scope reduces the accumulated sum.
// The module must outlive this object and must not gain or lose parameters.
// Collective failures surface as CollectiveError from Backward(). Not
// thread-safe. In a standalone world this is a thin pass-through.
class DistributedDataParallel {
 public:
  DistributedDataParallel(World world,
                          std::shared_ptr<torch::nn::Module> module,
                          DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  // loss.backward() with gradient synchronisation (see class comment).
  // `loss` must be a scalar, or pass `grad` like Tensor::backward.
  void Backward(const at::Tensor& loss);
  void Backward(const at::Tensor& output, const at::Tensor& grad);

  // RAII scope in which Backward() skips synchronisation (gradient
  // accumulation). Scopes nest.
  class NoSyncScope {
   public:
    explicit NoSyncScope(DistributedDataParallel* ddp);
    ~NoSyncScope();
    NoSyncScope(const NoSyncScope&) = delete;
    NoSyncScope& operator=(const NoSyncScope&) = delete;

   private:
    DistributedDataParallel* ddp_;
    bool previous_;
  };
  NoSyncScope NoSync() { return NoSyncScope(this); }
  bool sync_enabled() const { return sync_enabled_; }

  // Re-broadcasts rank 0's parameters and buffers (after loading a
  // checkpoint on rank 0 only, for instance). Collective.
  void BroadcastState();

  // Number of buckets and their sizes in bytes (for tests/diagnostics).
  std::vector<size_t> bucket_bytes() const;
  // The parameter indices (among those that require grad, in module order)
  // of each bucket, in the order the reducer holds them now (empty in a
  // standalone world): DdpOptions::layout of a DDP that replaces this one.
  std::vector<std::vector<size_t>> bucket_layout() const;
  // How gradients travel: "shared_memory", "process_group", or "none" (a
  // standalone world); with why_not_shared_memory() saying why not the
  // first when it was wanted (e.g. "the ranks span hosts").
  const char* gradient_transport() const;
  const std::string& why_not_shared_memory() const;

  torch::nn::Module& module() { return *module_; }
  const World& world() const { return world_; }

 private:
  struct Impl;
  World world_;
  std::shared_ptr<torch::nn::Module> module_;
  DdpOptions options_;
  bool sync_enabled_ = true;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddprun::worker
