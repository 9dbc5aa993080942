#include "ddprun/worker/sharded_adam.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/ATen.h>
#include <torch/serialize/archive.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "ddprun/worker/errors.h"
#include "ddprun/worker/heal.h"

namespace ddprun::worker {

ShardedAdam::ShardedAdam(World world, std::vector<at::Tensor> params,
                         ShardedAdamOptions options)
    : world_(std::move(world)), params_(std::move(params)), options_(options) {
  // Its constructor's broadcast would meet the survivors' heal.
  if (world_.env().replacement) {
    throw CollectiveError(ShardedOptimizerCannotHeal());
  }
  for (auto& p : params_) {
    if (p.scalar_type() != at::kFloat || p.is_sparse()) {
      throw ConfigError("ShardedAdam: parameters must be dense float32");
    }
    numel_ += p.numel();
  }
  int n = world_.world_size();
  shard_size_ = (numel_ + n - 1) / n;
  shard_begin_ = std::min(numel_, shard_size_ * world_.rank());
  shard_end_ = std::min(numel_, shard_begin_ + shard_size_);
  // Without DDP (ZeRO-2 mode) nothing else makes the replicas start equal.
  if (world_.distributed()) {
    at::NoGradGuard no_grad;
    for (auto& p : params_) {
      at::Tensor d = p.detach();
      world_.Broadcast(d, 0);
    }
  }
  auto opts = at::TensorOptions().dtype(at::kFloat).device(StateDevice());
  // Pinned host memory makes the per-step copies to and from a GPU DMA
  // transfers (and pinning needs a CUDA Torch, which a GPU world has).
  if (options_.offload_to_cpu && !world_.device().is_cpu())
    opts = opts.pinned_memory(true);
  exp_avg_ = at::zeros({shard_size_}, opts);
  exp_avg_sq_ = at::zeros({shard_size_}, opts);
  if (options_.offload_to_cpu) {
    grad_host_ = at::empty({shard_size_}, opts);
    shard_host_ = at::empty({shard_size_}, opts);
  }
}

c10::Device ShardedAdam::StateDevice() const {
  return options_.offload_to_cpu ? c10::Device(c10::kCPU) : world_.device();
}

void ShardedAdam::ZeroGrad() {
  for (auto& p : params_) {
    if (p.grad().defined()) {
      p.mutable_grad().detach_();
      p.mutable_grad().zero_();
    }
  }
}

int64_t ShardedAdam::state_bytes() const {
  return exp_avg_.nbytes() + exp_avg_sq_.nbytes();
}

at::Tensor ShardedAdam::Padding(int64_t n) const {
  return at::zeros(
      {n}, at::TensorOptions().dtype(at::kFloat).device(world_.device()));
}

int64_t ShardedAdam::device_state_bytes() const {
  return options_.offload_to_cpu ? 0 : state_bytes();
}

at::Tensor ShardedAdam::FlatGrads() const {
  std::vector<at::Tensor> parts;
  for (auto& p : params_) {
    parts.push_back(p.grad().defined() ? p.grad().detach().flatten()
                                       : at::zeros({p.numel()}, p.options()));
  }
  int64_t pad = shard_size_ * world_.world_size() - numel_;
  if (pad > 0) parts.push_back(Padding(pad));
  return at::cat(parts);
}

at::Tensor ShardedAdam::GatherFull(const at::Tensor& shard) const {
  return at::cat(world_.AllGather(shard)).narrow(0, 0, numel_);
}

double ShardedAdam::Step(double max_grad_norm) {
  at::NoGradGuard no_grad;
  const int n = world_.world_size();
  const int r = world_.rank();
  at::Tensor grad;
  {
    // The full flat gradient is a temporary: only this rank's shard is kept.
    at::Tensor flat_grad = FlatGrads();
    if (options_.reduce_gradients && n > 1) {
      // Each rank receives only the sum of its own shard (Gloo: ring over
      // send/recv, see World::ReduceScatter).
      grad = world_.ReduceScatter(flat_grad) / n;
    } else {
      grad = flat_grad.narrow(0, shard_size_ * r, shard_size_).clone();
    }
  }
  double total_norm = 0;
  if (max_grad_norm > 0) {
    // The shards are disjoint (the padding is zero): the sum of their
    // squared norms is the full gradient's. Same arithmetic as
    // clip_grad_norm_: coefficient max_norm / (norm + 1e-6), if below 1.
    at::Tensor sq = grad.to(at::kDouble).pow(2).sum().reshape({1});
    world_.AllReduce(sq);
    total_norm = std::sqrt(sq.item<double>());
    const double coef = max_grad_norm / (total_norm + 1e-6);
    if (coef < 1) grad.mul_(coef);
  }

  // This rank's shard of the parameters as one flat vector (a copy).
  at::Tensor shard = ParamShard();
  if (options_.offload_to_cpu) {
    // The update runs where the state is, on the host buffers (blocking
    // copies: the CPU reads them next).
    grad = grad_host_.copy_(grad);
    shard = shard_host_.copy_(shard);
  }

  // torch::optim::Adam / AdamW, step for step.
  const double lr = options_.lr, wd = options_.weight_decay;
  if (wd != 0) {
    if (options_.decoupled_weight_decay) {
      shard.mul_(1 - lr * wd);
    } else {
      grad = grad.add(shard, wd);
    }
  }
  ++step_;
  double bc1 = 1 - std::pow(options_.beta1, step_);
  double bc2 = 1 - std::pow(options_.beta2, step_);
  exp_avg_.mul_(options_.beta1).add_(grad, 1 - options_.beta1);
  exp_avg_sq_.mul_(options_.beta2).addcmul_(grad, grad, 1 - options_.beta2);
  at::Tensor denom = (exp_avg_sq_.sqrt() / std::sqrt(bc2)).add_(options_.eps);
  shard.addcdiv_(exp_avg_, denom, -lr / bc1);
  if (options_.offload_to_cpu) shard = shard.to(world_.device());

  // Every rank gets every shard back.
  CopyToParams(n > 1 ? world_.AllGather(shard)
                     : std::vector<at::Tensor>{shard});
  return total_norm;
}

at::Tensor ShardedAdam::ParamShard() const {
  const int64_t begin = shard_size_ * world_.rank();
  const int64_t end = begin + shard_size_;
  std::vector<at::Tensor> parts;
  int64_t off = 0, have = 0;
  for (auto& p : params_) {
    const int64_t lo = std::max(begin, off);
    const int64_t hi = std::min(end, off + p.numel());
    if (lo < hi) {
      parts.push_back(p.detach().flatten().narrow(0, lo - off, hi - lo));
      have += hi - lo;
    }
    off += p.numel();
  }
  if (have < shard_size_) parts.push_back(Padding(shard_size_ - have));
  return at::cat(parts);
}

void ShardedAdam::CopyToParams(const std::vector<at::Tensor>& shards) {
  int64_t off = 0;
  for (auto& p : params_) {
    std::vector<at::Tensor> pieces;
    for (int64_t done = 0; done < p.numel();) {
      const int64_t s = (off + done) / shard_size_;
      const int64_t in = (off + done) % shard_size_;
      const int64_t len = std::min(p.numel() - done, shard_size_ - in);
      pieces.push_back(shards[s].narrow(0, in, len));
      done += len;
    }
    if (!pieces.empty()) {
      p.detach().copy_(
          (pieces.size() == 1 ? pieces[0] : at::cat(pieces)).view_as(p));
    }
    off += p.numel();
  }
}

void ShardedAdam::Save(torch::serialize::OutputArchive& archive) {
  archive.write("step", at::tensor({step_}, at::kLong));
  archive.write("lr", at::tensor({options_.lr}, at::kDouble));
  // Collectives run on the world's device (NCCL takes no host tensors).
  archive.write("exp_avg", GatherFull(exp_avg_.to(world_.device())).cpu());
  archive.write("exp_avg_sq",
                GatherFull(exp_avg_sq_.to(world_.device())).cpu());
}

void ShardedAdam::Load(torch::serialize::InputArchive& archive) {
  at::Tensor step, lr, m, v;
  archive.read("step", step);
  archive.read("lr", lr);
  archive.read("exp_avg", m);
  archive.read("exp_avg_sq", v);
  if (m.numel() != numel_ || v.numel() != numel_) {
    throw WorkerError("ShardedAdam: saved state has " +
                      std::to_string(m.numel()) + " elements, model has " +
                      std::to_string(numel_));
  }
  step_ = step.item<int64_t>();
  options_.lr = lr.item<double>();
  exp_avg_.zero_();
  exp_avg_sq_.zero_();
  int64_t len = shard_end_ - shard_begin_;
  if (len > 0) {
    exp_avg_.narrow(0, 0, len).copy_(m.narrow(0, shard_begin_, len));
    exp_avg_sq_.narrow(0, 0, len).copy_(v.narrow(0, shard_begin_, len));
  }
}

}  // namespace ddprun::worker
