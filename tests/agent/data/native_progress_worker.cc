// A C++ worker on the worker runtime's plain pieces that reports its
// progress as the trainers do (ReportTotalSteps, ReportScalar("loss"),
// Heartbeat() per step): STEPS steps (env, default 60) 50 ms apart, then
// exit 0. For the live view's process tests.
#include <chrono>
#include <cstdlib>
#include <thread>

#include "ddprun/worker/heartbeat.h"

int main() {
  const char* s = std::getenv("STEPS");
  const int steps = s != nullptr ? std::atoi(s) : 60;
  ddprun::worker::ReportTotalSteps(steps);
  for (int step = 0; step < steps; ++step) {
    ddprun::worker::ReportScalar("loss", 1.0 / (step + 1));
    ddprun::worker::ReportScalar("bad name!", 1);  // ignored
    ddprun::worker::Heartbeat();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}
