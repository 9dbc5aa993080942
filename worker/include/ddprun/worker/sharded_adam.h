#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "ddprun/worker/world.h"

namespace torch::serialize {
class OutputArchive;
class InputArchive;
}  // namespace torch::serialize

namespace ddprun::worker {

struct ShardedAdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // true: AdamW (decoupled decay, p -= lr*wd*p); false: Adam (L2 added to
  // the gradient), both exactly as torch::optim::Adam/AdamW.
  bool decoupled_weight_decay = false;
  // true (ZeRO-2 style, use WITHOUT DDP): Step() averages gradients across
  // ranks itself and keeps only this rank's shard. false (ZeRO-1 style):
  // gradients are already averaged (model wrapped in DDP).
  bool reduce_gradients = true;
  // DeepSpeed's offload_optimizer {device: cpu} (ZeRO-Offload): this rank's
  // shard of exp_avg / exp_avg_sq lives in host memory (pinned when the
  // parameters are on a GPU) and the Adam update of the shard runs on the
  // CPU; the shard's gradient goes device -> host and its updated
  // parameters host -> device each step (blocking copies of 1/world of the
  // parameters each way), then are all-gathered on the device as without
  // offload. Saves 2 * 4 * numel / world bytes of device memory per rank.
  // On a CPU world the state is in host memory either way: same results,
  // nothing saved.
  bool offload_to_cpu = false;
};

// Adam/AdamW whose state (exp_avg, exp_avg_sq) is partitioned across ranks,
// the DeepSpeed ZeRO-1/2 analogue, optionally offloaded to host memory. All
// parameters are viewed as one flat fp32 vector split into world_size
// contiguous shards; rank r keeps state only for shard r, so optimizer-state
// bytes per rank ~ 2*4*numel/world. Step(), collective:
//   1. gradients flattened; with reduce_gradients, reduce-scattered with
//      World::ReduceScatter (NCCL: reduce_scatter; Gloo, whose Torch 1.13
//      process group throws on reduce_scatter: a ring over send/recv) and
//      divided by world_size. Each rank sends (world-1)/world of the
//      gradient bytes, as a reduce-scatter should, not the 2(world-1)/world
//      of an all-reduce;
//   2. Adam update of this rank's shard of the parameters (on the CPU with
//      offload_to_cpu);
//   3. parameters all-gathered from their owners and copied back.
// Results equal torch::optim::Adam(W) on the averaged gradients within fp32
// rounding. Parameters must be dense fp32 on world.device() and must not be
// replaced. The constructor broadcasts rank 0's parameters (collective: every
// rank constructs it at the same point). Not thread-safe. Throws
// CollectiveError on a failed collective.
class ShardedAdam {
 public:
  ShardedAdam(World world, std::vector<at::Tensor> params,
              ShardedAdamOptions options = {});

  void ZeroGrad();
  // max_grad_norm > 0 clips like torch::nn::utils::clip_grad_norm_ on the
  // averaged gradients of all ranks (the shards' norms are all-reduced), not
  // on this rank's local ones: what ZeRO-2 needs, whose gradients are only
  // reduced here. Returns the total norm (0 when not clipping).
  double Step(double max_grad_norm = 0);

  double lr() const { return options_.lr; }
  void set_lr(double lr) { options_.lr = lr; }
  int64_t steps() const { return step_; }

  // Bytes of optimizer state held by this rank (wherever it is).
  int64_t state_bytes() const;
  // Of those, the bytes on the parameters' device: 0 with offload_to_cpu
  // (held in host memory instead), else state_bytes().
  int64_t device_state_bytes() const;
  bool offloaded() const { return options_.offload_to_cpu; }
  // [begin, end) of this rank's shard in the flat parameter vector.
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }

  // Collective: every rank gathers the full state; archive keys "step",
  // "exp_avg", "exp_avg_sq" (flat, full length), "lr".
  void Save(torch::serialize::OutputArchive& archive);
  // Not collective: takes this rank's shard of a full saved state (any
  // world size at save time).
  void Load(torch::serialize::InputArchive& archive);

 private:
  at::Tensor FlatGrads() const;
  at::Tensor GatherFull(const at::Tensor& shard) const;
  // Where exp_avg / exp_avg_sq live: the CPU with offload_to_cpu, else the
  // world's device.
  c10::Device StateDevice() const;
  // Padding of the flat vectors: float32 on the parameters' device.
  at::Tensor Padding(int64_t n) const;
  // This rank's shard of the flat parameter vector, copied piece by piece
  // (no full-size flat copy: Step's transient memory stays ~1 gradient and
  // 1 gathered parameter vector).
  at::Tensor ParamShard() const;
  // Copies the all-gathered shards (rank order) into the parameters.
  void CopyToParams(const std::vector<at::Tensor>& shards);

  World world_;
  std::vector<at::Tensor> params_;
  ShardedAdamOptions options_;
  int64_t numel_ = 0;
  int64_t shard_size_ = 0;  // padded: shard_size_ * world_size >= numel_
  int64_t shard_begin_ = 0;
  int64_t shard_end_ = 0;
  int64_t step_ = 0;
  at::Tensor exp_avg_;     // shard (host memory with offload_to_cpu)
  at::Tensor exp_avg_sq_;  // shard
  // offload_to_cpu: host buffers the gradient and parameter shards are
  // copied through each step (pinned on a GPU world: DMA, no fresh
  // pageable tensors per step).
  at::Tensor grad_host_;
  at::Tensor shard_host_;
};

}  // namespace ddprun::worker
