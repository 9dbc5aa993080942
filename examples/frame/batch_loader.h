#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::examples {

// Loads batches on `num_workers` background threads (0 = on the caller's
// thread inside Next()) and hands them out in order, at most `prefetch`
// batches ahead. `load` turns a list of dataset indices into a Batch; it runs
// on worker threads, so it must be thread-safe. A failing load is reported by
// the Next() call for that batch; no exception crosses the thread edge (load
// must not throw). The destructor stops and joins the threads.
template <typename Batch>
class BatchLoader {
 public:
  using LoadFn = std::function<StatusOr<Batch>(const std::vector<int64_t>&)>;

  BatchLoader(std::vector<std::vector<int64_t>> batches, LoadFn load,
              int num_workers, int prefetch = 2)
      : batches_(std::move(batches)),
        load_(std::move(load)),
        prefetch_(std::max(prefetch, 1)) {
    for (int i = 0; i < num_workers; ++i)
      threads_.emplace_back([this] { Work(); });
  }
  ~BatchLoader() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  size_t size() const { return batches_.size(); }

  // Blocks until batch number `next` is ready and returns it. Call exactly
  // size() times.
  StatusOr<Batch> Next() {
    const size_t want = next_out_++;
    if (threads_.empty()) return load_(batches_.at(want));
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return ready_.count(want) > 0; });
    StatusOr<Batch> out = std::move(ready_.at(want));
    ready_.erase(want);
    consumed_ = want + 1;
    lock.unlock();
    cv_.notify_all();
    return out;
  }

 private:
  void Work() {
    for (;;) {
      size_t mine;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] {
          return stop_ || (next_in_ < batches_.size() &&
                           next_in_ < consumed_ + prefetch_);
        });
        if (stop_) return;
        mine = next_in_++;
      }
      StatusOr<Batch> b = load_(batches_[mine]);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.emplace(mine, std::move(b));
      }
      cv_.notify_all();
    }
  }

  const std::vector<std::vector<int64_t>> batches_;
  const LoadFn load_;
  const size_t prefetch_;
  size_t next_out_ = 0;  // Caller's thread only.

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                        // Guarded by mu_.
  size_t next_in_ = 0;                       // Guarded by mu_.
  size_t consumed_ = 0;                      // Guarded by mu_.
  std::map<size_t, StatusOr<Batch>> ready_;  // Guarded by mu_.
  std::vector<std::thread> threads_;
};

// Splits `indices` into consecutive batches of `batch_size` (the last may be
// shorter unless `drop_last`).
std::vector<std::vector<int64_t>> MakeBatches(
    const std::vector<int64_t>& indices, int64_t batch_size, bool drop_last);

// Data-loader threads for "auto" (-1): spare cores per local rank, at most 4.
int AutoNumWorkers(int requested, int local_world_size);

}  // namespace ddprun::examples
