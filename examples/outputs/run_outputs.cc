#include "examples/outputs/run_outputs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <tuple>

#include "common/logging.h"
#include "examples/outputs/curve_plot.h"

namespace ddprun::examples::outputs {
namespace {

namespace fs = std::filesystem;

Status MakeDir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return ErrnoStatus("cannot create " + what + " " + dir, ec.value());
  }
  return Status::Ok();
}

// The scalars of the event files already in `dir`, attempt after attempt
// in the order they started, each purging what its predecessors recorded
// from its SessionLog START step on (a file without one is appended as it
// is, as TensorBoard does).
SeriesMap ReadEarlierAttempts(const std::string& dir) {
  struct Attempt {
    double wall_time;
    std::string path;
    int64_t session_start;
    SeriesMap series;
  };
  std::vector<Attempt> attempts;
  for (const std::string& path : ListEventFiles(dir)) {
    StatusOr<EventFileScalars> read = ReadEventFileScalars(path);
    if (!read.ok()) {
      DDP_LOG(WARNING) << "earlier event file skipped: " << read.status();
      continue;
    }
    if (!read->damage.ok()) {
      DDP_LOG(WARNING) << read->damage.message()
                       << "; its scalars before that are kept";
    }
    attempts.push_back({read->first_wall_time, path, read->session_start,
                        std::move(read->series)});
  }
  std::sort(
      attempts.begin(), attempts.end(), [](const Attempt& a, const Attempt& b) {
        return std::tie(a.wall_time, a.path) < std::tie(b.wall_time, b.path);
      });
  SeriesMap merged;
  for (const Attempt& attempt : attempts) {
    if (attempt.session_start >= 0) PurgeFrom(attempt.session_start, &merged);
    AppendSeries(attempt.series, &merged);
  }
  return merged;
}

std::string FileSafe(const std::string& tag) {
  std::string out = tag;
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '-' || c == '.';
    if (!ok) c = '_';
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<RunOutputs>> RunOutputs::Open(Options options) {
  if (options.clock == nullptr) options.clock = Clock::Real();
  std::unique_ptr<RunOutputs> out(new RunOutputs(std::move(options)));
  if (!out->options_.is_main) return out;
  const std::string& dir = out->options_.output_dir;
  if (dir.empty()) return InvalidArgumentError("output directory is empty");
  DDP_RETURN_IF_ERROR(MakeDir(dir, "output directory"));
  if (out->options_.resumed_step < 0) {
    return InvalidArgumentError("resumed step " +
                                std::to_string(out->options_.resumed_step) +
                                " is negative");
  }
  const int64_t first_step = out->options_.resumed_step + 1;
  out->earlier_ = ReadEarlierAttempts(dir);
  PurgeFrom(first_step, &out->earlier_);
  DDP_ASSIGN_OR_RETURN(out->events_,
                       EventFileWriter::Create(dir, out->options_.clock));
  DDP_RETURN_IF_ERROR(out->events_->WriteSessionStart(first_step));
  DDP_RETURN_IF_ERROR(out->events_->Flush());
  return out;
}

RunOutputs::~RunOutputs() {
  if (events_) {
    const Status closed = events_->Close();
    if (!closed.ok()) DDP_LOG(WARNING) << closed;
  }
}

Status RunOutputs::CheckWritable(const std::string& tag) const {
  if (finished_) {
    return FailedPreconditionError("run outputs of " + options_.output_dir +
                                   " are finished; '" + tag + "' not recorded");
  }
  if (tag.empty()) return InvalidArgumentError("empty TensorBoard tag");
  return Status::Ok();
}

Status RunOutputs::Scalar(const std::string& tag, int64_t step, double value) {
  if (!options_.is_main) return Status::Ok();
  DDP_RETURN_IF_ERROR(CheckWritable(tag));
  if (!std::isfinite(value)) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", value);
    return InvalidArgumentError("scalar '" + tag + "' at step " +
                                std::to_string(step) + " is " + text +
                                "; not recorded");
  }
  // The plot shows what TensorBoard shows: the float32 value.
  const float stored = static_cast<float>(value);
  DDP_RETURN_IF_ERROR(events_->WriteScalar(tag, step, stored));
  current_[tag].push_back({step, stored});
  return Status::Ok();
}

Status RunOutputs::Image(const std::string& tag, int64_t step,
                         const RasterImage& image) {
  if (!options_.is_main) return Status::Ok();
  DDP_RETURN_IF_ERROR(CheckWritable(tag));
  Status valid = CheckRaster(image);
  if (!valid.ok()) return valid.WithContext("image '" + tag + "'");
  DDP_ASSIGN_OR_RETURN(const std::string png, EncodePng(image));
  DDP_RETURN_IF_ERROR(MakeDir(options_.output_dir + "/images", "directory"));
  // Encoded once for both the file and the event record.
  DDP_RETURN_IF_ERROR(ReplaceFile(ImagePath(tag, step), png));
  return events_->WriteImage(tag, step, image.width, image.height,
                             image.channels, png);
}

Status RunOutputs::EpochEnd() {
  if (!options_.is_main || finished_) return Status::Ok();
  return events_->Flush();
}

Status RunOutputs::Finish() {
  if (!options_.is_main || finished_) return Status::Ok();
  finished_ = true;
  const Status closed = events_->Close();
  StatusOr<RasterImage> plot = PlotTrainingCurves(
      options_.trainer_name + ": training curves", history());
  Status drawn = plot.ok() ? WritePng(plot_path(), *plot) : plot.status();
  if (!drawn.ok()) drawn = drawn.WithContext(plot_path() + " not written");
  return closed.ok() ? drawn : closed;
}

SeriesMap RunOutputs::history() const {
  SeriesMap merged = earlier_;
  AppendSeries(current_, &merged);
  return merged;
}

std::string RunOutputs::event_file() const {
  return events_ ? events_->path() : std::string();
}

std::string RunOutputs::plot_path() const {
  return options_.output_dir + "/training_curves.png";
}

std::string RunOutputs::ImagePath(const std::string& tag, int64_t step) const {
  char suffix[40];
  std::snprintf(suffix, sizeof(suffix), "_step%08lld.png",
                static_cast<long long>(step));
  return options_.output_dir + "/images/" + FileSafe(tag) + suffix;
}

}  // namespace ddprun::examples::outputs
