#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"

namespace ddprun::worker {

// Collectives between the ranks of ONE host through a POSIX shared memory
// segment, for the small CPU all-reduces of data parallel training. Over
// Gloo's TCP loopback an all-reduce of 0.2-0.9 MB took 1.3-3.1 ms on average
// between two otherwise idle ranks on a 2-core VM (fastest 0.3-0.6 ms): every
// hand-off of its ring wakes a thread on the peer. Here an all-reduce is two
// copies and a sum through the segment with two barriers, and a rank that
// arrives first polls for a while before it sleeps (issue 14).
//
// Layout: a header (magic, the ranks' pids, a barrier counter) and two
// halves of `size` slots of `slot_bytes` each. Consecutive chunks use
// alternate halves, so a rank may fill its slot for the next chunk while a
// slower rank still copies the previous result out; a barrier between them
// makes that safe (shared_memory_group.cc explains the argument).
//
// Results are the same bits on every rank: every element is summed over the
// ranks in rank order, by one rank, and copied to all.
//
// Errors are Status values: a peer that does not reach a barrier within the
// timeout gives DeadlineExceeded; a peer process that is gone (its pid no
// longer exists) gives Unavailable at once, naming the rank. After an error
// the group is unusable (the barrier counts no longer agree): the worker
// is expected to exit and be restarted with its peers, as after any
// collective failure (or, under restart scope "failed", to Abort() it and
// re-form).
//
// Threads: one collective at a time per group, from one thread of each rank,
// in the same order on every rank (like any process group).
class SharedMemoryGroup {
 public:
  struct Options {
    // Bytes of one rank's slot in one half; larger collectives run in chunks
    // of this size. The segment is 2 * size * slot_bytes plus a page (16 MB
    // for 8 ranks: inside Docker's default 64 MB /dev/shm).
    size_t slot_bytes = size_t{1} << 20;
    // How long a rank that arrives at a barrier first polls before it sleeps
    // on a futex. Negative: chosen by Create/Open (2 ms when every rank of
    // the group can have a CPU of its own, else none: a poller would take
    // the CPU from the rank it waits for).
    std::chrono::microseconds poll{-1};
    // A barrier not reached by every rank within this time fails.
    std::chrono::milliseconds timeout = std::chrono::minutes(30);
  };

  // Rank 0: makes a new segment with a random name (/dev/shm/ddprun-shm-*)
  // for `size` ranks and maps it. Pass name() to the other ranks (a store)
  // and call Unlink() once they have opened it.
  static StatusOr<std::unique_ptr<SharedMemoryGroup>> Create(int size,
                                                              Options options);
  // Ranks 1..size-1: maps the segment rank 0 made. NotFound when there is no
  // such segment here (the rank is on another host); FailedPrecondition when
  // it is not one for this group size and slot size.
  static StatusOr<std::unique_ptr<SharedMemoryGroup>> Open(
      const std::string& name, int rank, int size, Options options);

  ~SharedMemoryGroup();  // unmaps; never blocks
  SharedMemoryGroup(const SharedMemoryGroup&) = delete;
  SharedMemoryGroup& operator=(const SharedMemoryGroup&) = delete;

  // Removes the segment's name so that nothing is left in /dev/shm when the
  // processes exit (mappings stay valid). Idempotent; rank 0 only.
  void Unlink();

  // In place: data[i] = scale * sum over ranks of data[i], for n elements
  // (n equal on all ranks). Blocks until every rank has contributed.
  Status AllReduceSum(float* data, size_t n, float scale = 1.0f);
  Status AllReduceSum(double* data, size_t n, double scale = 1.0);

  // Copies root's bytes of every buffer into the same buffers of the other
  // ranks (same sizes on every rank). One barrier per slot_bytes.
  struct Buffer {
    void* data;
    size_t bytes;
  };
  Status Broadcast(const std::vector<Buffer>& buffers, int root);

  // Every rank's `bytes` bytes of `in`, in rank order: rank r's land at
  // out + r * bytes (`out` holds size() * bytes; `bytes` equal on all
  // ranks). One barrier per slot_bytes of each rank's part.
  Status AllGather(const void* in, size_t bytes, void* out);

  // Leaves the group for good (restart scope "failed": this rank re-forms
  // after a failure): every rank waiting in or arriving at a collective of
  // the group, this one included, fails with FailedPrecondition at once
  // instead of at the timeout. Never blocks; thread-safe.
  void Abort();

  // Collectives this rank has completed through the group (for tests and
  // diagnostics: which path a collective took).
  uint64_t completed() const { return completed_; }

  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::microseconds poll() const { return options_.poll; }

 private:
  struct Header;
  SharedMemoryGroup(std::string name, int rank, int size, Options options,
                    void* base, size_t bytes, bool owner);
  static size_t SegmentBytes(int size, size_t slot_bytes);

  unsigned char* Slot(int half, int rank) const;
  // Waits until every rank has called Barrier() as often as this one.
  Status Barrier();
  // FailedPrecondition once a barrier has failed (broken_).
  Status Usable() const;
  // FailedPrecondition (and broken_) once a rank called Abort().
  Status Aborted();
  // Which rank of those that have not arrived is gone, or -1.
  int DeadPeer() const;
  template <typename T>
  Status AllReduceSumImpl(T* data, size_t n, T scale);

  std::string name_;
  int rank_;
  int size_;
  Options options_;
  void* base_;
  size_t bytes_;
  bool owner_;  // made the name (rank 0): Unlink() removes it
  Header* header_;
  uint32_t barriers_ = 0;  // barriers this rank has passed
  uint64_t chunks_ = 0;    // chunks moved so far (picks the half)
  bool broken_ = false;    // a barrier failed: refuse further collectives
  uint64_t completed_ = 0;  // collectives completed
};

}  // namespace ddprun::worker
