// libFuzzer target over the rendezvous request handlers: bytes in, a
// sequence of serialized requests applied to a fresh RendezvousState.
//
// Input format: records of [op byte][length: 2 bytes, little endian]
// [payload]. op % 10 picks the handler: 0 Join, 1 Heartbeat, 2 ReportFailure,
// 3 ReportSuccess, 4 Leave, 5 Close, 6 Status (of every job: a page from
// page_after, as the rpc serves it), 7 advance the FakeClock by (first
// payload byte * 100 ms) and Tick, 8 cancel a parked waiter, 9 Stacks (a
// dump across the job's nodes: starts, answers in parts, polls, pages).
// A payload that does not parse as the request is skipped (gRPC would
// refuse it before the handler).
//
// Invariants checked (abort() on violation, which the fuzzer reports):
// no crash / sanitizer error; a handler that returns an error leaves the
// whole server state (Status of every job and every job's stack board)
// byte-identical and answers no parked call; every answered waiter was
// issued and is answered once; a Status page holds the jobs after
// page_after in order and names its last when more follow; a Stacks answer
// is a bounded page of its dump (ranks_next past ranks_from, at most
// ranks_total ranks, about 1 MiB).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "common/clock.h"
#include "common/logging.h"
#include "rendezvous/core/rendezvous_state.h"

namespace ddprun::rendezvous {
namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "rendezvous fuzz invariant violated: %s\n", what);
  std::abort();
}

class Session {
 public:
  Session() : state_(&clock_, JobDefaults{}, Limits()) {}

  void Apply(uint8_t op, const std::string& payload) {
    switch (op % 10) {
      case 0:
        Call<v1::JoinRequest>(payload, true, [&](auto& r, WaiterId w) {
          return state_.Join(r, w);
        });
        break;
      case 1:
        Call<v1::HeartbeatRequest>(payload, false, [&](auto& r, auto) {
          return state_.Heartbeat(r).status();
        });
        break;
      case 2:
        Call<v1::ReportFailureRequest>(payload, true, [&](auto& r, WaiterId w) {
          return state_.ReportFailure(r, w);
        });
        break;
      case 3:
        Call<v1::ReportSuccessRequest>(payload, true, [&](auto& r, WaiterId w) {
          return state_.ReportSuccess(r, w);
        });
        break;
      case 4:
        Call<v1::LeaveRequest>(payload, false,
                               [&](auto& r, auto) { return state_.Leave(r); });
        break;
      case 5:
        Call<v1::CloseRequest>(payload, false,
                               [&](auto& r, auto) { return state_.Close(r); });
        break;
      case 6:
        Call<v1::StatusRequest>(payload, false, [&](auto& r, auto) {
          if (r.rdzv_id().empty()) {
            CheckPage(r.page_after(), state_.GetStatusPage(r.page_after()));
            return Status::Ok();
          }
          return state_.GetStatus(r.rdzv_id()).status();
        });
        break;
      case 9:
        Call<v1::StacksRequest>(payload, false, [&](auto& r, auto) {
          StatusOr<v1::StacksResponse> resp = state_.Stacks(r);
          if (resp.ok()) CheckStacks(r, *resp);
          return resp.status();
        });
        break;
      case 7:
        clock_.Advance(std::chrono::milliseconds(
            100 * (payload.empty() ? 1 : static_cast<uint8_t>(payload[0]))));
        state_.Tick();
        Collect();
        break;
      case 8:
        if (!payload.empty() && next_waiter_ > 1) {
          state_.CancelWaiter(1 + static_cast<uint8_t>(payload[0]) %
                                      (next_waiter_ - 1));
          Collect();
        }
        break;
    }
    // The timer thread's contract: a deadline in the past is ticked now.
    auto next = state_.NextDeadline();
    if (next && *next <= clock_.Now()) {
      state_.Tick();
      Collect();
    }
  }

