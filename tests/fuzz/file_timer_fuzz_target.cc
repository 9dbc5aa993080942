// libFuzzer target over the agent's FileTimer server: bytes in as a worker
// (or anything else on the machine) could write them into the FileTimer
// pipe (agent/elastic/file_timer_pipe.h), one request per line.
//
// Each line goes through ParseTimerRequest; a request that parses is
// registered with a FileTimerServer. After each line the wall clock moves
// by (line length % 7) * 0.5 s and the server is asked what expired; every
// fourth line, the pids that are odd "exit" (ForgetDead).
//
// Invariants checked (abort() on violation, which the fuzzer reports):
// no crash / sanitizer error; a parsed request has a pid > 0 and a finite
// expiration time; a verdict reaps with a signal > 0, names an expired
// scope of its pid, expired no later than now, and pids are reported once,
// in order; after TakeExpired no timer is left that has expired; the server
// never holds more timers than acquires it was given.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "agent/elastic/file_timer_server.h"

namespace ddprun::agent {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "file_timer fuzz invariant violated: %s\n", what);
  std::abort();
}

void RunOne(std::string_view bytes) {
  FileTimerServer server;
  double now = 1.7e9;
  std::size_t acquires = 0;
  std::size_t lines = 0;
  while (!bytes.empty()) {
    const auto end = bytes.find('\n');
    const std::string_view line = bytes.substr(0, end);
    bytes = end == std::string_view::npos ? "" : bytes.substr(end + 1);
    StatusOr<TimerRequest> r = ParseTimerRequest(line);
    if (r.ok()) {
      Check(r->pid > 0, "parsed a pid <= 0");
      Check(std::isfinite(r->expiration_time), "parsed a non-finite time");
      if (r->expiration_time >= 0) ++acquires;
      server.Register(*r);
    } else {
      Check(!r.status().message().empty(), "an error without a message");
    }
    Check(server.size() <= acquires, "more timers than acquires");
    if (++lines % 4 == 0) {
      server.ForgetDead([](int pid) { return pid % 2 == 0; });
    }
    now += static_cast<double>(line.size() % 7) * 0.5;
    int last_pid = 0;
    for (const ExpiredTimer& t : server.TakeExpired(now)) {
      Check(t.signal > 0, "reaped with a signal <= 0");
      Check(t.expiration_time <= now, "reaped before its deadline");
      Check(t.pid > last_pid, "a pid reported twice or out of order");
      last_pid = t.pid;
      bool named = false;
      for (const std::string& s : t.expired_scopes) named |= s == t.scope_id;
      Check(named, "the verdict's scope is not among the expired ones");
      Check(!DescribeExpired(t, now).empty(), "an empty description");
    }
    if (auto next = server.NextExpiration()) {
      Check(*next > now, "an expired timer survived TakeExpired");
    }
  }
}

}  // namespace
}  // namespace ddprun::agent

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ddprun::agent::RunOne(
      std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
