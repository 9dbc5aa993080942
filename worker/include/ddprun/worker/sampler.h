#pragma once

#include <cstdint>
#include <vector>

namespace ddprun::worker {

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  // false: pad by repeating indices from the start of the (shuffled) list
  // so every rank gets ceil(N / world) samples; true: drop the tail so
  // every rank gets floor(N / world).
  bool drop_last = false;
};

// torch.utils.data.DistributedSampler in C++: for the same dataset size,
// world size, rank, seed, epoch, shuffle and drop_last it yields exactly the
// indices Python yields (the permutation is torch.randperm(N) with a CPU
// generator seeded seed + epoch; tested against Debian's python3-torch).
// Every rank gets the same count, so every rank runs the same number of
// batches and collectives stay matched. Cheap to copy; not thread-safe.
class DistributedSampler {
 public:
  // Throws ConfigError when rank is not in [0, world_size) or
  // dataset_size < 0.
  DistributedSampler(int64_t dataset_size, int world_size, int rank,
                     SamplerOptions options = {});

  // Selects the shuffle of an epoch (Python's set_epoch).
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch, in order.
  std::vector<int64_t> Indices() const;
  // Number of indices per rank (same on every rank).
  int64_t num_samples() const { return num_samples_; }
  // Indices padded/dropped over all ranks (num_samples * world_size).
  int64_t total_size() const { return num_samples_ * world_size_; }
  // Number of batches per rank for `batch_size` (last partial batch kept
  // unless drop_last_batch).
  int64_t NumBatches(int64_t batch_size, bool drop_last_batch = false) const;

 private:
  int64_t dataset_size_;
  int world_size_;
  int rank_;
  SamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

}  // namespace ddprun::worker
