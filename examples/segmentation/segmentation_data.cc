#include "examples/segmentation/segmentation_data.h"

#include <filesystem>
#include <fstream>
#include <random>

#include <torch/torch.h>

#include "common/file_util.h"
#include "examples/formats/csv_table.h"
#include "examples/formats/jsonl_reader.h"
#include "examples/frame/image_io.h"

namespace ddprun::examples {

StatusOr<std::vector<SegRecord>> ReadSegJsonl(const std::string& path) {
  DDP_ASSIGN_OR_RETURN(std::vector<JsonlRecord> lines, ReadJsonl(path));
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  auto resolve = [&](const std::string& p) {
    return std::filesystem::path(p).is_relative() ? (base / p).string() : p;
  };
  std::vector<SegRecord> records;
  for (const JsonlRecord& line : lines) {
    SegRecord r;
    r.where = path + ":" + std::to_string(line.line) + ": ";
    DDP_ASSIGN_OR_RETURN(r.image, JsonlString(path, line, "image"));
    DDP_ASSIGN_OR_RETURN(r.mask, JsonlString(path, line, "mask"));
    DDP_ASSIGN_OR_RETURN(r.prompt, JsonlString(path, line, "prompt"));
    r.image = resolve(r.image);
    r.mask = resolve(r.mask);
    records.push_back(std::move(r));
  }
  if (records.empty()) return InvalidArgumentError(path + ": no records");
  return records;
}

StatusOr<SegSample> LoadSegSample(const SegRecord& record, int64_t size) {
  SegSample s;
  DDP_ASSIGN_OR_RETURN(s.image, ReadGrayImage(record.image, size));
  DDP_ASSIGN_OR_RETURN(torch::Tensor mask, ReadGrayImage(record.mask, size));
  s.mask = mask.gt(0.5).to(torch::kFloat32);
  return s;
}

Status WriteSyntheticSegmentation(const std::string& dir, int64_t n,
                                  int64_t size, uint64_t seed) {
  std::error_code ec;
  const std::string media = dir + "/images_and_masks/lesions/";
  for (const char* sub :
       {"train_images", "train_masks", "val_images", "val_masks"}) {
    std::filesystem::create_directories(media + sub, ec);
  }
  std::filesystem::create_directories(dir + "/annotations", ec);
  if (ec) return InternalError("cannot create " + dir + ": " + ec.message());
  static const char* kQuadrants[4] = {"upper left", "upper right", "lower left",
                                      "lower right"};
  static const char* kTemplates[3] = {"lesion in the %s",
                                      "segment the nodule at the %s",
                                      "find the abnormality in the %s region"};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  torch::manual_seed(seed);
  torch::Tensor grid = torch::arange(size, torch::kFloat32);
  torch::Tensor yy = grid.view({-1, 1}), xx = grid.view({1, -1});
  const double half = size / 2.0;
  auto blob = [&](int quadrant) {
    const double r = size * (0.08 + 0.07 * unit(rng));
    const double cy = (quadrant / 2) * half + r + (half - 2 * r) * unit(rng);
    const double cx = (quadrant % 2) * half + r + (half - 2 * r) * unit(rng);
    return ((yy - cy).pow(2) + (xx - cx).pow(2)).le(r * r).to(torch::kFloat32);
  };
  std::string jsonl;
  std::string csv = "image_path,question,answer,split\n";
  for (int64_t i = 0; i < n; ++i) {
    const int target = static_cast<int>(rng() % 4);
    const int other = (target + 1 + static_cast<int>(rng() % 3)) % 4;
    torch::Tensor lesion = blob(target);
    torch::Tensor distractor = blob(other);
    torch::Tensor image = (0.15 + 0.6 * torch::max(lesion, distractor) +
                           0.08 * torch::randn({size, size}))
                              .clamp(0, 1);
    const std::string split = i % 5 == 0 ? "val" : "train";
    char name[32];
    std::snprintf(name, sizeof(name), "%04lld.png", static_cast<long long>(i));
    const std::string image_rel = "lesions/" + split + "_images/" + name;
    const std::string mask_rel = "lesions/" + split + "_masks/" + name;
    DDP_RETURN_IF_ERROR(
        WriteGrayPng(dir + "/images_and_masks/" + image_rel, image));
    DDP_RETURN_IF_ERROR(
        WriteGrayPng(dir + "/images_and_masks/" + mask_rel, lesion));
    char prompt[96];
    std::snprintf(prompt, sizeof(prompt), kTemplates[rng() % 3],
                  kQuadrants[target]);
    jsonl += nlohmann::json{{"image", "images_and_masks/" + image_rel},
                            {"mask", "images_and_masks/" + mask_rel},
                            {"prompt", prompt}}
                 .dump() +
             "\n";
    csv += CsvEscape(image_rel) + "," + CsvEscape(prompt) + "," +
           CsvEscape(std::string("The lesion is in the ") + kQuadrants[target] +
                     " of the image.") +
           "," + split + "\n";
  }
  DDP_RETURN_IF_ERROR(
      WriteFileAtomically(dir + "/annotations/lesions.csv", {csv}));
  return WriteFileAtomically(dir + "/prompts.jsonl", {jsonl});
}

}  // namespace ddprun::examples
