#include "examples/frame/norm_layer.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <numeric>

#include "ddprun/worker/errors.h"
#include "ddprun/worker/sync_batch_norm.h"
#include "examples/frame/norm_counts.h"

namespace ddprun::examples {

namespace nn = torch::nn;

namespace {

constexpr double kMomentum = 0.1;  // torch's default for the running stats

// Batch norm layers (torch's and the worker's SyncBatchNorm, both updating
// r = (1 - 0.1) r + 0.1 b) whose running statistics start from the data
// instead of (mean 0, var 1): the n-th training batch updates them with
// momentum max(0.1, 1/n), i.e. the plain average of the first 10 batches,
// then the usual exponential average. Why: conv outputs here have variance
// ~0.01, and with momentum 0.1 the initial running_var of 1 still dominated
// eval-mode normalisation after ~50 steps (features 2-13x too small,
// measured in vqa_trainer, whose answer accuracy fell to the majority answer
// in eval while training was fine). A cumulative average (momentum None)
// fixes that but keeps the first batches' statistics forever (segmentation
// Dice 0.63 vs 0.69). Same parameters and buffers as Base, so checkpoints
// do not change.
double WarmMomentum(int64_t num_batches_tracked) {
  return std::max(kMomentum,
                  1.0 / (static_cast<double>(num_batches_tracked) + 1.0));
}

// From this count on WarmMomentum is kMomentum: 1 / (9 + 1) = 0.1.
constexpr int64_t kWarmBatches = 9;

// A host copy of num_batches_tracked, so that a forward does not read the
// buffer from the device (a host sync per layer per step on a GPU). Keyed by
// the buffer's version counter: anything else that writes it (a checkpoint
// load, DDP's buffer broadcast, reset_running_stats) bumps the version and
// the next Read() fetches it again, as long as the copy is below
// kWarmBatches. From there on the momentum no longer depends on the count,
// which only grows while training (DDP's broadcast rewrites rank 0's equal
// count every step): no more reads.
// RereadBatchCounts() moves it: every copy is read again.
std::atomic<uint64_t> reread_epoch{0};

class TrackedCount {
 public:
  int64_t Read(const torch::Tensor& buffer) {
    const uint64_t epoch = reread_epoch.load(std::memory_order_relaxed);
    if (!known_ || epoch != epoch_ ||
        (value_ < kWarmBatches && buffer._version() != version_)) {
      value_ = buffer.item<int64_t>();
      version_ = buffer._version();
      epoch_ = epoch;
      known_ = true;
    }
    return value_;
  }
  // After a training forward that added 1 to the buffer (one in-place add:
  // one version step).
  void Incremented(const torch::Tensor& buffer) {
    if (known_ &&
        (value_ >= kWarmBatches || buffer._version() == version_ + 1)) {
      ++value_;
      version_ = buffer._version();
    } else {
      known_ = false;
    }
  }

 private:
  bool known_ = false;
  uint64_t epoch_ = 0;
  int64_t version_ = 0;
  int64_t value_ = 0;
};

// torch BatchNorm reads its momentum option on every forward.
template <typename Base>
class WarmStartBatchNorm : public Base {
 public:
  using Base::Base;

  torch::Tensor forward(const torch::Tensor& x) {
    if (!this->is_training()) return Base::forward(x);
    this->options.momentum(
        WarmMomentum(tracked_.Read(this->num_batches_tracked)));
    torch::Tensor y = Base::forward(x);
    tracked_.Incremented(this->num_batches_tracked);
    return y;
  }

  // Defined here: libtorch does not export BatchNormImplBase's.
  void pretty_print(std::ostream& stream) const override {
    stream << "WarmStartBatchNorm(" << this->running_mean.numel() << ")";
  }

 private:
  TrackedCount tracked_;
};

// SyncBatchNorm's momentum is fixed at construction; it updates
// r = (1 - k) r0 + k b after its autograd function (which saves no running
// stats, so rewriting them is safe): recover b and redo it with the warm
// momentum.
class WarmStartSyncBatchNorm : public worker::SyncBatchNormImpl {
 public:
  using SyncBatchNormImpl::SyncBatchNormImpl;

  torch::Tensor forward(const torch::Tensor& x) {
    if (!is_training()) return SyncBatchNormImpl::forward(x);
    const double m = WarmMomentum(tracked_.Read(num_batches_tracked));
    if (m == kMomentum) {
      torch::Tensor y = SyncBatchNormImpl::forward(x);
      tracked_.Incremented(num_batches_tracked);
      return y;
    }
    const torch::Tensor mean0 = running_mean.detach().clone();
    const torch::Tensor var0 = running_var.detach().clone();
    torch::Tensor y = SyncBatchNormImpl::forward(x);
    tracked_.Incremented(num_batches_tracked);
    torch::NoGradGuard no_grad;
    Reweight(running_mean, mean0, m);
    Reweight(running_var, var0, m);
    return y;
  }

