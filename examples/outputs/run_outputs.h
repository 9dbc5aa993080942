#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/clock.h"
#include "ddprun/common/status_or.h"
#include "examples/outputs/event_file.h"
#include "examples/outputs/raster_image.h"
#include "examples/outputs/scalar_history.h"

namespace ddprun::examples::outputs {

// What a training run leaves for people to look at, in its output dir:
//   events.out.tfevents.<time>.<host>  TensorBoard scalars and images
//                                      (`tensorboard --logdir <output_dir>`)
//   training_curves.png                the curves, drawn by Finish()
//   images/<tag>_step<step>.png        every Image(), e.g.
//                                      images/val_samples_step00000120.png
// Tags follow TensorBoard's convention "<section>/<name>": train/loss (per
// step), train/epoch_loss, train/lr, train/samples_per_s, val/<metric>; the
// step is the global step (per-epoch values at the step the epoch ended).
//
// Only the main rank (rank 0) writes; on the others every call returns OK
// and does nothing, so a trainer calls it unconditionally. Calls come from
// the training thread only (no locking). Calls block on local file I/O only,
// never wait on anything else: Open() reads the earlier event files (about
// 50 bytes per scalar), Finish() draws the plot (tens of milliseconds, also
// for 100k steps). Errors come back as Status and
// leave the object usable; none is worth stopping training for, so a caller
// logs them.
//
// A restarted run continues into the same output dir with a new event file
// that starts with a SessionLog START at its first step (resumed_step + 1):
// TensorBoard drops the earlier files' values from that step on, and Open()
// reads the earlier files' scalars the same way, so that the plot covers the
// whole run without the work the restart threw away (see PurgeFrom).
class RunOutputs {
 public:
  struct Options {
    std::string output_dir;
    std::string trainer_name;  // the plot's title: "<name>: training curves"
    bool is_main = true;       // false: writes nothing
    // The global step training resumes from (the checkpoint's step); 0 for
    // a fresh start. Earlier attempts' values after it are dropped.
    int64_t resumed_step = 0;
    const Clock* clock = nullptr;  // wall time of events; null = real clock
  };

  // Main rank: creates output_dir if needed, reads the scalars of the event
  // files already there, creates a new event file and writes its version
  // and SessionLog START records (flushed). Errors name the path
  // (e.g. "cannot create output directory x: Not a directory"); an earlier
  // event file that is damaged or unreadable is only logged (WARNING) and
  // contributes the records before the damage.
  static StatusOr<std::unique_ptr<RunOutputs>> Open(Options options);
  // Closes the event file (flushing it). Draws no plot: call Finish().
  ~RunOutputs();
  RunOutputs(const RunOutputs&) = delete;
  RunOutputs& operator=(const RunOutputs&) = delete;

  // Records `value` under `tag` at `step`, in the event file (as float32)
  // and for the plot. INVALID_ARGUMENT, nothing recorded, for an empty tag
  // or a non-finite value ("scalar 'train/loss' at step 12 is nan").
  Status Scalar(const std::string& tag, int64_t step, double value);

  // Writes `image` (gray or RGB, see raster_image.h; e.g. from SliceGrid,
  // MaskOverlayGrid, BarChart) to ImagePath(tag, step) and as a TensorBoard
  // image summary. INVALID_ARGUMENT for an empty tag or a malformed image;
  // an error naming the path when the file cannot be written.
  Status Image(const std::string& tag, int64_t step, const RasterImage& image);

  // Hands the records so far to the kernel (fflush, no fsync): a crash of
  // the process after it loses nothing recorded before it. Call once per
  // epoch.
  Status EpochEnd();

  // Closes the event file and writes training_curves.png from history().
  // Later calls return OK and do nothing; Scalar() and Image() after it are
  // FAILED_PRECONDITION. INVALID_ARGUMENT when there is nothing to plot.
  Status Finish();

  // The scalars of the earlier attempts merged with this one's (empty on
  // the other ranks).
  SeriesMap history() const;
  // The event file this attempt writes; empty on the other ranks.
  std::string event_file() const;
  std::string plot_path() const;
  // <output_dir>/images/<tag, '/' and odd characters as '_'>_step<8 digits>.png
  std::string ImagePath(const std::string& tag, int64_t step) const;

 private:
  explicit RunOutputs(Options options) : options_(std::move(options)) {}
  Status CheckWritable(const std::string& tag) const;

  Options options_;
  std::unique_ptr<EventFileWriter> events_;  // null on the other ranks
  SeriesMap earlier_;  // earlier attempts' scalars up to resumed_step
  SeriesMap current_;  // this attempt's
  bool finished_ = false;
};

}  // namespace ddprun::examples::outputs
