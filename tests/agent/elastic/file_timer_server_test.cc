// torch's FileTimer server logic (requests, deadlines by pid and scope, who
// is reaped) on an injected clock, and the pipe the agent polls.

#include "ddprun_catch.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "agent/elastic/file_timer_pipe.h"
#include "agent/elastic/file_timer_server.h"
#include "tests/common/manual_event_loop.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;

// What torch's FileTimerClient writes (FileTimerRequest.to_json):
// json.dumps of a dict, the same keys and order in 1.13 and 2.x.
std::string Line(int pid, const std::string& scope, double expiration,
                 int signal) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6f", expiration);
  return "{\"version\": 1, \"pid\": " + std::to_string(pid) +
         ", \"scope_id\": \"" + scope + "\", \"expiration_time\": " + buf +
         ", \"signal\": " + std::to_string(signal) + "}";
}

TimerRequest Req(int pid, const std::string& scope, double expiration,
                 int signal = SIGKILL) {
  return TimerRequest{pid, scope, expiration, signal};
}

TEST_CASE("ParseTimerRequest: torch's request lines", "[agent][filetimer]") {
  // 1.13 and 2.x: FileTimerRequest.to_json (acquire: time.time() + after).
  auto r = ParseTimerRequest(Line(4242, "train.py#12", 1700000001.5, 9));
  REQUIRE(r.ok());
  CHECK(r->pid == 4242);
  CHECK(r->scope_id == "train.py#12");
  CHECK(r->expiration_time == Approx(1700000001.5));
  CHECK(r->signal == 9);
  // release(): expiration_time -1 (an int in the JSON), signal 0.
  auto rel = ParseTimerRequest(
      "{\"version\": 1, \"pid\": 7, \"scope_id\": \"s\", "
      "\"expiration_time\": -1, \"signal\": 0}");
  REQUIRE(rel.ok());
  CHECK(rel->expiration_time == -1);
  // Key order and spacing do not matter; unknown keys are ignored.
  CHECK(ParseTimerRequest("{\"signal\":15,\"expiration_time\":3,"
                          "\"scope_id\":\"x\",\"pid\":5,\"extra\":[1]}")
            ->signal == 15);
  // Bad lines are errors that say what is wrong.
  auto bad = [](const std::string& line) {
    auto p = ParseTimerRequest(line);
    REQUIRE_FALSE(p.ok());
    return p.status().message();
  };
  CHECK_THAT(bad("not json"), Catch::Contains("not JSON"));
  CHECK_THAT(bad("[1,2]"), Catch::Contains("not a JSON object"));
  CHECK_THAT(bad("{\"pid\": 1, \"scope_id\": \"s\", \"signal\": 9}"),
             Catch::Contains("no \"expiration_time\""));
  CHECK_THAT(bad("{\"pid\": \"1\", \"scope_id\": \"s\", "
                 "\"expiration_time\": 1, \"signal\": 9}"),
             Catch::Contains("\"pid\" is not a process id"));
  CHECK_THAT(bad("{\"pid\": 1, \"scope_id\": 3, \"expiration_time\": 1, "
                 "\"signal\": 9}"),
             Catch::Contains("\"scope_id\" is not text"));
  CHECK_THAT(bad("{\"pid\": 1, \"scope_id\": \"s\", \"expiration_time\": 1, "
                 "\"signal\": 9.5}"),
             Catch::Contains("\"signal\" is not an integer"));
}

TEST_CASE("FileTimerServer: a scope expires at its deadline, not before",
          "[agent][filetimer]") {
  FileTimerServer server;
  server.Register(Req(100, "a", 10.0));
  CHECK(server.TakeExpired(9.99).empty());
  CHECK(server.NextExpiration() == 10.0);
  auto expired = server.TakeExpired(10.0);  // expiration_time <= now
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == 100);
  CHECK(expired[0].scope_id == "a");
  CHECK(expired[0].signal == SIGKILL);
  // Reaped: its timers are gone.
  CHECK(server.size() == 0);
  CHECK(server.TakeExpired(100).empty());
}

TEST_CASE("FileTimerServer: release, re-acquire, per-pid scopes",
          "[agent][filetimer]") {
  FileTimerServer server;
  server.Register(Req(100, "a", 10.0));
  server.Register(Req(100, "a", -1, 0));  // the with-block ended
  CHECK(server.size() == 0);
  CHECK(server.TakeExpired(50).empty());
  // A later acquire of the same (pid, scope) replaces the earlier one.
  server.Register(Req(100, "a", 10.0));
  server.Register(Req(100, "a", 20.0));
  CHECK(server.TakeExpired(15).empty());
  // The same scope name of another pid is another timer.
  server.Register(Req(200, "a", 12.0));
  auto expired = server.TakeExpired(15);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == 200);
  CHECK(server.size() == 1);  // pid 100's timer still runs
  // Releasing a scope that is not held is nothing.
  server.Register(Req(300, "b", -1, 0));
  CHECK(server.size() == 1);
}

TEST_CASE("FileTimerServer: torch's verdict among several expired scopes",
          "[agent][filetimer]") {
  FileTimerServer server;
  // The earliest expired timer with a signal > 0 decides the signal.
  server.Register(Req(100, "late", 5.0, SIGTERM));
  server.Register(Req(100, "early-no-signal", 3.0, 0));
  server.Register(Req(100, "middle", 4.0, SIGKILL));
  server.Register(Req(100, "not-yet", 50.0, SIGKILL));
  // A pid whose expired timers have no signal is not reaped...
  server.Register(Req(200, "quiet", 1.0, 0));
  auto expired = server.TakeExpired(6.0);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == 100);
  CHECK(expired[0].scope_id == "middle");
  CHECK(expired[0].signal == SIGKILL);
  CHECK(expired[0].expired_scopes ==
        std::vector<std::string>{"early-no-signal", "middle", "late"});
  // ... but, as in torch, every timer of an expired pid is forgotten,
  // also its scope that has not expired yet and the quiet pid's.
  CHECK(server.size() == 0);
}

