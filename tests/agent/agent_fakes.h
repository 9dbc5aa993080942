#pragma once

// The agent's collaborators as fakes that the test drives, all delivering
// on a ManualEventLoop (tests/common/manual_event_loop.h): a process
// launcher whose workers exit when the test says (or on a signal), a
// rendezvous client that answers when the test says, and a console that
// keeps what is written. Nothing sleeps.

#include <unistd.h>

#include <csignal>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/process/console.h"
#include "agent/process/process_launcher.h"
#include "common/event_loop.h"
#include "ddprun_catch.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent::testing {

// A launched fake worker. Signals in `dies_on` make it exit by that signal
// (posted, as a real SIGCHLD would arrive later).
struct FakeWorker {
  ProcessSpec spec;
  ProcessCallbacks callbacks;
  int pid = 0;
  std::vector<int> signals;
  bool exited = false;
  std::set<int> dies_on = {SIGTERM, SIGINT, SIGKILL, SIGHUP, SIGQUIT};
  // Copies of spec.inherit_fds, as a child holds them (closed with it).
  std::vector<int> fds;
  std::string env(const std::string& key) const { return spec.env.at(key); }
  ~FakeWorker() {
    for (int fd : fds) ::close(fd);
  }
};

class FakeLauncher : public ProcessLauncher {
 public:
  explicit FakeLauncher(EventLoop* loop) : loop_(loop) {}

  StatusOr<std::unique_ptr<Process>> Launch(const ProcessSpec& spec,
                                            ProcessCallbacks cb) override {
    if (fail_launch_at.has_value() && workers.size() == *fail_launch_at) {
      return NotFoundError("cannot find executable 'nope' in PATH");
    }
    auto w = std::make_shared<FakeWorker>();
    w->spec = spec;
    w->callbacks = std::move(cb);
    w->pid = 1000 + static_cast<int>(workers.size());
    w->dies_on = default_dies_on;
    for (int fd : spec.inherit_fds) w->fds.push_back(::dup(fd));
    workers.push_back(w);
    return std::unique_ptr<Process>(new FakeProcess(w, this));
  }

  // The worker exits with `exitcode` (negative: by signal).
  void Exit(size_t index, int exitcode, const std::string& out = "") {
    auto& w = workers.at(index);
    REQUIRE_FALSE(w->exited);
    w->exited = true;
    if (!out.empty()) w->callbacks.on_stdout(out);
    w->callbacks.on_exit(ExitStatus{exitcode});
  }

  // Workers of the latest attempt (the last nproc launched).
  std::vector<std::shared_ptr<FakeWorker>> Latest(size_t nproc) const {
    return std::vector<std::shared_ptr<FakeWorker>>(workers.end() - nproc,
                                                    workers.end());
  }

  std::vector<std::shared_ptr<FakeWorker>> workers;
  std::optional<size_t> fail_launch_at;
  std::set<int> default_dies_on = {SIGTERM, SIGINT, SIGKILL, SIGHUP, SIGQUIT};

 private:
  class FakeProcess : public Process {
   public:
    FakeProcess(std::shared_ptr<FakeWorker> w, FakeLauncher* launcher)
        : w_(std::move(w)), launcher_(launcher) {}
    int pid() const override { return w_->pid; }
    Status SignalGroup(int sig) override {
      w_->signals.push_back(sig);
      if (!w_->exited && w_->dies_on.count(sig)) {
        auto w = w_;
        launcher_->loop_->Post([w, sig] {
          if (w->exited) return;
          w->exited = true;
          w->callbacks.on_exit(ExitStatus{-sig});
        });
      }
      return Status::Ok();
    }

   private:
    std::shared_ptr<FakeWorker> w_;
    FakeLauncher* launcher_;
  };

  EventLoop* loop_;
};

