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
                            at::Tensor* batch_var, int64_t* count) {
    auto dims = ReduceDims(x);
    int64_t c = x.size(1);
    at::Tensor xf = x.to(at::kFloat);
    at::Tensor stats = at::cat({xf.sum(dims), (xf * xf).sum(dims),
                                at::full({1}, x.numel() / c, xf.options())});
    world->AllReduce(stats, ReduceOp::kSum);
    double n = stats[2 * c].item<double>();
    at::Tensor mean = stats.narrow(0, 0, c) / n;
    at::Tensor var = (stats.narrow(0, c, c) / n - mean * mean).clamp_min(0);
    at::Tensor invstd = (var + eps).rsqrt();
    at::Tensor xhat = (xf - PerChannel(mean, x)) * PerChannel(invstd, x);
    at::Tensor y = xhat;
    if (weight.defined()) y = y * PerChannel(weight, x) + PerChannel(bias, x);
    ctx->save_for_backward({xhat, invstd, weight});
    ctx->saved_data["world"] = reinterpret_cast<int64_t>(world);
    ctx->saved_data["n"] = n;
    *batch_mean = mean;
    *batch_var = var;
    *count = static_cast<int64_t>(n);
    return y.to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor xhat = saved[0], invstd = saved[1], weight = saved[2];
    const World* world =
        reinterpret_cast<const World*>(ctx->saved_data["world"].toInt());
    double n = ctx->saved_data["n"].toDouble();
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
  at::Tensor mean, var;
  int64_t count = 0;
  at::Tensor y = SyncBatchNormFunction::apply(
      input, options_.affine ? weight : at::Tensor(),
      options_.affine ? bias : at::Tensor(), &world_, options_.eps, &mean, &var,
      &count);
  {
    at::NoGradGuard no_grad;
    double m = options_.momentum;
    double unbias = count > 1 ? static_cast<double>(count) / (count - 1) : 1.0;
    running_mean.mul_(1 - m).add_(mean.detach(), m);
    running_var.mul_(1 - m).add_(var.detach() * unbias, m);
    num_batches_tracked.add_(1);
  }
  return y;
}

}  // namespace ddprun::worker
