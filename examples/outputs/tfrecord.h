#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::examples::outputs {

// TFRecord framing, the container of TensorBoard event files. Each record is
//   uint64 length (little endian) | uint32 masked CRC-32C of those 8 bytes |
//   length bytes of data           | uint32 masked CRC-32C of the data.

// Appends records to a new file. Records go through a stdio buffer: Flush()
// hands them to the kernel, so a crash of the process loses only what was
// appended after the last Flush(), and a record cut short by a crash is a
// truncated tail that readers stop at (ReadTfRecordFile, TensorBoard).
// Not thread-safe: one writer thread.
class TfRecordWriter {
 public:
  // Creates `path`, which must not exist (ALREADY_EXISTS; other errors name
  // the path and errno, e.g. NOT_FOUND for a missing directory).
  static StatusOr<std::unique_ptr<TfRecordWriter>> Create(
      const std::string& path);
  ~TfRecordWriter();  // Close(), its error dropped: call Close() to see it
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  // INTERNAL / RESOURCE_EXHAUSTED naming the file when the write fails;
  // FAILED_PRECONDITION after Close().
  Status Append(std::string_view data);
  Status Flush();
  // Flushes and closes; later calls return OK and do nothing.
  Status Close();

  const std::string& path() const { return path_; }

 private:
  TfRecordWriter(std::string path, std::FILE* file)
      : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

// The frame of one record around `data` (what Append writes).
std::string FrameTfRecord(std::string_view data);

// What a TFRecord file holds, read defensively.
struct TfRecordFile {
  std::vector<std::string> records;  // every intact record, in order
  // The file ends inside a record (a writer still writing, or killed
  // mid-record): the records before it are kept, as TensorBoard does.
  bool truncated_tail = false;
  // DATA_LOSS naming the byte offset when a length or data CRC does not
  // match; reading stops there and `records` holds those before it.
  Status damage;
};

// NOT_FOUND / INTERNAL when the file cannot be read; damage and a truncated
// tail are reported in the result, not as an error.
StatusOr<TfRecordFile> ReadTfRecordFile(const std::string& path);

}  // namespace ddprun::examples::outputs
