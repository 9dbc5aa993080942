#include "examples/ddpm/checkpointed_call.h"

#include <torch/torch.h>

#include "ddprun/worker/precision.h"

namespace ddprun::examples {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward pass needs besides the saved inputs; held by the
// autograd graph (a capsule in the context) until the graph is freed.
struct Recompute : torch::CustomClassHolder {
  CheckpointFn fn;
  RecomputeAutocast autocast;
};

class CheckpointFunction
    : public torch::autograd::Function<CheckpointFunction> {
 public:
  static variable_list forward(AutogradContext* ctx,
                               c10::intrusive_ptr<Recompute> recompute,
                               at::TensorList inputs) {
    // Runs under no-grad (Function::apply): nothing inside fn is kept.
    std::vector<at::Tensor> in(inputs.begin(), inputs.end());
    variable_list out = recompute->fn(in);
    ctx->save_for_backward(in);
    ctx->saved_data["recompute"] =
        c10::IValue::make_capsule(std::move(recompute));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto recompute = c10::static_intrusive_pointer_cast<Recompute>(
        ctx->saved_data["recompute"].toCapsule());
    std::vector<at::Tensor> inputs;
    for (const at::Tensor& x : ctx->get_saved_variables()) {
      inputs.push_back(x.detach().requires_grad_(x.requires_grad()));
    }
    variable_list outputs;
    {
      torch::AutoGradMode grad_on(true);
      const RecomputeAutocast& a = recompute->autocast;
      worker::AutocastScope autocast(a.enabled, a.device, a.dtype);
      outputs = recompute->fn(inputs);
    }
    variable_list roots, root_grads;
    for (size_t i = 0; i < outputs.size() && i < grads.size(); ++i) {
      if (outputs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    variable_list result{at::Tensor()};  // for `recompute`
    for (const at::Tensor& x : inputs) {
      result.push_back(x.requires_grad() ? x.grad() : at::Tensor());
    }
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> CheckpointedCall(const CheckpointFn& fn,
                                         const std::vector<at::Tensor>& inputs,
                                         const RecomputeAutocast& autocast) {
  bool any_grad = false;
  for (const at::Tensor& x : inputs) any_grad = any_grad || x.requires_grad();
  if (!torch::GradMode::is_enabled() || !any_grad) return fn(inputs);
  auto recompute = c10::make_intrusive<Recompute>();
  recompute->fn = fn;
  recompute->autocast = autocast;
  return CheckpointFunction::apply(std::move(recompute),
                                   at::TensorList(inputs));
}

}  // namespace ddprun::examples
