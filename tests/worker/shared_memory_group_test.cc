// SharedMemoryGroup between real processes (fork): sums, chunking,
// broadcast, and what a rank sees when a peer dies or never arrives.
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ddprun_catch.h"

#include "ddprun/worker/shared_memory_group.h"

namespace w = ddprun::worker;
using Group = w::SharedMemoryGroup;

namespace {

constexpr size_t kSlot = 4096;  // small slots: most tests run in chunks

// Segments this test process made (their names carry the maker's pid; other
// tests running at the same time make their own).
std::vector<std::string> ShmEntries() {
  const std::string mine = "ddprun-shm-" + std::to_string(getpid()) + "-";
  std::vector<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).rfind(mine, 0) == 0)
        out.push_back(e->d_name);
    }
    closedir(d);
  }
  return out;
}

struct Child {
  pid_t pid;
  int out_fd;  // read end: what the child wrote
};

// Runs body(group) in `size` processes: rank 0 here made the segment, ranks
// 1.. open it after the fork. Each child's return value is its exit code;
// what it writes to `out` comes back in outputs[rank]. Rank 0 runs in a
// child too, so a hang is bounded by `limit` (then the children are killed).
struct GroupRun {
  std::vector<int> exit_codes;
  std::vector<std::string> outputs;
};
GroupRun RunGroup(int size, Group::Options options,
                  const std::function<int(Group&, FILE* out)>& body,
                  std::chrono::seconds limit = std::chrono::seconds(30)) {
  auto made = Group::Create(size, options);
  REQUIRE(made.ok());
  std::unique_ptr<Group> owner = std::move(made.value());
  const std::string name = owner->name();
  std::vector<Child> children;
  for (int r = 0; r < size; ++r) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      FILE* out = fdopen(fds[1], "w");
      int code = 0;
      if (r == 0) {
        code = body(*owner, out);
      } else {
        auto opened = Group::Open(name, r, size, options);
        if (!opened.ok()) {
          std::fprintf(out, "open: %s", opened.status().message().c_str());
          code = 90;
        } else {
          code = body(*opened.value(), out);
        }
      }
      std::fflush(out);
      _exit(code);
    }
    close(fds[1]);
    children.push_back({pid, fds[0]});
  }
  GroupRun run;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (Child& c : children) {
    int status = 0;
    while (waitpid(c.pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (Child& k : children) kill(k.pid, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    run.exit_codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status)
                                               : 128 + WTERMSIG(status));
    std::string text;
    char buf[4096];
    ssize_t n;
    while ((n = read(c.out_fd, buf, sizeof(buf))) > 0) text.append(buf, n);
    close(c.out_fd);
    run.outputs.push_back(text);
  }
  owner.reset();  // removes the name: every child has opened it or exited
  return run;
}

// Options with kSlot-byte slots, so that small tests cross chunks.
Group::Options SmallSlots() {
  Group::Options options;
  options.slot_bytes = kSlot;
  return options;
}

void RequireAllExitedZero(const GroupRun& run) {
  for (size_t r = 0; r < run.exit_codes.size(); ++r) {
    INFO("rank " << r << ": " << run.outputs[r]);
    REQUIRE(run.exit_codes[r] == 0);
  }
}

float Value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * 0.25 + std::sin(0.001 * i) * 3.0);
}

}  // namespace