// Keeps what the agent hands a rendezvous client with its heartbeats (the
// step rates, the restart count); every other call does nothing.
class RecordingRendezvous : public rendezvous::RendezvousClient {
 public:
  std::string Backend() const override { return "recording"; }
  void Join(const rendezvous::JoinRequest&, Clock::TimePoint,
            JoinDone) override {}
  void SetEventHandler(EventHandler) override {}
  void ReportFailure(int64_t, const std::string&, bool, FailureDone) override {}
  void ReplaceRank(int64_t, int, int64_t, const std::string&,
                   ReplaceDone) override {}
  void ReportSuccess(int64_t, Clock::Duration, Done) override {}
  void Leave(std::function<void()> done) override { done(); }
  void SetStepRates(std::vector<rendezvous::RankStepRate> r) override {
    rates = std::move(r);
  }
  void SetWorkerRestarts(int n) override { restarts = n; }

  std::vector<rendezvous::RankStepRate> rates;
  int restarts = 0;
};

// Answers on the loop, as the real clients do. With `hold_join`,
// `hold_barrier` or `hold_failure` set, that call stays in flight until
// Leave() (which cancels it) or Release().
class FakeRendezvous : public rendezvous::RendezvousClient {
 public:
  explicit FakeRendezvous(EventLoop* loop) : loop_(loop) {}

  std::string Backend() const override { return "fake"; }
  void Join(const rendezvous::JoinRequest& request, Clock::TimePoint deadline,
            JoinDone done) override {
    ++joins;
    last_request = request;
    StatusOr<rendezvous::RendezvousResult> answer = Answer(request);
    if (hold_join) {
      held_ = [done, answer] { done(answer); };
      cancel_ = [done] { done(CancelledError("left")); };
      return;
    }
    loop_->Post([done, answer] { done(answer); });
  }
  void SetEventHandler(EventHandler h) override { handler = std::move(h); }
  void ReportFailure(int64_t r, const std::string& reason, bool retry,
                     FailureDone done) override {
    failure_reasons.push_back(reason);
    if (!retry) ++no_retry_reports;
    bool again = retry && restarts_used < max_restarts;
    if (again) ++restarts_used;
    if (hold_failure) {
      held_ = [done, again] { done(again); };
      cancel_ = [done] { done(CancelledError("left")); };
      return;
    }
    loop_->Post([done, again] { done(again); });
  }
  // Spends the budget as ReportFailure does; `replace_error` answers
  // instead when set (a server without the rpc: kUnimplemented).
  void ReplaceRank(int64_t r, int rank, int64_t generation,
                   const std::string& reason, ReplaceDone done) override {
    replaced_ranks.push_back(rank);
    replace_generations.push_back(generation);
    if (!replace_error.ok()) {
      loop_->Post([done, e = replace_error] { done(e); });
      return;
    }
    ReplaceAnswer answer;
    answer.replaced = restarts_used < max_restarts && healing_rank < 0;
    answer.healing_rank = healing_rank;
    if (answer.replaced) {
      ++restarts_used;
      answer.generation = allocate_generations ? ++allocated : 0;
    }
    loop_->Post([done, answer] { done(answer); });
  }
  void ReportHealed(int64_t, int rank, int64_t generation,
                    double seconds) override {
    healed.push_back({rank, generation, seconds});
  }
  void ReportSuccess(int64_t r, Clock::Duration, Done done) override {
    ++successes;
    if (hold_barrier) {
      held_ = [done] { done(Status::Ok()); };
      cancel_ = [done] { done(CancelledError("left")); };
      return;
    }
    loop_->Post([done] { done(Status::Ok()); });
  }
  void Leave(std::function<void()> done) override {
    ++leaves;
    if (cancel_) loop_->Post(std::move(cancel_));
    held_ = nullptr;
    cancel_ = nullptr;
    loop_->Post(std::move(done));
  }

