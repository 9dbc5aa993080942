#include "examples/vqa/vqa_mimic.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "examples/formats/csv_table.h"

namespace ddprun::examples {
namespace {

namespace fs = std::filesystem;

struct StudyLabels {
  std::vector<float> labels, mask;
  int64_t uncertain = 0;
};
using LabelMap = std::map<std::pair<int64_t, int64_t>, StudyLabels>;

// The whole of a gzip file (zlib; a plain file reads as itself).
StatusOr<std::string> ReadGzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return NotFoundError("cannot open " + path);
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while ((n = gzread(file, buffer, sizeof(buffer))) > 0) text.append(buffer, n);
  int code = Z_OK;
  const char* message = gzerror(file, &code);
  const std::string error = n < 0 ? message : "";
  gzclose(file);
  if (n < 0)
    return InvalidArgumentError(path + ": cannot decompress: " + error);
  return text;
}

StatusOr<int64_t> IdField(const CsvTable& csv, const CsvRow& row, int column) {
  DDP_ASSIGN_OR_RETURN(double v, csv.GetDouble(row, column));
  if (v < 0 || v != std::floor(v)) {
    return InvalidArgumentError(csv.Where(row) + "column '" +
                                csv.header()[column] + "': '" +
                                row.fields[column] + "' is not an id");
  }
  return static_cast<int64_t>(v);
}

// mimic-cxr-2.0.0-chexpert.csv[.gz] of `root`.
StatusOr<LabelMap> ReadLabels(const std::string& root, UncertainPolicy policy) {
  std::string path = root + "/" + kMimicLabelsCsv;
  if (!fs::exists(path) && fs::exists(path + ".gz")) path += ".gz";
  if (!fs::exists(path)) {
    return NotFoundError(root + ": no " + kMimicLabelsCsv +
                         " (or .csv.gz): MIMIC-CXR-JPG's CheXpert labels "
                         "(subject_id, study_id and the 14 findings)");
  }
  DDP_ASSIGN_OR_RETURN(std::string text, ReadGzip(path));
  DDP_ASSIGN_OR_RETURN(CsvTable csv, CsvTable::Parse(text, path));
  DDP_ASSIGN_OR_RETURN(int subject, csv.ColumnIndex("subject_id"));
  DDP_ASSIGN_OR_RETURN(int study, csv.ColumnIndex("study_id"));
  std::vector<int> columns;
  for (const std::string& name : CheXpertNames()) {
    DDP_ASSIGN_OR_RETURN(int c, csv.ColumnIndex(name));
    columns.push_back(c);
  }
  LabelMap labels;
  for (const CsvRow& row : csv.rows()) {
    DDP_ASSIGN_OR_RETURN(int64_t s, IdField(csv, row, subject));
    DDP_ASSIGN_OR_RETURN(int64_t t, IdField(csv, row, study));
    VqaRecord r;
    r.labels.assign(kCheXpertLabels, 0.0f);
    r.mask.assign(kCheXpertLabels, 0.0f);
    for (int64_t k = 0; k < kCheXpertLabels; ++k) {
      const std::string& field = row.fields[columns[k]];
      double x = NAN;
      if (!field.empty()) {
        DDP_ASSIGN_OR_RETURN(x, csv.GetDouble(row, columns[k]));
      }
      if (!SetCheXpertLabel(r, k, x, policy)) {
        return InvalidArgumentError(csv.Where(row) + "column '" +
                                    CheXpertNames()[k] + "': '" + field +
                                    "' must be 1.0, 0.0, -1.0 or empty");
      }
    }
    labels[{s, t}] = {std::move(r.labels), std::move(r.mask), r.uncertain};
  }
  return labels;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") + 1 - b);
}

// The question files below <qa_root>/qa, in path order, with their ids.
struct QaFile {
  std::string path;
  int64_t subject = 0, study = 0;
};

StatusOr<std::vector<QaFile>> FindQuestionFiles(const std::string& qa_dir) {
  static const std::regex kName("s([0-9]+)\\.qa\\.json");
  static const std::regex kPatient("p([0-9]+)");
  std::vector<QaFile> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(qa_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::smatch name, patient;
    const std::string file = it->path().filename().string();
    const std::string parent = it->path().parent_path().filename().string();
    if (!std::regex_match(file, name, kName) ||
        !std::regex_match(parent, patient, kPatient))
      continue;
    files.push_back(
        {it->path().string(), std::stoll(patient[1]), std::stoll(name[1])});
  }
  if (ec) return InvalidArgumentError(qa_dir + ": " + ec.message());
  std::sort(files.begin(), files.end(),
            [](const QaFile& a, const QaFile& b) { return a.path < b.path; });
  return files;
}

// The first image of a study folder in name order, "" when none.
std::string StudyImage(const std::string& folder) {
  std::vector<std::string> images;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string ext = Lower(it->path().extension().string());
    if (it->is_regular_file() &&
        (ext == ".jpg" || ext == ".jpeg" || ext == ".png"))
      images.push_back(it->path().string());
  }
  if (images.empty()) return "";
  return *std::min_element(images.begin(), images.end());
}

StatusOr<nlohmann::json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json value = nlohmann::json::parse(text.str(), nullptr, false);
  if (value.is_discarded())
    return InvalidArgumentError(path + ": not valid JSON");
  return value;
}