TEST_CASE("SharedMemoryGroup: all-reduce sums in chunks, the same bits on "
          "every rank", "[worker][shm]") {
  Group::Options options = SmallSlots();
  const int size = 3;
  // 0: nothing; 5: fewer elements than ranks' parts; 1024: one full slot;
  // 2.5 slots: a partial last chunk.
  const std::vector<size_t> lengths = {0, 5, 1024, 2560 + 7, 70000};
  GroupRun run = RunGroup(size, options, [&](Group& g, FILE* out) {
    const int r = g.rank();
    uint64_t hash = 1469598103934665603ull;
    for (size_t n : lengths) {
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = Value(r, i);
      if (!g.AllReduceSum(v.data(), n, 0.5f).ok()) return 1;
      for (size_t i = 0; i < n; ++i) {
        float want = 0.5f * ((Value(0, i) + Value(1, i)) + Value(2, i));
        if (std::fabs(v[i] - want) > 1e-5f * (1 + std::fabs(want))) return 2;
        uint32_t bits;
        std::memcpy(&bits, &v[i], 4);
        hash = (hash ^ bits) * 1099511628211ull;
      }
    }
    std::vector<double> d(3000);
    for (size_t i = 0; i < d.size(); ++i) d[i] = r * 1e-3 + i;
    if (!g.AllReduceSum(d.data(), d.size()).ok()) return 3;
    for (size_t i = 0; i < d.size(); ++i) {
      if (std::fabs(d[i] - (3e-3 + 3.0 * i)) > 1e-9) return 4;
    }
    std::fprintf(out, "%llx", static_cast<unsigned long long>(hash));
    return 0;
  });
  RequireAllExitedZero(run);
  const std::vector<std::string>& hashes = run.outputs;
  REQUIRE(hashes[0] == hashes[1]);
  REQUIRE(hashes[0] == hashes[2]);
  REQUIRE(ShmEntries().empty());
}

TEST_CASE("SharedMemoryGroup: broadcast of several buffers across chunks",
          "[worker][shm]") {
  Group::Options options = SmallSlots();
  GroupRun run = RunGroup(3, options, [](Group& g, FILE* out) {
    // 3 buffers of 10 KB, 0 B and 3 B: the stream crosses chunk and buffer
    // boundaries; root 1's bytes must arrive everywhere.
    std::vector<unsigned char> a(10000), b, c(3);
    for (size_t i = 0; i < a.size(); ++i) a[i] = g.rank() == 1 ? i % 251 : 0;
    for (auto& x : c) x = g.rank() == 1 ? 7 : 0;
    ddprun::Status s = g.Broadcast({{a.data(), a.size()},
                                    {b.data(), 0},
                                    {c.data(), c.size()}},
                                   1);
    if (!s.ok()) {
      std::fprintf(out, "%s", s.message().c_str());
      return 1;
    }
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != i % 251) return 2;
    for (auto x : c)
      if (x != 7) return 3;
    return 0;
  });
  RequireAllExitedZero(run);
  REQUIRE(ShmEntries().empty());
}

TEST_CASE("SharedMemoryGroup: all-gather in rank order across chunks, "
          "between other collectives",
          "[worker][shm]") {
  Group::Options options = SmallSlots();
  GroupRun run = RunGroup(3, options, [](Group& g, FILE* out) {
    auto fail = [&](const ddprun::Status& s) {
      std::fprintf(out, "%s", s.message().c_str());
      return 1;
    };
    // Parts of 0 B, 3 B and ~2.5 slots: every rank's bytes land at
    // rank * bytes, whichever half each chunk used; a broadcast and an
    // all-reduce in between keep the halves alternating across kinds.
    for (size_t bytes : {size_t{0}, size_t{3}, size_t{10007}}) {
      std::vector<unsigned char> mine(bytes), all(3 * bytes, 0xEE);
      for (size_t i = 0; i < bytes; ++i) mine[i] = (i * 7 + g.rank()) % 253;
      if (ddprun::Status s = g.AllGather(mine.data(), bytes, all.data());
          !s.ok()) {
        return fail(s);
      }
      for (int r = 0; r < 3; ++r) {
        for (size_t i = 0; i < bytes; ++i) {
          if (all[r * bytes + i] != (i * 7 + r) % 253) return 2;
        }
      }
      float v = 1.0f;
      if (ddprun::Status s = g.AllReduceSum(&v, 1); !s.ok()) return fail(s);
      if (v != 3.0f) return 3;
      unsigned char b = g.rank() == 2 ? 9 : 0;
      if (ddprun::Status s = g.Broadcast({{&b, 1}}, 2); !s.ok()) return fail(s);
      if (b != 9) return 4;
    }
    return g.completed() == 9 ? 0 : 5;
  });
  RequireAllExitedZero(run);
  REQUIRE(ShmEntries().empty());
}

