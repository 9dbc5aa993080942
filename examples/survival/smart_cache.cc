#include "examples/survival/smart_cache.h"

#include <algorithm>
#include <set>
#include <stdexcept>

namespace ddprun::examples {

SmartCache::SmartCache(std::vector<int64_t> order, int64_t cache_num,
                       int64_t replace_num, LoadFn load)
    : order_(std::move(order)),
      cache_num_(std::clamp<int64_t>(cache_num, 1,
                                     static_cast<int64_t>(order_.size()))),
      replace_num_(std::clamp<int64_t>(replace_num, 0, cache_num_)),
      load_(std::move(load)) {}

SmartCache::~SmartCache() { JoinRefresh(); }

void SmartCache::JoinRefresh() {
  if (refresh_.joinable()) refresh_.join();
}

std::vector<int64_t> SmartCache::ItemsOf(int64_t epoch) const {
  const int64_t n = static_cast<int64_t>(order_.size());
  std::vector<int64_t> items;
  const int64_t start = (epoch * replace_num_) % n;
  for (int64_t k = 0; k < cache_num_; ++k)
    items.push_back(order_[(start + k) % n]);
  return items;
}

Status SmartCache::BeginEpoch(int64_t epoch) {
  JoinRefresh();
  std::map<int64_t, torch::Tensor> next;
  EpochStats stats;
  const std::vector<int64_t> items = ItemsOf(epoch);
  for (int64_t item : items) {
    if (next.count(item)) continue;
    if (auto it = cache_.find(item); it != cache_.end()) {
      next.emplace(item, it->second);
      ++stats.kept;
    } else if (auto p = prefetched_.find(item); p != prefetched_.end()) {
      if (!p->second.ok()) return p->second.status();
      next.emplace(item, p->second.value());
      ++stats.prefetched;
    } else {
      StatusOr<torch::Tensor> loaded = load_(item);
      if (!loaded.ok()) return loaded.status();
      next.emplace(item, std::move(loaded).value());
      ++stats.loaded;
    }
  }
  cache_ = std::move(next);
  last_epoch_stats_ = stats;
  slots_ = items;
  prefetched_.clear();
  // Prefetch what epoch + 1 adds while this epoch trains.
  std::vector<int64_t> incoming;
  for (int64_t item : ItemsOf(epoch + 1)) {
    if (!cache_.count(item)) incoming.push_back(item);
  }
  if (!incoming.empty()) {
    refresh_ = std::thread([this, incoming] {
      for (int64_t item : incoming) {
        prefetched_.emplace(item, load_(item));
        ++background_loads_;
      }
    });
  }
  return Status::Ok();
}

}  // namespace ddprun::examples
