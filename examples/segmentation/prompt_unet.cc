#include "examples/segmentation/prompt_unet.h"

#include "examples/frame/norm_layer.h"

namespace ddprun::examples {
namespace {

namespace nn = torch::nn;

// Batch norm with warm-started running statistics (see MakeNorm).
nn::AnyModule Norm(int64_t channels) {
  return MakeNorm(NormKind::kBatch, channels, /*spatial_dims=*/2,
                  /*groups=*/1, worker::World());
}

// Two 3x3 conv + batch norm + relu.
nn::Sequential DoubleConv(int64_t in, int64_t out) {
  return nn::Sequential(
      nn::Conv2d(nn::Conv2dOptions(in, out, 3).padding(1).bias(false)),
      Norm(out), nn::ReLU(true),
      nn::Conv2d(nn::Conv2dOptions(out, out, 3).padding(1).bias(false)),
      Norm(out), nn::ReLU(true));
}

nn::ConvTranspose2d Up(int64_t in, int64_t out) {
  return nn::ConvTranspose2d(nn::ConvTranspose2dOptions(in, out, 2).stride(2));
}

}  // namespace

PromptUNetImpl::PromptUNetImpl(const PromptUNetOptions& o) {
  const int64_t w = o.width;
  enc1_ = register_module("enc1", DoubleConv(3, w));
  enc2_ = register_module("enc2", DoubleConv(w, 2 * w));
  enc3_ = register_module("enc3", DoubleConv(2 * w, 4 * w));
  bottleneck_ = register_module("bottleneck", DoubleConv(4 * w, 8 * w));
  up3_ = register_module("up3", Up(8 * w, 4 * w));
  dec3_ = register_module("dec3", DoubleConv(8 * w, 4 * w));
  up2_ = register_module("up2", Up(4 * w, 2 * w));
  dec2_ = register_module("dec2", DoubleConv(4 * w, 2 * w));
  up1_ = register_module("up1", Up(2 * w, w));
  dec1_ = register_module("dec1", DoubleConv(2 * w, w));
  out_ = register_module("out", nn::Conv2d(nn::Conv2dOptions(w, 1, 1)));
  embed_ = register_module(
      "embed",
      nn::Embedding(
          nn::EmbeddingOptions(o.vocab_size, o.embed_dim).padding_idx(0)));
  film_ = register_module(
      "film", nn::Sequential(nn::Linear(o.embed_dim, 64), nn::ReLU(true),
                             nn::Linear(64, 2 * 8 * w)));
}

torch::Tensor PromptUNetImpl::forward(torch::Tensor image,
                                      torch::Tensor tokens) {
  const int64_t n = image.size(0), h = image.size(2), w = image.size(3);
  auto opts = image.options();
  torch::Tensor ys =
      torch::linspace(-1, 1, h, opts).view({1, 1, h, 1}).expand({n, 1, h, w});
  torch::Tensor xs =
      torch::linspace(-1, 1, w, opts).view({1, 1, 1, w}).expand({n, 1, h, w});
  torch::Tensor x1 = enc1_->forward(torch::cat({image, ys, xs}, 1));
  torch::Tensor x2 = enc2_->forward(torch::max_pool2d(x1, 2));
  torch::Tensor x3 = enc3_->forward(torch::max_pool2d(x2, 2));
  torch::Tensor b = bottleneck_->forward(torch::max_pool2d(x3, 2));

  torch::Tensor mask =
      tokens.ne(0).to(b.scalar_type()).unsqueeze(-1);  // [N,L,1]
  torch::Tensor words = embed_->forward(tokens).to(b.scalar_type());
  torch::Tensor prompt = (words * mask).sum(1) / mask.sum(1).clamp_min(1.0);
  torch::Tensor film = film_->forward(prompt).to(b.scalar_type());
  auto gb = film.chunk(2, 1);
  b = b * (1 + gb[0].unsqueeze(-1).unsqueeze(-1)) +
      gb[1].unsqueeze(-1).unsqueeze(-1);

  torch::Tensor d3 = dec3_->forward(torch::cat({up3_->forward(b), x3}, 1));
  torch::Tensor d2 = dec2_->forward(torch::cat({up2_->forward(d3), x2}, 1));
  torch::Tensor d1 = dec1_->forward(torch::cat({up1_->forward(d2), x1}, 1));
  return out_->forward(d1);
}

}  // namespace ddprun::examples
