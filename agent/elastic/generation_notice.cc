#include "agent/elastic/generation_notice.h"

#include <optional>
#include <string>
#include <utility>

#include "common/logging.h"

namespace ddprun::agent {
namespace {

// The store's generation, 0 when missing or not a number (the agents write
// only decimal numbers there).
int64_t StoreGeneration(const WorkerStore& store) {
  std::optional<std::string> value = store.Get(kGenerationKey);
  if (!value.has_value() || value->empty() || value->size() > 18) return 0;
  int64_t g = 0;
  for (char c : *value) {
    if (c < '0' || c > '9') return 0;
    g = g * 10 + (c - '0');
  }
  return g;
}

}  // namespace

GenerationNotice::GenerationNotice(Options options, EventLoop* loop,
                                   WorkerStore* store, SignalWorkers signal)
    : options_(options),
      loop_(loop),
      store_(store),
      signal_(std::move(signal)) {}

GenerationNotice::~GenerationNotice() { Stop(); }

void GenerationNotice::StartGroup(int64_t round) {
  Stop();
  round_ = round;
  signalled_ = 0;
}

void GenerationNotice::Stop() {
  round_ = -1;
  pending_ = 0;
  if (timer_armed_) {
    loop_->Cancel(timer_);
    timer_armed_ = false;
  }
}

void GenerationNotice::Announce(int64_t round, int64_t generation) {
  if (round_ < 0 || round != round_) return;
  if (generation <= signalled_ || generation <= pending_) return;
  pending_ = generation;
  deadline_ = loop_->clock()->Now() + options_.timeout;
  if (timer_armed_) {
    loop_->Cancel(timer_);
    timer_armed_ = false;
  }
  Check();
}

void GenerationNotice::Check() {
  timer_armed_ = false;
  if (pending_ == 0) return;
  const int64_t stored = StoreGeneration(*store_);
  if (stored >= pending_) {
    // A newer number than announced is signalled as such: one signal.
    signalled_ = stored;
    pending_ = 0;
    signal_(stored);
    return;
  }
  const Clock::TimePoint now = loop_->clock()->Now();
  if (now >= deadline_) {
    DDP_LOG(WARNING) << "generation " << pending_
                     << " did not reach the workers' store within "
                     << options_.timeout.count() / 1000
                     << " s: its signal is not sent";
    pending_ = 0;
    return;
  }
  timer_ = loop_->RunAt(now + options_.poll, [this] { Check(); });
  timer_armed_ = true;
}

}  // namespace ddprun::agent
