// Fuzz target over reading a checkpoint with LibTorch
// (Checkpointer::LoadFile, ddprun/worker/checkpoint.h): replayed in ctest
// (fuzz/checkpoint, TORCH: not in the Torch-free Clang build; the
// container itself has its own libFuzzer target, checkpoint_file).
//
// Input: a checkpoint file's bytes. Each input is read twice: as it is
// (a torn or foreign file is refused by its trailer or hash), and with its
// payload (the bytes before our trailer, or all of them) given a valid
// trailer, so that torch's reader sees the bytes: a payload damaged before
// it was hashed, or a file made to look complete.
//
// Invariants (abort() on violation): IsComplete() agrees with LoadFile()
// about the file as it is; whatever the bytes, LoadFile() either loads a
// TrainState or throws WorkerError naming the file (a torch error does not
// escape as one of torch's); a load that fails leaves the model's shapes
// as they were.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <typeinfo>

#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/errors.h"
#include "fuzz_check.h"
#include "fuzz_temp_dir.h"
#include "worker/src/checkpoint_file.h"

namespace ddprun::worker {
namespace {

using fuzz::Check;

// Loads `path` into a small model and optimizer; true when it loaded.
bool Load(const std::string& path) {
  torch::nn::Linear net(3, 2);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1));
  CheckpointParts parts;
  parts.model = net.ptr().get();
  parts.optimizer = &sgd;
  try {
    Checkpointer::LoadFile(path, parts);
    return true;
  } catch (const WorkerError& e) {
    Check(std::string(e.what()).find(path) != std::string::npos,
          "an error that does not name the file");
    Check(net->weight.sizes() == at::IntArrayRef({2, 3}),
          "a failed load changed the model's shape");
    return false;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "escaped: %s: %s\n", typeid(e).name(), e.what());
    Check(false, "an exception other than WorkerError escaped");
  } catch (...) {
    Check(false, "an exception other than WorkerError escaped");
  }
  return false;
}

}  // namespace
}  // namespace ddprun::worker

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddprun::worker;
  static const ddprun::fuzz::FuzzTempDir dir;
  const std::string as_is = dir.Write("as_is.pt", data, size);
  const bool complete = Checkpointer::IsComplete(as_is);
  const bool loaded = Load(as_is);
  Check(!loaded || complete, "an incomplete file loaded");
  // The payload, under a trailer that matches it.
  size_t length = size;
  if (size >= kCheckpointTrailerSize &&
      std::memcmp(data + size - kCheckpointTrailerSize, "DDPCKPT1", 8) == 0) {
    length = size - kCheckpointTrailerSize;
  }
  CheckpointTrailer trailer;
  trailer.length = length;
  Fnv1a64 hash;
  hash.Add(data, length);
  trailer.hash = hash.value();
  std::string fixed(reinterpret_cast<const char*>(data), length);
  fixed += EncodeCheckpointTrailer(trailer);
  const std::string resealed =
      dir.Write("resealed.pt", fixed.data(), fixed.size());
  Check(Checkpointer::IsComplete(resealed), "a resealed file is incomplete");
  Load(resealed);
  return 0;
}
