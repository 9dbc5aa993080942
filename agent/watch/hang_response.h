#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/process/console.h"
#include "agent/watch/stack_collector.h"
#include "common/event_loop.h"
#include "diagnosis/stack_diagnosis.h"
#include "diagnosis/stack_summary.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// What the agent does about a hung worker, and about a stack dump asked for
// here (SIGUSR2) or by another node: collect every local worker's stacks
// (StackCollector; Python workers answer through ddprun's
// sitecustomize.py), append them to attempt_<k>/<local_rank>/stacks.txt,
// print every rank's line and the diagnosis (diagnosis/stack_diagnosis.h),
// and only then kill the hung worker, the diagnosis added to its failure
// traceback. A hang found while a dump runs takes that dump as its verdict;
// one found once this group's verdict is in is killed at once.
//
// In a multi-node round (a backend with SupportsStacks()) a dump asked for
// here first gathers every node's stacks through the rendezvous (bounded,
// 5 s): the other agents are asked on their next heartbeat, collect their
// workers' stacks and answer; nothing is killed before that, and the
// diagnosis names every rank with its node. Asked so by another node (or
// by `ddprun-rendezvous --stacks`), it collects and answers without
// stopping anything; asked again while gathering, or once this group's
// workers are gone, it answers with this node's stacks of a moment ago.
//
// Without a collector (DDPRUN_STACKS=0), or for a worker without a stacks
// file, a hung worker is killed at once, as the watchdog always did.
//
// Confined to the loop thread. The loop, the rendezvous client, the
// console and `workers` must outlive it.
class HangResponse {
 public:
  // The agent's side: its running workers, and the verdict on a hung one.
  class Workers {
   public:
    virtual ~Workers() = default;
    // The running workers of the current group that have a stacks file
    // (DDPRUN_STACKS_FILE), by local rank; empty when none runs.
    virtual std::vector<StackTarget> StackTargets() const = 0;
    // The verdict on hung worker `local_rank` of the current group: SIGKILL
    // to its process group, and `diagnosis` ("" when none was made) added
    // to its failure traceback. Nothing when it is no longer running.
    virtual void KillHung(int local_rank, const std::string& diagnosis) = 0;
  };

  struct Options {
    // <log_dir>/<run_id>_<rand>, where attempt_<k>/ lies ("" = no files).
    std::string run_log_dir;
    // This node's host name in a diagnosis across nodes; asked when first
    // needed (it may be a DNS lookup).
    std::function<std::string()> hostname;
  };

  // `collector` null: stack dumps are off (DDPRUN_STACKS=0).
  HangResponse(Options options, EventLoop* loop,
               rendezvous::RendezvousClient* rendezvous, Console* console,
               Workers* workers, std::unique_ptr<StackCollector> collector);
  ~HangResponse();
  HangResponse(const HangResponse&) = delete;
  HangResponse& operator=(const HangResponse&) = delete;

  // Whether workers get a stacks file (a collector is there).
  bool collects_stacks() const { return collector_ != nullptr; }

  // A new worker group starts in `round`: hung workers of the previous one
  // are forgotten, and what is collected from now on is this group's.
  void StartGroup(const rendezvous::RendezvousResult& round);
  // The agent has finished: requests are ignored (a dump asked for here
  // says that stack dumps are off), and collections still in flight end
  // without a report, an answer or a kill.
  void Finish();

  // The watchdog found worker `local_rank` (pid `pid`) hung; `what` says
  // how (DescribeStuck()). The worker is killed through Workers::KillHung,
  // at once or once the stacks are in.
  void OnHung(int local_rank, int pid, const std::string& what);
  // The same for any verdict that a worker must die after the hang
  // diagnosis (e.g. an expired FileTimer scope): `headline` starts the
  // error line, `reason` names the dump in the stacks files.
  void KillAfterStacks(int local_rank, int pid, const std::string& headline,
                       const std::string& reason);
  // A dump on demand (SIGUSR2 to ddprun): every running worker's stacks to
  // its stacks.txt and the diagnosis to the console; the job goes on.
  void DumpStacks();
  // The rendezvous asks for this node's stacks (another node's dump, or an
  // operator's `ddprun-rendezvous --stacks`); answered through
  // AnswerStacks(request_id, ...), also when there is nothing to dump.
  void OnStacksRequested(uint64_t request_id, const std::string& reason);

 private:
  // Starts a collection of `targets` for this group; `watchdog`: a hang's,
  // `here`: asked on this node (not by another one).
  void Collect(std::vector<StackTarget> targets, const std::string& why,
               bool watchdog, bool here);
  void OnStacksCollected(int generation, bool watchdog, bool here,
                         std::vector<StackResult> results);
  void OnStacksGathered(int generation, bool watchdog,
                        std::vector<diagnosis::RankStacks> local,
                        StatusOr<rendezvous::StacksAnswer> answer);
  // Prints every rank's line and the diagnosis (`note`: what is missing),
  // keeps a watchdog's verdict for the failure table, kills hung_.
  void ReportStacks(int generation, bool watchdog,
                    const std::vector<diagnosis::RankStacks>& ranks,
                    const std::string& note);
  // The verdict on one hung worker (with this group's diagnosis, if made),
  // and on every worker in hung_.
  void Kill(int local_rank);
  void KillHung();
  bool AcrossNodes() const;
  std::string Host();       // host_, resolved once
  std::string NodeLabel();  // "node <group rank>: <host>"

  // Constant after construction.
  const Options options_;
  EventLoop* const loop_;
  rendezvous::RendezvousClient* const rendezvous_;
  Console* const console_;
  Workers* const workers_;
  const std::unique_ptr<StackCollector> collector_;  // null: dumps are off

  // Loop-thread state.
  bool finished_ = false;
  std::string host_;  // Options::hostname's answer, once asked
  // The current group: StartGroup counts them; results of an older one
  // are dropped.
  int generation_ = 0;
  rendezvous::RendezvousResult round_;
  // Hung workers (local ranks) to kill once their stacks are in.
  std::vector<int> hung_;
  // The diagnosis of the current group's hang, once made (generation).
  int diagnosis_generation_ = 0;
  std::string diagnosis_;
  // A dump another node asked for, answered when the collection ends.
  uint64_t answer_pending_ = 0;
  // A dump across nodes is being gathered (GatherStacks in flight).
  bool gathering_ = false;
  // This node's ranks in the last collection, as sent to the others, and
  // the group they belong to.
  std::vector<diagnosis::StackSummary> last_own_;
  int last_own_generation_ = 0;
};

}  // namespace ddprun::agent
