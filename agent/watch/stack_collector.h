#pragma once

#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/watch/worker_watchdog.h"
#include "common/clock.h"
#include "common/event_loop.h"
#include "diagnosis/stack_diagnosis.h"

namespace ddprun::agent {

// The signal that asks a worker for its stacks: SIGRTMAX-2 (62 on Linux).
// Workers learn it from DDPRUN_STACKS_SIGNAL; ddprun's sitecustomize.py
// registers faulthandler for it, writing to DDPRUN_STACKS_FILE.
int StackDumpSignal();

// The signal a user sends to a running ddprun for a dump on demand
// (SIGUSR2; torchrun dies of it, so no torchrun user relies on it).
inline constexpr int kDumpRequestSignal = SIGUSR2;

// The folder ddprun appends to Python workers' PYTHONPATH: the one that
// holds ddprun's sitecustomize.py, `<dir of ddprun>/../lib/ddprun/python`
// (the build tree, `cmake --install` and scripts/bundle_launcher.sh all lay
// it out so). "" when it is missing: workers then run without the hook.
std::string PythonStackHelperDir();

// True when process `pid` has a handler for `sig` (SigCgt in
// /proc/<pid>/status): only such a worker may get the dump signal, whose
// default action would kill it.
bool CatchesSignal(int pid, int sig);

// The line ddprun writes into a worker's stacks file before asking it for a
// dump. `why` may come from another node (a Stacks request's reason): its
// control characters are escaped, so it cannot forge lines in the file.
std::string StackDumpHeader(int rank, int pid, const std::string& why,
                            const std::string& stamp);

// A stacks file keeps the newest dumps only: once it is larger than
// kMaxStacksFileBytes, TrimStacksFile() keeps the newest whole dumps (each
// starts at a "# ddprun stack dump" line) that fit in half of it, in place
// (the worker's descriptor, opened O_APPEND, writes on at the new end). A
// file without such a line in its newest half is emptied. False when the
// file could not be trimmed (it stays as it was).
inline constexpr int64_t kMaxStacksFileBytes = int64_t{1} << 20;
bool TrimStacksFile(const std::string& path,
                    int64_t max_bytes = kMaxStacksFileBytes);

struct StackTarget {
  int rank = 0;  // global rank, for the diagnosis
  int pid = 0;
  std::string path;  // the worker's DDPRUN_STACKS_FILE
};
struct StackResult {
  StackTarget target;
  std::string dump;     // what the worker appended ("" = none)
  std::string missing;  // why there is no dump, "" when there is one
};

// A collected dump as the diagnosis reads it (diagnosis/stack_diagnosis.h).
diagnosis::RankStacks ToRankStacks(const StackResult& result);

// Collects every target's stacks without blocking the loop; `done` runs
// once on the loop thread (posted, never inside Collect) with one result
// per target, in the targets' order. One collection at a time: Collect
// while busy() is a programming error (it returns false and does nothing).
// An interface so that what acts on the dumps (HangResponse) is tested
// without processes.
class StackCollector {
 public:
  using Done = std::function<void(std::vector<StackResult>)>;

  virtual ~StackCollector() = default;
  // `why` goes into each file's header line; a target that has not
  // answered within `limit` is reported with `missing` set.
  virtual bool Collect(std::vector<StackTarget> targets, const std::string& why,
                       Clock::Duration limit, Done done) = 0;
  virtual bool busy() const = 0;
};

// The real collector: trims each target's file (TrimStacksFile), appends a
// "# ddprun stack dump" header line (StackDumpHeader) to it, sends
// StackDumpSignal() to the main thread of each target that catches it (tgkill; the worker's file is opened O_APPEND, so the
// dump follows the header), and polls the files. A dump is complete when
// its file grew and then stayed the same size for two polls (25 ms apart);
// a target that does not answer within `limit`, is stopped (state T), has
// exited or catches no such signal is reported with `missing` set, and
// never waited for.
//
// Confined to the loop thread.
class SignalStackCollector : public StackCollector {
 public:
  explicit SignalStackCollector(EventLoop* loop);
  ~SignalStackCollector() override;
  SignalStackCollector(const SignalStackCollector&) = delete;
  SignalStackCollector& operator=(const SignalStackCollector&) = delete;

  bool Collect(std::vector<StackTarget> targets, const std::string& why,
               Clock::Duration limit, Done done) override;
  bool busy() const override { return busy_; }

 private:
  struct Pending {
    StackResult result;
    int64_t start = 0;  // file size after our header
    int64_t last = -1;
    int stable = 0;
    bool finished = false;
  };
  void Poll();
  void Complete();

  EventLoop* loop_;
  std::unique_ptr<WorkerProbe> probe_;
  bool busy_ = false;
  std::vector<Pending> pending_;
  Clock::TimePoint deadline_{};
  Clock::Duration limit_{};
  Done done_;
  EventLoop::TimerId timer_ = 0;
  bool armed_ = false;
};

}  // namespace ddprun::agent
