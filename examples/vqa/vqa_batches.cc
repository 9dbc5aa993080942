#include "examples/vqa/vqa_batches.h"

#include "examples/frame/image_io.h"
#include "examples/frame/trainer_support.h"

namespace ddprun::examples {

StatusOr<VqaBatch> LoadVqaBatch(const std::vector<VqaRecord>& records,
                                const Vocabulary& vocab,
                                const LabelSet& answers, const VqaOptions& opt,
                                const std::vector<int64_t>& items) {
  std::vector<torch::Tensor> images, tokens, labels, mask;
  std::vector<int64_t> answer_ids;
  for (int64_t p : items) {
    const VqaRecord& r = records[p];
    DDP_ASSIGN_OR_RETURN(torch::Tensor image,
                         AtRow(r.where, ReadGrayImage(r.image, opt.image_size)));
    images.push_back(image);
    tokens.push_back(
        torch::tensor(vocab.Encode(r.question, opt.question_length)));
    answer_ids.push_back(answers.Index(r.answer));  // -1: unseen, ignored
    labels.push_back(torch::tensor(r.labels));
    mask.push_back(torch::tensor(r.mask));
  }
  return VqaBatch{torch::stack(images), torch::stack(tokens),
                  torch::tensor(answer_ids), torch::stack(labels),
                  torch::stack(mask)};
}

std::string DescribeAnswers(const LabelSet& answers) {
  std::string text = std::to_string(answers.size()) + " answers (";
  for (int64_t i = 0; i < answers.size() && i < 10; ++i)
    text += (i ? ", " : "") + answers.Label(i);
  return text + (answers.size() > 10 ? ", ...)" : ")");
}

VqaVocabularies BuildVqaVocabularies(const std::vector<VqaRecord>& records,
                                     const std::vector<int64_t>& train) {
  std::vector<std::string> questions, answers;
  for (int64_t i : train) {
    questions.push_back(records[i].question);
    answers.push_back(records[i].answer);
  }
  return {Vocabulary::Build(questions), LabelSet::Build(answers)};
}

std::string DescribeVqaRun(const VqaOptions& opt, const VqaVocabularies& vocab,
                           size_t train_questions, size_t val_questions,
                           int64_t accumulation, int world_size, NormKind norm,
                           const std::string& precision) {
  return "vqa: " + std::to_string(train_questions) + " train / " +
         std::to_string(val_questions) + " val questions, " +
         DescribeAnswers(vocab.answers) + ", " +
         std::to_string(vocab.words.num_words()) + " question words, batch " +
         std::to_string(opt.guide.batch_size) + " x accumulation " +
         std::to_string(accumulation) + " x world " +
         std::to_string(world_size) + " = effective " +
         std::to_string(opt.guide.batch_size * accumulation * world_size) +
         ", zero " + std::to_string(opt.guide.zero) +
         (opt.guide.offload_optimizer == "cpu" ? " + CPU offload" : "") + ", " +
         NormKindName(norm) + " norm, " + precision;
}

std::string DescribeUncertain(const std::vector<VqaRecord>& records,
                              const std::string& policy) {
  int64_t n = 0;
  for (const VqaRecord& r : records) n += r.uncertain;
  const std::string effect = policy == "ignore" ? "masked out of loss and AUROC"
                             : policy == "zeros" ? "trained as negative"
                                                 : "trained as positive";
  return "uncertain (-1) labels: " + std::to_string(n) + ", policy " + policy +
         " (" + effect + ")";
}

}  // namespace ddprun::examples
