#include "examples/vqa/vqa_model.h"

namespace ddprun::examples {

namespace nn = torch::nn;

VqaModelImpl::VqaModelImpl(const VqaModelOptions& o) {
  encoder_ = nn::Sequential();
  int64_t in = 1;
  for (int s = 0; s < 4; ++s) {
    const int64_t out = o.width << s;
    encoder_->push_back(nn::Conv2d(
        nn::Conv2dOptions(in, out, 3).stride(2).padding(1).bias(false)));
    encoder_->push_back(
        MakeNorm(o.norm, out, /*spatial_dims=*/2, /*groups=*/4, o.world));
    encoder_->push_back(nn::ReLU(true));
    in = out;
  }
  // A 2x2 pool, not a global one: questions ask about a lung quadrant, so the
  // features must keep where things are.
  encoder_->push_back(nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions(2)));
  encoder_->push_back(nn::Flatten());
  in *= 4;
  register_module("encoder", encoder_);
  embed_ = register_module(
      "embed",
      nn::Embedding(
          nn::EmbeddingOptions(o.vocab_size, o.hidden).padding_idx(0)));
  gru_ = register_module(
      "gru", nn::GRU(nn::GRUOptions(o.hidden, o.hidden).batch_first(true)));
  answer_head_ = register_module(
      "answer_head",
      nn::Sequential(nn::Linear(in + o.hidden, o.hidden), nn::ReLU(true),
                     nn::Linear(o.hidden, o.num_answers)));
  label_head_ = register_module("label_head", nn::Linear(in, o.num_labels));
}

std::pair<torch::Tensor, torch::Tensor> VqaModelImpl::forward(
    torch::Tensor images, torch::Tensor tokens) {
  torch::Tensor image = encoder_->forward(images);
  // Last hidden state at each question's true length (padding is at the end).
  torch::Tensor outputs = std::get<0>(gru_->forward(embed_->forward(tokens)));
  torch::Tensor last = tokens.ne(0).sum(1).clamp_min(1) - 1;
  torch::Tensor question =
      outputs.gather(1, last.view({-1, 1, 1}).expand({-1, 1, outputs.size(2)}))
          .squeeze(1);
  torch::Tensor fused =
      torch::cat({image, question.to(image.scalar_type())}, 1);
  return {answer_head_->forward(fused), label_head_->forward(image)};
}

}  // namespace ddprun::examples