  // Stack dumps across nodes, with `supports_stacks` (else the base
  // class's: none). A GatherStacks stays in flight until AnswerGather().
  bool SupportsStacks() const override { return supports_stacks; }
  void SetGenerationHandler(GenerationHandler h) override {
    generation_handler = std::move(h);
  }
  // As a heartbeat's answer would: round `r` handed out `generation`.
  void AnnounceGeneration(int64_t r, int64_t generation) {
    REQUIRE(generation_handler);
    loop_->Post([this, r, generation] {
      if (generation_handler) generation_handler(r, generation);
    });
  }
  void SetStacksRequestHandler(StacksRequestHandler h) override {
    stacks_handler = std::move(h);
  }
  void AnswerStacks(uint64_t request_id,
                    std::vector<diagnosis::StackSummary> ranks) override {
    answers.push_back({request_id, std::move(ranks)});
  }
  void GatherStacks(const std::string& reason,
                    std::vector<diagnosis::StackSummary> own,
                    Clock::TimePoint deadline, StacksDone done) override {
    if (!supports_stacks) {
      RendezvousClient::GatherStacks(reason, std::move(own), deadline,
                                     std::move(done));
      return;
    }
    REQUIRE_FALSE(gather_done_);
    gathers.push_back({reason, std::move(own), deadline});
    gather_done_ = std::move(done);
  }
  // Answers the GatherStacks in flight (on the loop).
  void AnswerGather(StatusOr<rendezvous::StacksAnswer> answer) {
    REQUIRE(gather_done_);
    loop_->Post([done = std::move(gather_done_), answer] { done(answer); });
    gather_done_ = nullptr;
  }
  bool gathering() const { return static_cast<bool>(gather_done_); }

  // Answers the held call.
  void Release() {
    REQUIRE(held_);
    loop_->Post(std::move(held_));
    held_ = nullptr;
    cancel_ = nullptr;
  }
  bool holding() const { return static_cast<bool>(held_); }

  EventHandler handler;
  std::vector<int> replaced_ranks;
  std::vector<int64_t> replace_generations;
  Status replace_error = Status::Ok();
  // As a server: hand out generations 1, 2, ... (else 0: the agent counts),
  // and refuse while `healing_rank` >= 0 heals on another node.
  bool allocate_generations = false;
  int64_t allocated = 0;
  int healing_rank = -1;
  struct Healed {
    int rank;
    int64_t generation;
    double seconds;
  };
  std::vector<Healed> healed;
  int max_restarts = 0;
  int restarts_used = 0;
  int64_t round = 0;
  int group_rank = 0;
  int joins = 0;
  int successes = 0;
  int no_retry_reports = 0;
  int leaves = 0;
  bool fail_join = false;
  bool job_succeeded = false;  // Join answers "the job ended without you"
  // Join answers with this rank offset (the world ends with this node) and
  // as a lost node's place in generation join_replaces_generation (> 0).
  int join_rank_offset = 0;
  int64_t join_replaces_generation = 0;
  bool hold_join = false;
  bool hold_barrier = false;
  bool hold_failure = false;
  rendezvous::JoinRequest last_request;
  std::vector<std::string> failure_reasons;
  bool supports_stacks = false;
  StacksRequestHandler stacks_handler;
  GenerationHandler generation_handler;
  struct AnswerCall {
    uint64_t request_id = 0;
    std::vector<diagnosis::StackSummary> ranks;
  };
  std::vector<AnswerCall> answers;  // AnswerStacks calls
  struct GatherCall {
    std::string reason;
    std::vector<diagnosis::StackSummary> own;
    Clock::TimePoint deadline;
  };
  std::vector<GatherCall> gathers;  // GatherStacks calls

 private:
  StatusOr<rendezvous::RendezvousResult> Answer(
      const rendezvous::JoinRequest& request) {
    if (fail_join) return DeadlineExceededError("rendezvous timed out");
    rendezvous::RendezvousResult r;
    if (job_succeeded) {
      r.job_succeeded = true;
      return r;
    }
    r.round = round++;
    r.group_rank = group_rank;
    r.world_size = request.local_world_size;
    r.role_world_size = request.local_world_size;
    r.master_addr = "127.0.0.1";
    r.master_port = 29600 + static_cast<int>(r.round);
    r.restart_count = restarts_used;
    if (join_rank_offset > 0) {
      r.rank_offset = join_rank_offset;
      r.world_size = join_rank_offset + request.local_world_size;
    }
    r.replaces_generation = join_replaces_generation;
    return r;
  }

  EventLoop* loop_;
  std::function<void()> held_;
  std::function<void()> cancel_;
  StacksDone gather_done_;
};

class CaptureConsole : public Console {
 public:
  void Write(Stream stream, std::string_view text) override {
    (stream == Stream::kOut ? out : err) += std::string(text);
  }
  std::string out;
  std::string err;
};

}  // namespace ddprun::agent::testing
