#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include <torch/types.h>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// MONAI's SmartCacheDataset: keeps `cache_num` of the dataset's items in
// memory and trains each epoch on the cached ones only; between epochs
// `replace_num` of them are swapped for items not yet seen, which a
// background thread loads during the previous epoch so training never waits
// for disk. The schedule is deterministic: epoch e caches
// order[(e * replace_num + k) % N] for k in [0, cache_num), so every rank
// holds the same cache and a resumed run rebuilds the cache of its epoch.
// Thread-safety: BeginEpoch() from one thread; Get()/ItemAt() from any
// thread between BeginEpoch() calls. `load` runs on the background thread.
class SmartCache {
 public:
  using LoadFn = std::function<StatusOr<torch::Tensor>(int64_t item)>;

  // `order`: dataset indices in cycling order (a seeded shuffle).
  // cache_num in [1, N]; replace_num in [0, cache_num].
  SmartCache(std::vector<int64_t> order, int64_t cache_num, int64_t replace_num,
             LoadFn load);
  ~SmartCache();  // Joins the background thread.
  SmartCache(const SmartCache&) = delete;
  SmartCache& operator=(const SmartCache&) = delete;

  // Blocks until the cache holds epoch `epoch`'s items (loading on this
  // thread whatever the background refresh did not prefetch), then starts
  // loading epoch + 1's new items in the background. Returns the first load
  // error (naming the file).
  Status BeginEpoch(int64_t epoch);

  int64_t size() const { return cache_num_; }
  int64_t replace_num() const { return replace_num_; }
  // Dataset index held in `slot` this epoch.
  int64_t ItemAt(int64_t slot) const { return slots_.at(slot); }
  const torch::Tensor& Get(int64_t slot) const {
    return cache_.at(slots_.at(slot));
  }

  // Items loaded in the background so far (tests, logs).
  int64_t background_loads() const { return background_loads_.load(); }

  // Where the items of the last BeginEpoch() came from: kept from the
  // previous epoch's cache, prefetched by the background thread, or loaded
  // on the calling thread (the first epoch, a resumed run).
  struct EpochStats {
    int64_t kept = 0;
    int64_t prefetched = 0;
    int64_t loaded = 0;
  };
  const EpochStats& last_epoch_stats() const { return last_epoch_stats_; }

 private:
  std::vector<int64_t> ItemsOf(int64_t epoch) const;
  void JoinRefresh();

  const std::vector<int64_t> order_;
  const int64_t cache_num_;
  const int64_t replace_num_;
  const LoadFn load_;

  std::vector<int64_t> slots_;
  std::map<int64_t, torch::Tensor> cache_;
  // Written only by the refresh thread between its start and join.
  std::map<int64_t, StatusOr<torch::Tensor>> prefetched_;
  std::thread refresh_;
  std::atomic<int64_t> background_loads_{0};
  EpochStats last_epoch_stats_;
};

}  // namespace ddprun::examples
