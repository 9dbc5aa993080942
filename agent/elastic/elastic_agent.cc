#include "agent/elastic/elastic_agent.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <tuple>

#include "agent/cli/log_line_prefix.h"
#include "agent/elastic/log_dir.h"
#include "agent/process/signal_names.h"
#include "common/logging.h"
#include "diagnosis/stack_diagnosis.h"
#include "diagnosis/stack_summary.h"

namespace ddprun::agent {

const char* WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kInit:
      return "INIT";
    case WorkerState::kHealthy:
      return "HEALTHY";
    case WorkerState::kUnhealthy:
      return "UNHEALTHY";
    case WorkerState::kStopped:
      return "STOPPED";
    case WorkerState::kSucceeded:
      return "SUCCEEDED";
    case WorkerState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

struct ElasticAgent::Worker {
  int local_rank = 0;
  int global_rank = 0;
  int pid = -1;
  bool running = false;
  ExitStatus exit;
  std::string error_file;
  std::string heartbeat_file;  // DDPRUN_WATCHDOG_FILE, "" without watchdog
  std::string watchdog_kill;   // why the watchdog killed it, "" if it did not
  std::string stacks_file;     // DDPRUN_STACKS_FILE, "" without one
  std::string steps_file;      // DDPRUN_STEP_FILE, "" without a log dir
  std::unique_ptr<Process> process;
  std::unique_ptr<WorkerOutput> out;
  std::unique_ptr<WorkerOutput> err;
};

namespace {

// argparse's exit code for a usage error, and the trainers' ConfigError's.
constexpr int kUsageErrorExitCode = 2;

bool Has(StdStreams mask, StdStreams bit) {
  return (static_cast<int>(mask) & static_cast<int>(bit)) != 0;
}

// How long a worker has to answer a stack request.
constexpr auto kStacksLimit = std::chrono::seconds(2);
// How long the other nodes have to answer a dump across nodes: their next
// heartbeat (1 s apart by default) tells them, then their workers have
// kStacksLimit.
constexpr auto kGatherLimit = std::chrono::seconds(5);
// Frames per rank on the console (the files hold all of them).
constexpr size_t kConsoleFrames = 6;

double Millis(Clock::Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace

ElasticAgent::ElasticAgent(AgentOptions options, EventLoop* loop,
                           ProcessLauncher* launcher,
                           rendezvous::RendezvousClient* rendezvous,
                           Console* console)
    : options_(std::move(options)),
      loop_(loop),
      launcher_(launcher),
      rendezvous_(rendezvous),
      console_(console),
      hostname_(options_.hostname) {
  const double timeout_s = options_.launch.watchdog_timeout_s;
  if (timeout_s > 0) {
    WorkerProbe* probe = options_.watchdog_probe;
    if (probe == nullptr) {
      own_probe_ = MakeProcWorkerProbe();
      probe = own_probe_.get();
    }
    watchdog_ = std::make_unique<WorkerWatchdog>(
        loop_, probe,
        std::chrono::duration_cast<Clock::Duration>(
            std::chrono::duration<double>(timeout_s)),
        [this](const WorkerWatchdog::Stuck& s) { OnWorkerStuck(s); });
  }
  StragglerPolicy policy;
  policy.factor = options_.launch.straggler_factor;
  policy.slow_for = std::chrono::duration_cast<Clock::Duration>(
      std::chrono::duration<double>(options_.launch.straggler_time_s));
  stragglers_ = std::make_unique<StragglerWatch>(loop_, policy, rendezvous_);
  auto off = options_.parent_env.find("DDPRUN_STACKS");
  if (off == options_.parent_env.end() || off->second != "0") {
    stacks_ = std::make_unique<StackCollector>(loop_);
  }
}

ElasticAgent::~ElasticAgent() {
  rendezvous_->SetEventHandler(nullptr);
  rendezvous_->SetStacksRequestHandler(nullptr);
}

void ElasticAgent::Start(DoneCallback on_done) {
  on_done_ = std::move(on_done);
  rendezvous_->SetEventHandler(
      [this](const rendezvous::RendezvousEvent& event) {
        OnRendezvousEvent(event);
      });
  rendezvous_->SetStacksRequestHandler(
      [this](uint64_t id, const std::string& reason) {
        OnStacksRequested(id, reason);
      });
  loop_->Post([this] { StartRendezvous(); });
}

std::vector<int> ElasticAgent::worker_pids() const {
  std::vector<int> pids;
  for (const auto& w : workers_) pids.push_back(w->pid);
  return pids;
}

bool ElasticAgent::AnyRunning() const {
  for (const auto& w : workers_) {
    if (w->running) return true;
  }
  return false;
}

void ElasticAgent::StartRendezvous() {
  if (finished_ || phase_ == Phase::kLeaving) return;
  if (pending_signal_ != 0) {
    DDP_LOG(INFO) << "stopping on " << SignalName(pending_signal_)
                  << " instead of re-joining the rendezvous";
    LeaveAndFinish(WorkerState::kFailed, 128 + pending_signal_);
    return;
  }
  state_ = WorkerState::kInit;
  phase_ = Phase::kJoining;
  const LaunchOptions& o = options_.launch;
  rendezvous::JoinRequest request;
  request.run_id = options_.run_id;
  request.node_id = options_.node_id;
  request.role = o.role;
  request.local_world_size = o.nproc_per_node;
  request.node_rank_hint = options_.node_rank_hint;
  request.local_addr = options_.local_addr;
  request.host = options_.node_host;
  request.min_nodes = o.min_nodes;
  request.max_nodes = o.max_nodes;
  request.max_restarts = o.max_restarts;
  rendezvous_->Join(request, loop_->clock()->Now() + options_.join_timeout,
                    [this](StatusOr<rendezvous::RendezvousResult> round) {
                      OnJoined(std::move(round));
                    });
}

void ElasticAgent::OnJoined(StatusOr<rendezvous::RendezvousResult> round) {
  if (finished_ || phase_ != Phase::kJoining) return;  // left meanwhile
  phase_ = Phase::kIdle;
  if (!round.ok()) {
    DDP_LOG(ERROR) << "rendezvous (" << rendezvous_->Backend()
                   << ") failed: " << round.status().message();
    Finish(WorkerState::kFailed, 1);
    return;
  }
  if (round->job_succeeded) {
    DDP_LOG(INFO) << "job " << options_.run_id
                  << " finished successfully while this node was waiting as "
                     "a spare";
    Finish(WorkerState::kSucceeded, 0);
    return;
  }
  if (options_.node_rank_exact &&
      round->group_rank != options_.node_rank_hint) {
    DDP_LOG(ERROR) << "static rendezvous: this node has --node_rank="
                   << options_.node_rank_hint << " but got group rank "
                   << round->group_rank
                   << " (does another node use --node_rank="
                   << options_.node_rank_hint << "?)";
    LeaveAndFinish(WorkerState::kFailed, 1);
    return;
  }
  round_ = *round;
  phase_ = Phase::kRunning;
  Status started = StartWorkers();
  if (!started.ok()) {
    DDP_LOG(ERROR) << "cannot start workers: " << started.message();
    BeginStop(StopReason::kLaunchError, SIGKILL, started.message());
    return;
  }
  state_ = WorkerState::kHealthy;
  if (starts_ > 1 && failure_seen_at_ != Clock::TimePoint{}) {
    DDP_LOG(INFO) << "[" << options_.launch.role
                  << "] worker group restarted (attempt "
                  << round_.restart_count << ") "
                  << Millis(loop_->clock()->Now() - failure_seen_at_)
                  << " ms after the failure was seen";
  }
}

Status ElasticAgent::StartWorkers() {
  const LaunchOptions& o = options_.launch;
  ++generation_;
  ++starts_;
  workers_.clear();
  failures_.clear();
  hung_.clear();  // local ranks of the previous group
  stop_pending_ = false;
  stop_reason_ = StopReason::kNone;
  // No run log directory (--log_dir /dev/null): no files at all, and every
  // stream goes to the console, as torchrun's DefaultLogsSpecs does.
  const bool files = !options_.run_log_dir.empty();
  std::string attempt_dir =
      options_.run_log_dir + "/attempt_" + std::to_string(round_.restart_count);
  if (files) DDP_RETURN_IF_ERROR(RecreateDir(attempt_dir));
  for (int lr = 0; lr < o.nproc_per_node; ++lr) {
    auto w = std::make_unique<Worker>();
    w->local_rank = lr;
    w->global_rank = round_.rank_offset + lr;
    std::string dir = attempt_dir + "/" + std::to_string(lr);
    if (files) {
      DDP_RETURN_IF_ERROR(MakeDirs(dir));
      w->error_file = dir + "/error.json";
      if (watchdog_) w->heartbeat_file = dir + "/heartbeat";
      if (stacks_) w->stacks_file = dir + "/stacks.txt";
      w->steps_file = dir + "/steps";
    }
    DDP_ASSIGN_OR_RETURN(
        std::string prefix,
        LogLinePrefix(o.log_line_prefix_template, o.role, w->global_rank, lr));
    bool shown = !o.local_ranks_filter.has_value() ||
                 o.local_ranks_filter->count(lr) > 0;
    StdStreams redirect = files ? o.redirects.ForRank(lr) : StdStreams::kNone;
    StdStreams tee = files ? o.tee.ForRank(lr) : StdStreams::kNone;
    auto make_output = [&](StdStreams bit, const char* file,
                           Console::Stream stream) {
      WorkerOutput::Options wo;
      bool to_file = Has(redirect, bit) || Has(tee, bit);
      if (to_file) wo.file_path = dir + "/" + file;
      wo.to_console = shown && (!Has(redirect, bit) || Has(tee, bit));
      wo.prefix = prefix;
      wo.stream = stream;
      wo.live = console_->IsTerminal(stream);
      return std::make_unique<WorkerOutput>(wo, console_);
    };
    w->out = make_output(StdStreams::kOut, "stdout.log", Console::Stream::kOut);
    w->err = make_output(StdStreams::kErr, "stderr.log", Console::Stream::kErr);
    DDP_RETURN_IF_ERROR(w->out->Open());
    DDP_RETURN_IF_ERROR(w->err->Open());
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) {
    ProcessSpec spec;
    spec.argv = BuildWorkerArgv(o, options_.worker_torch, w->local_rank,
                                options_.parent_env, round_.rank_offset);
    spec.env =
        BuildWorkerEnv(o, options_.worker_torch, round_, options_.run_id,
                       w->local_rank, w->error_file, options_.parent_env);
    if (!w->heartbeat_file.empty()) {
      spec.env["DDPRUN_WATCHDOG_FILE"] = w->heartbeat_file;
    }
    // As torchrun's workers write to the terminal: a stream shown live on
    // a terminal console (and kept in no file) is a terminal for the worker.
    spec.tty_stdout = w->out->live_terminal();
    spec.tty_stderr = w->err->live_terminal();
    if (spec.tty_stdout || spec.tty_stderr) {
      std::tie(spec.tty_rows, spec.tty_cols) = console_->TerminalSize();
    }
    if (!w->steps_file.empty()) spec.env["DDPRUN_STEP_FILE"] = w->steps_file;
    if (!w->stacks_file.empty()) {
      spec.env["DDPRUN_STACKS_FILE"] = w->stacks_file;
      spec.env["DDPRUN_STACKS_SIGNAL"] = std::to_string(StackDumpSignal());
      // ddprun's sitecustomize.py (stack dumps) and ddprun_steps.py (step
      // counts); DDPRUN_STACKS=0 leaves PYTHONPATH alone.
      const std::string& helper = options_.python_stack_helper_dir;
      if (!helper.empty()) {
        // Last: the user's (and deepspeed's cwd-first) order stays; still
        // before the standard library, where Debian's sitecustomize.py lies,
        // which ddprun's chain-loads. A user's own sitecustomize.py on
        // PYTHONPATH wins: that worker then answers no stack request.
        std::string& path = spec.env["PYTHONPATH"];
        path = path.empty() ? helper : path + ":" + helper;
      }
    }
    ProcessCallbacks cb;
    Worker* raw = w.get();
    int generation = generation_;
    cb.on_stdout = [raw](std::string_view c) { raw->out->OnChunk(c); };
    cb.on_stderr = [raw](std::string_view c) { raw->err->OnChunk(c); };
    int lr = w->local_rank;
    cb.on_exit = [this, generation, lr](ExitStatus s) {
      OnWorkerExit(generation, lr, s);
    };
    StatusOr<std::unique_ptr<Process>> p = launcher_->Launch(spec, cb);
    if (!p.ok()) return p.status();
    w->process = std::move(p).value();
    w->pid = w->process->pid();
    w->running = true;
    if (watchdog_) watchdog_->Watch(w->local_rank, w->pid, w->heartbeat_file);
  }
  // Every worker is reported (pid, state); those with a step file also
  // with their counts.
  std::vector<StragglerWatch::Target> watched;
  for (const auto& w : workers_) {
    watched.push_back({w->global_rank, w->local_rank, w->pid, w->steps_file});
  }
  stragglers_->Start(std::move(watched));
  DDP_LOG(DEBUG) << "started " << workers_.size() << " workers, attempt "
                 << round_.restart_count;
  return Status::Ok();
}

void ElasticAgent::OnWorkerExit(int generation, int local_rank,
                                ExitStatus status) {
  if (generation != generation_) return;
  Worker& w = *workers_[local_rank];
  w.running = false;
  w.exit = status;
  stragglers_->NoteExit(w.global_rank, status.succeeded());
  if (watchdog_) watchdog_->Forget(local_rank);
  w.out->OnEof();
  w.err->OnEof();
  if (stop_reason_ != StopReason::kNone) {
    MaybeFinishStop();
    return;
  }
  if (!status.succeeded()) {
    failures_.push_back(MakeProcessFailure(w.local_rank, w.global_rank, w.pid,
                                           status.exitcode, w.error_file,
                                           loop_->clock()->WallSeconds()));
    if (!w.watchdog_kill.empty() && failures_.back().error_json.empty()) {
      failures_.back().traceback = w.watchdog_kill;
    }
    if (!stop_pending_) {
      stop_pending_ = true;
      failure_seen_at_ = loop_->clock()->Now();
      state_ = WorkerState::kUnhealthy;
      // Posted, so that exits already queued in this batch are recorded as
      // failures too (torchrun reports every failure seen in one poll).
      loop_->Post([this, generation] {
        if (generation != generation_ || stop_reason_ != StopReason::kNone)
          return;
        BeginStop(StopReason::kWorkerFailure, SIGTERM, "worker failure");
      });
    }
    return;
  }
  if (!stop_pending_ && !AnyRunning()) {
    state_ = WorkerState::kSucceeded;
    stragglers_->Stop();
    DDP_LOG(DEBUG) << "worker group succeeded";
    KillLeftovers();
    phase_ = Phase::kBarrier;
    rendezvous_->ReportSuccess(round_.round,
                               std::chrono::duration_cast<Clock::Duration>(
                                   std::chrono::duration<double>(
                                       options_.launch.exit_barrier_timeout_s)),
                               [this](Status s) { OnBarrierPassed(s); });
  }
}

void ElasticAgent::OnBarrierPassed(const Status& status) {
  if (finished_ || phase_ != Phase::kBarrier) return;  // left meanwhile
  phase_ = Phase::kIdle;
  if (!status.ok()) DDP_LOG(WARNING) << "exit barrier: " << status.message();
  Finish(WorkerState::kSucceeded, 0);
}

void ElasticAgent::OnWorkerStuck(const WorkerWatchdog::Stuck& stuck) {
  if (finished_ || stop_reason_ != StopReason::kNone) return;
  if (stuck.local_rank < 0 ||
      stuck.local_rank >= static_cast<int>(workers_.size())) {
    return;
  }
  Worker& w = *workers_[stuck.local_rank];
  if (!w.running || w.pid != stuck.pid) return;
  const double timeout_s = options_.launch.watchdog_timeout_s;
  const std::string what =
      std::string(WatchdogReasonText(stuck.reason)) + " for " +
      Seconds(std::chrono::duration<double>(stuck.stuck_for).count()) +
      " (--watchdog_timeout=" + Number(timeout_s) + ")";
  w.watchdog_kill = "killed by the ddprun watchdog: " + what;
  if (stacks_ == nullptr || w.stacks_file.empty()) {
    DDP_LOG(ERROR) << "watchdog: local_rank " << w.local_rank << " (pid "
                   << w.pid << ") hung, " << what
                   << ": sending SIGKILL to its process group";
    KillHung(w.local_rank);
    return;
  }
  DDP_LOG(ERROR) << "watchdog: local_rank " << w.local_rank << " (pid " << w.pid
                 << ") hung, " << what
                 << ": collecting every worker's stacks, then SIGKILL to its "
                    "process group";
  if (diagnosis_generation_ == generation_) {
    // This hang's stacks are in already: the same verdict.
    KillHung(w.local_rank);
    return;
  }
  hung_.push_back(w.local_rank);
  // Killed when the collection (and the gathering across nodes) ends.
  if (stacks_->busy() || gathering_) return;
  const int generation = generation_;
  stacks_->Collect(StackTargets(),
                   "watchdog: local_rank " + std::to_string(w.local_rank) +
                       " hung",
                   kStacksLimit,
                   [this, generation](std::vector<StackResult> results) {
                     OnStacksCollected(generation, /*watchdog=*/true,
                                       /*here=*/true, std::move(results));
                   });
}

void ElasticAgent::KillHung(int local_rank) {
  Worker& w = *workers_[local_rank];
  if (!w.running) return;
  if (!diagnosis_.empty() && diagnosis_generation_ == generation_) {
    w.watchdog_kill += "; hang diagnosis: " + diagnosis_;
  }
  Status s = w.process->SignalGroup(SIGKILL);
  if (!s.ok()) DDP_LOG(WARNING) << s.message();
}

std::vector<StackTarget> ElasticAgent::StackTargets() const {
  std::vector<StackTarget> targets;
  for (const auto& w : workers_) {
    if (!w->running || w->stacks_file.empty()) continue;
    targets.push_back({w->global_rank, w->pid, w->stacks_file});
  }
  return targets;
}

void ElasticAgent::DumpStacks() {
  if (finished_ || stacks_ == nullptr) {
    DDP_LOG(WARNING) << "stack dump requested, but stack dumps are off "
                        "(DDPRUN_STACKS=0)";
    return;
  }
  std::vector<StackTarget> targets = StackTargets();
  if (phase_ != Phase::kRunning || targets.empty()) {
    DDP_LOG(WARNING) << "stack dump requested, but no worker runs"
                     << (options_.run_log_dir.empty() ? " with a log dir" : "");
    return;
  }
  if (stacks_->busy() || gathering_) {
    DDP_LOG(INFO) << "stack dump requested while one is being collected";
    return;
  }
  DDP_LOG(INFO) << "stack dump requested: collecting every worker's stacks";
  const int generation = generation_;
  stacks_->Collect(std::move(targets), "requested", kStacksLimit,
                   [this, generation](std::vector<StackResult> results) {
                     OnStacksCollected(generation, /*watchdog=*/false,
                                       /*here=*/true, std::move(results));
                   });
}

bool ElasticAgent::AcrossNodes() const {
  return round_.group_world_size > 1 && rendezvous_->SupportsStacks();
}

std::string ElasticAgent::Host() {
  if (hostname_.empty()) hostname_ = FullyQualifiedHostname();
  return hostname_;
}

void ElasticAgent::OnStacksRequested(uint64_t request_id,
                                     const std::string& reason) {
  if (finished_) return;
  std::vector<StackTarget> targets = StackTargets();
  if (gathering_ || (targets.empty() && last_own_generation_ == generation_)) {
    // This node's stacks of a moment ago (this group's, taken before its
    // hung workers were killed) are its answer.
    rendezvous_->AnswerStacks(request_id, last_own_);
    return;
  }
  if (stacks_ == nullptr || phase_ != Phase::kRunning || targets.empty()) {
    // Nothing to dump here: say so at once, so the dump completes.
    rendezvous_->AnswerStacks(request_id, {});
    return;
  }
  answer_pending_ = request_id;
  if (stacks_->busy()) return;  // answered when the collection ends
  DDP_LOG(INFO) << "stack dump requested through the rendezvous (" << reason
                << "): collecting every worker's stacks";
  const int generation = generation_;
  stacks_->Collect(std::move(targets), "requested by another node: " + reason,
                   kStacksLimit,
                   [this, generation](std::vector<StackResult> results) {
                     OnStacksCollected(generation, /*watchdog=*/false,
                                       /*here=*/false, std::move(results));
                   });
}

void ElasticAgent::OnStacksCollected(int generation, bool watchdog, bool here,
                                     std::vector<StackResult> results) {
  if (finished_) return;
  const uint64_t answer = answer_pending_;
  answer_pending_ = 0;
  if (generation != generation_) {
    // Dumps of a group that is gone; hung workers of the new one (hung_ is
    // cleared when a group starts) are killed without a verdict.
    if (answer != 0) rendezvous_->AnswerStacks(answer, {});
    std::vector<int> hung = std::move(hung_);
    hung_.clear();
    for (int lr : hung) KillHung(lr);
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
        watchdog
            ? "watchdog on " + diagnosis::NodeLabel(round_.group_rank, Host())
            : "requested on " + diagnosis::NodeLabel(round_.group_rank, Host());
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

void ElasticAgent::OnStacksGathered(int generation, bool watchdog,
                                    std::vector<diagnosis::RankStacks> local,
                                    StatusOr<rendezvous::StacksAnswer> answer) {
  if (finished_) return;
  gathering_ = false;
  if (generation != generation_) {
    std::vector<int> hung = std::move(hung_);
    hung_.clear();
    for (int lr : hung) KillHung(lr);
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
      note = "no stacks within " +
             Seconds(std::chrono::duration<double>(kGatherLimit).count()) +
             " from " + nodes;
    }
  } else {
    DDP_LOG(WARNING) << "stacks of the other nodes: "
                     << answer.status().message();
    note = "the other nodes' stacks are unknown (" +
           answer.status().message() + ")";
    ranks = std::move(local);
    for (diagnosis::RankStacks& r : ranks)
      r.node = diagnosis::NodeLabel(round_.group_rank, Host());
  }
  ReportStacks(generation, watchdog || !hung_.empty(), ranks, note);
}

void ElasticAgent::ReportStacks(int generation, bool watchdog,
                                const std::vector<diagnosis::RankStacks>& ranks,
                                const std::string& note) {
  bool any = false;
  for (const diagnosis::RankStacks& r : ranks) {
    any = any || !r.threads.empty() || r.native.present;
  }
  const std::string attempt_dir = options_.run_log_dir + "/attempt_" +
                                  std::to_string(round_.restart_count);
  const bool across = !ranks.empty() && !ranks.front().node.empty();
  if (any) {
    // Every rank's main thread on one line; the files hold every thread.
    std::string lines;
    for (const diagnosis::RankStacks& r : ranks)
      lines += diagnosis::ConsoleLine(r, kConsoleFrames);
    if (!note.empty()) lines += "  " + note + "\n";
    std::string verdict = diagnosis::DiagnoseHang(ranks);
    if (!note.empty()) verdict += " (" + note + ")";
    const std::string where =
        across ? "<log_dir of each node>/attempt_" +
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
  std::vector<int> hung = std::move(hung_);
  hung_.clear();
  for (int lr : hung) KillHung(lr);
}

void ElasticAgent::OnRendezvousEvent(const rendezvous::RendezvousEvent& event) {
  if (finished_ || stop_reason_ != StopReason::kNone || stop_pending_) return;
  if (state_ != WorkerState::kHealthy) return;
  using rendezvous::RendezvousEventType;
  switch (event.type) {
    case RendezvousEventType::kMembershipChanged:
      DDP_LOG(INFO) << "membership changed (" << event.reason
                    << "): restarting the worker group";
      BeginStop(StopReason::kMembershipChanged, SIGTERM, event.reason);
      break;
    case RendezvousEventType::kRestartRequested:
      DDP_LOG(INFO) << "restart requested (" << event.reason << ")";
      BeginStop(StopReason::kRestartRequested, SIGTERM, event.reason);
      break;
    case RendezvousEventType::kJobFailed:
      DDP_LOG(ERROR) << "job failed elsewhere: " << event.reason;
      BeginStop(StopReason::kJobFailed, SIGTERM, event.reason);
      break;
    case RendezvousEventType::kConnectionLost:
      DDP_LOG(ERROR) << "rendezvous lost: " << event.reason;
      BeginStop(StopReason::kConnectionLost, SIGTERM, event.reason);
      break;
  }
}

void ElasticAgent::OnSignal(int sig) {
  if (finished_) return;
  switch (phase_) {
    case Phase::kIdle:
      // Before the first rendezvous: nothing joined, nothing runs.
      DDP_LOG(INFO) << "received " << SignalName(sig) << " before starting";
      Finish(WorkerState::kFailed, 128 + sig);
      return;
    case Phase::kJoining:
    case Phase::kBarrier:
      // No workers run: leave the job, which cancels the call.
      DDP_LOG(INFO) << "received " << SignalName(sig)
                    << " while waiting for the rendezvous: leaving the job";
      LeaveAndFinish(WorkerState::kFailed, 128 + sig);
      return;
    case Phase::kReporting:
      // Bounded (rpc_timeout); its answer decides: a restart becomes the
      // exit, a failed job stays one.
      if (pending_signal_ == 0) pending_signal_ = sig;
      return;
    case Phase::kLeaving:
    case Phase::kDone:
      return;
    case Phase::kRunning:
      break;
  }
  if (stop_reason_ == StopReason::kSignal) {
    // A second signal while stopping: do not wait for the grace period.
    DDP_LOG(WARNING) << "received " << SignalName(sig)
                     << " again: killing workers";
    if (stop_timer_armed_) loop_->Cancel(stop_timer_);
    OnStopDeadline();
    return;
  }
  DDP_LOG(INFO) << "received " << SignalName(sig)
                << ", forwarding it to the workers";
  if (stop_reason_ != StopReason::kNone) {
    // Already stopping (failure or restart): exit after it instead.
    stop_reason_ = StopReason::kSignal;
    stop_signal_ = sig;
    for (auto& w : workers_) {
      if (w->running) (void)w->process->SignalGroup(sig);
    }
    return;
  }
  BeginStop(StopReason::kSignal, sig, SignalName(sig));
}

void ElasticAgent::BeginStop(StopReason reason, int sig,
                             const std::string& why) {
  stragglers_->Stop();
  stop_reason_ = reason;
  stop_signal_ = sig;
  stop_why_ = why;
  if (watchdog_) watchdog_->ForgetAll();
  if (reason != StopReason::kSignal && reason != StopReason::kLaunchError) {
    state_ = WorkerState::kUnhealthy;
  }
  for (auto& w : workers_) {
    if (!w->running) continue;
    Status s = w->process->SignalGroup(sig);
    if (!s.ok()) DDP_LOG(WARNING) << s.message();
    // A stopped worker (SIGSTOP, Ctrl-Z) only acts on SIGTERM once
    // continued; without this it would sit out --shutdown_timeout.
    if (sig == SIGTERM) (void)w->process->SignalGroup(SIGCONT);
  }
  if (AnyRunning()) {
    auto timeout = std::chrono::duration_cast<Clock::Duration>(
        std::chrono::duration<double>(options_.launch.shutdown_timeout_s));
    stop_timer_ = loop_->RunAt(loop_->clock()->Now() + timeout,
                               [this] { OnStopDeadline(); });
    stop_timer_armed_ = true;
    return;
  }
  int generation = generation_;
  loop_->Post([this, generation] {
    if (generation == generation_) MaybeFinishStop();
  });
}

void ElasticAgent::OnStopDeadline() {
  stop_timer_armed_ = false;
  for (auto& w : workers_) {
    if (!w->running) continue;
    DDP_LOG(WARNING) << "worker pid " << w->pid
                     << " did not stop in time: sending SIGKILL";
    (void)w->process->SignalGroup(SIGKILL);
  }
}

void ElasticAgent::MaybeFinishStop() {
  if (stop_reason_ == StopReason::kNone || AnyRunning() || finished_) return;
  if (stop_timer_armed_) {
    loop_->Cancel(stop_timer_);
    stop_timer_armed_ = false;
  }
  KillLeftovers();
  state_ = WorkerState::kStopped;
  AfterStop();
}

void ElasticAgent::KillLeftovers() {
  // What a worker started in its process group ends with the group, also
  // after a successful exit; a process that left the group (setsid, a
  // deliberate daemon) is not ours to kill.
  for (auto& w : workers_) {
    if (w->process) (void)w->process->SignalGroup(SIGKILL);
  }
}

void ElasticAgent::AfterStop() {
  StopReason reason = stop_reason_;
  switch (reason) {
    case StopReason::kWorkerFailure: {
      const ProcessFailure& root = failures_[RootCauseIndex(failures_)];
      DDP_LOG(ERROR) << "failed (exitcode: " << root.exitcode
                     << ") local_rank: " << root.local_rank
                     << " (pid: " << root.pid
                     << ") of binary: " << EntrypointName(options_.launch);
      // Exit code 2 on the first attempt is a usage or configuration error
      // (argparse, the trainers' ConfigError): every retry would fail alike.
      const bool usage_error = root.exitcode == kUsageErrorExitCode &&
                               starts_ == 1 &&
                               !options_.launch.retry_usage_errors;
      phase_ = Phase::kReporting;
      rendezvous_->ReportFailure(round_.round, root.traceback,
                                 /*retry=*/!usage_error,
                                 [this, usage_error](StatusOr<bool> again) {
                                   OnFailureReported(again, usage_error);
                                 });
      return;
    }
    case StopReason::kMembershipChanged:
    case StopReason::kRestartRequested:
      failure_seen_at_ = Clock::TimePoint{};
      StartRendezvous();
      return;
    case StopReason::kJobFailed:
    case StopReason::kConnectionLost:
      if (!failures_.empty()) ReportFailedJob();
      DDP_LOG(ERROR) << "job failed: " << stop_why_;
      Finish(WorkerState::kFailed, 1);
      return;
    case StopReason::kSignal:
      LeaveAndFinish(WorkerState::kFailed, 128 + stop_signal_);
      return;
    case StopReason::kLaunchError:
      Finish(WorkerState::kFailed, 1);
      return;
    case StopReason::kNone:
      return;
  }
}

void ElasticAgent::OnFailureReported(StatusOr<bool> again, bool usage_error) {
  if (finished_ || phase_ != Phase::kReporting) return;
  phase_ = Phase::kIdle;
  if (!again.ok()) {
    DDP_LOG(ERROR) << "reporting the failure: " << again.status().message();
  }
  if (again.ok() && *again) {
    DDP_LOG(INFO) << "[" << options_.launch.role
                  << "] Worker group FAILED; will restart worker group";
    StartRendezvous();
    return;
  }
  ReportFailedJob();
  if (usage_error) {
    const ProcessFailure& root = failures_[RootCauseIndex(failures_)];
    DDP_LOG(ERROR) << "not retried: local_rank " << root.local_rank
                   << " exited with code 2 on the first attempt, a "
                      "usage or configuration error that a restart "
                      "cannot fix (--retry_usage_errors retries it)";
  }
  Finish(WorkerState::kFailed, 1);
}

void ElasticAgent::LeaveAndFinish(WorkerState state, int exit_code) {
  phase_ = Phase::kLeaving;
  rendezvous_->Leave([this, state, exit_code] { Finish(state, exit_code); });
}

void ElasticAgent::ReportFailedJob() {
  if (failures_.empty()) return;
  std::vector<ProcessFailure> sorted = failures_;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const ProcessFailure& a, const ProcessFailure& b) {
                     return a.local_rank < b.local_rank;
                   });
  if (hostname_.empty()) hostname_ = FullyQualifiedHostname();
  std::string table =
      FormatFailureTable(EntrypointName(options_.launch), sorted, hostname_);
  console_->Write(Console::Stream::kErr, table + "\n");
  const ProcessFailure& root = sorted[RootCauseIndex(sorted)];
  Status s = DumpRootCauseErrorFile(root, options_.agent_error_file);
  if (!s.ok()) DDP_LOG(WARNING) << s.message();
}

void ElasticAgent::Finish(WorkerState state, int exit_code) {
  if (finished_) return;
  finished_ = true;
  stragglers_->Stop();
  phase_ = Phase::kDone;
  state_ = state;
  if (on_done_) on_done_(exit_code);
}

}  // namespace ddprun::agent
