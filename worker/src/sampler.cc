#include "ddprun/worker/sampler.h"

#include <string>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include "ddprun/worker/errors.h"

namespace ddprun::worker {

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size,
                                       int rank, SamplerOptions options)
    : dataset_size_(dataset_size),
      world_size_(world_size),
      rank_(rank),
      options_(options) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw ConfigError("DistributedSampler: rank " + std::to_string(rank) +
                      " is not in [0, " + std::to_string(world_size) + ")");
  }
  if (dataset_size < 0) {
    throw ConfigError("DistributedSampler: negative dataset size " +
                      std::to_string(dataset_size));
  }
  // Python: ceil((N - R) / R) when dropping an uneven tail, else ceil(N / R).
  if (options_.drop_last && dataset_size % world_size != 0) {
    num_samples_ = dataset_size / world_size;
  } else {
    num_samples_ = (dataset_size + world_size - 1) / world_size;
  }
}

std::vector<int64_t> DistributedSampler::Indices() const {
  std::vector<int64_t> all;
  all.reserve(static_cast<size_t>(total_size()));
  if (options_.shuffle) {
    at::Generator gen = at::detail::createCPUGenerator(
        options_.seed + static_cast<uint64_t>(epoch_));
    at::Tensor perm = at::randperm(dataset_size_, gen, at::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    all.assign(p, p + dataset_size_);
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) all.push_back(i);
  }
  const int64_t total = total_size();
  if (!options_.drop_last) {
    // Pad by cycling from the start, as Python does.
    for (int64_t i = 0; static_cast<int64_t>(all.size()) < total; ++i) {
      all.push_back(all[static_cast<size_t>(i % dataset_size_)]);
    }
  } else {
    all.resize(static_cast<size_t>(total));
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += world_size_) {
    mine.push_back(all[static_cast<size_t>(i)]);
  }
  return mine;
}

int64_t DistributedSampler::NumBatches(int64_t batch_size,
                                       bool drop_last_batch) const {
  if (batch_size <= 0) {
    throw ConfigError("DistributedSampler: batch size must be > 0");
  }
  return drop_last_batch ? num_samples_ / batch_size
                         : (num_samples_ + batch_size - 1) / batch_size;
}

}  // namespace ddprun::worker
