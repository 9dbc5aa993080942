#include "examples/survival/survival_data.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include <torch/torch.h>

#include "common/file_util.h"
#include "examples/formats/csv_table.h"
#include "examples/frame/nifti_io.h"

namespace ddprun::examples {

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

// "image", else the guide's "NIFTI path" in any case.
StatusOr<int> ImageColumn(const CsvTable& table) {
  const std::vector<std::string>& header = table.header();
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == "image") return static_cast<int>(i);
  }
  for (size_t i = 0; i < header.size(); ++i) {
    if (Lower(header[i]) == Lower(kGuideImageColumn))
      return static_cast<int>(i);
  }
  std::string have;
  for (const std::string& h : header) have += (have.empty() ? "" : ",") + h;
  return InvalidArgumentError(
      table.name() + ":1: missing column 'image' (or the guide's '" +
      kGuideImageColumn + "') (header has: " + have + ")");
}

Status NoGuideLayout(const std::string& path) {
  std::string csvs;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    if (e.path().extension() == ".csv")
      csvs += (csvs.empty() ? "" : " or ") + e.path().string();
  }
  return InvalidArgumentError(
      path + " is a directory without " + kGuideCsvName +
      " (the guide's layout: <data>/" + kGuideCsvName + " with columns " +
      kGuideImageColumn +
      ",time,event,Fold_1); --csv_path takes that directory or the CSV file "
      "that lists the volumes" +
      (csvs.empty() ? std::string(" (there is no CSV in it)")
                    : ", e.g. " + csvs));
}

}  // namespace

StatusOr<std::string> ResolveSurvivalCsv(const std::string& csv_path) {
  if (!std::filesystem::is_directory(csv_path)) return csv_path;
  const std::filesystem::path guide =
      std::filesystem::path(csv_path) / kGuideCsvName;
  if (std::filesystem::is_regular_file(guide)) return guide.string();
  return NoGuideLayout(csv_path);
}

StatusOr<SurvivalTable> ReadSurvivalCsv(const std::string& csv_path,
                                        const std::string& fold_column,
                                        bool fold_required) {
  if (std::filesystem::is_directory(csv_path)) return NoGuideLayout(csv_path);
  DDP_ASSIGN_OR_RETURN(CsvTable table, CsvTable::Read(csv_path));
  SurvivalTable out;
  DDP_ASSIGN_OR_RETURN(int image_col, ImageColumn(table));
  out.image_column = table.header()[image_col];
  DDP_ASSIGN_OR_RETURN(int time_col, table.ColumnIndex("time"));
  DDP_ASSIGN_OR_RETURN(int event_col, table.ColumnIndex("event"));
  int fold_col = -1;
  if (fold_required) {
    DDP_ASSIGN_OR_RETURN(fold_col, table.ColumnIndex(fold_column));
  }
  for (size_t i = 0; i < table.header().size(); ++i) {
    if (!fold_column.empty() && table.header()[i] == fold_column)
      fold_col = static_cast<int>(i);
  }
  out.has_fold = fold_col >= 0;
  const std::filesystem::path base =
      std::filesystem::path(csv_path).parent_path();
  for (const CsvRow& row : table.rows()) {
    SurvivalRecord r;
    r.where = table.Where(row);
    r.image = row.fields[image_col];
    if (r.image.empty())
      return InvalidArgumentError(table.Where(row) + "empty image path");
    if (std::filesystem::path(r.image).is_relative()) {
      const std::string beside = (base / r.image).string();
      // The guide's scripts open paths as given (from the working
      // directory); ours are relative to the CSV. The CSV's folder wins.
      if (std::filesystem::exists(beside) ||
          !std::filesystem::exists(r.image)) {
        r.image = beside;
      }
    }
    DDP_ASSIGN_OR_RETURN(r.time, table.GetDouble(row, time_col));
    DDP_ASSIGN_OR_RETURN(r.event, table.GetDouble(row, event_col));
    if (!(r.time > 0) || !std::isfinite(r.time)) {
      return InvalidArgumentError(table.Where(row) +
                                  "time must be a positive number, got " +
                                  row.fields[time_col]);
    }
    if (r.event != 0 && r.event != 1) {
      return InvalidArgumentError(table.Where(row) +
                                  "event must be 0 or 1, got " +
                                  row.fields[event_col]);
    }
    if (fold_col >= 0) r.fold = row.fields[fold_col];
    out.records.push_back(std::move(r));
  }
  if (out.records.empty())
    return InvalidArgumentError(csv_path + ": no data rows");
  return out;
}

