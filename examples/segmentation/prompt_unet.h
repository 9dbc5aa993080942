#pragma once

#include <torch/torch.h>

namespace ddprun::examples {

struct PromptUNetOptions {
  int64_t vocab_size = 2;
  int64_t width = 8;       // channels of the first level; doubled per level
  int64_t embed_dim = 32;  // prompt word embedding size
};

// Text-prompted 2D UNet (PRS-Med style). The image gets two coordinate
// channels (CoordConv) so features know where they are; the prompt
// ("lesion in the upper left") is embedded (mean of word embeddings, padding
// ignored) and modulates the bottleneck by FiLM (x * (1 + gamma) + beta), so
// the decoder segments the structure the prompt points at.
// forward(image [N,1,H,W], tokens [N,L] int64) -> logits [N,1,H,W];
// H and W must be divisible by 8.
class PromptUNetImpl : public torch::nn::Module {
 public:
  explicit PromptUNetImpl(const PromptUNetOptions& options);
  torch::Tensor forward(torch::Tensor image, torch::Tensor tokens);

 private:
  torch::nn::Sequential enc1_{nullptr}, enc2_{nullptr}, enc3_{nullptr},
      bottleneck_{nullptr};
  torch::nn::Sequential dec3_{nullptr}, dec2_{nullptr}, dec1_{nullptr};
  torch::nn::ConvTranspose2d up3_{nullptr}, up2_{nullptr}, up1_{nullptr};
  torch::nn::Conv2d out_{nullptr};
  torch::nn::Embedding embed_{nullptr};
  torch::nn::Sequential film_{nullptr};
};
TORCH_MODULE(PromptUNet);

}  // namespace ddprun::examples
