// libFuzzer target over the checkpoint file's container, without Torch
// (worker/src/checkpoint_file.h): the trailer, the hash check, reads of the
// payload where it lies, and the folder listing that orders rotated
// checkpoints by write order.
//
// Input: the bytes of one file, written as <dir>/ckpt-000000000007.pt. The
// first byte also picks the generation of a second, valid checkpoint the
// target writes beside it (ckpt-000000000003.pt, its payload the input's
// first half), and the folder holds a FIFO named like a checkpoint
// (ckpt-000000000001.pt) throughout.
//
// Invariants (abort() on violation): Open() accepts exactly the files whose
// last 32 bytes are our magic and a length equal to the file's size less
// 32; Verify() is true exactly when the payload's FNV-1a 64 (computed here,
// independently) is the trailer's; ReadPayload() returns the payload's
// bytes and nothing past it; ListCheckpoints() lists exactly the files
// Open() accepts, ordered by (generation, step), and never blocks on the
// FIFO; CheckpointStepOf() and CheckpointFileName() are inverse.
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "fuzz_temp_dir.h"
#include "worker/src/checkpoint_file.h"

namespace ddprun::worker {
namespace {

using fuzz::Check;

uint64_t Fnv(const uint8_t* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= data[i];
    h *= 1099511628211ull;
  }
  return h;
}

const fuzz::FuzzTempDir& Dir() {
  static const fuzz::FuzzTempDir dir;
  static const bool fifo_made = [] {
    const std::string fifo = dir.path() + "/" + CheckpointFileName(1);
    Check(::mkfifo(fifo.c_str(), 0600) == 0, "mkfifo");
    return true;
  }();
  (void)fifo_made;
  return dir;
}

// What Open() must decide, from the bytes alone.
bool TrailerMatches(const uint8_t* data, size_t size,
                    CheckpointTrailer* trailer) {
  if (size < kCheckpointTrailerSize) return false;
  const uint8_t* t = data + size - kCheckpointTrailerSize;
  if (std::memcmp(t, "DDPCKPT1", 8) != 0) return false;
  std::memcpy(&trailer->length, t + 8, 8);
  std::memcpy(&trailer->hash, t + 16, 8);
  std::memcpy(&trailer->generation, t + 24, 8);
  return trailer->length == size - kCheckpointTrailerSize;
}

void CheckReads(const CheckpointFile& file, const uint8_t* payload,
                uint64_t length) {
  char buf[64];
  const uint64_t positions[] = {0,      length / 2, length > 3 ? length - 3 : 0,
                                length, length + 1, ~0ull};
  for (uint64_t pos : positions) {
    const size_t got = file.ReadPayload(pos, buf, sizeof(buf));
    const size_t want = pos >= length ? 0
                                      : static_cast<size_t>(std::min<uint64_t>(
                                            sizeof(buf), length - pos));
    Check(got == want, "ReadPayload returned a wrong count");
    Check(std::memcmp(buf, payload + (pos < length ? pos : 0), got) == 0,
          "ReadPayload returned other bytes than the payload's");
  }
}

}  // namespace
}  // namespace ddprun::worker

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddprun::worker;
  const ddprun::fuzz::FuzzTempDir& dir = Dir();
  const std::string path = dir.Write(CheckpointFileName(7), data, size);

  CheckpointTrailer expected;
  const bool matches = TrailerMatches(data, size, &expected);
  std::optional<CheckpointFile> file = CheckpointFile::Open(path);
  Check(file.has_value() == matches, "Open disagrees with the trailer");
  if (file) {
    Check(file->trailer().length == expected.length &&
              file->trailer().hash == expected.hash &&
              file->trailer().generation == expected.generation,
          "Open read another trailer");
    Check(file->Verify() == (Fnv(data, expected.length) == expected.hash),
          "Verify disagrees with the payload's hash");
    CheckReads(*file, data, expected.length);
  }

  // A second, valid checkpoint of a lower step: the listing orders the two
  // by generation first.
  CheckpointTrailer other;
  other.length = size / 2;
  other.hash = Fnv(data, other.length);
  other.generation = size > 0 ? data[0] : 0;
  std::string second(reinterpret_cast<const char*>(data), other.length);
  second += EncodeCheckpointTrailer(other);
  dir.Write(CheckpointFileName(3), second.data(), second.size());
  const std::vector<CheckpointEntry> listed = ListCheckpoints(dir.path());
  Check(listed.size() == (matches ? 2u : 1u),
        "ListCheckpoints listed other files than Open accepts");
  for (size_t i = 0; i + 1 < listed.size(); ++i) {
    Check(listed[i].generation < listed[i + 1].generation ||
              (listed[i].generation == listed[i + 1].generation &&
               listed[i].step < listed[i + 1].step),
          "ListCheckpoints is not in (generation, step) order");
  }
  for (const CheckpointEntry& e : listed) {
    Check(e.step == 3 || e.step == 7, "ListCheckpoints listed a stranger");
    Check(
        e.generation == (e.step == 3 ? other.generation : expected.generation),
        "ListCheckpoints read another generation");
  }

  // The input as a file name.
  const std::string name(reinterpret_cast<const char*>(data),
                         std::min<size_t>(size, 64));
  const int64_t step = CheckpointStepOf(name);
  if (step >= 0) {
    Check(CheckpointFileName(step) == name,
          "CheckpointStepOf accepted a name CheckpointFileName does not "
          "write");
  }
  return 0;
}
