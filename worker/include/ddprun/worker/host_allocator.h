#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::worker {

// glibc malloc settings for a training process. By default glibc gives
// freed memory back to the kernel: a freed chunk of >= 128 KiB (raised
// dynamically up to the largest freed mmapped chunk) is munmap'ed, and a
// free top of the heap larger than twice that is trimmed with brk. A
// training step allocates and frees the same tens of MB of activations and
// gradients every iteration, so depending on the heap's layout (it varies
// from run to run) every step can fault much of that memory back in (measured
// in bench/ddp_step: 4,000-15,000 page faults and ~10 ms of CPU per 50 ms step,
// in C++ and in Python alike). With these settings the heap keeps freed memory
// and a steady-state step faults nothing.
//  - mmap threshold: blocks below it come from the heap; 32 MiB is the
//    largest value glibc accepts (larger tensors are still mmapped and
//    returned on free).
//  - trim threshold: the free top of the heap is returned to the kernel only
//    beyond this size, so the process keeps its peak heap (<= 1 GiB free)
//    resident, as jemalloc/tcmalloc would.
inline constexpr size_t kMallocMmapThresholdBytes = size_t{32} << 20;
inline constexpr size_t kMallocTrimThresholdBytes = size_t{1} << 30;

// The equivalent environment for a process that does not link this
// runtime (a Python rank): GLIBC_TUNABLES=<this>.
std::string MallocTunablesEnvValue();

struct HostAllocatorDecision {
  bool apply = false;
  std::string reason;  // one line: why (not)
};

// Decides from the environment: DDPRUN_MALLOC_TUNING=0 turns tuning off
// ("1" or unset: on); the user's own glibc malloc settings win
// (GLIBC_TUNABLES naming glibc.malloc.*, MALLOC_TRIM_THRESHOLD_,
// MALLOC_MMAP_THRESHOLD_, MALLOC_TOP_PAD_, MALLOC_MMAP_MAX_), and so does a
// preloaded jemalloc/tcmalloc/mimalloc. Any other DDPRUN_MALLOC_TUNING value
// is an InvalidArgument error naming the variable.
StatusOr<HostAllocatorDecision> DecideHostAllocatorTuning(
    const std::function<const char*(const char*)>& getenv);

// Applies the settings above with mallopt() when DecideHostAllocatorTuning
// over the process environment says so; returns the decision (apply is
// false with the reason when mallopt refused). Process-wide, idempotent,
// safe from any thread; best called before the first large allocation.
// InitFromEnv calls it (InitOptions::tune_host_allocator).
StatusOr<HostAllocatorDecision> TuneHostAllocator();

}  // namespace ddprun::worker
