#pragma once

// Blocking use of the asynchronous RendezvousClient for tests and the test
// agent: a real EventLoop on a thread of its own (ThreadEventLoop), and a
// wrapper whose calls wait for their answer (SyncClient). Several threads
// may call one SyncClient at once (a Join waiting while another thread
// Leaves), as agents did with the blocking client.

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/event_loop.h"
#include "common/mutex.h"
#include "rendezvous/client/grpc_rendezvous_client.h"

namespace ddprun::rendezvous::testing {

// An EventLoop on the real clock, run by its own thread until destroyed.
// Every method is thread-safe.
class ThreadEventLoop : public EventLoop {
 public:
  ThreadEventLoop() : thread_([this] { Loop(); }) {}
  ~ThreadEventLoop() override {
    {
      MutexLock lock(&mu_);
      stop_ = true;
    }
    cv_.NotifyAll();
    thread_.join();
  }

  Clock* clock() override { return Clock::Real(); }
  void Post(std::function<void()> fn) override {
    {
      MutexLock lock(&mu_);
      queue_.emplace(next_++, std::move(fn));
    }
    cv_.NotifyAll();
  }
  TimerId RunAt(Clock::TimePoint when, std::function<void()> fn) override {
    TimerId id;
    {
      MutexLock lock(&mu_);
      id = next_++;
      timers_[id] = {when, std::move(fn)};
    }
    cv_.NotifyAll();
    return id;
  }
  void Cancel(TimerId id) override {
    MutexLock lock(&mu_);
    timers_.erase(id);
  }

  // Runs `fn` on the loop thread and waits until it returned.
  void RunSync(const std::function<void()>& fn) {
    std::promise<void> done;
    Post([&] {
      fn();
      done.set_value();
    });
    done.get_future().get();
  }

 private:
  void Loop() {
    mu_.Lock();
    while (!stop_) {
      std::function<void()> fn;
      if (!queue_.empty()) {
        fn = std::move(queue_.begin()->second);
        queue_.erase(queue_.begin());
      } else {
        auto due = timers_.end();
        for (auto it = timers_.begin(); it != timers_.end(); ++it) {
          if (due == timers_.end() || it->second.first < due->second.first) {
            due = it;
          }
        }
        const Clock::TimePoint now = clock()->Now();
        if (due != timers_.end() && due->second.first <= now) {
          fn = std::move(due->second.second);
          timers_.erase(due);
        } else {
          const Clock::TimePoint until = due != timers_.end()
                                             ? due->second.first
                                             : now + std::chrono::seconds(1);
          (void)cv_.WaitUntil(&mu_, until);
          continue;
        }
      }
      mu_.Unlock();
      fn();
      mu_.Lock();
    }
    mu_.Unlock();
  }

  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  TimerId next_ GUARDED_BY(mu_) = 1;
  std::map<TimerId, std::function<void()>> queue_ GUARDED_BY(mu_);
  std::map<TimerId, std::pair<Clock::TimePoint, std::function<void()>>> timers_
      GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once the rest is ready
};

// A RendezvousClient on its own ThreadEventLoop, called as if it blocked.
class SyncClient {
 public:
  // The gRPC client with `options`.
  static StatusOr<std::unique_ptr<SyncClient>> Grpc(
      const GrpcClientOptions& options) {
    auto sync = std::unique_ptr<SyncClient>(new SyncClient());
    DDP_ASSIGN_OR_RETURN(sync->client_,
                         CreateGrpcRendezvousClient(options, &sync->loop_));
    return sync;
  }
  // The client is destroyed on its loop thread, as the contract asks.
  ~SyncClient() {
    loop_.RunSync([this] { client_.reset(); });
  }
  SyncClient(const SyncClient&) = delete;
  SyncClient& operator=(const SyncClient&) = delete;

  std::string Backend() const { return client_->Backend(); }
  // `handler` runs on the client's loop thread.
  void SetEventHandler(RendezvousClient::EventHandler handler) {
    loop_.RunSync([&] { client_->SetEventHandler(std::move(handler)); });
  }
  StatusOr<RendezvousResult> Join(const JoinRequest& request,
                                  Clock::TimePoint deadline) {
    return Call<StatusOr<RendezvousResult>>(
        [&](auto done) { client_->Join(request, deadline, std::move(done)); });
  }
  StatusOr<bool> ReportFailure(int64_t round, const std::string& reason,
                               bool retry) {
    return Call<StatusOr<bool>>([&](auto done) {
      client_->ReportFailure(round, reason, retry, std::move(done));
    });
  }
  Status ReportSuccess(int64_t round, Clock::Duration barrier_timeout) {
    return Call<Status>([&](auto done) {
      client_->ReportSuccess(round, barrier_timeout, std::move(done));
    });
  }
  StatusOr<RendezvousClient::ReplaceAnswer> ReplaceRank(
      int64_t round, int rank, int64_t generation, const std::string& reason) {
    return Call<StatusOr<RendezvousClient::ReplaceAnswer>>([&](auto done) {
      client_->ReplaceRank(round, rank, generation, reason, std::move(done));
    });
  }
  // `handler` runs on the client's loop thread.
  void SetGenerationHandler(RendezvousClient::GenerationHandler handler) {
    loop_.RunSync([&] { client_->SetGenerationHandler(std::move(handler)); });
  }
  // `handler` runs on the client's loop thread.
  void SetStacksRequestHandler(RendezvousClient::StacksRequestHandler handler) {
    loop_.RunSync(
        [&] { client_->SetStacksRequestHandler(std::move(handler)); });
  }
  // Sends this node's answer (returns at once; the client sends it on).
  void AnswerStacks(uint64_t request_id,
                    std::vector<diagnosis::StackSummary> ranks) {
    loop_.Post([this, request_id, ranks = std::move(ranks)]() mutable {
      client_->AnswerStacks(request_id, std::move(ranks));
    });
  }
  StatusOr<StacksAnswer> GatherStacks(const std::string& reason,
                                      std::vector<diagnosis::StackSummary> own,
                                      Clock::TimePoint deadline) {
    return Call<StatusOr<StacksAnswer>>([&](auto done) {
      client_->GatherStacks(reason, own, deadline, std::move(done));
    });
  }
  void Leave() {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> left = done->get_future();
    loop_.Post([this, done] { client_->Leave([done] { done->set_value(); }); });
    left.get();
  }

 private:
  SyncClient() = default;

  // Starts a call on the loop thread and waits for its answer.
  template <typename Answer, typename Start>
  Answer Call(Start start) {
    auto answer = std::make_shared<std::promise<Answer>>();
    std::future<Answer> result = answer->get_future();
    loop_.Post([start, answer] {
      start([answer](Answer a) { answer->set_value(std::move(a)); });
    });
    return result.get();
  }

  ThreadEventLoop loop_;
  std::unique_ptr<RendezvousClient> client_;
};

}  // namespace ddprun::rendezvous::testing
