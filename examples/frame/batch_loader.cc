#include "examples/frame/batch_loader.h"

#include <algorithm>

namespace ddprun::examples {

std::vector<std::vector<int64_t>> MakeBatches(
    const std::vector<int64_t>& indices, int64_t batch_size, bool drop_last) {
  std::vector<std::vector<int64_t>> out;
  for (size_t i = 0; i < indices.size(); i += batch_size) {
    size_t end = std::min(indices.size(), i + static_cast<size_t>(batch_size));
    if (drop_last && end - i < static_cast<size_t>(batch_size)) break;
    out.emplace_back(indices.begin() + i, indices.begin() + end);
  }
  return out;
}

int AutoNumWorkers(int requested, int local_world_size) {
  if (requested >= 0) return requested;
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  int per_rank = cores / std::max(local_world_size, 1);
  // One core runs the model; the rest may load data.
  return std::clamp(per_rank - 1, 0, 4);
}

}  // namespace ddprun::examples
