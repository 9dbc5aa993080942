#include "examples/frame/activation_checkpoint.h"

#include <stdexcept>
#include <vector>

#include <torch/csrc/autograd/custom_function.h>

#include "ddprun/worker/precision.h"

namespace ddprun::examples {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What backward needs besides the saved input: the computation, the
// module's parameters (in the order they were passed as inputs) and
// buffers, and the scope to recompute in. Travels in ctx->saved_data as a
// capsule.
struct Recompute : torch::CustomClassHolder {
  std::function<torch::Tensor(const std::vector<torch::Tensor>&)> fn;
  std::vector<torch::Tensor> params;
  std::vector<torch::Tensor> buffers;
  RecomputeScope scope;
  std::vector<bool> input_requires_grad;
};

// Inputs: the computation's inputs, then the parameters (so the node is
// part of the graph and returns their gradients, even when no input needs
// one), then the state.
class CheckpointFunction
    : public torch::autograd::Function<CheckpointFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               at::TensorList params,
                               c10::intrusive_ptr<Recompute> state) {
    // apply() runs this without grad mode: no graph, no activations kept.
    std::vector<torch::Tensor> in(inputs.begin(), inputs.end());
    torch::Tensor out = state->fn(in);
    ctx->save_for_backward(in);
    ctx->saved_data["state"] = c10::IValue::make_capsule(state);
    return {out};
  }

  static variable_list backward(AutogradContext* ctx,
                                variable_list grad_outputs) {
    auto* state =
        static_cast<Recompute*>(ctx->saved_data["state"].toCapsule().get());
    std::vector<torch::Tensor> inputs;
    for (const torch::Tensor& saved : ctx->get_saved_variables()) {
      torch::Tensor x = saved.detach();
      x.requires_grad_(state->input_requires_grad[inputs.size()]);
      inputs.push_back(x);
    }
    std::vector<torch::Tensor> snapshot;
    {
      torch::NoGradGuard no_grad;
      for (const torch::Tensor& b : state->buffers) {
        snapshot.push_back(b.defined() ? b.clone() : b);
      }
    }
    torch::Tensor out;
    {
      c10::AutoGradMode grad(true);
      auto run = [&] { out = state->fn(inputs); };
      if (state->scope) {
        state->scope(run);
      } else {
        run();
      }
    }
    // Gradients of the inputs that need them, computed here and returned
    // (torch::autograd::grad accumulates nothing into .grad).
    std::vector<torch::Tensor> wrt;
    for (const torch::Tensor& x : inputs) {
      if (x.requires_grad()) wrt.push_back(x);
    }
    for (const torch::Tensor& p : state->params) wrt.push_back(p);
    variable_list grads;
    if (out.requires_grad() && !wrt.empty()) {
      grads = torch::autograd::grad({out}, wrt, {grad_outputs[0]},
                                    /*retain_graph=*/false,
                                    /*create_graph=*/false,
                                    /*allow_unused=*/true);
    } else {
      grads.resize(wrt.size());
    }
    // After the gradients: batch norm's backward checks the version of the
    // running statistics it saved.
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < snapshot.size(); ++i) {
        if (snapshot[i].defined()) state->buffers[i].copy_(snapshot[i]);
      }
    }
    variable_list result;
    size_t next = 0;
    for (const torch::Tensor& x : inputs) {
      result.push_back(x.requires_grad() ? grads[next++] : torch::Tensor());
    }
    for (size_t i = 0; i < state->params.size(); ++i) {
      result.push_back(grads[next++]);
    }
    result.push_back(torch::Tensor());  // the state
    return result;
  }
};

}  // namespace

RecomputeScope AutocastRecompute(const RecomputeAutocast& a) {
  if (!a.enabled) return {};
  return [a](const std::function<void()>& run) {
    worker::AutocastScope autocast(a.enabled, a.device, a.dtype);
    run();
  };
}

torch::Tensor CheckpointedForward(
    torch::nn::Module& module,
    const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& fn,
    const std::vector<torch::Tensor>& inputs, const RecomputeScope& scope) {
  if (!torch::GradMode::is_enabled()) return fn(inputs);
  auto state = c10::make_intrusive<Recompute>();
  for (const torch::Tensor& p : module.parameters()) {
    if (p.requires_grad()) state->params.push_back(p);
  }
  bool any_input = false;
  for (const torch::Tensor& x : inputs) {
    state->input_requires_grad.push_back(x.requires_grad());
    any_input = any_input || x.requires_grad();
  }
  if (state->params.empty() && !any_input) return fn(inputs);
  state->buffers = module.buffers();
  state->fn = fn;
  state->scope = scope;
  variable_list out = CheckpointFunction::apply(
      at::TensorList(inputs), at::TensorList(state->params), state);
  return out[0];
}

torch::Tensor CheckpointedForward(
    torch::nn::Module& module,
    const std::function<torch::Tensor(const torch::Tensor&)>& fn,
    const torch::Tensor& x, const RecomputeScope& scope) {
  return CheckpointedForward(
      module, [fn](const std::vector<torch::Tensor>& in) { return fn(in[0]); },
      {x}, scope);
}

}  // namespace ddprun::examples
