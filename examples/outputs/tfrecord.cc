#include "examples/outputs/tfrecord.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "examples/outputs/crc32c.h"

namespace ddprun::examples::outputs {
namespace {

constexpr size_t kHeaderSize = 12;  // length + its CRC
constexpr size_t kFooterSize = 4;   // CRC of the data

void PutLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> 8 * i));
}

uint64_t GetLittleEndian(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(p[i]);
  }
  return v;
}

}  // namespace

std::string FrameTfRecord(std::string_view data) {
  std::string out;
  out.reserve(kHeaderSize + data.size() + kFooterSize);
  PutLittleEndian(data.size(), 8, &out);
  PutLittleEndian(MaskedCrc32c(out), 4, &out);
  out.append(data);
  PutLittleEndian(MaskedCrc32c(data), 4, &out);
  return out;
}

StatusOr<std::unique_ptr<TfRecordWriter>> TfRecordWriter::Create(
    const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("cannot create event file " + path, errno);
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus("cannot open event file " + path, err);
  }
  return std::unique_ptr<TfRecordWriter>(new TfRecordWriter(path, file));
}

TfRecordWriter::~TfRecordWriter() { (void)Close(); }

Status TfRecordWriter::Append(std::string_view data) {
  if (file_ == nullptr) {
    return FailedPreconditionError("event file " + path_ + " is closed");
  }
  const std::string framed = FrameTfRecord(data);
  if (std::fwrite(framed.data(), 1, framed.size(), file_) != framed.size()) {
    return ErrnoStatus("cannot write event file " + path_, errno);
  }
  return Status::Ok();
}

Status TfRecordWriter::Flush() {
  if (file_ == nullptr) {
    return FailedPreconditionError("event file " + path_ + " is closed");
  }
  if (std::fflush(file_) != 0) {
    return ErrnoStatus("cannot write event file " + path_, errno);
  }
  return Status::Ok();
}

Status TfRecordWriter::Close() {
  if (file_ == nullptr) return Status::Ok();
  std::FILE* file = file_;
  file_ = nullptr;
  int err = 0;
  if (std::fflush(file) != 0) err = errno;
  if (std::fclose(file) != 0 && err == 0) err = errno;
  if (err != 0) return ErrnoStatus("cannot write event file " + path_, err);
  return Status::Ok();
}

StatusOr<TfRecordFile> ReadTfRecordFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoStatus("cannot read event file " + path, errno);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  if (in.bad()) return ErrnoStatus("cannot read event file " + path, errno);

  TfRecordFile file;
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t left = bytes.size() - pos;
    if (left < kHeaderSize) {
      file.truncated_tail = true;
      break;
    }
    const char* header = bytes.data() + pos;
    const uint64_t length = GetLittleEndian(header, 8);
    if (GetLittleEndian(header + 8, 4) !=
        MaskedCrc32c(std::string_view(header, 8))) {
      file.damage = Status(StatusCode::kDataLoss, path + ": record at byte " +
                                                      std::to_string(pos) +
                                                      ": length CRC mismatch");
      break;
    }
    if (length > left - kHeaderSize ||
        left - kHeaderSize - length < kFooterSize) {
      file.truncated_tail = true;
      break;
    }
    const std::string_view data(header + kHeaderSize, length);
    if (GetLittleEndian(header + kHeaderSize + length, 4) !=
        MaskedCrc32c(data)) {
      file.damage = Status(StatusCode::kDataLoss, path + ": record at byte " +
                                                      std::to_string(pos) +
                                                      ": data CRC mismatch");
      break;
    }
    file.records.emplace_back(data);
    pos += kHeaderSize + length + kFooterSize;
  }
  return file;
}

}  // namespace ddprun::examples::outputs
