#pragma once

#include <cstdint>

namespace ddprun::worker {

// ddprun's stack dumps for C++ workers: the agent sends DDPRUN_STACKS_SIGNAL
// (a realtime signal) to the worker's main thread when its watchdog finds a
// hang or when a user asks ddprun (SIGUSR2) for a dump. The handler appends
// to DDPRUN_STACKS_FILE:
//   # ddprun native stacks: pid P, doing all_reduce, step 12
//   Thread 4711 (current):
//   <backtrace_symbols_fd lines>
//   Thread 4712:
//   ...
//   # end of native stacks
// Every thread of the process is asked in turn (tgkill from the handler,
// at most 200 ms each; one that blocks the signal is listed as not
// answering). Only async-signal-safe calls run in the handler, except
// backtrace(), which is warmed up at installation.
//
// Installs the handler once (later calls return the first result); false
// when the environment names no file or signal, or the file cannot be
// opened. Heartbeat() and World's initialisation call it; a program may too.
bool InstallStackDumpHandler();

// What this rank is doing, for the dump: `what` must be a string with static
// storage ("all_reduce"), nullptr when the rank is in none. Lock-free.
void SetActivity(const char* what);
// The step counter the dump shows: Heartbeat() counts steps with it.
void NoteStep();
int64_t Steps();

// Sets the activity for a scope (a collective) and restores the previous
// one after it.
class ActivityScope {
 public:
  explicit ActivityScope(const char* what);
  ~ActivityScope();
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

 private:
  const char* previous_;
};

}  // namespace ddprun::worker