TEST_CASE("FileTimerServer: timers of processes that exited are forgotten",
          "[agent][filetimer]") {
  FileTimerServer server;
  server.Register(Req(100, "a", 1.0));
  server.Register(Req(200, "b", 1.0));
  server.ForgetDead([](int pid) { return pid == 200; });
  auto expired = server.TakeExpired(2.0);
  REQUIRE(expired.size() == 1);
  CHECK(expired[0].pid == 200);
}

TEST_CASE("FileTimer: where the pipe goes, and how an expiry reads",
          "[agent][filetimer]") {
  // Off unless TORCHELASTIC_ENABLE_FILE_TIMER is "1", as torch's agent.
  CHECK(FileTimerPath({}).empty());
  CHECK(FileTimerPath({{"TORCHELASTIC_ENABLE_FILE_TIMER", "true"},
                       {"TORCHELASTIC_TIMER_FILE", "/x"}})
            .empty());
  CHECK(FileTimerPath({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"},
                       {"TORCHELASTIC_TIMER_FILE", "/run/timer"}}) ==
        "/run/timer");
  const std::string made =
      FileTimerPath({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"},
                     {"TMPDIR", "/scratch"}});
  CHECK(made.rfind("/scratch/watchdog_timer_", 0) == 0);
  CHECK(made.size() == std::string("/scratch/watchdog_timer_").size() + 36);
  CHECK(FileTimerPath({{"TORCHELASTIC_ENABLE_FILE_TIMER", "1"}})
            .rfind("/tmp/watchdog_timer_", 0) == 0);
  ExpiredTimer t;
  t.expiration_time = 100.0;
  t.expired_scopes = {"a.py#3", "b.py#9"};
  CHECK(DescribeExpired(t, 100.25) ==
        "its FileTimer scope 'a.py#3', 'b.py#9' expired 0.2 s ago "
        "(torch.distributed.elastic.timer)");
}

// A temporary directory for the pipe.
struct PipeDir {
  PipeDir() {
    char tmpl[] = "/tmp/ddprun_filetimer_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~PipeDir() { (void)!system(("rm -rf " + path).c_str()); }
  std::string path;
};

// Writes one request as FileTimerClient does: a non-blocking open (ENXIO
// without a reader), one line, close.
bool Send(const std::string& fifo, const std::string& line) {
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  if (fd < 0) return false;
  const std::string text = line + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) ==
                  static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

TEST_CASE("FileTimerPipe: the agent's pipe, polled on its loop",
          "[agent][filetimer]") {
  PipeDir dir;
  const std::string path = dir.path + "/watchdog_timer";
  // A file already there is replaced, as torch does.
  {
    FILE* f = std::fopen(path.c_str(), "w");
    std::fclose(f);
  }
  testing::ManualEventLoop loop;
  std::vector<ExpiredTimer> reaped;
  auto pipe = FileTimerPipe::Create(
      &loop, path, [&](const ExpiredTimer& t) { reaped.push_back(t); },
      [](int pid) { return pid < 1000; });
  REQUIRE(pipe.ok());
  struct stat st;
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  const double now = loop.clock()->WallSeconds();
  // Two clients, a bad line between them, a release.
  REQUIRE(Send(path, Line(10, "train.py#5", now + 1.0, SIGKILL)));
  REQUIRE(Send(path, "garbage"));
  REQUIRE(Send(path, Line(11, "train.py#9", now + 1.0, SIGKILL)));
  REQUIRE(Send(path, Line(11, "train.py#9", -1, 0)));
  // A process that no longer runs (pid 5000 here) keeps no timer.
  REQUIRE(Send(path, Line(5000, "gone", now + 0.5, SIGKILL)));
  loop.Advance(100ms);  // the first poll reads them: nothing expired
  CHECK(reaped.empty());
  loop.Advance(900ms);  // 1.0 s: pid 10's scope expired
  REQUIRE(reaped.size() == 1);
  CHECK(reaped[0].pid == 10);
  CHECK(reaped[0].scope_id == "train.py#5");
  loop.Advance(5s);
  CHECK(reaped.size() == 1);
  // Reset (a new worker group) forgets every timer.
  REQUIRE(Send(path, Line(12, "x", now + 7.0, SIGKILL)));
  loop.Advance(100ms);
  (*pipe)->Reset();
  loop.Advance(5s);
  CHECK(reaped.size() == 1);
  pipe->reset();
  // Gone with its owner.
  CHECK(::stat(path.c_str(), &st) != 0);
  CHECK_FALSE(Send(path, Line(10, "late", now, SIGKILL)));
}

TEST_CASE("FileTimerPipe: an unusable path is an error that names it",
          "[agent][filetimer]") {
  testing::ManualEventLoop loop;
  auto pipe = FileTimerPipe::Create(&loop, "/nonexistent/dir/timer",
                                    [](const ExpiredTimer&) {});
  REQUIRE_FALSE(pipe.ok());
  CHECK_THAT(pipe.status().message(),
             Catch::Contains("/nonexistent/dir/timer"));
}

}  // namespace
}  // namespace ddprun::agent
