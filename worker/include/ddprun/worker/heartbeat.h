#pragma once

#include <cstdint>
#include <string>

namespace ddprun::worker {

// Tells ddprun's hang watchdog (--watchdog_timeout) that this process still
// makes progress: touches the file named by DDPRUN_WATCHDOG_FILE (creating
// it on the first call). Once a worker has called it, the agent kills the
// worker when it goes --watchdog_timeout seconds without calling it again,
// so call it from the training loop (once per step), not from a thread that
// keeps running while training is stuck.
//
// Each call also counts one step: at most every 100 ms the count is written
// to the file DDPRUN_STEP_FILE names, from which ddprun computes every
// rank's step rate and warns about stragglers (--straggler_factor).
//
// Cheap: returns after a clock read unless 100 ms passed since the last
// touch; a no-op when DDPRUN_WATCHDOG_FILE and DDPRUN_STEP_FILE are unset
// or empty (not launched by ddprun). Never throws; a file that cannot be touched
// is ignored (the watchdog then only sees a stopped process).
// Thread-safe.
void Heartbeat();

// Numbers ddprun's live view and /metrics show beside this rank's step
// rate (`ddprun --http_port`, `ddprun-rendezvous --http_port`): the last
// value of each name, e.g. ReportScalar("loss", 0.31). They are written
// with the step count by the next Heartbeat() that writes (at most every
// 100 ms). At most 8 names of 1..32 bytes of [A-Za-z0-9_.:/-]; another
// name, a ninth one and a value that is not finite are ignored.
// Thread-safe; cheap (a lock and a copy); no effect outside ddprun.
void ReportScalar(const std::string& name, double value);

// How many Heartbeat() calls (steps) this process will have made when it
// is done; with the step rate the live view shows an ETA. 0 = not known.
void ReportTotalSteps(int64_t total);

}  // namespace ddprun::worker
