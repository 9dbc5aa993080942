#include "agent/watch/straggler_watch.h"

#include <cstdlib>

#include "common/file_util.h"
#include "common/logging.h"

namespace ddprun::agent {
namespace {

constexpr auto kInterval = std::chrono::seconds(1);

// A count and its newline; a worker's own file, so what is not a small
// regular file (a FIFO would block the loop, a huge file stall it) is
// read as no count.
constexpr size_t kMaxStepFile = 64;

// The count at the start of `path`; -1 when there is none (yet).
int64_t ReadCount(const std::string& path) {
  StatusOr<std::string> text = ReadRegularFile(path, kMaxStepFile);
  if (!text.ok() || text->empty()) return -1;
  char* end = nullptr;
  const long long n = std::strtoll(text->c_str(), &end, 10);
  return end == text->c_str() || n < 0 ? -1 : n;
}

}  // namespace

StragglerWatch::StragglerWatch(EventLoop* loop, StragglerPolicy policy,
                               rendezvous::RendezvousClient* rendezvous)
    : loop_(loop), rendezvous_(rendezvous), rates_(policy) {}

StragglerWatch::~StragglerWatch() {
  if (armed_) loop_->Cancel(timer_);
}

void StragglerWatch::Start(std::vector<Target> targets) {
  Stop();
  targets_ = std::move(targets);
  armed_ = true;
  timer_ = loop_->RunAt(loop_->clock()->Now() + kInterval, [this] {
    armed_ = false;
    Tick();
  });
}

void StragglerWatch::Stop() {
  if (armed_) loop_->Cancel(timer_);
  armed_ = false;
  targets_.clear();
  rates_.Clear();
  rendezvous_->SetStepRates({});
}

void StragglerWatch::Tick() {
  const Clock::TimePoint now = loop_->clock()->Now();
  for (const Target& t : targets_) {
    const int64_t count = ReadCount(t.steps_file);
    if (count >= 0) rates_.Observe(t.rank, count, now);
  }
  std::vector<rendezvous::RankStepRate> sent;
  for (const RankRate& r : rates_.Rates()) {
    sent.push_back({r.rank, r.steps, r.per_s});
  }
  if (!sent.empty()) rendezvous_->SetStepRates(std::move(sent));
  const double job = rendezvous_->JobMedianStepRate();
  for (const Straggler& s : rates_.Check(now, job > 0 ? job : -1)) {
    std::string who;
    for (const Target& t : targets_) {
      if (t.rank == s.rank) {
        who = " (local_rank " + std::to_string(t.local_rank) + ", pid " +
              std::to_string(t.pid) + ")";
      }
    }
    const std::string line =
        "straggler: " + DescribeStraggler(s, job > 0) + who;
    DDP_LOG(WARNING) << line;
    warnings_.push_back(line);
  }
  armed_ = true;
  timer_ = loop_->RunAt(now + kInterval, [this] {
    armed_ = false;
    Tick();
  });
}

}  // namespace ddprun::agent
