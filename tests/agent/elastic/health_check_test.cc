// --health_check's checks, without nvidia-smi (the process tests run a fake
// one): /dev/shm, the log dir, paths, which GPUs are visible and how much
// memory they have in use.

#include "ddprun_catch.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "agent/elastic/health_check.h"

namespace ddprun::agent {
namespace {

TEST_CASE("HealthChecker: /dev/shm size against the threshold",
          "[agent][health]") {
  CHECK(CheckShm("/dev/shm", 0).ok());
  Status small = CheckShm("/dev/shm", 1e12);
  REQUIRE_FALSE(small.ok());
  CHECK(small.code() == StatusCode::kFailedPrecondition);
  CHECK_THAT(small.message(), Catch::Contains("/dev/shm is "));
  CHECK_THAT(small.message(),
             Catch::Contains("less than --health_check_shm_mb=1e+12"));
  CHECK_THAT(CheckShm("/nonexistent_shm", 1).message(),
             Catch::Contains("/nonexistent_shm: No such file"));
}

TEST_CASE("HealthChecker: a log dir that takes no file fails",
          "[agent][health]") {
  char tmpl[] = "/tmp/ddprun_health_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  CHECK(CheckWritableDir(dir).ok());
  // Nothing is left behind.
  CHECK(system(("test -z \"$(ls -A " + dir + ")\"").c_str()) == 0);
  CHECK_THAT(CheckWritableDir(dir + "/missing").message(),
             Catch::Contains("is not writable"));
  if (::geteuid() != 0) {  // root writes anywhere
    ::chmod(dir.c_str(), 0500);
    CHECK_FALSE(CheckWritableDir(dir).ok());
    ::chmod(dir.c_str(), 0700);
  }
  CHECK(CheckPathsExist({dir, "/"}).ok());
  CHECK_THAT(CheckPathsExist({dir, dir + "/data"}).message(),
             Catch::Contains(dir + "/data (--health_check_paths): No such"));
  ::rmdir(dir.c_str());
}

std::vector<GpuMemory> FourGpus() {
  return {{0, "GPU-aaaa", 3, 81559},
          {1, "GPU-bbbb", 40000, 81559},
          {2, "GPU-cccc", 5, 81559},
          {3, "GPU-dddd", 7, 81559}};
}

TEST_CASE("HealthChecker: the GPUs CUDA_VISIBLE_DEVICES lets the workers see",
          "[agent][health]") {
  auto all = VisibleGpuMemory(FourGpus(), nullptr);
  REQUIRE(all.ok());
  CHECK(all->size() == 4);
  const std::string mask = "2,GPU-dd";
  auto some = VisibleGpuMemory(FourGpus(), &mask);
  REQUIRE(some.ok());
  REQUIRE(some->size() == 2);
  CHECK((*some)[0].index == 2);
  CHECK((*some)[1].index == 3);
  // A GPU the mask names but nvidia-smi does not list: it is gone.
  const std::string gone = "0,7";
  auto missing = VisibleGpuMemory(FourGpus(), &gone);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(),
             Catch::Contains("CUDA_VISIBLE_DEVICES names GPU 7"));
  // CUDA stops at the first invalid entry: "" or -1 hide the rest.
  const std::string hidden = "-1,0";
  CHECK(VisibleGpuMemory(FourGpus(), &hidden)->empty());
}

TEST_CASE("HealthChecker: GPU memory in use against the threshold",
          "[agent][health]") {
  std::vector<GpuMemory> gpus = FourGpus();
  Status busy = CheckGpuMemory(gpus, 1024);
  REQUIRE_FALSE(busy.ok());
  CHECK(busy.message() ==
        "GPU 1 has 40000 MiB of 81559 MiB in use, more than "
        "--health_check_gpu_mem_mb=1024");
  gpus.erase(gpus.begin() + 1);
  CHECK(CheckGpuMemory(gpus, 1024).ok());
  CHECK(CheckGpuMemory({}, 0).ok());  // no GPU: nothing to check
}

}  // namespace
}  // namespace ddprun::agent
