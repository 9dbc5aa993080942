// A C++ worker on the worker runtime's plain pieces (Heartbeat(), the stack
// dump handler, ActivityScope), for ddprun's stack dump tests: each step
// calls Heartbeat(); at step 3 rank HANG_RANK (env) stops outside any
// collective while the others wait "in all_reduce", forever.
#include <chrono>
#include <cstdlib>
#include <thread>

#include "ddprun/worker/heartbeat.h"
#include "ddprun/worker/stack_dump.h"

int main() {
  const char* r = std::getenv("RANK");
  const char* h = std::getenv("HANG_RANK");
  const int rank = r != nullptr ? std::atoi(r) : 0;
  const int hang_rank = h != nullptr ? std::atoi(h) : -1;
  for (int step = 0;; ++step) {
    ddprun::worker::Heartbeat();
    if (step == 3) {
      if (rank == hang_rank) {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }
      ddprun::worker::ActivityScope scope("all_reduce");
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
}
