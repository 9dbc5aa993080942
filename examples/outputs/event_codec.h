#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::examples::outputs {

// TensorBoard's Event record (tensorflow/core/util/event.proto and
// summary.proto), the subset a training run writes, in protobuf's wire
// format. Hand-encoded rather than generated: a few fields do not justify
// libprotobuf in every trainer, and the PyTorch wheels' LibTorch ships old
// protobuf headers that would shadow the system's.
//   Event      1 wall_time double, 2 step int64, 3 file_version string,
//              5 summary Summary, 7 session_log SessionLog
//   SessionLog 1 status enum (START = 1)
//   Summary    1 value repeated Value
//   Value      1 tag string, 2 simple_value float, 4 image Image
//   Image      1 height int32, 2 width int32, 3 colorspace int32,
//              4 encoded_image_string bytes
struct EventImage {
  int height = 0;
  int width = 0;
  int colorspace = 0;  // 1 grayscale, 3 RGB
  std::string png;
};

struct EventValue {
  std::string tag;
  bool is_image = false;
  float simple_value = 0;  // when !is_image
  EventImage image;        // when is_image
};

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;     // "brain.Event:2" in a file's first record
  int session_log_status = -1;  // -1: no session_log; 1 = START
  std::vector<EventValue> values;  // a Summary when not empty
};

std::string EncodeEvent(const Event& event);

// DATA_LOSS when `bytes` is not a well-formed Event (truncated field,
// wrong wire type for a known field). Unknown fields are skipped, as
// protobuf readers do.
StatusOr<Event> DecodeEvent(const std::string& bytes);

}  // namespace ddprun::examples::outputs
