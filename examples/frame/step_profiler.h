#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

namespace ddprun::examples {

// Where the time of a training epoch goes (--profile). The loop and the
// step runner measure these phases on the training thread:
enum class Phase {
  kDataWait,    // waiting for the loader's next batch (decoding, when the
                // loader has no threads)
  kForward,     // each micro-batch's forward and loss
  kBackward,    // autograd until the last parameter gradient is computed
  kGradSync,    // after that, until DDP's gradient all-reduce has finished
                // (the part of it backward did not hide) and the buffer
                // broadcast
  kOptimizer,   // zero_grad, unscale, clip, optimizer step
  kMetrics,     // the loop's collectives outside DDP (loss average, best
                // decision), progress line, observers
  kCheckpoint,  // periodic, best and final checkpoints
  kValidation,  // the trainer's validate callback
  kCount
};

// The phase's name in the table and the metrics record ("data_wait", ...).
const char* PhaseName(Phase phase);

// Sums wall time per phase over one epoch. Disabled (the default) every
// call returns at once: no clock read, no device synchronisation. Enabled
// on a CUDA device, Measure() synchronises the device at both ends so
// asynchronous kernels are charged to the phase that launched them (this
// slows the run a little and removes some overlap; CPU runs are measured
// as they are). The backward/all-reduce split comes from gradient hooks
// (StepRunner): on a GPU it is the split at kernel launch, an
// approximation. Not thread-safe: training thread only.
class StepProfiler {
 public:
  using Clock = std::chrono::steady_clock;

  StepProfiler() = default;
  StepProfiler(bool enabled, c10::Device device)
      : enabled_(enabled), device_(device) {}

  bool enabled() const { return enabled_; }

  // Adds the time from construction to destruction to `phase`.
  class Span {
   public:
    Span(StepProfiler* profiler, Phase phase);
    ~Span();
    Span(const Span&) = delete;
    Span& operator=(const Span&) = delete;

   private:
    StepProfiler* profiler_;  // null when disabled
    Phase phase_;
    Clock::time_point start_;
  };
  Span Measure(Phase phase) { return Span(this, phase); }

  // Adds `seconds` to `phase` (enabled only).
  void Add(Phase phase, double seconds);
  // Counts one optimizer step.
  void CountStep() {
    if (enabled_) ++steps_;
  }
  // Counts one collective the training loop itself issues (loss average,
  // best-checkpoint decision; not DDP's, not the trainer's validation).
  void CountLoopCollective() {
    if (enabled_) ++loop_collectives_;
  }
  // Starts a new window (an epoch): totals and counts back to zero.
  void BeginEpoch();
  // The current window: {"steps", "wall_s", "loop_collectives",
  // "<phase>_ms" per step,
  // "<phase>_share" of the wall time, "other_ms"/"other_share" for what no
  // phase covers}. Empty object when disabled.
  nlohmann::json Summary() const;
  // The summary as the lines rank 0 prints: a header and one line per
  // phase ("  forward          12.31 ms/step  41.0%").
  static std::string Table(const nlohmann::json& summary,
                           const std::string& title);

  // Synchronises the device when enabled and on CUDA (public for the step
  // runner's gradient hooks).
  void SyncDevice() const;

 private:
  bool enabled_ = false;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::array<double, static_cast<size_t>(Phase::kCount)> seconds_{};
  int64_t steps_ = 0;
  int64_t loop_collectives_ = 0;
  Clock::time_point window_start_ = Clock::now();
};

}  // namespace ddprun::examples