TEST_CASE("SharedMemoryGroup: a peer that exits is named at once, a late "
          "peer after the timeout", "[worker][shm]") {
  Group::Options options = SmallSlots();
  SECTION("rank 2 exits before the all-reduce: the others fail in < 2 s") {
    options.timeout = std::chrono::seconds(60);
    const auto start = std::chrono::steady_clock::now();
    GroupRun run = RunGroup(3, options, [](Group& g, FILE* out) {
      if (g.rank() == 2) return 0;
      std::vector<float> v(100, 1.0f);
      ddprun::Status s = g.AllReduceSum(v.data(), v.size());
      std::fprintf(out, "%s", s.message().c_str());
      // A group that failed refuses further collectives.
      if (!s.ok() && !g.AllReduceSum(v.data(), v.size()).ok()) return 1;
      return 0;
    });
    const double s = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    REQUIRE(s < 2.0);
    for (int r = 0; r < 2; ++r) {
      INFO(run.outputs[r]);
      REQUIRE(run.exit_codes[r] == 1);
      REQUIRE(run.outputs[r].find("rank 2 (pid") != std::string::npos);
      REQUIRE(run.outputs[r].find("exited") != std::string::npos);
    }
  }
  SECTION("rank 1 is alive but late: DeadlineExceeded naming it") {
    options.timeout = std::chrono::milliseconds(300);
    GroupRun run = RunGroup(2, options, [](Group& g, FILE* out) {
      if (g.rank() == 1) {
        // Late on purpose: past options.timeout.
        std::this_thread::sleep_for(std::chrono::seconds(2));
        return 0;
      }
      std::vector<float> v(100, 1.0f);
      ddprun::Status s = g.AllReduceSum(v.data(), v.size());
      std::fprintf(out, "%s|%s", ddprun::StatusCodeName(s.code()),
                   s.message().c_str());
      return s.ok() ? 0 : 1;
    });
    INFO(run.outputs[0]);
    REQUIRE(run.exit_codes[0] == 1);
    REQUIRE(run.outputs[0].find("did not arrive within") != std::string::npos);
    REQUIRE(run.outputs[0].find("rank(s) 1 ") != std::string::npos);
  }
  REQUIRE(ShmEntries().empty());
}

TEST_CASE("SharedMemoryGroup: bad segments and a full /dev/shm are errors, "
          "not crashes", "[worker][shm]") {
  Group::Options options = SmallSlots();
  SECTION("a name that is not here (another host) is NotFound") {
    auto opened = Group::Open("/ddprun-shm-0-nosuchsegment", 1, 2, options);
    REQUIRE_FALSE(opened.ok());
    REQUIRE(opened.status().code() == ddprun::StatusCode::kNotFound);
  }
  SECTION("a segment made for another group size is refused") {
    auto made = Group::Create(2, options);
    REQUIRE(made.ok());
    auto opened = Group::Open(made.value()->name(), 1, 3, options);
    REQUIRE_FALSE(opened.ok());
    REQUIRE(opened.status().message().find("wrong size") != std::string::npos);
  }
  SECTION("a segment larger than /dev/shm fails at Create, leaving nothing") {
    options.slot_bytes = size_t{1} << 40;  // 4 TiB for 2 ranks
    auto made = Group::Create(2, options);
    REQUIRE_FALSE(made.ok());
    INFO(made.status().message());
    REQUIRE(made.status().message().find("/dev/shm") != std::string::npos);
  }
  REQUIRE(ShmEntries().empty());
}
