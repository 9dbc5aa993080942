#include "worker/src/checkpoint_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <utility>

namespace ddprun::worker {
namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'K', 'P', 'T', '1'};
constexpr size_t kNameSize = sizeof("ckpt-000000000000.pt") - 1;

// pread(2) of exactly `n` bytes (fewer only at the end of the file); -1 on
// an error.
ssize_t ReadAt(int fd, void* buf, size_t n, uint64_t pos) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(buf) + got, n - got,
                              static_cast<off_t>(pos + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

}  // namespace

std::string EncodeCheckpointTrailer(const CheckpointTrailer& trailer) {
  std::string out(kCheckpointTrailerSize, '\0');
  std::memcpy(&out[0], kMagic, 8);
  std::memcpy(&out[8], &trailer.length, 8);
  std::memcpy(&out[16], &trailer.hash, 8);
  std::memcpy(&out[24], &trailer.generation, 8);
  return out;
}

bool DecodeCheckpointTrailer(const char* bytes, uint64_t file_size,
                             CheckpointTrailer* trailer) {
  if (file_size < kCheckpointTrailerSize ||
      std::memcmp(bytes, kMagic, 8) != 0) {
    return false;
  }
  CheckpointTrailer t;
  std::memcpy(&t.length, bytes + 8, 8);
  std::memcpy(&t.hash, bytes + 16, 8);
  std::memcpy(&t.generation, bytes + 24, 8);
  if (t.length != file_size - kCheckpointTrailerSize) return false;
  *trailer = t;
  return true;
}

void Fnv1a64::Add(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = hash_;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  hash_ = h;
}

std::optional<CheckpointFile> CheckpointFile::Open(const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  char bytes[kCheckpointTrailerSize];
  CheckpointTrailer trailer;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) < kCheckpointTrailerSize ||
      ReadAt(fd, bytes, sizeof(bytes),
             static_cast<uint64_t>(st.st_size) - kCheckpointTrailerSize) !=
          static_cast<ssize_t>(sizeof(bytes)) ||
      !DecodeCheckpointTrailer(bytes, static_cast<uint64_t>(st.st_size),
                               &trailer)) {
    ::close(fd);
    return std::nullopt;
  }
  return CheckpointFile(fd, trailer);
}

CheckpointFile::CheckpointFile(CheckpointFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), trailer_(other.trailer_) {}

CheckpointFile& CheckpointFile::operator=(CheckpointFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    trailer_ = other.trailer_;
  }
  return *this;
}

CheckpointFile::~CheckpointFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool CheckpointFile::Verify() const {
  std::vector<char> buf(size_t{1} << 20);
  Fnv1a64 hash;
  uint64_t pos = 0;
  while (pos < trailer_.length) {
    const size_t want = static_cast<size_t>(
        std::min<uint64_t>(buf.size(), trailer_.length - pos));
    if (ReadAt(fd_, buf.data(), want, pos) != static_cast<ssize_t>(want)) {
      return false;  // shrank under us, or an I/O error
    }
    hash.Add(buf.data(), want);
    pos += want;
  }
  return hash.value() == trailer_.hash;
}

size_t CheckpointFile::ReadPayload(uint64_t pos, void* buf, size_t n) const {
  if (pos >= trailer_.length) return 0;
  n = static_cast<size_t>(std::min<uint64_t>(n, trailer_.length - pos));
  const ssize_t got = ReadAt(fd_, buf, n, pos);
  return got < 0 ? 0 : static_cast<size_t>(got);
}

std::string CheckpointFileName(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "ckpt-%012lld.pt",
                static_cast<long long>(step));
  return buf;
}

int64_t CheckpointStepOf(const std::string& name) {
  if (name.size() != kNameSize || name.compare(0, 5, "ckpt-") != 0 ||
      name.compare(kNameSize - 3, 3, ".pt") != 0) {
    return -1;
  }
  int64_t step = 0;
  for (size_t i = 5; i < kNameSize - 3; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::vector<CheckpointEntry> ListCheckpoints(const std::string& dir) {
  std::vector<CheckpointEntry> found;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return found;
  while (dirent* e = ::readdir(d)) {
    const int64_t step = CheckpointStepOf(e->d_name);
    if (step < 0) continue;
    std::string path = dir + "/" + e->d_name;
    if (std::optional<CheckpointFile> f = CheckpointFile::Open(path)) {
      found.push_back({step, f->trailer().generation, std::move(path)});
    }
  }
  ::closedir(d);
  std::sort(found.begin(), found.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) {
              return std::tie(a.generation, a.step) <
                     std::tie(b.generation, b.step);
            });
  return found;
}

}  // namespace ddprun::worker
