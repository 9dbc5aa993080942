#include "examples/segmentation/prs_med_layout.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "examples/formats/csv_table.h"

namespace ddprun::examples {
namespace {

namespace fs = std::filesystem;

// How the guide's layout looks, for the errors that find something else.
const char kLayout[] =
    "the guide's --data_root layout is DIR/annotations/<dataset>.csv "
    "(columns image_path,question[,answer,split]) and "
    "DIR/images_and_masks/<image_path>, each mask beside its image in "
    "<split>_masks/ instead of <split>_images/";

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// `image_path` with its innermost train_images/val_images/test_images
// component replaced by the matching *_masks; empty when it has none.
std::string MaskPathOf(const std::string& image_path) {
  std::vector<std::string> parts;
  for (const fs::path& part : fs::path(image_path)) parts.push_back(part);
  for (size_t i = parts.size(); i-- > 1;) {  // never the file name itself
    for (const char* split : {"train", "val", "test"}) {
      if (parts[i - 1] == std::string(split) + "_images") {
        parts[i - 1] = std::string(split) + "_masks";
        fs::path mask;
        for (const std::string& p : parts) mask /= p;
        return mask.string();
      }
    }
  }
  return "";
}

// The records of one annotations CSV.
Status ReadAnnotations(const std::string& csv, const fs::path& media,
                       std::vector<SegRecord>* records) {
  DDP_ASSIGN_OR_RETURN(CsvTable table, CsvTable::Read(csv));
  DDP_ASSIGN_OR_RETURN(const int image_col, table.ColumnIndex("image_path"));
  DDP_ASSIGN_OR_RETURN(const int question_col, table.ColumnIndex("question"));
  const auto& header = table.header();
  const auto split_it = std::find(header.begin(), header.end(), "split");
  const int split_col = split_it == header.end()
                            ? -1
                            : static_cast<int>(split_it - header.begin());
  for (const CsvRow& row : table.rows()) {
    const std::string where = table.Where(row);
    const std::string image_path = Trim(row.fields[image_col]);
    if (image_path.empty()) {
      return InvalidArgumentError(where + "empty image_path");
    }
    const std::string mask_path = MaskPathOf(image_path);
    if (mask_path.empty()) {
      return InvalidArgumentError(
          where + "image_path '" + image_path +
          "' is not inside a train_images/, val_images/ or test_images/ "
          "folder, so its mask cannot be found (" +
          kLayout + ")");
    }
    SegRecord r;
    r.where = where;
    r.image = (media / image_path).string();  // an absolute path stays
    r.mask = (media / mask_path).string();
    r.prompt = row.fields[question_col];
    if (split_col >= 0) {
      r.split = Trim(row.fields[split_col]);
      std::transform(r.split.begin(), r.split.end(), r.split.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      if (r.split != "train" && r.split != "val" && r.split != "test") {
        return InvalidArgumentError(where + "column 'split': '" +
                                    row.fields[split_col] +
                                    "' is not train, val or test");
      }
    }
    if (!fs::is_regular_file(r.image)) {
      return NotFoundError(where + "image not found: " + r.image);
    }
    if (!fs::is_regular_file(r.mask)) {
      return NotFoundError(where + "image " + r.image +
                           " has no mask: " + r.mask + " not found");
    }
    records->push_back(std::move(r));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<SegRecord>> ReadPrsMedRoot(const std::string& root) {
  const fs::path annotations = fs::path(root) / "annotations";
  const fs::path media = fs::path(root) / "images_and_masks";
  if (!fs::is_directory(annotations)) {
    return NotFoundError(annotations.string() + ": no such folder (" + kLayout +
                         ")");
  }
  if (!fs::is_directory(media)) {
    return NotFoundError(media.string() + ": no such folder (" + kLayout + ")");
  }
  std::vector<std::string> csvs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(annotations, ec)) {
    if (entry.path().extension() == ".csv" && entry.is_regular_file()) {
      csvs.push_back(entry.path().string());
    }
  }
  if (ec) {
    return NotFoundError(annotations.string() + ": " + ec.message());
  }
  if (csvs.empty()) {
    return NotFoundError(annotations.string() + ": no .csv files (" + kLayout +
                         ")");
  }
  std::sort(csvs.begin(), csvs.end());  // the same order on every rank
  std::vector<SegRecord> records;
  for (const std::string& csv : csvs) {
    DDP_RETURN_IF_ERROR(ReadAnnotations(csv, media, &records));
  }
  if (records.empty()) {
    return InvalidArgumentError(annotations.string() +
                                ": the annotation files have no rows");
  }
  return records;
}

StatusOr<std::vector<SegRecord>> ReadSegData(const std::string& path) {
  if (fs::is_regular_file(path)) return ReadSegJsonl(path);
  if (!fs::exists(path)) {
    return NotFoundError(path + ": no such file or directory");
  }
  if (fs::is_directory(fs::path(path) / "annotations")) {
    return ReadPrsMedRoot(path);
  }
  const fs::path jsonl = fs::path(path) / "prompts.jsonl";
  if (fs::is_regular_file(jsonl)) return ReadSegJsonl(jsonl.string());
  return InvalidArgumentError(
      path + ": a directory with neither annotations/ nor prompts.jsonl (" +
      kLayout + "; or give a JSONL file of {image, mask, prompt} lines)");
}

}  // namespace ddprun::examples
