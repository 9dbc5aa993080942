#include "ddprun/worker/sync_batch_norm.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "ddprun/worker/errors.h"

namespace ddprun::worker {
namespace {

std::vector<int64_t> ReduceDims(const at::Tensor& x) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// Shape (1, C, 1, ...) for broadcasting per-channel values against x.
at::Tensor PerChannel(const at::Tensor& v, const at::Tensor& x) {
  std::vector<int64_t> shape(x.dim(), 1);
  shape[1] = -1;
  return v.reshape(shape);
}

// Batch norm over the global batch. The World travels as a pointer in
// saved_data: the owning module (and its World) outlives backward.
class SyncBatchNormFunction
    : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const World* world,
                            double eps, at::Tensor* batch_mean,
                            at::Tensor* batch_var, at::Tensor* count) {
    auto dims = ReduceDims(x);
    int64_t c = x.size(1);
    at::Tensor xf = x.to(at::kFloat);
    // Each rank's count, mean and sum of squared deviations (two-pass,
    // local), combined across ranks as Chan et al.'s parallel variance does
    // and as PyTorch's SyncBatchNorm (batch_norm_gather_stats_with_counts)
    // does. E[x^2] - E[x]^2 from fp32 sums loses the variance to
    // cancellation when |mean| >> std. The counts stay tensors: no host sync.
    const int64_t local_n = c > 0 ? x.numel() / c : 0;
    at::Tensor mean_l = at::zeros({c}, xf.options());
    at::Tensor m2_l = at::zeros({c}, xf.options());
    if (local_n > 0) {
      auto [var_l, mu_l] =
          at::var_mean(xf, at::IntArrayRef(dims), /*unbiased=*/false);
      mean_l = mu_l;
      m2_l = var_l * static_cast<double>(local_n);
    }
    at::Tensor local =
        at::cat({mean_l, m2_l,
                 at::full({1}, static_cast<double>(local_n), xf.options())});
    at::Tensor all = at::stack(world->AllGather(local));  // (ranks, 2c+1)
    at::Tensor counts = all.narrow(1, 2 * c, 1);          // (ranks, 1)
    at::Tensor means = all.narrow(1, 0, c);
    at::Tensor n = counts.sum();
    at::Tensor mean = (means * counts).sum(0) / n;
    at::Tensor m2 =
        all.narrow(1, c, c).sum(0) + (counts * (means - mean).pow(2)).sum(0);
    at::Tensor var = m2 / n;
    at::Tensor invstd = (var + eps).rsqrt();
    at::Tensor xhat = (xf - PerChannel(mean, x)) * PerChannel(invstd, x);
    at::Tensor y = xhat;
    if (weight.defined()) y = y * PerChannel(weight, x) + PerChannel(bias, x);
    ctx->save_for_backward({xhat, invstd, weight, n});
    ctx->saved_data["world"] = reinterpret_cast<int64_t>(world);
    *batch_mean = mean;
    *batch_var = var;
    *count = n;
    return y.to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor xhat = saved[0], invstd = saved[1], weight = saved[2];
    at::Tensor n = saved[3];
    const World* world =
        reinterpret_cast<const World*>(ctx->saved_data["world"].toInt());
    at::Tensor dy = grads[0].to(at::kFloat);
    auto dims = ReduceDims(dy);
    int64_t c = dy.size(1);
    // Local sums: the affine gradients stay local (DDP averages them).
    at::Tensor sum_dy = dy.sum(dims);
    at::Tensor sum_dy_xhat = (dy * xhat).sum(dims);
    at::Tensor dweight, dbias;
    if (weight.defined()) {
      dweight = sum_dy_xhat.clone();
      dbias = sum_dy.clone();
    }
    at::Tensor sums = at::cat({sum_dy, sum_dy_xhat});
    world->AllReduce(sums, ReduceOp::kSum);
    at::Tensor mean_dy = sums.narrow(0, 0, c) / n;
    at::Tensor mean_dy_xhat = sums.narrow(0, c, c) / n;
    at::Tensor scale = invstd;
    if (weight.defined()) scale = scale * weight;
    at::Tensor dx =
        (dy - PerChannel(mean_dy, dy) - xhat * PerChannel(mean_dy_xhat, dy)) *
        PerChannel(scale, dy);
    return {dx.to(grads[0].scalar_type()),
            dweight,
            dbias,
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor(),
            at::Tensor()};
  }
};

}  // namespace

SyncBatchNormImpl::SyncBatchNormImpl(World world, SyncBatchNormOptions options)
    : world_(std::move(world)), options_(options) {
  if (options_.num_features <= 0) {
    throw ConfigError("SyncBatchNorm: num_features must be > 0");
  }
  reset();
}

void SyncBatchNormImpl::reset() {
  int64_t c = options_.num_features;
  if (options_.affine) {
    weight = register_parameter("weight", at::ones({c}));
    bias = register_parameter("bias", at::zeros({c}));
  }
  running_mean = register_buffer("running_mean", at::zeros({c}));
  running_var = register_buffer("running_var", at::ones({c}));
  num_batches_tracked =
      register_buffer("num_batches_tracked", at::zeros({}, at::kLong));
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  if (input.dim() < 2 || input.size(1) != options_.num_features) {
    throw ConfigError("SyncBatchNorm: expected (N, " +
                      std::to_string(options_.num_features) +
                      ", ...) input, got " + c10::str(input.sizes()));
  }
  if (!is_training()) {
    at::Tensor y = (input - PerChannel(running_mean, input)) *
                   PerChannel((running_var + options_.eps).rsqrt(), input);
    if (options_.affine) {
      y = y * PerChannel(weight, input) + PerChannel(bias, input);
    }
    return y;
  }
  at::Tensor mean, var, count;
  at::Tensor y = SyncBatchNormFunction::apply(
      input, options_.affine ? weight : at::Tensor(),
      options_.affine ? bias : at::Tensor(), &world_, options_.eps, &mean, &var,
      &count);
  {
    at::NoGradGuard no_grad;
    double m = options_.momentum;
    // n / (n - 1) where n > 1, as a tensor: no host sync.
    at::Tensor unbias =
        at::where(count > 1, count / (count - 1), at::ones_like(count));
    running_mean.mul_(1 - m).add_(mean.detach(), m);
    running_var.mul_(1 - m).add_(var.detach() * unbias, m);
    num_batches_tracked.add_(1);
  }
  return y;
}

}  // namespace ddprun::worker
