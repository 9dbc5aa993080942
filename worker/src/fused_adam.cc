#include "ddprun/worker/fused_adam.h"

#include <cmath>
#include <memory>

#include "torch_compat.h"

namespace ddprun::worker {
namespace {

bool Fusable(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided &&
         t.scalar_type() == at::kFloat && t.is_contiguous();
}

// Every parameter with a gradient can take the loop (and its state too, if
// it has one already).
template <typename ParamState, typename Options>
bool AllFusable(torch::optim::Optimizer& opt) {
  for (auto& group : opt.param_groups()) {
    if (static_cast<Options&>(group.options()).amsgrad()) return false;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!Fusable(p) || !Fusable(p.grad())) return false;
      auto it = opt.state().find(torch_compat::OptimizerStateKey(opt, p));
      if (it != opt.state().end()) {
        auto& s = static_cast<ParamState&>(*it->second);
        if (!Fusable(s.exp_avg()) || !Fusable(s.exp_avg_sq())) return false;
      }
    }
  }
  return true;
}

// Torch's Adam/AdamW step (torch/csrc/api/src/optim/adam{,w}.cpp), the same
// sequence of float operations per element. `decoupled`: AdamW's weight
// decay (p *= 1 - lr*wd) instead of Adam's (grad += wd*p).
template <typename ParamState, typename Options>
void FusedStep(torch::optim::Optimizer& opt, bool decoupled) {
  at::NoGradGuard no_grad;
  for (auto& group : opt.param_groups()) {
    auto& o = static_cast<Options&>(group.options());
    const double beta1 = std::get<0>(o.betas());
    const double beta2 = std::get<1>(o.betas());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto key = torch_compat::OptimizerStateKey(opt, p);
      auto it = opt.state().find(key);
      if (it == opt.state().end()) {
        auto fresh = std::make_unique<ParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        it = opt.state().emplace(key, std::move(fresh)).first;
      }
      auto& state = static_cast<ParamState&>(*it->second);
      state.step(state.step() + 1);
      const double bias1 = 1 - std::pow(beta1, state.step());
      const double bias2 = 1 - std::pow(beta2, state.step());
      const float b1 = static_cast<float>(beta1);
      const float b2 = static_cast<float>(beta2);
      const float a1 = static_cast<float>(1 - beta1);
      const float a2 = static_cast<float>(1 - beta2);
      const float sqrt_bias2 = static_cast<float>(std::sqrt(bias2));
      const float eps = static_cast<float>(o.eps());
      const float neg_step = static_cast<float>(-(o.lr() / bias1));
      const float wd = static_cast<float>(o.weight_decay());
      const float decay = static_cast<float>(1 - o.lr() * o.weight_decay());
      float* w = p.data_ptr<float>();
      const float* g = p.grad().data_ptr<float>();
      float* m = state.exp_avg().template data_ptr<float>();
      float* v = state.exp_avg_sq().template data_ptr<float>();
      const int64_t n = p.numel();
      const bool decay_weights = o.weight_decay() != 0;
      for (int64_t i = 0; i < n; ++i) {
        float gi = g[i];
        if (decay_weights) {
          if (decoupled) {
            w[i] *= decay;
          } else {
            gi = gi + wd * w[i];
          }
        }
        m[i] = m[i] * b1 + a1 * gi;
        v[i] = v[i] * b2 + a2 * gi * gi;
        const float denom = std::sqrt(v[i]) / sqrt_bias2 + eps;
        w[i] = w[i] + neg_step * (m[i] / denom);
      }
      // What Torch's in-place updates do: caches keyed by a tensor's version
      // (e.g. oneDNN's prepacked bf16 weights under CPU autocast in Torch
      // 2.x) must see new weights; without it 2.6 trained on stale ones and
      // diverged.
      p.unsafeGetTensorImpl()->bump_version();
      state.exp_avg().unsafeGetTensorImpl()->bump_version();
      state.exp_avg_sq().unsafeGetTensorImpl()->bump_version();
    }
  }
}

}  // namespace

at::Tensor FusedAdam::step(LossClosure closure) {
  using State = torch::optim::AdamParamState;
  using Options = torch::optim::AdamOptions;
  if (closure != nullptr || !AllFusable<State, Options>(*this)) {
    return Adam::step(closure);
  }
  FusedStep<State, Options>(*this, /*decoupled=*/false);
  return {};
}

at::Tensor FusedAdamW::step(LossClosure closure) {
  using State = torch::optim::AdamWParamState;
  using Options = torch::optim::AdamWOptions;
  if (closure != nullptr || !AllFusable<State, Options>(*this)) {
    return AdamW::step(closure);
  }
  FusedStep<State, Options>(*this, /*decoupled=*/true);
  return {};
}

}  // namespace ddprun::worker