 private:
  TrackedCount tracked_;

  static void Reweight(torch::Tensor& r, const torch::Tensor& r0, double m) {
    const torch::Tensor batch = (r - (1 - kMomentum) * r0) / kMomentum;
    r.copy_((1 - m) * r0 + m * batch);
  }
};

// Group norm in its parameters' dtype: under autocast the conv before it
// hands it bfloat16/float16 activations while its weight stays float32, and
// LibTorch 1.13's CPU group norm refuses mixed dtypes ("expected scalar type
// BFloat16 but found Float"; its CPU autocast has no policy for group_norm).
// Normalising in float32 is what torch's CUDA autocast does for group_norm
// (its fp32 list), and is also the numerically safe choice: the statistics
// of low-precision activations are computed in float32. The output stays
// float32; the next conv casts it back under autocast.
class Fp32GroupNorm : public nn::GroupNormImpl {
 public:
  using GroupNormImpl::GroupNormImpl;

  torch::Tensor forward(const torch::Tensor& x) {
    if (weight.defined() && x.scalar_type() != weight.scalar_type())
      return GroupNormImpl::forward(x.to(weight.scalar_type()));
    return GroupNormImpl::forward(x);
  }
};

}  // namespace

void RereadBatchCounts() {
  reread_epoch.fetch_add(1, std::memory_order_relaxed);
}

NormKind ParseNormKind(const std::string& norm, bool sync_batchnorm) {
  if (norm == "group") {
    if (sync_batchnorm) {
      throw worker::ConfigError(
          "--sync_batchnorm needs --norm batch (group norm has no batch "
          "statistics to synchronise)");
    }
    return NormKind::kGroup;
  }
  if (norm == "batch")
    return sync_batchnorm ? NormKind::kSyncBatch : NormKind::kBatch;
  throw worker::ConfigError("--norm must be group or batch, got '" + norm +
                            "'");
}

std::string NormKindName(NormKind kind) {
  switch (kind) {
    case NormKind::kGroup:
      return "group";
    case NormKind::kBatch:
      return "batch";
    case NormKind::kSyncBatch:
      return "sync_batch";
  }
  return "?";
}

nn::AnyModule MakeNorm(NormKind kind, int64_t channels, int spatial_dims,
                       int64_t groups, const worker::World& world) {
  switch (kind) {
    case NormKind::kGroup:
      return nn::AnyModule(std::make_shared<Fp32GroupNorm>(
          nn::GroupNormOptions(std::gcd(groups, channels), channels)));
    case NormKind::kBatch:
      if (spatial_dims == 2) {
        return nn::AnyModule(
            std::make_shared<WarmStartBatchNorm<nn::BatchNorm2dImpl>>(
                nn::BatchNormOptions(channels)));
      }
      return nn::AnyModule(
          std::make_shared<WarmStartBatchNorm<nn::BatchNorm3dImpl>>(
              nn::BatchNormOptions(channels)));
    case NormKind::kSyncBatch: {
      worker::SyncBatchNormOptions o;
      o.num_features = channels;
      o.momentum = kMomentum;
      return nn::AnyModule(std::make_shared<WarmStartSyncBatchNorm>(world, o));
    }
  }
  throw worker::ConfigError("unknown norm kind");
}

double AlignBuffersWithRank0(const worker::World& world,
                             torch::nn::Module& module) {
  if (!world.distributed()) return 0.0;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> buffers;
  for (const auto& b : module.buffers()) {
    if (b.is_floating_point()) buffers.push_back(b);
  }
  if (buffers.empty()) return 0.0;
  std::vector<torch::Tensor> flat;
  for (const auto& b : buffers)
    flat.push_back(b.reshape({-1}).to(world.device(), torch::kFloat64));
  torch::Tensor local = torch::cat(flat);
  torch::Tensor root = local.clone();
  world.Broadcast(root, 0);
  torch::Tensor spread = (local - root).abs().max().reshape({1});
  world.AllReduce(spread, worker::ReduceOp::kMax);
  int64_t offset = 0;
  for (auto& b : buffers) {
    b.copy_(root.narrow(0, offset, b.numel()).view_as(b));
    offset += b.numel();
  }
  return spread.item<double>();
}

}  // namespace ddprun::examples
