#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "ddprun/common/status_or.h"
#include "examples/outputs/scalar_history.h"
#include "examples/outputs/tfrecord.h"

namespace ddprun::examples::outputs {

// "events.out.tfevents.": TensorBoard reads every file whose name holds
// "tfevents" under --logdir.
inline constexpr char kEventFilePrefix[] = "events.out.tfevents.";

// Writes one TensorBoard event file: TFRecord framing (tfrecord.h) of Event
// protos, the first with file_version "brain.Event:2", then one Event per
// value with wall_time, step and a Summary (or a SessionLog). Not
// thread-safe: one writer
// thread. Records reach the kernel on Flush() / Close() (see
// TfRecordWriter).
class EventFileWriter {
 public:
  // Creates <dir>/events.out.tfevents.<unix seconds, 10 digits>.<hostname>
  // (TensorBoard's name; ".1", ".2", ... appended when a file of that name
  // exists, e.g. two attempts started in the same second), writes the
  // version record and flushes it. `dir` must exist. `clock` (not owned,
  // outlives the writer) gives the wall time of the name and the events.
  // Errors name the path (NOT_FOUND, PERMISSION_DENIED, ...).
  static StatusOr<std::unique_ptr<EventFileWriter>> Create(
      const std::string& dir, const Clock* clock);

  // A SessionLog START at `first_step`, the first step this attempt will
  // record: TensorBoard then drops what earlier files hold for that step and
  // later (see PurgeFrom).
  Status WriteSessionStart(int64_t first_step);
  // A Summary.Value with simple_value (a float32, as TensorBoard stores it).
  Status WriteScalar(const std::string& tag, int64_t step, float value);
  // A Summary.Value with Summary.Image: `png` is the encoded image of
  // `width` x `height` with `channels` 1 (grayscale) or 3 (RGB).
  Status WriteImage(const std::string& tag, int64_t step, int width, int height,
                    int channels, const std::string& png);
  Status Flush() { return records_->Flush(); }
  Status Close() { return records_->Close(); }

  const std::string& path() const { return records_->path(); }

 private:
  EventFileWriter(std::unique_ptr<TfRecordWriter> records, const Clock* clock)
      : records_(std::move(records)), clock_(clock) {}

  std::unique_ptr<TfRecordWriter> records_;
  const Clock* clock_;
};

// The scalars of one event file (for a resumed run's plot).
struct EventFileScalars {
  SeriesMap series;
  double first_wall_time = 0;  // of the first event; orders attempts
  // The step of the file's first SessionLog START, -1 without one.
  int64_t session_start = -1;
  bool truncated_tail = false;
  Status damage;  // DATA_LOSS: a CRC mismatch or an undecodable record;
                  // `series` holds what came before it
};
// NOT_FOUND / INTERNAL when the file cannot be read.
StatusOr<EventFileScalars> ReadEventFileScalars(const std::string& path);

// The event files directly in `dir` (names starting with kEventFilePrefix),
// sorted by name; empty when `dir` does not exist.
std::vector<std::string> ListEventFiles(const std::string& dir);

}  // namespace ddprun::examples::outputs