 private:
  static StateLimits Limits() {
    StateLimits l;
    l.max_jobs = 16;  // reachable by the fuzzer
    return l;
  }

  std::string Snapshot() {
    auto s = state_.GetStatus("");
    Check(s.ok(), "Status of all jobs failed");
    std::string out;
    s->SerializeToString(&out);
    for (const v1::JobStatus& job : s->jobs()) {
      auto board = state_.PeekStacks(job.rdzv_id());
      if (board.ok()) out += "|" + board->SerializeAsString();
    }
    return out + "#" + std::to_string(state_.job_count());
  }

  void CheckPage(const std::string& after, const v1::StatusResponse& page) {
    std::string last = after;
    for (const v1::JobStatus& job : page.jobs()) {
      Check(job.rdzv_id() > last, "a Status page out of order");
      last = job.rdzv_id();
    }
    Check(page.next_page_after().empty() || page.next_page_after() == last,
          "a Status page's next_page_after is not its last job");
    if (page.next_page_after().empty()) {
      Check(page.jobs_size() == JobsAfter(after),
            "a last Status page left out jobs");
    }
  }

  // How many jobs come after `after` (Status of every job).
  int JobsAfter(const std::string& after) {
    auto s = state_.GetStatus("");
    int n = 0;
    for (const v1::JobStatus& job : s->jobs()) n += job.rdzv_id() > after;
    return n;
  }

  void CheckStacks(const v1::StacksRequest& r, const v1::StacksResponse& resp) {
    Check(static_cast<uint32_t>(resp.ranks_size()) <= resp.ranks_total(),
          "a Stacks answer has more ranks than its dump");
    Check(resp.ranks_next() == 0 || resp.ranks_next() > r.ranks_from(),
          "a Stacks page does not move on");
    Check(resp.ranks_next() == 0 ||
              resp.ranks_next() ==
                  r.ranks_from() + static_cast<uint32_t>(resp.ranks_size()),
          "a Stacks page skips or repeats ranks");
    Check(resp.ByteSizeLong() <= 3 * StackBoard::kPageBytes,
          "a Stacks answer beyond its page bound");
    Check(resp.complete() == (resp.missing_nodes_size() == 0),
          "a complete dump with missing nodes");
  }

  template <typename Request, typename Fn>
  void Call(const std::string& payload, bool parks, Fn&& fn) {
    Request request;
    if (!request.ParseFromString(payload)) return;
    const std::string before = Snapshot();
    const WaiterId waiter = parks ? next_waiter_++ : 0;
    Status s = fn(request, waiter);
    if (!s.ok()) {
      Check(Snapshot() == before, "a failed rpc changed the server state");
      Check(state_.TakeOutcomes().empty(), "a failed rpc answered a call");
      return;
    }
    Collect();
  }

  void Collect() {
    for (const Outcome& o : state_.TakeOutcomes()) {
      Check(o.waiter != 0 && o.waiter < next_waiter_,
            "an answer for a waiter never issued");
      Check(answered_.insert(o.waiter).second, "a waiter answered twice");
    }
  }

  FakeClock clock_;
  RendezvousState state_;
  WaiterId next_waiter_ = 1;
  std::set<WaiterId> answered_;
};

}  // namespace
}  // namespace ddprun::rendezvous

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    ddprun::SetMinLogLevel(ddprun::LogLevel::kError);
    // Invalid UTF-8 in string fields is an expected parse failure here.
    google::protobuf::SetLogHandler(nullptr);
    return true;
  }();
  (void)quiet;
  ddprun::rendezvous::Session session;
  size_t i = 0;
  while (i + 3 <= size) {
    const uint8_t op = data[i];
    const size_t len =
        std::min<size_t>(data[i + 1] | (data[i + 2] << 8), size - i - 3);
    session.Apply(
        op, std::string(reinterpret_cast<const char*>(data + i + 3), len));
    i += 3 + len;
  }
  return 0;
}