// The main answer's text of one question, or an error.
StatusOr<std::string> MainAnswer(const nlohmann::json& q,
                                 const std::string& where) {
  auto answers = q.find("answers");
  if (answers == q.end() || !answers->is_array() || answers->empty()) {
    return InvalidArgumentError(where + "'answers' must be a non-empty list");
  }
  const nlohmann::json* main = &(*answers)[0];
  for (const auto& a : *answers) {
    if (a.is_object() && a.value("answer_type", "") == "main_answer") {
      main = &a;
      break;
    }
  }
  if (!main->is_object() || !main->contains("text") ||
      !(*main)["text"].is_string()) {
    return InvalidArgumentError(where + "the answer has no 'text' string");
  }
  const std::string text = Lower(Trim((*main)["text"].get<std::string>()));
  if (text.empty()) return InvalidArgumentError(where + "the answer is empty");
  return text;
}

}  // namespace

std::string MimicStudyPath(int64_t subject_id, int64_t study_id) {
  const std::string subject = std::to_string(subject_id);
  return "p" + subject.substr(0, 2) + "/p" + subject + "/s" +
         std::to_string(study_id);
}

StatusOr<MimicCxrVqa> ReadMimicCxrVqa(const std::string& image_root,
                                      const std::string& qa_root,
                                      UncertainPolicy policy) {
  const std::string qa_dir = qa_root + "/" + kMimicQuestions;
  const std::string files_dir = image_root + "/" + kMimicImages;
  if (!fs::is_directory(qa_dir)) {
    return NotFoundError(
        qa_root + ": no " + kMimicQuestions +
        "/ folder of MIMIC-Ext-CXR-QBA question files "
        "(qa/p10/p10000032/s50414267.qa.json); --data_path takes such a "
        "MIMIC-CXR data root or a JSONL file");
  }
  if (!fs::is_directory(files_dir)) {
    return NotFoundError(image_root + ": no " + kMimicImages +
                         "/ folder of MIMIC-CXR-JPG images "
                         "(files/p10/p10000032/s50414267/<dicom_id>.jpg)");
  }
  DDP_ASSIGN_OR_RETURN(LabelMap labels, ReadLabels(image_root, policy));
  DDP_ASSIGN_OR_RETURN(std::vector<QaFile> files, FindQuestionFiles(qa_dir));
  if (files.empty()) {
    return NotFoundError(qa_dir +
                         ": no question files (p10/p10000032/"
                         "s50414267.qa.json)");
  }
  MimicCxrVqa out;
  int64_t studies = 0, no_image = 0, no_labels = 0;
  std::string first_no_image;
  for (const QaFile& f : files) {
    const std::string folder =
        files_dir + "/" + MimicStudyPath(f.subject, f.study);
    const std::string image = StudyImage(folder);
    if (image.empty()) {
      if (no_image++ == 0) first_no_image = folder;
      continue;
    }
    DDP_ASSIGN_OR_RETURN(nlohmann::json qa, ReadJsonFile(f.path));
    auto questions = qa.is_object() ? qa.find("questions") : qa.end();
    if (questions == qa.end() || !questions->is_array()) {
      return InvalidArgumentError(f.path + ": expected {\"questions\": [...]}");
    }
    ++studies;
    auto label = labels.find({f.subject, f.study});
    if (label == labels.end()) ++no_labels;
    for (size_t i = 0; i < questions->size(); ++i) {
      const nlohmann::json& q = (*questions)[i];
      const std::string where =
          f.path + ": question " + std::to_string(i + 1) + ": ";
      if (!q.is_object() || !q.contains("question") ||
          !q["question"].is_string()) {
        return InvalidArgumentError(where + "no 'question' string");
      }
      VqaRecord r;
      r.where = where;
      r.image = image;
      r.question = q["question"].get<std::string>();
      DDP_ASSIGN_OR_RETURN(r.answer, MainAnswer(q, where));
      if (label != labels.end()) {
        r.labels = label->second.labels;
        r.mask = label->second.mask;
        r.uncertain = label->second.uncertain;
      } else {
        r.labels.assign(kCheXpertLabels, 0.0f);
        r.mask.assign(kCheXpertLabels, 0.0f);
      }
      out.records.push_back(std::move(r));
    }
  }
  if (studies == 0) {
    return NotFoundError(
        files_dir + ": no image for any of the " +
        std::to_string(files.size()) +
        " studies with questions (the first: " + first_no_image + "/)");
  }
  if (out.records.empty()) {
    return InvalidArgumentError(qa_dir +
                                ": the question files hold no question");
  }
  out.description =
      "MIMIC-CXR root " + image_root +
      (qa_root == image_root ? "" : " (questions from " + qa_root + ")") +
      ": " + std::to_string(studies) + " studies, " +
      std::to_string(out.records.size()) + " questions" +
      (no_image ? ", " + std::to_string(no_image) +
                      " studies left out without an image (the first: " +
                      first_no_image + "/)"
                : "") +
      (no_labels ? ", " + std::to_string(no_labels) +
                       " without a CheXpert row (labels masked)"
                 : "");
  return out;
}

}  // namespace ddprun::examples
