// glibc malloc tuning of the worker runtime (host_allocator.h): the
// environment decides, and once applied a training-step allocation pattern
// stops page-faulting.
#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "ddprun_catch.h"

#include "ddprun/worker/host_allocator.h"
#include "tests/worker/map_env.h"

namespace w = ddprun::worker;

namespace {

ddprun::StatusOr<w::HostAllocatorDecision> Decide(
    const std::map<std::string, std::string>& vars) {
  return w::DecideHostAllocatorTuning(w::testing::MapGetenv(vars));
}

long MinorFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Page faults per iteration of "allocate four 8 MiB blocks, write them, free
// them" (activations of a step), after two warm-up iterations. glibc's
// defaults trim the freed 32 MiB from the heap every time: ~8,000 faults.
double FaultsPerStep() {
  constexpr size_t kBlock = size_t{8} << 20;
  constexpr int kWarmup = 2, kSteps = 10;
  long start = 0;
  for (int i = 0; i < kWarmup + kSteps; ++i) {
    if (i == kWarmup) start = MinorFaults();
    void* blocks[4];
    for (void*& b : blocks) {
      b = std::malloc(kBlock);
      REQUIRE(b != nullptr);
      std::memset(b, i, kBlock);
    }
    for (void* b : blocks) std::free(b);
  }
  return static_cast<double>(MinorFaults() - start) / kSteps;
}

}  // namespace

TEST_CASE("HostAllocatorTuning: on by default with glibc's tunables string",
          "[worker][malloc]") {
  auto d = Decide({});
  REQUIRE(d.ok());
  REQUIRE(d->apply);
  REQUIRE(w::MallocTunablesEnvValue() ==
          "glibc.malloc.mmap_threshold=33554432:"
          "glibc.malloc.trim_threshold=1073741824");
  REQUIRE(Decide({{"DDPRUN_MALLOC_TUNING", "1"}})->apply);
}

TEST_CASE("HostAllocatorTuning: switched off or overridden by the user",
          "[worker][malloc]") {
  auto off = Decide({{"DDPRUN_MALLOC_TUNING", "0"}});
  REQUIRE(off.ok());
  REQUIRE_FALSE(off->apply);
  REQUIRE(off->reason.find("DDPRUN_MALLOC_TUNING=0") != std::string::npos);

  auto tunables =
      Decide({{"GLIBC_TUNABLES", "glibc.malloc.trim_threshold=65536"}});
  REQUIRE_FALSE(tunables->apply);
  REQUIRE(tunables->reason.find("GLIBC_TUNABLES") != std::string::npos);
  // Tunables of other glibc parts leave the tuning on.
  REQUIRE(Decide({{"GLIBC_TUNABLES", "glibc.pthread.rseq=0"}})->apply);

  auto legacy = Decide({{"MALLOC_TRIM_THRESHOLD_", "0"}});
  REQUIRE_FALSE(legacy->apply);
  REQUIRE(legacy->reason.find("MALLOC_TRIM_THRESHOLD_") != std::string::npos);

  auto jemalloc =
      Decide({{"LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"}});
  REQUIRE_FALSE(jemalloc->apply);
  REQUIRE(jemalloc->reason.find("jemalloc") != std::string::npos);
}

TEST_CASE("HostAllocatorTuning: a bad DDPRUN_MALLOC_TUNING names the variable",
          "[worker][malloc]") {
  auto d = Decide({{"DDPRUN_MALLOC_TUNING", "yes"}});
  REQUIRE_FALSE(d.ok());
  REQUIRE(d.status().message() == "DDPRUN_MALLOC_TUNING='yes' must be 0 or 1");
}

TEST_CASE("TuneHostAllocator: a step's freed memory is reused without faults",
          "[worker][malloc]") {
  // The decision reads the real environment: make sure nothing from the
  // caller's shell switches it off.
  for (const char* name :
       {"DDPRUN_MALLOC_TUNING", "GLIBC_TUNABLES", "MALLOC_TRIM_THRESHOLD_",
        "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_",
        "LD_PRELOAD"}) {
    unsetenv(name);
  }
  auto d = w::TuneHostAllocator();
  REQUIRE(d.ok());
  REQUIRE(d->apply);
  INFO(d->reason);
  REQUIRE(FaultsPerStep() < 100);  // 2,048 pages per 8 MiB block otherwise
}
