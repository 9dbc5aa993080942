// The files a worker writes and the agent reads (its step count, its
// error.json): whatever the worker leaves at those paths, the agent's loop
// neither blocks nor takes the file's size in memory.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "ddprun_catch.h"

#include "agent/elastic/failure_report.h"
#include "agent/watch/straggler_watch.h"
#include "tests/agent/agent_fakes.h"
#include "tests/common/manual_event_loop.h"
#include "tests/common/remove_at_exit.h"

namespace ddprun::agent {
namespace {

std::string TempDir() {
  char tmpl[] = "/tmp/ddprun_worker_files_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return ddprun::testing::RemoveAtExit(tmpl);
}

// Waits up to 5 s for `done`; past that, opens and closes `fifo` for
// writing, which lets a reader blocked in open(2) on it go on (and read
// its end), so that the test ends.
template <typename T>
bool FinishesWithin5s(std::future<T>& done, const std::string& fifo) {
  if (done.wait_for(std::chrono::seconds(5)) == std::future_status::ready) {
    return true;
  }
  const int w = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  if (w >= 0) close(w);
  done.wait();
  return false;
}

// The peak resident size of this process so far, in KiB.
long PeakRssKib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

}  // namespace

TEST_CASE(
    "StragglerWatch: a FIFO or a huge file at a step file does not stall "
    "the agent's loop",
    "[agent][hostile]") {
  const std::string dir = TempDir();
  const std::string fifo = dir + "/steps0";
  const std::string huge = dir + "/steps1";
  const std::string good = dir + "/steps2";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  {
    std::ofstream(huge) << "7\n";
    REQUIRE(truncate(huge.c_str(), int64_t{1} << 30) == 0);  // sparse
    std::ofstream(good) << "12\n";
  }
  ddprun::testing::ManualEventLoop loop;
  agent::testing::RecordingRendezvous sink;
  StragglerWatch watch(&loop, StragglerPolicy{}, &sink);
  watch.Start({{0, 0, 100, fifo}, {1, 1, 101, huge}, {2, 2, 102, good}});
  // The watch reads once a second, on the loop; the loop runs here in a
  // thread so that a read that blocks shows as a deadline missed.
  auto tick = std::async(std::launch::async,
                         [&] { loop.Advance(std::chrono::seconds(1)); });
  REQUIRE(FinishesWithin5s(tick, fifo));
  // Every worker is reported (the live view lists them all); only the
  // regular, small file gives a count.
  REQUIRE(sink.rates.size() == 3);
  for (const rendezvous::RankStepRate& r : sink.rates) {
    INFO("rank " << r.rank);
    CHECK(r.steps == (r.rank == 2 ? 12 : 0));
  }
  watch.Stop();
}

TEST_CASE(
    "MakeProcessFailure: an error file over the limit is refused unread, a "
    "FIFO is not waited for",
    "[agent][hostile]") {
  const std::string dir = TempDir();
  // 256 MiB of a valid error file's opening, sparse: read whole, it would
  // cost the agent that much memory (and a slow disk, its time).
  const std::string big = dir + "/error.json";
  std::ofstream(big) << R"({"message": {"message": "E", "extraInfo": {)";
  REQUIRE(truncate(big.c_str(), int64_t{256} << 20) == 0);
  const long before = PeakRssKib();
  ProcessFailure f = MakeProcessFailure(0, 0, 4242, 1, big, 1700000000.0);
  CHECK(PeakRssKib() - before < 32 * 1024);
  CHECK(f.error_file == kNotAvailable);
  CHECK(f.error_json.empty());
  CHECK(f.timestamp == 1700000000);
  const std::string fifo = dir + "/fifo.json";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto made = std::async(std::launch::async, [&] {
    return MakeProcessFailure(1, 1, 4243, 1, fifo, 1700000001.0);
  });
  REQUIRE(FinishesWithin5s(made, fifo));
  CHECK(made.get().error_file == kNotAvailable);
}

TEST_CASE(
    "MakeProcessFailure: a deeply nested or out-of-range error file is "
    "malformed, and the root cause's copy cannot crash the agent",
    "[agent][hostile]") {
  const std::string dir = TempDir();
  auto write = [&dir](const std::string& name, const std::string& text) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    return path;
  };
  const std::string head =
      R"({"message": {"message": "E", "extraInfo": {"timestamp": 5}}, "x": )";
  // Valid JSON of torchrun's schema, a million levels deep: written back
  // out for the agent's own error file, it overflowed the stack.
  const std::string deep =
      write("deep.json",
            head + std::string(1000000, '[') + std::string(1000000, ']') + "}");
  ProcessFailure f = MakeProcessFailure(0, 0, 4242, 1, deep, 1700000000.0);
  CHECK(f.error_file == kNotAvailable);
  CHECK(DumpRootCauseErrorFile(f, dir + "/agent_error.json").ok());
  // Shallow, the same shape is read and copied.
  const std::string shallow =
      write("shallow.json",
            head + std::string(100, '[') + std::string(100, ']') + "}");
  ProcessFailure ok = MakeProcessFailure(0, 0, 4242, 1, shallow, 1700000000.0);
  CHECK(ok.error_file == shallow);
  CHECK(ok.timestamp == 5);
  CHECK(DumpRootCauseErrorFile(ok, dir + "/agent_error.json").ok());
  // Timestamps an int64_t cannot hold are not Python ints we can use.
  for (const char* ts : {"1e300", "-1e19", "18446744073709551615"}) {
    INFO(ts);
    const std::string path = write(
        "ts.json", std::string(R"({"message": "E", "timestamp": )") + ts + "}");
    ProcessFailure t = MakeProcessFailure(0, 0, 4242, 1, path, 1700000000.0);
    CHECK(t.error_file == kNotAvailable);
    CHECK(t.timestamp == 1700000000);
  }
  const std::string frac =
      write("frac.json", R"({"message": "E", "timestamp": -12.5})");
  CHECK(MakeProcessFailure(0, 0, 4242, 1, frac, 1700000000.0).timestamp == -12);
}

}  // namespace ddprun::agent
