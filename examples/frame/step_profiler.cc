#include "examples/frame/step_profiler.h"

#include <cstdio>

#include <torch/cuda.h>

namespace ddprun::examples {

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kDataWait:
      return "data_wait";
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kGradSync:
      return "grad_allreduce_wait";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kMetrics:
      return "metrics";
    case Phase::kCheckpoint:
      return "checkpoint";
    case Phase::kValidation:
      return "validation";
    case Phase::kCount:
      break;
  }
  return "?";
}

StepProfiler::Span::Span(StepProfiler* profiler, Phase phase)
    : profiler_(profiler->enabled() ? profiler : nullptr), phase_(phase) {
  if (profiler_ == nullptr) return;
  profiler_->SyncDevice();
  start_ = Clock::now();
}

StepProfiler::Span::~Span() {
  if (profiler_ == nullptr) return;
  profiler_->SyncDevice();
  profiler_->Add(phase_,
                 std::chrono::duration<double>(Clock::now() - start_).count());
}

void StepProfiler::Add(Phase phase, double seconds) {
  if (enabled_) seconds_[static_cast<size_t>(phase)] += seconds;
}

void StepProfiler::BeginEpoch() {
  if (!enabled_) return;
  seconds_.fill(0);
  steps_ = 0;
  loop_collectives_ = 0;
  window_start_ = Clock::now();
}

void StepProfiler::SyncDevice() const {
  if (enabled_ && device_.is_cuda()) torch::cuda::synchronize(device_.index());
}

nlohmann::json StepProfiler::Summary() const {
  nlohmann::json out = nlohmann::json::object();
  if (!enabled_) return out;
  const double wall =
      std::chrono::duration<double>(Clock::now() - window_start_).count();
  const double per = steps_ > 0 ? 1e3 / steps_ : 0.0;
  out["steps"] = steps_;
  out["wall_s"] = wall;
  out["loop_collectives"] = loop_collectives_;
  double covered = 0;
  auto put = [&](const std::string& name, double s) {
    out[name + "_ms"] = s * per;
    out[name + "_share"] = wall > 0 ? s / wall : 0.0;
  };
  for (size_t i = 0; i < seconds_.size(); ++i) {
    put(PhaseName(static_cast<Phase>(i)), seconds_[i]);
    covered += seconds_[i];
  }
  put("other", std::max(0.0, wall - covered));
  return out;
}

std::string StepProfiler::Table(const nlohmann::json& summary,
                                const std::string& title) {
  if (!summary.contains("steps")) return "";
  const int64_t steps = summary["steps"].get<int64_t>();
  const double wall = summary["wall_s"].get<double>();
  char line[256];
  std::snprintf(line, sizeof(line),
                "%s: %lld steps in %.3f s (%.2f ms/step), %lld collectives "
                "of the loop; per step and share of the wall time:",
                title.c_str(), static_cast<long long>(steps), wall,
                steps > 0 ? wall * 1e3 / steps : 0.0,
                static_cast<long long>(summary.value("loop_collectives", 0)));
  std::string out = line;
  auto row = [&](const std::string& name) {
    std::snprintf(line, sizeof(line), "\n  %-20s %9.2f ms %6.1f%%",
                  name.c_str(), summary.value(name + "_ms", 0.0),
                  100 * summary.value(name + "_share", 0.0));
    out += line;
  };
  for (size_t i = 0; i < static_cast<size_t>(Phase::kCount); ++i) {
    row(PhaseName(static_cast<Phase>(i)));
  }
  row("other");
  if (summary.contains("grad_transport")) {
    std::snprintf(line, sizeof(line),
                  "\n  gradients: %.2f MB a step in %lld bucket(s) over %s",
                  summary.value("allreduce_mb_per_step", 0.0),
                  static_cast<long long>(summary.value("buckets", 0)),
                  summary["grad_transport"].get<std::string>().c_str());
    out += line;
  }
  return out;
}

}  // namespace ddprun::examples
