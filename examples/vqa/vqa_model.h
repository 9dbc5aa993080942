#pragma once

#include <torch/torch.h>

#include "ddprun/worker/world.h"
#include "examples/frame/norm_layer.h"

namespace ddprun::examples {

struct VqaModelOptions {
  int64_t vocab_size = 2;
  int64_t num_answers = 2;
  int64_t num_labels = 14;  // CheXpert findings
  int64_t width = 16;       // image encoder channels of the first stage
  int64_t hidden = 64;      // question GRU and fusion size
  NormKind norm = NormKind::kGroup;  // image encoder normalisation
  worker::World world;               // for NormKind::kSyncBatch
};

// Chest X-ray VQA: a 4-stage 2D CNN image encoder (conv + norm + relu,
// stride 2, 2x2 average pool; group norm by default) and a GRU question encoder
// (word embeddings, padding ignored through the lengths), fused by
// concatenation into an MLP answer head over a closed answer vocabulary; a
// linear 14-label CheXpert head reads the image features alone. forward(images
// [N,1,H,W], tokens [N,L]) -> {answer logits [N,A], label logits [N,14]}.
class VqaModelImpl : public torch::nn::Module {
 public:
  explicit VqaModelImpl(const VqaModelOptions& options);
  std::pair<torch::Tensor, torch::Tensor> forward(torch::Tensor images,
                                                  torch::Tensor tokens);

 private:
  torch::nn::Sequential encoder_{nullptr};
  torch::nn::Embedding embed_{nullptr};
  torch::nn::GRU gru_{nullptr};
  torch::nn::Sequential answer_head_{nullptr};
  torch::nn::Linear label_head_{nullptr};
};
TORCH_MODULE(VqaModel);

}  // namespace ddprun::examples
