#include "examples/cascade/cascade_model.h"

#include <cmath>

#include "ddprun/worker/errors.h"
#include "examples/cascade/drr.h"

namespace ddprun::examples {

namespace F = torch::nn::functional;

namespace {

torch::nn::LayerNorm PlainNorm(int64_t dim) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({dim}).elementwise_affine(false).eps(1e-6));
}

// A linear layer that starts at zero (adaLN-Zero: every block starts as
// the identity, the head predicts 0).
torch::nn::Linear ZeroLinear(int64_t in, int64_t out) {
  torch::nn::Linear layer(in, out);
  torch::NoGradGuard no_grad;
  layer->weight.zero_();
  layer->bias.zero_();
  return layer;
}

// [B, dim] -> [B, 1, dim], to modulate every token.
torch::Tensor Tokens(const torch::Tensor& t) { return t.unsqueeze(1); }

}  // namespace

VitBlockImpl::VitBlockImpl(int64_t dim, int64_t heads)
    : heads_(heads),
      norm1_(register_module("norm1", PlainNorm(dim))),
      norm2_(register_module("norm2", PlainNorm(dim))),
      qkv_(register_module("qkv", torch::nn::Linear(dim, 3 * dim))),
      proj_(register_module("proj", torch::nn::Linear(dim, dim))),
      fc1_(register_module("fc1", torch::nn::Linear(dim, 4 * dim))),
      fc2_(register_module("fc2", torch::nn::Linear(4 * dim, dim))),
      modulation_(register_module("modulation", ZeroLinear(dim, 6 * dim))) {}

torch::Tensor VitBlockImpl::forward(const torch::Tensor& x,
                                    const torch::Tensor& cond) {
  const auto m = modulation_(torch::silu(cond)).chunk(6, -1);
  const int64_t b = x.size(0), n = x.size(1), dim = x.size(2);
  const int64_t head_dim = dim / heads_;
  torch::Tensor h = norm1_(x) * (1 + Tokens(m[1])) + Tokens(m[0]);
  const torch::Tensor qkv =
      qkv_(h).view({b, n, 3, heads_, head_dim}).permute({2, 0, 3, 1, 4});
  const torch::Tensor attention =
      torch::softmax(qkv[0].matmul(qkv[1].transpose(-2, -1)) *
                         (1.0 / std::sqrt(static_cast<double>(head_dim))),
                     -1);
  h = attention.matmul(qkv[2]).transpose(1, 2).reshape({b, n, dim});
  torch::Tensor out = x + Tokens(m[2]) * proj_(h);
  h = norm2_(out) * (1 + Tokens(m[4])) + Tokens(m[3]);
  return out + Tokens(m[5]) * fc2_(torch::gelu(fc1_(h)));
}

CascadeStageImpl::CascadeStageImpl(const StageModelOptions& options)
    : options_(options), dim_(options.stage.voxel_dim) {
  const StageConfig& s = options.stage;
  const int64_t p = s.patch_size;
  const XrayOptions& x = options.xray;
  if (x.num_views < 1 || x.num_views > 2 || x.patch_size < 1 ||
      x.img_size % x.patch_size != 0) {
    throw worker::ConfigError(
        "xray_config: num_views must be 1 or 2 and img_size a multiple of "
        "the X-ray patch size");
  }
  int64_t tokens = 1;
  for (int64_t edge : s.volume_size) {
    grid_.push_back(edge / p);
    tokens *= edge / p;
  }
  // The noisy volume, the previous stage's output, and each view's
  // back-projection (drr.h): the views enter twice, as voxels on their
  // beams here and as learned features (LiftViews).
  const int64_t in_channels =
      1 + (options.conditioned_on_previous ? 1 : 0) + x.num_views;
  patch_embed_ = register_module(
      "patch_embed",
      torch::nn::Conv3d(
          torch::nn::Conv3dOptions(in_channels, dim_, p).stride(p)));
  positions_ =
      register_parameter("positions", torch::randn({1, tokens, dim_}) * 0.02);
  view_embed_ = register_module("view_embed", torch::nn::ModuleList());
  for (int64_t v = 0; v < x.num_views; ++v) {
    view_embed_->push_back(torch::nn::Conv2d(
        torch::nn::Conv2dOptions(1, dim_, x.patch_size).stride(x.patch_size)));
  }
  time_mlp_ = register_module(
      "time_mlp",
      torch::nn::Sequential(torch::nn::Linear(dim_, dim_), torch::nn::SiLU(),
                            torch::nn::Linear(dim_, dim_)));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < s.vit_depth; ++i) {
    blocks_->push_back(VitBlock(dim_, s.num_heads));
  }
  final_norm_ = register_module("final_norm", PlainNorm(dim_));
  final_modulation_ =
      register_module("final_modulation", ZeroLinear(dim_, 2 * dim_));
  head_ = register_module("head", ZeroLinear(dim_, p * p * p));
}

