#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

// The container of a Checkpointer file (ddprun/worker/checkpoint.h), without
// LibTorch: a payload (a torch archive) followed by a 32-byte trailer,
//   "DDPCKPT1" | payload length | FNV-1a 64 of the payload | generation
// (u64s in the machine's byte order). The generation orders the rotated
// checkpoints of a folder by when they were written (1 + the highest one
// there at the time); files of earlier ddprun versions hold 0 there.
// Everything here reads files where they lie (pread), never whole into
// memory, and never blocks on what is not a regular file. Thread-safe
// (no shared state).
namespace ddprun::worker {

inline constexpr size_t kCheckpointTrailerSize = 32;

struct CheckpointTrailer {
  uint64_t length = 0;  // payload bytes
  uint64_t hash = 0;    // FNV-1a 64 of the payload
  uint64_t generation = 0;
};

std::string EncodeCheckpointTrailer(const CheckpointTrailer& trailer);
// `bytes`: the last kCheckpointTrailerSize bytes of a file of `file_size`
// bytes. False when the magic is not ours or the length is not the file's
// size less the trailer (a torn copy, a foreign file).
bool DecodeCheckpointTrailer(const char* bytes, uint64_t file_size,
                             CheckpointTrailer* trailer);

// FNV-1a 64, fed piece by piece.
class Fnv1a64 {
 public:
  void Add(const void* data, size_t n);
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 1469598103934665603ull;
};

// One checkpoint file, open, its trailer read and matching its size. The
// hash is checked only by Verify(): a whole read of the payload.
class CheckpointFile {
 public:
  // nullopt when `path` is missing, not a regular file (opened O_NONBLOCK:
  // a FIFO or device there never blocks), or its trailer does not match.
  static std::optional<CheckpointFile> Open(const std::string& path);

  CheckpointFile(CheckpointFile&& other) noexcept;
  CheckpointFile& operator=(CheckpointFile&& other) noexcept;
  CheckpointFile(const CheckpointFile&) = delete;
  CheckpointFile& operator=(const CheckpointFile&) = delete;
  ~CheckpointFile();

  // The payload hashes to the trailer's hash: read once, 1 MiB at a time.
  bool Verify() const;
  // Up to `n` bytes of the payload from `pos` into `buf`: fewer at its end,
  // 0 past it or on a read error (torch's InputArchive::load_from reader).
  size_t ReadPayload(uint64_t pos, void* buf, size_t n) const;

  const CheckpointTrailer& trailer() const { return trailer_; }

 private:
  CheckpointFile(int fd, CheckpointTrailer trailer)
      : fd_(fd), trailer_(trailer) {}

  int fd_ = -1;
  CheckpointTrailer trailer_;
};

// "ckpt-000000000042.pt": the rotated checkpoint of a step.
std::string CheckpointFileName(int64_t step);
// The step of such a name; -1 for any other name.
int64_t CheckpointStepOf(const std::string& name);

struct CheckpointEntry {
  int64_t step = 0;
  uint64_t generation = 0;
  std::string path;
};
// The rotated checkpoints in `dir` whose trailer matches (hashes not
// checked), oldest first: by generation, then step. Write order, not step
// order, so that a run writing lower steps into a folder that holds a
// earlier run's higher ones finds its own checkpoints the newest.
std::vector<CheckpointEntry> ListCheckpoints(const std::string& dir);

}  // namespace ddprun::worker
