#include "examples/outputs/event_file.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "examples/outputs/event_codec.h"

namespace ddprun::examples::outputs {
namespace {

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
    return "localhost";
  }
  return name;
}

Status Append(TfRecordWriter* records, const Event& event) {
  return records->Append(EncodeEvent(event));
}

}  // namespace

StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(
    const std::string& dir, const Clock* clock) {
  const double now = clock->WallSeconds();
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%010lld", static_cast<long long>(now));
  const std::string base =
      dir + "/" + kEventFilePrefix + stamp + "." + HostName();
  StatusOr<std::unique_ptr<TfRecordWriter>> records =
      TfRecordWriter::Create(base);
  for (int n = 1;
       !records.ok() && records.status().code() == StatusCode::kAlreadyExists &&
       n < 100;
       ++n) {
    records = TfRecordWriter::Create(base + "." + std::to_string(n));
  }
  if (!records.ok()) return records.status();
  std::unique_ptr<EventFileWriter> writer(
      new EventFileWriter(std::move(records).value(), clock));
  Event version;
  version.wall_time = now;
  version.file_version = "brain.Event:2";
  DDP_RETURN_IF_ERROR(Append(writer->records_.get(), version));
  DDP_RETURN_IF_ERROR(writer->Flush());
  return writer;
}

Status EventFileWriter::WriteSessionStart(int64_t first_step) {
  Event event;
  event.wall_time = clock_->WallSeconds();
  event.step = first_step;
  event.session_log_status = 1;  // START
  return Append(records_.get(), event);
}

Status EventFileWriter::WriteScalar(const std::string& tag, int64_t step,
                                    float value) {
  Event event;
  event.wall_time = clock_->WallSeconds();
  event.step = step;
  EventValue v;
  v.tag = tag;
  v.simple_value = value;
  event.values.push_back(std::move(v));
  return Append(records_.get(), event);
}

Status EventFileWriter::WriteImage(const std::string& tag, int64_t step,
                                   int width, int height, int channels,
                                   const std::string& png) {
  Event event;
  event.wall_time = clock_->WallSeconds();
  event.step = step;
  EventValue v;
  v.tag = tag;
  v.is_image = true;
  v.image.height = height;
  v.image.width = width;
  v.image.colorspace = channels;  // 1 = grayscale, 3 = RGB, as TF's codes
  v.image.png = png;
  event.values.push_back(std::move(v));
  return Append(records_.get(), event);
}

StatusOr<EventFileScalars> ReadEventFileScalars(const std::string& path) {
  DDP_ASSIGN_OR_RETURN(TfRecordFile file, ReadTfRecordFile(path));
  EventFileScalars out;
  out.truncated_tail = file.truncated_tail;
  out.damage = file.damage;
  for (size_t i = 0; i < file.records.size(); ++i) {
    StatusOr<Event> event = DecodeEvent(file.records[i]);
    if (!event.ok()) {
      out.damage = Status(StatusCode::kDataLoss,
                          path + ": record " + std::to_string(i) + " is " +
                              event.status().message());
      break;
    }
    if (i == 0) out.first_wall_time = event->wall_time;
    if (out.session_start < 0 && event->session_log_status == 1) {
      out.session_start = event->step;
    }
    for (const EventValue& v : event->values) {
      if (!v.is_image) out.series[v.tag].push_back({event->step, v.simple_value});
    }
  }
  return out;
}

std::vector<std::string> ListEventFiles(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kEventFilePrefix, 0) == 0 && it->is_regular_file(ec)) {
      files.push_back(it->path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace ddprun::examples::outputs
