#include "agent/watch/hang_response.h"

#include <algorithm>
#include <cstdio>

#include "common/logging.h"

namespace ddprun::agent {
namespace {

// How long a worker has to answer a stack request.
constexpr auto kStacksLimit = std::chrono::seconds(2);
// How long the other nodes have to answer a dump across nodes: their next
// heartbeat (1 s apart by default) tells them, then their workers have
// kStacksLimit.
constexpr auto kGatherLimit = std::chrono::seconds(5);
// Frames per rank on the console (the files hold all of them).
constexpr size_t kConsoleFrames = 6;

}  // namespace

HangResponse::HangResponse(Options options, EventLoop* loop,
                           rendezvous::RendezvousClient* rendezvous,
                           Console* console, Workers* workers,
                           std::unique_ptr<StackCollector> collector)
    : options_(std::move(options)),
      loop_(loop),
      rendezvous_(rendezvous),
      console_(console),
      workers_(workers),
      collector_(std::move(collector)) {}

HangResponse::~HangResponse() = default;

void HangResponse::StartGroup(const rendezvous::RendezvousResult& round) {
  ++generation_;
  round_ = round;
  hung_.clear();  // local ranks of the previous group
}

void HangResponse::Finish() { finished_ = true; }

void HangResponse::OnHung(int local_rank, int pid, const std::string& what) {
  const std::string who = "watchdog: local_rank " + std::to_string(local_rank);
  KillAfterStacks(local_rank, pid,
                  who + " (pid " + std::to_string(pid) + ") hung, " + what,
                  who + " hung");
}

void HangResponse::KillAfterStacks(int local_rank, int pid,
                                   const std::string& headline,
                                   const std::string& reason) {
  if (finished_) return;
  std::vector<StackTarget> targets = workers_->StackTargets();
  const bool has_file =
      std::any_of(targets.begin(), targets.end(),
                  [pid](const StackTarget& t) { return t.pid == pid; });
  if (collector_ == nullptr || !has_file) {
    DDP_LOG(ERROR) << headline << ": sending SIGKILL to its process group";
    Kill(local_rank);
    return;
  }
  DDP_LOG(ERROR) << headline
                 << ": collecting every worker's stacks, then SIGKILL to its "
                    "process group";
  if (diagnosis_generation_ == generation_) {
    // This hang's stacks are in already: the same verdict.
    Kill(local_rank);
    return;
  }
  hung_.push_back(local_rank);
  // Killed when the collection (and the gathering across nodes) ends.
  if (collector_->busy() || gathering_) return;
  Collect(std::move(targets), reason, /*watchdog=*/true, /*here=*/true);
}

void HangResponse::DumpStacks() {
  if (finished_ || collector_ == nullptr) {
    DDP_LOG(WARNING) << "stack dump requested, but stack dumps are off "
                        "(DDPRUN_STACKS=0)";
    return;
  }
  std::vector<StackTarget> targets = workers_->StackTargets();
  if (targets.empty()) {
    DDP_LOG(WARNING) << "stack dump requested, but no worker runs"
                     << (options_.run_log_dir.empty() ? " with a log dir" : "");
    return;
  }
  if (collector_->busy() || gathering_) {
    DDP_LOG(INFO) << "stack dump requested while one is being collected";
    return;
  }
  DDP_LOG(INFO) << "stack dump requested: collecting every worker's stacks";
  Collect(std::move(targets), "requested", /*watchdog=*/false, /*here=*/true);
}

void HangResponse::OnStacksRequested(uint64_t request_id,
                                     const std::string& reason) {
  if (finished_) return;
  std::vector<StackTarget> targets = workers_->StackTargets();
  if (gathering_ || (targets.empty() && last_own_generation_ == generation_)) {
    // This node's stacks of a moment ago (this group's, taken before its
    // hung workers were killed) are its answer.
    rendezvous_->AnswerStacks(request_id, last_own_);
    return;
  }
  if (collector_ == nullptr || targets.empty()) {
    // Nothing to dump here: say so at once, so the dump completes.
    rendezvous_->AnswerStacks(request_id, {});
    return;
  }
  answer_pending_ = request_id;
  if (collector_->busy()) return;  // answered when the collection ends
  DDP_LOG(INFO) << "stack dump requested through the rendezvous (" << reason
                << "): collecting every worker's stacks";
  Collect(std::move(targets), "requested by another node: " + reason,
          /*watchdog=*/false, /*here=*/false);
}

void HangResponse::Collect(std::vector<StackTarget> targets,
                           const std::string& why, bool watchdog, bool here) {
  const int generation = generation_;
  collector_->Collect(
      std::move(targets), why, kStacksLimit,
      [this, generation, watchdog, here](std::vector<StackResult> results) {
        OnStacksCollected(generation, watchdog, here, std::move(results));
      });
}

void HangResponse::OnStacksCollected(int generation, bool watchdog, bool here,
                                     std::vector<StackResult> results) {
  if (finished_) return;
  const uint64_t answer = answer_pending_;
  answer_pending_ = 0;
  if (generation != generation_) {
    // Dumps of a group that is gone; hung workers of the new one (hung_ is
    // cleared when a group starts) are killed without a verdict.
    if (answer != 0) rendezvous_->AnswerStacks(answer, {});
    KillHung();
    return;
  }
  // A hang found while a dump ran: that dump is its verdict.
  watchdog = watchdog || !hung_.empty();
  here = here || watchdog;
  std::vector<diagnosis::RankStacks> ranks;
  for (const StackResult& r : results) ranks.push_back(ToRankStacks(r));
  last_own_.clear();
  last_own_generation_ = generation;
  for (const diagnosis::RankStacks& r : ranks) {
    last_own_.push_back(diagnosis::Summarize(r, round_.group_rank, Host()));
  }
  if (here && AcrossNodes()) {
    // Every node's stacks before anything is killed: the others collect
    // theirs when their next heartbeat tells them, and answer.
    gathering_ = true;
    const std::string reason =
        (watchdog ? "watchdog on " : "requested on ") + NodeLabel();
    rendezvous_->GatherStacks(
        reason, last_own_, loop_->clock()->Now() + kGatherLimit,
        [this, generation, watchdog,
         ranks](StatusOr<rendezvous::StacksAnswer> answer) {
          OnStacksGathered(generation, watchdog, ranks, std::move(answer));
        });
    return;
  }
  if (answer != 0) rendezvous_->AnswerStacks(answer, last_own_);
  ReportStacks(generation, watchdog, ranks, "");
}

void HangResponse::OnStacksGathered(int generation, bool watchdog,
                                    std::vector<diagnosis::RankStacks> local,
                                    StatusOr<rendezvous::StacksAnswer> answer) {
  if (finished_) return;
  gathering_ = false;
  if (generation != generation_) {
    KillHung();
    return;
  }
  std::string note;
  std::vector<diagnosis::RankStacks> ranks;
  if (answer.ok()) {
    for (const diagnosis::StackSummary& r : answer->ranks) {
      ranks.push_back(diagnosis::FromSummary(r));
    }
    if (!answer->complete) {
      std::string nodes;
      for (const std::string& n : answer->missing_nodes) {
        nodes += (nodes.empty() ? "" : ", ") + n;
      }
      char limit[32];
      std::snprintf(limit, sizeof(limit), "%.1f s",
                    std::chrono::duration<double>(kGatherLimit).count());
      note = "no stacks within " + std::string(limit) + " from " + nodes;
    }
  } else {
    DDP_LOG(WARNING) << "stacks of the other nodes: "
                     << answer.status().message();
    note = "the other nodes' stacks are unknown (" + answer.status().message() +
           ")";
    ranks = std::move(local);
    const std::string node = NodeLabel();
    for (diagnosis::RankStacks& r : ranks) r.node = node;
  }
  ReportStacks(generation, watchdog || !hung_.empty(), ranks, note);
}

void HangResponse::ReportStacks(int generation, bool watchdog,
                                const std::vector<diagnosis::RankStacks>& ranks,
                                const std::string& note) {
  bool any = false;
  for (const diagnosis::RankStacks& r : ranks) {
    any = any || !r.threads.empty() || r.native.present;
  }
  const std::string attempt_dir =
      options_.run_log_dir + "/attempt_" + std::to_string(round_.restart_count);
  const bool across = !ranks.empty() && !ranks.front().node.empty();
  if (any) {
    // Every rank's main thread on one line; the files hold every thread.
    std::string lines;
    for (const diagnosis::RankStacks& r : ranks)
      lines += diagnosis::ConsoleLine(r, kConsoleFrames);
    // The note names other nodes (their ids and addresses): escaped.
    if (!note.empty()) lines += "  " + EscapeControlChars(note) + "\n";
    std::string verdict = diagnosis::DiagnoseHang(ranks);
    if (!note.empty()) verdict += " (" + note + ")";
    const std::string where = across
                                  ? "<log_dir of each node>/attempt_" +
                                        std::to_string(round_.restart_count) +
                                        "/<local_rank>/stacks.txt"
                                  : attempt_dir + "/<local_rank>/stacks.txt";
    // The log escapes line breaks: the per-rank lines go to the console.
    if (watchdog) {
      diagnosis_ = verdict;
      diagnosis_generation_ = generation;
      DDP_LOG(ERROR) << "hang diagnosis: " << verdict;
    } else {
      DDP_LOG(INFO) << "stack dump: " << verdict;
    }
    console_->Write(Console::Stream::kErr,
                    lines + "  every thread's stack: " + where + "\n");
  } else {
    const std::string why = ranks.empty() ? "no running worker"
                            : ranks.front().missing.empty()
                                ? "no Python frames"
                                : ranks.front().missing;
    if (watchdog) {
      // Workers without the hook (a shell script, a C++ binary): the
      // watchdog acts as it always did.
      DDP_LOG(DEBUG) << "no worker gave a stack (" << why << ")";
      diagnosis_generation_ = generation;
    } else {
      DDP_LOG(WARNING) << "no worker gave a stack (" << why << ")";
    }
  }
  KillHung();
}

void HangResponse::Kill(int local_rank) {
  workers_->KillHung(local_rank, diagnosis_generation_ == generation_
                                     ? diagnosis_
                                     : std::string());
}

void HangResponse::KillHung() {
  std::vector<int> hung = std::move(hung_);
  hung_.clear();
  for (int local_rank : hung) Kill(local_rank);
}

bool HangResponse::AcrossNodes() const {
  return round_.group_world_size > 1 && rendezvous_->SupportsStacks();
}

std::string HangResponse::Host() {
  if (host_.empty() && options_.hostname) host_ = options_.hostname();
  return host_;
}

std::string HangResponse::NodeLabel() {
  return diagnosis::NodeLabel(round_.group_rank, Host());
}

}  // namespace ddprun::agent
