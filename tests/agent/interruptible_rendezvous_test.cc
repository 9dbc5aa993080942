// InterruptibleRendezvous: a signal must stop an agent that is blocked in a
// rendezvous call (where its event loop cannot see the signal), and must not
// cut a call short while workers run. The exit path ends the process, so the
// blocked cases run in a forked child and the parent checks its exit code.

#include "ddprun_catch.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "agent/interruptible_rendezvous.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;

// A rendezvous whose Join and ReportSuccess block until Leave() (as a parked
// gRPC call does until it is cancelled), unless told to answer at once.
class BlockingRendezvous : public RendezvousClient {
 public:
  bool answer_at_once = false;
  int leaves = 0;
  int joins = 0;
  // Written (one byte) when a call starts blocking, so a test knows when.
  int blocked_fd = -1;

  std::string Backend() const override { return "blocking"; }
  StatusOr<RendezvousResult> Join(const JoinRequest&,
                                  Clock::TimePoint) override {
    ++joins;
    if (answer_at_once) {
      RendezvousResult r;
      r.world_size = 3;
      return r;
    }
    Block();
    return CancelledError("left");
  }
  void SetEventHandler(EventHandler) override {}
  StatusOr<bool> ReportFailure(int64_t, const std::string&, bool) override {
    return true;
  }
  Status ReportSuccess(int64_t, Clock::Duration) override {
    if (answer_at_once) return Status::Ok();
    Block();
    return CancelledError("left");
  }
  void Leave() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++leaves;
    left_ = true;
    cv_.notify_all();
  }

 private:
  void Block() {
    if (blocked_fd >= 0) {
      const char c = 'b';
      (void)!write(blocked_fd, &c, 1);
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 30s, [this] { return left_; });
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool left_ = false;
};

struct ExitCalled {
  int code;
};

// Runs `blocked_call` on a thread of a forked child; once the call blocks,
// the child's main thread delivers SIGTERM through Interrupt(). Returns the
// child's exit code (-1 if it did not exit within 10 s). The child exits
// 100 + leaves if the call returned instead of the process exiting.
int ExitCodeOfInterruptedCall(
    const std::function<void(InterruptibleRendezvous*)>& blocked_call) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    BlockingRendezvous inner;
    int blocked[2];
    if (pipe(blocked) != 0) _exit(90);
    inner.blocked_fd = blocked[1];
    // The exit code says whether Leave() ran before the process exit.
    InterruptibleRendezvous rdzv(
        &inner, [&inner](int code) { _exit(inner.leaves == 1 ? code : 91); });
    std::thread t([&] {
      blocked_call(&rdzv);
      _exit(100 + inner.leaves);  // the call returned: not the contract
    });
    char c;
    if (read(blocked[0], &c, 1) != 1) _exit(92);
    rdzv.Interrupt(SIGTERM);
    _exit(93);  // Interrupt must not return while a call is blocked
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE(
    "InterruptibleRendezvous: a signal during a blocked Join leaves "
    "and exits 128+N",
    "[agent][rendezvous]") {
  const int code = ExitCodeOfInterruptedCall([](InterruptibleRendezvous* r) {
    (void)r->Join(JoinRequest{}, Clock::TimePoint::max());
  });
  CHECK(code == 128 + SIGTERM);
}

TEST_CASE(
    "InterruptibleRendezvous: a signal in the exit barrier leaves and "
    "exits 128+N",
    "[agent][rendezvous]") {
  const int code = ExitCodeOfInterruptedCall([](InterruptibleRendezvous* r) {
    (void)r->ReportSuccess(1, std::chrono::hours(1));
  });
  CHECK(code == 128 + SIGTERM);
}

TEST_CASE(
    "InterruptibleRendezvous: a signal while workers run is deferred "
    "to the next rendezvous call",
    "[agent][rendezvous]") {
  BlockingRendezvous inner;
  inner.answer_at_once = true;
  InterruptibleRendezvous rdzv(&inner,
                               [](int code) { throw ExitCalled{code}; });
  StatusOr<RendezvousResult> first =
      rdzv.Join(JoinRequest{}, Clock::TimePoint::max());
  REQUIRE(first.ok());
  CHECK(first->world_size == 3);
  // Not blocked: the agent itself must stop its workers first.
  CHECK_FALSE(rdzv.Interrupt(SIGINT));
  CHECK(inner.leaves == 0);
  // Re-joining after the stop exits instead of joining a new round.
  try {
    (void)rdzv.Join(JoinRequest{}, Clock::TimePoint::max());
    FAIL("Join returned after a pending signal");
  } catch (const ExitCalled& e) {
    CHECK(e.code == 128 + SIGINT);
  }
  CHECK(inner.joins == 1);
  CHECK(inner.leaves == 1);
}

TEST_CASE("InterruptibleRendezvous: without a signal calls pass through",
          "[agent][rendezvous]") {
  BlockingRendezvous inner;
  inner.answer_at_once = true;
  InterruptibleRendezvous rdzv(&inner,
                               [](int code) { throw ExitCalled{code}; });
  CHECK(rdzv.Backend() == "blocking");
  CHECK(rdzv.Join(JoinRequest{}, Clock::TimePoint::max()).ok());
  CHECK(rdzv.ReportSuccess(1, 1s).ok());
  CHECK(*rdzv.ReportFailure(1, "x", true));
  CHECK(inner.joins == 1);
  CHECK(inner.leaves == 0);
}

}  // namespace
}  // namespace ddprun::agent
