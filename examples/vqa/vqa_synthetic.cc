#include "examples/vqa/vqa_synthetic.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "examples/frame/image_io.h"
#include "examples/vqa/vqa_data.h"
#include "examples/vqa/vqa_mimic.h"

namespace ddprun::examples {
namespace {

namespace fs = std::filesystem;

const char* const kQuadrants[4] = {"upper left", "upper right", "lower left",
                                   "lower right"};

// One synthetic study: the image, what is in it and its labels.
struct Sample {
  torch::Tensor image;
  bool present[4] = {};
  int count = 0;
  nlohmann::json labels = nlohmann::json::array();  // 14 of 1, 0, -1
};

class Generator {
 public:
  Generator(int64_t size, uint64_t seed) : size_(size), rng_(seed) {
    torch::manual_seed(seed);
    torch::Tensor grid = torch::arange(size, torch::kFloat32);
    yy_ = grid.view({-1, 1});
    xx_ = grid.view({1, -1});
  }

  Sample Next() {
    Sample s;
    const double half = size_ / 2.0;
    s.image = 0.2 + 0.05 * torch::randn({size_, size_});
    for (int q = 0; q < 4; ++q) {
      s.present[q] = Unit() < 0.5;
      if (!s.present[q]) continue;
      ++s.count;
      const double r = size_ * (0.07 + 0.05 * Unit());
      const double cy = (q / 2) * half + r + (half - 2 * r) * Unit();
      const double cx = (q % 2) * half + r + (half - 2 * r) * Unit();
      s.image = s.image + 0.6 * ((yy_ - cy).pow(2) + (xx_ - cx).pow(2))
                                    .le(r * r)
                                    .to(torch::kFloat32);
    }
    for (int k = 0; k < kCheXpertLabels; ++k) {
      const double u = Unit();
      if (u < 0.1) {
        s.labels.push_back(-1);
      } else {
        bool v = s.present[k % 4];
        if (u < 0.2) v = !v;
        s.labels.push_back(v ? 1 : 0);
      }
    }
    return s;
  }

  // A question about `s`: yes/no about a quadrant (60%) or the count;
  // `kind` 0 or 1 forces one of them.
  std::pair<std::string, std::string> Question(const Sample& s, int kind = -1) {
    if (kind == 0 || (kind < 0 && Unit() < 0.6)) {
      const int q = static_cast<int>(rng_() % 4);
      return {std::string("is there an opacity in the ") + kQuadrants[q] + "?",
              s.present[q] ? "yes" : "no"};
    }
    return {"how many opacities are there?", std::to_string(s.count)};
  }

 private:
  double Unit() { return unit_(rng_); }

  int64_t size_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<double> unit_{0.0, 1.0};
  torch::Tensor yy_, xx_;
};

Status WriteImage(const std::string& path, const torch::Tensor& image,
                  bool jpeg) {
  return jpeg ? WriteGrayJpeg(path, image) : WriteGrayPng(path, image);
}

// Writes `text` to `path` through a temporary file renamed into place.
Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text;
    out.close();
    if (!out) return InternalError("cannot write " + path);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return InternalError("cannot write " + path + ": " + ec.message());
  return Status::Ok();
}

Status MakeDirs(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InternalError("cannot create " + dir + ": " + ec.message());
  return Status::Ok();
}

}  // namespace

Status WriteSyntheticVqa(const std::string& dir, int64_t n, int64_t size,
                         uint64_t seed, bool jpeg) {
  DDP_RETURN_IF_ERROR(MakeDirs(dir + "/images"));
  Generator gen(size, seed);
  std::string jsonl;
  for (int64_t i = 0; i < n; ++i) {
    const Sample s = gen.Next();
    char name[32];
    std::snprintf(name, sizeof(name), "images/%05lld.%s",
                  static_cast<long long>(i), jpeg ? "jpg" : "png");
    DDP_RETURN_IF_ERROR(WriteImage(dir + "/" + name, s.image, jpeg));
    auto [question, answer] = gen.Question(s);
    jsonl += nlohmann::json{{"image", name},
                            {"question", question},
                            {"answer", answer},
                            {"labels", s.labels}}
                 .dump() +
             "\n";
  }
  return WriteFileAtomically(dir + "/vqa.jsonl", jsonl);
}

Status WriteSyntheticMimic(const std::string& dir, int64_t n, int64_t size,
                           uint64_t seed, bool jpeg) {
  Generator gen(size, seed);
  std::string csv = "subject_id,study_id";
  for (const std::string& name : CheXpertNames()) csv += "," + name;
  csv += "\n";
  for (int64_t i = 0; i < n; ++i) {
    const Sample s = gen.Next();
    const int64_t subject = 10000000 + i / 2, study = 50000000 + i;
    const std::string study_path = MimicStudyPath(subject, study);
    const std::string image_dir = dir + "/" + kMimicImages + "/" + study_path;
    const std::string qa_file =
        dir + "/" + kMimicQuestions + "/" + study_path + ".qa.json";
    DDP_RETURN_IF_ERROR(MakeDirs(image_dir));
    DDP_RETURN_IF_ERROR(MakeDirs(fs::path(qa_file).parent_path().string()));
    char dicom[48];
    std::snprintf(dicom, sizeof(dicom), "%08llx-synthetic.%s",
                  static_cast<unsigned long long>(i), jpeg ? "jpg" : "png");
    DDP_RETURN_IF_ERROR(WriteImage(image_dir + "/" + dicom, s.image, jpeg));

    nlohmann::json questions = nlohmann::json::array();
    auto add = [&](int kind) {
      auto [question, answer] = gen.Question(s, kind);
      questions.push_back(
          {{"question_id",
            std::to_string(study) + "_" + std::to_string(questions.size())},
           {"question_type",
            question.rfind("how many", 0) == 0 ? "count" : "has_finding"},
           {"question", question},
           {"answers", {{{"answer_type", "main_answer"}, {"text", answer}}}}});
    };
    add(-1);
    if (i % 4 == 0) add(questions[0]["question_type"] == "count" ? 0 : 1);
    DDP_RETURN_IF_ERROR(WriteFileAtomically(
        qa_file, nlohmann::json{{"study_id", "s" + std::to_string(study)},
                                {"questions", questions}}
                     .dump(1)));

    csv += std::to_string(subject) + "," + std::to_string(study);
    for (const auto& v : s.labels) {
      // MIMIC-CXR writes 1.0 / 0.0 / -1.0 (and leaves unmentioned ones
      // empty).
      csv += "," + std::to_string(v.get<int>()) + ".0";
    }
    csv += "\n";
  }
  return WriteFileAtomically(dir + "/" + kMimicLabelsCsv, csv);
}

}  // namespace ddprun::examples
