#include "examples/vqa/vqa_data.h"

#include <cmath>
#include <filesystem>

#include "examples/formats/jsonl_reader.h"
#include "examples/vqa/vqa_mimic.h"

namespace ddprun::examples {

const std::vector<std::string>& CheXpertNames() {
  static const std::vector<std::string> names = {"Atelectasis",
                                                 "Cardiomegaly",
                                                 "Consolidation",
                                                 "Edema",
                                                 "Enlarged Cardiomediastinum",
                                                 "Fracture",
                                                 "Lung Lesion",
                                                 "Lung Opacity",
                                                 "No Finding",
                                                 "Pleural Effusion",
                                                 "Pleural Other",
                                                 "Pneumonia",
                                                 "Pneumothorax",
                                                 "Support Devices"};
  return names;
}

bool SetCheXpertLabel(VqaRecord& r, int64_t k, double x,
                      UncertainPolicy policy) {
  if (std::isnan(x)) return true;  // missing: stays masked
  if (x == 1.0 || x == 0.0) {
    r.labels[k] = static_cast<float>(x);
    r.mask[k] = 1.0f;
    return true;
  }
  if (x != -1.0) return false;
  ++r.uncertain;
  if (policy == UncertainPolicy::kIgnore) return true;
  r.labels[k] = policy == UncertainPolicy::kOnes ? 1.0f : 0.0f;
  r.mask[k] = 1.0f;
  return true;
}

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
        const double x = v.is_null()     ? NAN
                         : v.is_number() ? v.get<double>()
                                         : 2.0;
        if (!SetCheXpertLabel(r, k, x, policy)) {
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

StatusOr<VqaData> ReadVqaData(const std::string& data_path,
                              const std::string& qa_root,
                              UncertainPolicy policy) {
  std::error_code ec;
  const auto status = std::filesystem::status(data_path, ec);
  if (!std::filesystem::exists(status)) {
    return NotFoundError(data_path +
                         ": no such file or directory (--data_path: a JSONL "
                         "file or a MIMIC-CXR data root)");
  }
  VqaData data;
  if (std::filesystem::is_directory(status)) {
    DDP_ASSIGN_OR_RETURN(
        MimicCxrVqa mimic,
        ReadMimicCxrVqa(data_path, qa_root.empty() ? data_path : qa_root,
                        policy));
    data.records = std::move(mimic.records);
    data.description = mimic.description;
    return data;
  }
  if (!qa_root.empty()) {
    return InvalidArgumentError(
        "--mimic_qa_path goes with a MIMIC-CXR data root, but --data_path " +
        data_path + " is a file");
  }
  DDP_ASSIGN_OR_RETURN(data.records, ReadVqaJsonl(data_path, policy));
  data.description = "JSONL " + data_path + ": " +
                     std::to_string(data.records.size()) + " questions";
  return data;
}

}  // namespace ddprun::examples
