// Worker for bench/launcher/run.py, started with --no_python by both ddprun
// and torchrun so that the launcher, not an interpreter, is what is measured.
//
//   launcher_bench_worker start DIR   record the start time, then:
//     attempt 0 (TORCHELASTIC_RESTART_COUNT=0): the rank named by
//       BENCH_CRASH_RANK (default 0) waits until every local rank of the
//       attempt has started (at most 10 s), records the crash time and exits
//       1; the other ranks sleep until the launcher stops them (at most 60 s).
//     later attempts: exit 0 at once.
//   launcher_bench_worker sleep MS    sleep, exit 0 (steady-state RSS runs).
//
// Times are CLOCK_REALTIME nanoseconds written to DIR/start_<attempt>_<rank>
// and DIR/crash, each created with a rename so a reader never sees half.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

long long NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int EnvInt(const char* name, int def) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : def;
}

void WriteTime(const std::string& path, long long ns) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) std::exit(3);
  std::fprintf(f, "%lld\n", ns);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

bool AllStarted(const std::string& dir, int attempt, int local_world) {
  for (int r = 0; r < local_world; ++r) {
    const std::string p =
        dir + "/start_" + std::to_string(attempt) + "_" + std::to_string(r);
    if (access(p.c_str(), F_OK) != 0) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const long long start = NowNs();
  if (argc == 3 && std::string(argv[1]) == "sleep") {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(argv[2])));
    return 0;
  }
  if (argc != 3 || std::string(argv[1]) != "start") {
    std::fprintf(stderr, "usage: %s start DIR | sleep MS\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[2];
  const int rank = EnvInt("RANK", 0);
  const int attempt = EnvInt("TORCHELASTIC_RESTART_COUNT", 0);
  const int local_world = EnvInt("LOCAL_WORLD_SIZE", 1);
  WriteTime(
      dir + "/start_" + std::to_string(attempt) + "_" + std::to_string(rank),
      start);
  if (attempt > 0) return 0;
  if (rank != EnvInt("BENCH_CRASH_RANK", 0)) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!AllStarted(dir, attempt, local_world) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  WriteTime(dir + "/crash", NowNs());
  return 1;
}
