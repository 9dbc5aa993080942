#include "examples/vqa/vqa_data.h"

#include <filesystem>
#include <fstream>
#include <random>

#include <torch/torch.h>

#include "examples/common/image_io.h"
#include "examples/common/jsonl_reader.h"

namespace ddprun::examples {

StatusOr<std::vector<VqaRecord>> ReadVqaJsonl(const std::string& path,
                                              UncertainPolicy policy) {
  DDP_ASSIGN_OR_RETURN(std::vector<JsonlRecord> lines, ReadJsonl(path));
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  std::vector<VqaRecord> records;
  for (const JsonlRecord& line : lines) {
    const std::string where = path + ":" + std::to_string(line.line) + ": ";
    VqaRecord r;
    r.where = where;
    DDP_ASSIGN_OR_RETURN(r.image, JsonlString(path, line, "image"));
    DDP_ASSIGN_OR_RETURN(r.question, JsonlString(path, line, "question"));
    DDP_ASSIGN_OR_RETURN(r.answer, JsonlString(path, line, "answer"));
    if (std::filesystem::path(r.image).is_relative())
      r.image = (base / r.image).string();
    r.labels.assign(kCheXpertLabels, 0.0f);
    r.mask.assign(kCheXpertLabels, 0.0f);
    auto labels = line.value.find("labels");
    if (labels != line.value.end()) {
      if (!labels->is_array() || labels->size() != kCheXpertLabels) {
        return InvalidArgumentError(where +
                                    "'labels' must be a list of 14 values");
      }
      for (int64_t k = 0; k < kCheXpertLabels; ++k) {
        const auto& v = (*labels)[k];
        if (v.is_null()) continue;
        const double x = v.is_number() ? v.get<double>() : 2.0;
        if (x == 1.0 || x == 0.0) {
          r.labels[k] = static_cast<float>(x);
          r.mask[k] = 1.0f;
        } else if (x == -1.0) {
          ++r.uncertain;
          if (policy == UncertainPolicy::kIgnore) continue;
          r.labels[k] = policy == UncertainPolicy::kOnes ? 1.0f : 0.0f;
          r.mask[k] = 1.0f;
        } else {
          return InvalidArgumentError(where + "label " + std::to_string(k) +
                                      " must be 1, 0, -1 or null, got " +
                                      v.dump());
        }
      }
    }
    records.push_back(std::move(r));
  }
  if (records.empty()) return InvalidArgumentError(path + ": no records");
  return records;
}

Status WriteSyntheticVqa(const std::string& dir, int64_t n, int64_t size,
                         uint64_t seed, bool jpeg) {
  std::error_code ec;
  std::filesystem::create_directories(dir + "/images", ec);
  if (ec)
    return InternalError("cannot create " + dir + "/images: " + ec.message());
  static const char* kQuadrants[4] = {"upper left", "upper right", "lower left",
                                      "lower right"};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  torch::manual_seed(seed);
  torch::Tensor grid = torch::arange(size, torch::kFloat32);
  torch::Tensor yy = grid.view({-1, 1}), xx = grid.view({1, -1});
  const double half = size / 2.0;
  std::ofstream out(dir + "/vqa.jsonl.tmp");
  for (int64_t i = 0; i < n; ++i) {
    bool present[4];
    int count = 0;
    torch::Tensor image = 0.2 + 0.05 * torch::randn({size, size});
    for (int q = 0; q < 4; ++q) {
      present[q] = unit(rng) < 0.5;
      if (!present[q]) continue;
      ++count;
      const double r = size * (0.07 + 0.05 * unit(rng));
      const double cy = (q / 2) * half + r + (half - 2 * r) * unit(rng);
      const double cx = (q % 2) * half + r + (half - 2 * r) * unit(rng);
      image = image + 0.6 * ((yy - cy).pow(2) + (xx - cx).pow(2))
                                .le(r * r)
                                .to(torch::kFloat32);
    }
    char name[32];
    std::snprintf(name, sizeof(name), "images/%05lld.%s",
                  static_cast<long long>(i), jpeg ? "jpg" : "png");
    DDP_RETURN_IF_ERROR(jpeg ? WriteGrayJpeg(dir + "/" + name, image)
                             : WriteGrayPng(dir + "/" + name, image));
    nlohmann::json labels = nlohmann::json::array();
    for (int k = 0; k < kCheXpertLabels; ++k) {
      const double u = unit(rng);
      if (u < 0.1) {
        labels.push_back(-1);
      } else {
        bool v = present[k % 4];
        if (u < 0.2) v = !v;
        labels.push_back(v ? 1 : 0);
      }
    }
    std::string question, answer;
    if (unit(rng) < 0.6) {
      const int q = static_cast<int>(rng() % 4);
      question =
          std::string("is there an opacity in the ") + kQuadrants[q] + "?";
      answer = present[q] ? "yes" : "no";
    } else {
      question = "how many opacities are there?";
      answer = std::to_string(count);
    }
    out << nlohmann::json{{"image", name},
                          {"question", question},
                          {"answer", answer},
                          {"labels", labels}}
               .dump()
        << "\n";
  }
  out.close();
  if (!out) return InternalError("cannot write " + dir + "/vqa.jsonl");
  std::filesystem::rename(dir + "/vqa.jsonl.tmp", dir + "/vqa.jsonl", ec);
  if (ec)
    return InternalError("cannot write " + dir + "/vqa.jsonl: " + ec.message());
  return Status::Ok();
}

}  // namespace ddprun::examples
