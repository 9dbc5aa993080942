#include "agent/watch/straggler_watch.h"

#include "agent/watch/step_file.h"
#include "common/logging.h"

namespace ddprun::agent {
namespace {

constexpr auto kInterval = std::chrono::seconds(1);

}  // namespace

StragglerWatch::StragglerWatch(EventLoop* loop, StragglerPolicy policy,
                               rendezvous::RendezvousClient* rendezvous)
    : loop_(loop), rendezvous_(rendezvous), rates_(policy) {}

StragglerWatch::~StragglerWatch() {
  if (armed_) loop_->Cancel(timer_);
}

void StragglerWatch::Arm(Clock::TimePoint at) {
  armed_ = true;
  timer_ = loop_->RunAt(at, [this] {
    armed_ = false;
    Tick();
  });
}

void StragglerWatch::Start(std::vector<Target> targets) {
  if (armed_) loop_->Cancel(timer_);
  armed_ = false;
  rates_.Clear();
  workers_.clear();
  for (Target& t : targets) {
    Worker w;
    w.target = std::move(t);
    workers_.push_back(std::move(w));
  }
  if (starts_++ > 0) rendezvous_->SetWorkerRestarts(starts_ - 1);
  Publish();
  Arm(loop_->clock()->Now() + kInterval);
}

void StragglerWatch::NoteExit(int rank, bool succeeded) {
  for (Worker& w : workers_) {
    if (w.target.rank == rank && w.state == State::kRunning) {
      w.state = succeeded ? State::kSucceeded : State::kFailed;
    }
  }
  Publish();
}

void StragglerWatch::Restarted(int rank, int pid) {
  for (Worker& w : workers_) {
    if (w.target.rank != rank) continue;
    w.target.pid = pid;
    w.state = State::kRunning;
  }
  Publish();
}

void StragglerWatch::Stop() {
  if (armed_) loop_->Cancel(timer_);
  armed_ = false;
  rates_.Clear();
  for (Worker& w : workers_) {
    if (w.state == State::kRunning) w.state = State::kStopped;
  }
  Publish();
}

void StragglerWatch::Publish() {
  std::vector<rendezvous::RankStepRate> sent;
  const std::vector<RankRate> known = rates_.Rates();
  size_t budget = kScalarBudget;
  for (const Worker& w : workers_) {
    rendezvous::RankStepRate r;
    r.rank = w.target.rank;
    r.local_rank = w.target.local_rank;
    r.pid = w.target.pid;
    r.state = w.state;
    r.steps = w.last.steps < 0 ? 0 : w.last.steps;
    for (const RankRate& k : known) {
      if (k.rank == r.rank && w.state == State::kRunning) r.per_s = k.per_s;
    }
    r.straggler = w.state == State::kRunning && rates_.Straggling(r.rank);
    r.total_steps = w.last.total_steps;
    for (const auto& [name, value] : w.last.scalars) {
      const size_t cost = name.size() + 16;
      if (cost > budget) break;
      budget -= cost;
      r.scalars.emplace_back(name, value);
    }
    sent.push_back(std::move(r));
  }
  rendezvous_->SetStepRates(std::move(sent));
}

void StragglerWatch::Tick() {
  const Clock::TimePoint now = loop_->clock()->Now();
  for (Worker& w : workers_) {
    if (w.state != State::kRunning) continue;
    StepFile file = ReadStepFile(w.target.steps_file);
    if (file.steps < 0) continue;
    rates_.Observe(w.target.rank, file.steps, now);
    w.last = std::move(file);
  }
  const double job = rendezvous_->JobMedianStepRate();
  for (const Straggler& s : rates_.Check(now, job > 0 ? job : -1)) {
    std::string who;
    for (const Worker& w : workers_) {
      if (w.target.rank == s.rank) {
        who = " (local_rank " + std::to_string(w.target.local_rank) + ", pid " +
              std::to_string(w.target.pid) + ")";
      }
    }
    const std::string line =
        "straggler: " + DescribeStraggler(s, job > 0) + who;
    DDP_LOG(WARNING) << line;
    warnings_.push_back(line);
  }
  Publish();
  Arm(now + kInterval);
}

}  // namespace ddprun::agent