torch::Tensor CascadeStageImpl::TimeEmbedding(const torch::Tensor& t) const {
  const int64_t half = dim_ / 2;
  const torch::Tensor freqs = torch::exp(
      torch::arange(half,
                    torch::TensorOptions(torch::kFloat32).device(t.device())) *
      (-std::log(10000.0) / std::max<int64_t>(half, 1)));
  const torch::Tensor angles =
      t.to(torch::kFloat32).unsqueeze(1) * freqs.unsqueeze(0);
  torch::Tensor emb = torch::cat({torch::sin(angles), torch::cos(angles)}, 1);
  if (emb.size(1) < dim_) {
    emb = F::pad(emb, F::PadFuncOptions({0, dim_ - emb.size(1)}));
  }
  return emb;
}

torch::Tensor CascadeStageImpl::LiftViews(const torch::Tensor& views,
                                          torch::Tensor* pooled) {
  const int64_t gd = grid_[0], gh = grid_[1], gw = grid_[2];
  torch::Tensor lifted;
  torch::Tensor pool_sum;
  for (int64_t v = 0; v < options_.xray.num_views; ++v) {
    const torch::Tensor image = views.select(1, v).unsqueeze(1) * 2.0 - 1.0;
    const torch::Tensor features =
        view_embed_[v]->as<torch::nn::Conv2d>()->forward(image);
    pool_sum =
        v == 0 ? features.mean({2, 3}) : pool_sum + features.mean({2, 3});
    // A frontal pixel (d, w) lies on the beam through every h; a lateral
    // pixel (d, h) on the beam through every w.
    const std::vector<int64_t> rows_cols =
        v == 0 ? std::vector<int64_t>{gd, gw} : std::vector<int64_t>{gd, gh};
    torch::Tensor map = F::adaptive_avg_pool2d(
        features, F::AdaptiveAvgPool2dFuncOptions(rows_cols));
    map = v == 0 ? map.unsqueeze(3).expand({-1, -1, gd, gh, gw})
                 : map.unsqueeze(4).expand({-1, -1, gd, gh, gw});
    lifted = v == 0 ? map : lifted + map;
  }
  *pooled = pool_sum / static_cast<double>(options_.xray.num_views);
  return lifted.flatten(2).transpose(1, 2);  // [B, N, dim]
}

torch::Tensor CascadeStageImpl::forward(const torch::Tensor& x_t,
                                        const torch::Tensor& t,
                                        const torch::Tensor& views,
                                        const torch::Tensor& previous) {
  const int64_t b = x_t.size(0);
  const int64_t p = options_.stage.patch_size;
  std::vector<torch::Tensor> channels{x_t};
  if (options_.conditioned_on_previous) channels.push_back(previous);
  channels.push_back(
      BackProjection(views, options_.stage.volume_size).to(x_t.scalar_type()));
  const torch::Tensor input = torch::cat(channels, 1);
  torch::Tensor pooled;
  torch::Tensor tokens = patch_embed_(input).flatten(2).transpose(1, 2) +
                         positions_ + LiftViews(views, &pooled);
  const torch::Tensor cond = time_mlp_->forward(TimeEmbedding(t)) + pooled;
  for (const auto& module : *blocks_) {
    auto* block = module->as<VitBlock>();
    tokens = options_.gradient_checkpointing
                 ? CheckpointedForward(
                       *block,
                       [block](const std::vector<torch::Tensor>& in) {
                         return block->forward(in[0], in[1]);
                       },
                       {tokens, cond}, AutocastRecompute(options_.recompute))
                 : block->forward(tokens, cond);
  }
  const auto m = final_modulation_(torch::silu(cond)).chunk(2, -1);
  tokens = final_norm_(tokens) * (1 + Tokens(m[1])) + Tokens(m[0]);
  // [B, N, p^3] -> [B, 1, D, H, W].
  return head_(tokens)
      .view({b, grid_[0], grid_[1], grid_[2], p, p, p})
      .permute({0, 1, 4, 2, 5, 3, 6})
      .reshape({b, 1, grid_[0] * p, grid_[1] * p, grid_[2] * p});
}

CascadeModelImpl::CascadeModelImpl(const std::vector<StageConfig>& stages,
                                   const XrayOptions& xray,
                                   bool gradient_checkpointing,
                                   const RecomputeAutocast& recompute) {
  for (size_t k = 0; k < stages.size(); ++k) {
    StageModelOptions o;
    o.stage = stages[k];
    o.xray = xray;
    o.conditioned_on_previous = k > 0;
    o.gradient_checkpointing = gradient_checkpointing;
    o.recompute = recompute;
    stages_.push_back(
        register_module("stage" + std::to_string(k + 1), CascadeStage(o)));
  }
}

}  // namespace ddprun::examples
