#include "examples/cascade/grad_checkpoint.h"

#include <cstdint>

#include <torch/csrc/autograd/custom_function.h>

#include "ddprun/worker/precision.h"

namespace ddprun::examples {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// inputs..., parameters... are the node's differentiable inputs; the block
// and the autocast are plain arguments (no gradient).
class CheckpointFunction
    : public torch::autograd::Function<CheckpointFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, at::TensorList inputs,
                            at::TensorList params, Recomputable* block,
                            RecomputeAutocast autocast) {
    ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
    ctx->saved_data["inputs"] = static_cast<int64_t>(inputs.size());
    ctx->saved_data["params"] = static_cast<int64_t>(params.size());
    ctx->saved_data["autocast"] = autocast.enabled;
    ctx->saved_data["device_type"] =
        static_cast<int64_t>(autocast.device.type());
    ctx->saved_data["device_index"] =
        static_cast<int64_t>(autocast.device.index());
    ctx->saved_data["dtype"] = static_cast<int64_t>(autocast.dtype);
    ctx->save_for_backward(inputs.vec());
    // Grad mode is off here (Function::apply): nothing inside is recorded.
    return block->Recompute(inputs.vec());
  }

  static variable_list backward(AutogradContext* ctx,
                                variable_list grad_outputs) {
    auto* block =
        reinterpret_cast<Recomputable*>(ctx->saved_data["block"].toInt());
    const int64_t n_inputs = ctx->saved_data["inputs"].toInt();
    const int64_t n_params = ctx->saved_data["params"].toInt();
    RecomputeAutocast autocast;
    autocast.enabled = ctx->saved_data["autocast"].toBool();
    autocast.device = c10::Device(
        static_cast<c10::DeviceType>(ctx->saved_data["device_type"].toInt()),
        static_cast<c10::DeviceIndex>(ctx->saved_data["device_index"].toInt()));
    autocast.dtype =
        static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());

    const variable_list saved = ctx->get_saved_variables();
    std::vector<at::Tensor> inputs;
    for (const at::Tensor& s : saved) {
      inputs.push_back(s.detach().requires_grad_(s.requires_grad()));
    }
    const std::vector<at::Tensor> params = block->RecomputeParameters();
    at::Tensor out;
    {
      torch::AutoGradMode grad_on(true);
      worker::AutocastScope scope(autocast.enabled, autocast.device,
                                  autocast.dtype);
      out = block->Recompute(inputs);
    }
    // One result per forward argument: inputs, parameters, then the two
    // plain arguments (undefined).
    variable_list result(n_inputs + n_params + 2);
    std::vector<at::Tensor> wrt;
    std::vector<size_t> where;
    for (int64_t i = 0; i < n_inputs; ++i) {
      if (inputs[i].requires_grad()) {
        wrt.push_back(inputs[i]);
        where.push_back(i);
      }
    }
    for (int64_t p = 0; p < n_params; ++p) {
      if (params[p].requires_grad()) {
        wrt.push_back(params[p]);
        where.push_back(n_inputs + p);
      }
    }
    if (wrt.empty() || !out.requires_grad()) return result;
    const variable_list grads = torch::autograd::grad(
        {out}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
        /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t k = 0; k < grads.size(); ++k) result[where[k]] = grads[k];
    return result;
  }
};

}  // namespace

at::Tensor CheckpointedCall(Recomputable* block,
                            const std::vector<at::Tensor>& inputs,
                            const RecomputeAutocast& autocast) {
  if (!torch::GradMode::is_enabled()) return block->Recompute(inputs);
  const std::vector<at::Tensor> params = block->RecomputeParameters();
  return CheckpointFunction::apply(at::TensorList(inputs),
                                   at::TensorList(params), block, autocast);
}

}  // namespace ddprun::examples
