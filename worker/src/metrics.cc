#include "ddprun/worker/metrics.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include <ATen/ATen.h>

namespace ddprun::worker {
namespace {

std::string FormatDuration(double seconds) {
  if (seconds < 0 || seconds > 1e8) return "--:--:--";
  long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02ld:%02ld:%02ld", s / 3600, (s / 60) % 60,
                s % 60);
  return buf;
}

}  // namespace

double AllReduceSum(const World& world, double value) {
  if (!world.distributed()) return value;
  // fp64 so sums of many values keep their precision.
  at::Tensor t = at::tensor({value}, at::kDouble).to(world.device());
  world.AllReduce(t, ReduceOp::kSum);
  return t.item<double>();
}

double AllReduceMean(const World& world, double value) {
  return AllReduceSum(world, value) / world.world_size();
}

double AllReduceWeightedMean(const World& world, double value, double weight) {
  at::Tensor t = at::tensor({value * weight, weight}, at::kDouble);
  if (world.distributed()) {
    t = t.to(world.device());
    world.AllReduce(t, ReduceOp::kSum);
    t = t.cpu();
  }
  double w = t[1].item<double>();
  return w == 0 ? 0.0 : t[0].item<double>() / w;
}

void LogMain(const World& world, const std::string& line) {
  if (!world.is_main()) return;
  std::string out = line;
  if (out.empty() || out.back() != '\n') out += '\n';
  ssize_t ignored = ::write(2, out.data(), out.size());
  (void)ignored;
}

ProgressMeter::ProgressMeter(World world, int64_t total_epochs,
                             int64_t total_steps,
                             std::chrono::milliseconds min_interval)
    : world_(std::move(world)),
      total_epochs_(total_epochs),
      total_steps_(total_steps),
      min_interval_(min_interval),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

void ProgressMeter::Update(int64_t epoch, int64_t step, double loss,
                           int64_t global_samples) {
  auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    // Throughput starts at the first step: start-up is not training speed.
    first_step_ = step;
    start_ = now;
    samples_ = 0;
  } else {
    samples_ += global_samples;
  }
  epoch_ = epoch;
  step_ = step;
  loss_ = loss;
  if (now - last_print_ >= min_interval_ || step == total_steps_) {
    last_print_ = now;
    LogMain(world_, Line());
  }
}

void ProgressMeter::Flush() {
  // Update() always prints the run's last step and the end of its epoch
  // flushes right after: one line for it, not a second with the same step
  // and a lower rate.
  if (step_ > 0 && step_ == total_steps_) return;
  last_print_ = std::chrono::steady_clock::now();
  LogMain(world_, Line());
}

bool ProgressMeter::rate_measured() const {
  return first_step_ >= 0 && step_ > first_step_;
}

double ProgressMeter::samples_per_second() const {
  if (!rate_measured()) return 0.0;
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
          .count();
  return secs > 0 ? samples_ / secs : 0.0;
}

std::string ProgressMeter::Line() const {
  double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_)
          .count();
  int64_t done = first_step_ < 0 ? 0 : step_ - first_step_;
  double eta = -1;
  if (done > 0 && total_steps_ > 0) {
    eta = secs / done * static_cast<double>(total_steps_ - step_);
  }
  char rate[32] = "-";  // not measured yet: no number rather than 0
  if (rate_measured()) {
    std::snprintf(rate, sizeof(rate), "%.1f", samples_per_second());
  }
  // A loss that rounds to zero (a batch without events gives -0.0) prints
  // as 0.0000, not -0.0000.
  const double shown_loss = std::fabs(loss_) < 5e-5 ? 0.0 : loss_;
  char buf[256];
  std::snprintf(
      buf, sizeof(buf),
      "epoch %lld/%lld step %lld/%lld loss %.4f samples/s %s "
      "eta %s",
      static_cast<long long>(epoch_ + 1), static_cast<long long>(total_epochs_),
      static_cast<long long>(step_), static_cast<long long>(total_steps_),
      shown_loss, rate, FormatDuration(eta).c_str());
  return buf;
}

}  // namespace ddprun::worker
