#include "ddprun/worker/host_allocator.h"

#include <malloc.h>

#include <cstdlib>
#include <cstring>

namespace ddprun::worker {
namespace {

bool Set(const char* v) { return v != nullptr && *v != '\0'; }

}  // namespace

std::string MallocTunablesEnvValue() {
  return "glibc.malloc.mmap_threshold=" +
         std::to_string(kMallocMmapThresholdBytes) +
         ":glibc.malloc.trim_threshold=" +
         std::to_string(kMallocTrimThresholdBytes);
}

StatusOr<HostAllocatorDecision> DecideHostAllocatorTuning(
    const std::function<const char*(const char*)>& getenv) {
  HostAllocatorDecision d;
  const char* flag = getenv("DDPRUN_MALLOC_TUNING");
  if (Set(flag) && std::strcmp(flag, "1") != 0) {
    if (std::strcmp(flag, "0") != 0) {
      return InvalidArgumentError(std::string("DDPRUN_MALLOC_TUNING='") + flag +
                                  "' must be 0 or 1");
    }
    d.reason = "off: DDPRUN_MALLOC_TUNING=0";
    return d;
  }
  const char* tunables = getenv("GLIBC_TUNABLES");
  if (Set(tunables) && std::strstr(tunables, "glibc.malloc.") != nullptr) {
    d.reason = "off: GLIBC_TUNABLES sets glibc.malloc.* (yours win)";
    return d;
  }
  for (const char* name : {"MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                           "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_"}) {
    if (Set(getenv(name))) {
      d.reason = std::string("off: ") + name + " is set (yours wins)";
      return d;
    }
  }
  const char* preload = getenv("LD_PRELOAD");
  if (Set(preload)) {
    for (const char* lib : {"jemalloc", "tcmalloc", "mimalloc"}) {
      if (std::strstr(preload, lib) != nullptr) {
        d.reason = std::string("off: ") + lib + " is preloaded";
        return d;
      }
    }
  }
  d.apply = true;
  d.reason = "on: " + MallocTunablesEnvValue();
  return d;
}

StatusOr<HostAllocatorDecision> TuneHostAllocator() {
  DDP_ASSIGN_OR_RETURN(HostAllocatorDecision d,
                       DecideHostAllocatorTuning(
                           [](const char* name) { return std::getenv(name); }));
  if (!d.apply) return d;
  // Either call also turns off glibc's dynamic thresholds, which would
  // otherwise reset the trim threshold to twice the largest freed mmapped
  // block.
  if (mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMallocMmapThresholdBytes)) !=
          1 ||
      mallopt(M_TRIM_THRESHOLD, static_cast<int>(kMallocTrimThresholdBytes)) !=
          1) {
    d.apply = false;
    d.reason = "off: mallopt refused the settings";
  }
  return d;
}

}  // namespace ddprun::worker