StatusOr<FoldSplit> SplitByFold(const SurvivalTable& table,
                                const std::string& csv_path,
                                const std::string& fold_column,
                                const std::string& train_fold,
                                const std::string& val_fold) {
  FoldSplit split;
  std::set<std::string> values;
  for (size_t i = 0; i < table.records.size(); ++i) {
    const std::string& fold = table.records[i].fold;
    values.insert(fold);
    if (fold == train_fold) {
      split.train.push_back(static_cast<int64_t>(i));
    } else if (fold == val_fold) {
      split.val.push_back(static_cast<int64_t>(i));
    } else {
      ++split.unused;
    }
  }
  auto missing = [&](const std::string& value, const std::string& flag) {
    std::string have;
    for (const std::string& v : values)
      have += (have.empty() ? "'" : ", '") + v + "'";
    return InvalidArgumentError(csv_path + ": no row has " + fold_column +
                                " = '" + value + "' (" + flag +
                                "); the column holds " + have);
  };
  if (split.train.empty()) return missing(train_fold, "--train_fold");
  if (split.val.empty()) return missing(val_fold, "--val_fold");
  return split;
}

StatusOr<torch::Tensor> LoadSurvivalVolume(const std::string& path,
                                           const std::vector<int64_t>& size) {
  DDP_ASSIGN_OR_RETURN(torch::Tensor v,
                       ReadNiftiChecked(path, /*channels=*/1, {}));
  if (v.size(1) != size[0] || v.size(2) != size[1] || v.size(3) != size[2]) {
    namespace F = torch::nn::functional;
    v = F::interpolate(v.unsqueeze(0), F::InterpolateFuncOptions()
                                           .size(size)
                                           .mode(torch::kTrilinear)
                                           .align_corners(false))
            .squeeze(0);
  }
  // Centred in place, then the sample standard deviation from the centred
  // values' norm: vectorised passes, no temporaries. Loading runs on the
  // training thread when every core trains; this cut survival's load time
  // per batch by ~20% (torch::std_mean, one Welford pass, doubled it).
  v = v.contiguous();
  v.sub_(v.mean());
  const double n = static_cast<double>(std::max<int64_t>(v.numel() - 1, 1));
  v.div_(v.norm().div_(std::sqrt(n)).add_(1e-6));
  return v;
}

Status WriteSyntheticSurvival(const std::string& dir, int64_t n, int64_t size,
                              uint64_t seed) {
  std::error_code ec;
  std::filesystem::create_directories(dir + "/images", ec);
  if (ec)
    return InternalError("cannot create " + dir + "/images: " + ec.message());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  torch::manual_seed(seed);
  std::ostringstream ours, guide;
  ours << "image,time,event\n";
  // The guide's columns (MultiGPUSurvivalDataset: nifti_col, time, event,
  // fold_column), with its case number in front.
  guide << "case_num," << CsvEscape(kGuideImageColumn)
        << ",time,event,Fold_1\n";
  const double r_min = size * 0.08, r_max = size * 0.28;
  torch::Tensor grid = torch::arange(size, torch::kFloat32);
  torch::Tensor zz = grid.view({-1, 1, 1}), yy = grid.view({1, -1, 1}),
                xx = grid.view({1, 1, -1});
  for (int64_t i = 0; i < n; ++i) {
    const double radius = r_min + (r_max - r_min) * unit(rng);
    const double margin = radius + 1;
    auto center = [&] { return margin + (size - 2 * margin) * unit(rng); };
    const double cz = center(), cy = center(), cx = center();
    torch::Tensor dist2 =
        (zz - cz).pow(2) + (yy - cy).pow(2) + (xx - cx).pow(2);
    torch::Tensor volume = dist2.le(radius * radius).to(torch::kFloat32) +
                           0.3 * torch::randn({size, size, size});
    // Hazard grows with the radius: standardized radius times 1.5.
    const double z =
        ((radius - r_min) / (r_max - r_min) - 0.5) * std::sqrt(12.0);
    const double hazard = 0.1 * std::exp(1.5 * z);
    const double event_time = -std::log(1.0 - unit(rng)) / hazard;
    const double censor_time = -std::log(1.0 - unit(rng)) / 0.04;
    const bool event = event_time <= censor_time;
    const double time = std::max(0.01, std::min(event_time, censor_time));
    char name[48];
    std::snprintf(name, sizeof(name), "images/subject_%04lld.nii",
                  static_cast<long long>(i));
    DDP_RETURN_IF_ERROR(WriteNifti(dir + "/" + name, volume));
    ours << name << "," << time << "," << (event ? 1 : 0) << "\n";
    // Subjects are independent draws: every fourth one validates.
    guide << i << "," << name << "," << time << "," << (event ? 1 : 0) << ","
          << (i % 4 == 3 ? "val" : "train") << "\n";
  }
  DDP_RETURN_IF_ERROR(WriteFileAtomically(dir + "/survival.csv", {ours.str()}));
  return WriteFileAtomically(dir + "/dataset.csv", {guide.str()});
}

}  // namespace ddprun::examples
