#include "examples/ddpm/unet3d.h"

#include <cmath>

#include "ddprun/worker/errors.h"

namespace ddprun::examples {
namespace {

namespace nn = torch::nn;

nn::AnyModule Norm(const UNet3dOptions& o, int64_t channels) {
  return MakeNorm(o.norm, channels, /*spatial_dims=*/3, /*groups=*/8, o.world);
}

// Registers `norm` under `name` and returns it (AnyModule holds the module
// by pointer, so the registered module is the one forward runs).
nn::AnyModule Register(nn::Module* parent, const std::string& name,
                       nn::AnyModule norm) {
  parent->register_module(name, norm.ptr());
  return norm;
}

// worker::Conv3d: at 2 ranks each rank's batch is often one volume, where
// torch's own layer takes a 20x slower CPU kernel (see conv3d.h).
worker::Conv3d Conv3(int64_t in, int64_t out) {
  return worker::Conv3d(nn::Conv3dOptions(in, out, 3).padding(1));
}

// Norm-SiLU-conv, + time projection, norm-SiLU-conv, + skip.
class ResBlockImpl : public nn::Module {
 public:
  ResBlockImpl(const UNet3dOptions& o, int64_t in, int64_t out)
      : norm1_(Register(this, "norm1", Norm(o, in))),
        conv1_(register_module("conv1", Conv3(in, out))),
        time_(register_module("time", nn::Linear(o.time_dim, out))),
        norm2_(Register(this, "norm2", Norm(o, out))),
        conv2_(register_module("conv2", Conv3(out, out))) {
    if (in != out) {
      skip_ = register_module("skip",
                              worker::Conv3d(nn::Conv3dOptions(in, out, 1)));
    }
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& temb) {
    torch::Tensor h = conv1_->forward(torch::silu(norm1_.forward(x)));
    h = h + time_->forward(temb).view({h.size(0), -1, 1, 1, 1});
    h = conv2_->forward(torch::silu(norm2_.forward(h)));
    return h + (skip_ ? skip_->forward(x) : x);
  }

 private:
  nn::AnyModule norm1_;
  worker::Conv3d conv1_;
  nn::Linear time_;
  nn::AnyModule norm2_;
  worker::Conv3d conv2_;
  worker::Conv3d skip_{nullptr};
};
TORCH_MODULE(ResBlock);

}  // namespace

UNet3dImpl::UNet3dImpl(const UNet3dOptions& o)
    : time_dim_(o.time_dim),
      checkpoint_(o.gradient_checkpointing),
      recompute_autocast_(o.recompute_autocast) {
  if (checkpoint_ && o.norm != NormKind::kGroup) {
    // Recomputing a batch-norm layer in training mode would update its
    // running statistics twice (and redo sync batch norm's collectives).
    throw worker::ConfigError(
        "--gradient_checkpointing needs --norm group (batch norm would "
        "update its running statistics twice)");
  }
  const int64_t w = o.width;
  time_mlp_ = register_module(
      "time_mlp", nn::Sequential(nn::Linear(o.time_dim, o.time_dim), nn::SiLU(),
                                 nn::Linear(o.time_dim, o.time_dim)));
  conv_in_ = register_module("conv_in", Conv3(o.in_channels, w));
  down_ = register_module(
      "down", worker::Conv3d(nn::Conv3dOptions(w, w, 3).stride(2).padding(1)));
  blocks_ = register_module("blocks", nn::ModuleList());
  blocks_->push_back(ResBlock(o, w, w));          // level 1
  blocks_->push_back(ResBlock(o, w, 2 * w));      // level 2
  blocks_->push_back(ResBlock(o, 2 * w, 2 * w));  // middle
  blocks_->push_back(ResBlock(o, 3 * w, w));      // up, after the skip
  norm_out_ = Register(this, "norm_out", Norm(o, w));
  conv_out_ = register_module("conv_out", Conv3(w, o.out_channels));
}

torch::Tensor UNet3dImpl::forward(torch::Tensor x, torch::Tensor t) {
  // Sinusoidal embedding of the integer timestep (as in DDPM).
  const int64_t half = time_dim_ / 2;
  torch::Tensor freqs =
      torch::exp(-std::log(10000.0) * torch::arange(half, x.options()) / half);
  torch::Tensor args = t.to(x.scalar_type()).unsqueeze(1) * freqs.unsqueeze(0);
  torch::Tensor temb =
      time_mlp_->forward(torch::cat({torch::sin(args), torch::cos(args)}, 1));

  auto block = [&](size_t i, const torch::Tensor& h) {
    ResBlockImpl* b = blocks_[i]->as<ResBlock>();
    if (!checkpoint_) return b->forward(h, temb);
    return CheckpointedForward(
        *b,
        [b](const std::vector<torch::Tensor>& in) {
          return b->forward(in[0], in[1]);
        },
        {h, temb}, AutocastRecompute(recompute_autocast_));
  };
  torch::Tensor h1 = block(0, conv_in_->forward(x));
  torch::Tensor h2 = block(2, block(1, down_->forward(h1)));
  namespace F = torch::nn::functional;
  torch::Tensor up = F::interpolate(
      h2,
      F::InterpolateFuncOptions()
          .size(std::vector<int64_t>(h1.sizes().begin() + 2, h1.sizes().end()))
          .mode(torch::kTrilinear)
          .align_corners(false));
  torch::Tensor h = block(3, torch::cat({up, h1}, 1));
  return conv_out_->forward(torch::silu(norm_out_.forward(h)));
}

}  // namespace ddprun::examples
