#include "agent/elastic/elastic_agent.h"

#include <algorithm>
#include <csignal>
#include <cstdio>

#include "agent/process/signal_names.h"
#include "common/file_util.h"
#include "common/logging.h"

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

namespace {

double Millis(Clock::Duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
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
      watchdog_(MakeWatchdog()),
      logs_(&options_.launch, options_.run_log_dir, console),
      group_(&options_, loop_, launcher_, console_, watchdog_.get(),
             [this](int local_rank, ExitStatus status) {
               OnWorkerExit(local_rank, status);
             }),
      hostname_(options_.hostname),
      progress_(options_.launch.max_restarts_without_progress) {
  StragglerPolicy policy;
  policy.factor = options_.launch.straggler_factor;
  policy.slow_for = std::chrono::duration_cast<Clock::Duration>(
      std::chrono::duration<double>(options_.launch.straggler_time_s));
  stragglers_ = std::make_unique<StragglerWatch>(loop_, policy, rendezvous_);
  std::unique_ptr<StackCollector> collector;
  auto off = options_.parent_env.find("DDPRUN_STACKS");
  if (off == options_.parent_env.end() || off->second != "0") {
    collector = std::make_unique<SignalStackCollector>(loop_);
  }
  HangResponse::Options hang;
  hang.run_log_dir = options_.run_log_dir;
  hang.hostname = [this] { return Host(); };
  hang_ = std::make_unique<HangResponse>(std::move(hang), loop_, rendezvous_,
                                         console_, this, std::move(collector));
  RankReplacement::Options replace;
  replace.heal_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(options_.launch.heal_timeout_s * 1000));
  replacement_ = std::make_unique<RankReplacement>(
      std::move(replace), loop_, rendezvous_,
      ReplacesFailedRanks(options_.launch) ? options_.worker_store : nullptr,
      console_, this);
  if (options_.launch.standby_workers && replacement_->enabled()) {
    const LaunchOptions& o = options_.launch;
    // A standby is any rank's: its command line must be every rank's, and
    // it must be the program itself (a standby waits in RunMain).
    const std::vector<std::string> argv =
        BuildWorkerArgv(o, options_.worker_torch, 0, options_.parent_env);
    if (argv[0] != o.entrypoint) {
      DDP_LOG(WARNING) << "--standby_workers: the workers run under " << argv[0]
                       << " (not a program on ddprun's C++ worker runtime): "
                          "no standby";
    } else if (o.nproc_per_node > 1 &&
               argv != BuildWorkerArgv(o, options_.worker_torch, 1,
                                       options_.parent_env)) {
      DDP_LOG(WARNING) << "--standby_workers: each rank's command line "
                          "differs (--local-rank): no standby";
    } else {
      standby_ = std::make_unique<StandbyWorker>(&options_, loop_, launcher_,
                                                 console_);
    }
  }
  if (options_.generation_signal != 0 && ReplacesFailedRanks(options_.launch) &&
      options_.worker_store != nullptr) {
    GenerationNotice::Options notice;
    notice.timeout = std::chrono::milliseconds(
        static_cast<int64_t>(options_.launch.heal_timeout_s * 1000));
    const int sig = options_.generation_signal;
    notice_ = std::make_unique<GenerationNotice>(
        notice, loop_, options_.worker_store, [this, sig](int64_t generation) {
          // The opt-in notice: the survivors need not wait for a collective
          // to fail to learn of the new generation.
          group_.SignalOlderThan(sig, generation);
        });
  }
}

std::unique_ptr<WorkerWatchdog> ElasticAgent::MakeWatchdog() {
  const double timeout_s = options_.launch.watchdog_timeout_s;
  if (timeout_s <= 0) return nullptr;
  WorkerProbe* probe = options_.watchdog_probe;
  if (probe == nullptr) {
    own_probe_ = MakeProcWorkerProbe();
    probe = own_probe_.get();
  }
  return std::make_unique<WorkerWatchdog>(
      loop_, probe,
      std::chrono::duration_cast<Clock::Duration>(
          std::chrono::duration<double>(timeout_s)),
      [this](const WorkerWatchdog::Stuck& s) { OnWorkerStuck(s); });
}

ElasticAgent::~ElasticAgent() {
  rendezvous_->SetEventHandler(nullptr);
  rendezvous_->SetStacksRequestHandler(nullptr);
  rendezvous_->SetGenerationHandler(nullptr);
}

void ElasticAgent::Start(DoneCallback on_done) {
  on_done_ = std::move(on_done);
  rendezvous_->SetEventHandler(
      [this](const rendezvous::RendezvousEvent& event) {
        OnRendezvousEvent(event);
      });
  rendezvous_->SetStacksRequestHandler(
      [this](uint64_t id, const std::string& reason) {
        hang_->OnStacksRequested(id, reason);
      });
  if (notice_ != nullptr) {
    rendezvous_->SetGenerationHandler(
        [this](int64_t round, int64_t generation) {
          // Another node's replacement (or this node's, whichever the
          // notice hears of first); ignored while no group runs.
          notice_->Announce(round, generation);
        });
  }
  StatusOr<std::unique_ptr<FileTimerResponse>> timer =
      FileTimerResponse::Start(options_.parent_env, loop_, this, hang_.get());
  if (!timer.ok()) {
    // torch's agent fails the same way when mkfifo fails.
    DDP_LOG(ERROR) << "TORCHELASTIC_ENABLE_FILE_TIMER=1: "
                   << timer.status().message();
    loop_->Post([this] { Finish(WorkerState::kFailed, 1); });
    return;
  }
  file_timer_ = std::move(timer).value();
  loop_->Post([this] { StartRendezvous(); });
}

bool ElasticAgent::GroupRunning() const {
  return !finished_ && phase_ == Phase::kRunning;
}

bool ElasticAgent::GroupStopping() const {
  return stop_reason_ != StopReason::kNone;
}

int ElasticAgent::RunningWorker(int pid) const {
  return group_.RunningWorker(pid);
}

void ElasticAgent::NoteKill(int local_rank, const std::string& why,
                            bool replace) {
  WorkerGroup::Worker* w = group_.worker(local_rank);
  if (w != nullptr && (replace || w->watchdog_kill.empty())) {
    w->watchdog_kill = why;
  }
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
  if (options_.health != nullptr) {
    // The node proves it is healthy before it joins (a signal meanwhile
    // leaves, as during a Join).
    const int check = ++health_checks_;
    options_.health->Check(group_.starts() > 0, [this, check](Status healthy) {
      if (finished_ || phase_ != Phase::kJoining || check != health_checks_) {
        return;
      }
      if (!healthy.ok()) {
        DDP_LOG(ERROR) << "health check failed, this node does not join: "
                       << healthy.message();
      }
      JoinRound(healthy.message());
    });
    return;
  }
  JoinRound("");
}

void ElasticAgent::JoinRound(const std::string& unhealthy) {
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
  request.replace_lost_nodes = replacement_->enabled();
  if (request.replace_lost_nodes) {
    // The survivors' workers wait --heal_timeout to re-form: half of it
    // for a node to join leaves the rest for it to start and heal.
    request.replace_wait = std::min(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            options_.join_timeout),
        std::chrono::milliseconds(
            static_cast<int64_t>(options_.launch.heal_timeout_s * 500)));
  }
  request.unhealthy = unhealthy;
  const Clock::TimePoint deadline =
      loop_->clock()->Now() + options_.join_timeout;
  if (!unhealthy.empty()) {
    // Told to the rendezvous' bad-host policy; the node does not join.
    rendezvous_->Join(request, deadline,
                      [this](StatusOr<rendezvous::RendezvousResult> answer) {
                        if (finished_ || phase_ != Phase::kJoining) return;
                        DDP_LOG(DEBUG) << "unhealthy node reported: "
                                       << answer.status().message();
                        LeaveAndFinish(WorkerState::kFailed, 1);
                      });
    return;
  }
  rendezvous_->Join(request, deadline,
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
  phase_ = Phase::kRunning;
  Status started = StartWorkers(*round);
  if (!started.ok()) {
    DDP_LOG(ERROR) << "cannot start workers: " << started.message();
    BeginStop(StopReason::kLaunchError, SIGKILL, started.message());
    return;
  }
  state_ = WorkerState::kHealthy;
  if (group_.starts() > 1 && failure_seen_at_ != Clock::TimePoint{}) {
    DDP_LOG(INFO) << "[" << options_.launch.role
                  << "] worker group restarted (attempt "
                  << group_.round().restart_count << ") "
                  << Millis(loop_->clock()->Now() - failure_seen_at_)
                  << " ms after the failure was seen";
  }
}

Status ElasticAgent::StartWorkers(const rendezvous::RendezvousResult& round) {
  group_.Reset(round);
  hang_->StartGroup(round);
  stop_pending_ = false;
  stop_reason_ = StopReason::kNone;
  bool reaches_store = false;
  if (options_.worker_store != nullptr) {
    DDP_ASSIGN_OR_RETURN(reaches_store,
                         options_.worker_store->StartRound(round));
  }
  replacement_->StartGroup(round, reaches_store);
  if (notice_ != nullptr) notice_->StartGroup(round.round);
  replacement_record_.reset();
  DDP_RETURN_IF_ERROR(logs_.StartAttempt(round.restart_count));
  if (file_timer_) file_timer_->Reset();  // torch: a server per group
  if (round.replaces_generation > 0) {
    // A lost node's place in a running round: the workers start as
    // replacements once the store shows the generation (StartReplacement).
    if (!replacement_->TakeOver(round.replaces_generation,
                                options_.launch.nproc_per_node)) {
      return FailedPreconditionError(
          "this node took a lost node's place (generation " +
          std::to_string(round.replaces_generation) +
          ") but cannot write the workers' store");
    }
    return Status::Ok();
  }
  DDP_RETURN_IF_ERROR(LaunchGroup(-1));
  DDP_LOG(DEBUG) << "started " << group_.size() << " workers, attempt "
                 << round.restart_count;
  return Status::Ok();
}

Status ElasticAgent::LaunchGroup(int64_t generation) {
  DDP_RETURN_IF_ERROR(group_.Start(&logs_, hang_->collects_stacks(),
                                   file_timer_ ? file_timer_->path() : "",
                                   generation));
  // Every worker is reported (pid, state); those with a step file also
  // with their counts.
  stragglers_->Start(group_.StragglerTargets());
  StartStandby();
  return Status::Ok();
}

void ElasticAgent::StartStandby() {
  if (standby_ == nullptr || !standby_->enabled() ||
      stop_reason_ != StopReason::kNone) {
    return;
  }
  Status s = standby_->Start(group_.round());
  if (!s.ok()) DDP_LOG(WARNING) << "standby worker: " << s.message();
}

Status ElasticAgent::StartReplacement(int local_rank, int64_t generation,
                                      const std::string& reason) {
  if (local_rank < 0) {
    // Every local rank: this node took a lost node's place.
    DDP_RETURN_IF_ERROR(LaunchGroup(generation));
    if (notice_ != nullptr) {
      notice_->Announce(group_.round().round, generation);
    }
    DDP_LOG(INFO) << "[" << options_.launch.role << "] ranks "
                  << group_.round().rank_offset << "-"
                  << group_.round().rank_offset + group_.size() - 1
                  << " started in a lost node's place (generation "
                  << generation << ")";
    return Status::Ok();
  }
  // Before the launch: the replacement writes its own failure, if any, to
  // the same error file path.
  RecordReplacement(local_rank, generation, reason);
  bool by_standby = false;
  DDP_RETURN_IF_ERROR(
      group_.Relaunch(local_rank, generation, standby_.get(), &by_standby));
  const WorkerGroup::Worker& w = *group_.worker(local_rank);
  stragglers_->Restarted(w.global_rank, w.pid);
  if (notice_ != nullptr) notice_->Announce(group_.round().round, generation);
  const double after = std::chrono::duration<double>(loop_->clock()->Now() -
                                                     replacement_->failed_at())
                           .count();
  char line[160];
  if (by_standby) {
    std::snprintf(line, sizeof(line),
                  "[ddprun] rank %d replaced (generation %lld) by the standby "
                  "worker pid %d, %.3f s after its failure\n",
                  w.global_rank, static_cast<long long>(generation), w.pid,
                  after);
    console_->Write(Console::Stream::kErr, line);
    // The next standby starts once this rank healed: loading LibTorch
    // beside the heal would slow it (the CPUs are the workers').
    return Status::Ok();
  }
  std::snprintf(line, sizeof(line), "%.3f", after);
  DDP_LOG(INFO) << "[" << options_.launch.role << "] rank " << w.global_rank
                << " started again alone (generation " << generation << ", pid "
                << w.pid << ", " << line << " s after its failure)";
  return Status::Ok();
}

void ElasticAgent::RecordReplacement(int local_rank, int64_t generation,
                                     const std::string& reason) {
  replacement_record_.reset();
  const WorkerGroup::Worker* w = group_.worker(local_rank);
  ProcessFailure* failed = group_.HeldFailure(local_rank);
  // Without log files (--log_dir /dev/null) a rank has no directory.
  if (w == nullptr || failed == nullptr || w->error_file.empty()) return;
  auto record = std::make_unique<ReplacementRecord>(
      Dirname(w->error_file), *failed, generation, reason);
  Status s = record->Begin();
  if (!s.ok()) {
    DDP_LOG(WARNING) << "recording the replacement of rank " << w->global_rank
                     << ": " << s.message();
  }
  if (!record->moved_error_file().empty() &&
      failed->error_file != kNotAvailable) {
    // Should the replacement give up, the failure table names the file
    // where it now is.
    failed->error_file = record->moved_error_file();
  }
  replacement_record_ = std::move(record);
}

void ElasticAgent::EndReplacementRecord(int local_rank, int64_t generation,
                                        int source, double seconds,
                                        const std::string& why) {
  if (replacement_record_ == nullptr ||
      replacement_record_->local_rank() != local_rank ||
      replacement_record_->generation() != generation) {
    return;
  }
  Status s = source >= 0 ? replacement_record_->Healed(source, seconds)
                         : replacement_record_->HealFailed(why);
  if (!s.ok()) {
    DDP_LOG(WARNING) << "recording the heal of local rank " << local_rank
                     << ": " << s.message();
  }
  replacement_record_.reset();
}

void ElasticAgent::ReplacementHealed(int local_rank, int64_t generation,
                                     int source, double seconds) {
  EndReplacementRecord(local_rank, generation, source, seconds, "");
  // The standby took this rank (or is still there, or none was ready).
  if (standby_ != nullptr && standby_->pid() < 0) StartStandby();
}

void ElasticAgent::ReplacementGaveUp(int local_rank, int64_t generation,
                                     const std::string& why) {
  EndReplacementRecord(local_rank, generation, -1, 0, why);
}

void ElasticAgent::RestartGroup(int local_rank, const std::string& why) {
  if (stop_reason_ != StopReason::kNone || finished_) return;
  if (local_rank < 0) {
    // A lost node's place that did not heal: no worker of this node failed,
    // the group's failure is the heal's.
    ProcessFailure failure;
    failure.global_rank = group_.round().rank_offset;
    const WorkerGroup::Worker* first = group_.worker(0);
    failure.pid = first != nullptr ? first->pid : 0;
    failure.exitcode = 1;
    failure.error_file = kNotAvailable;
    failure.traceback = why;
    failure.timestamp = loop_->clock()->WallSeconds();
    group_.AddFailure(std::move(failure));
  }
  group_.AddHeldFailure(local_rank);
  NoteGroupFailure();
  BeginStop(StopReason::kWorkerFailure, SIGTERM, why);
}

void ElasticAgent::NoteGroupFailure() {
  stop_pending_ = true;
  failure_seen_at_ = loop_->clock()->Now();
  state_ = WorkerState::kUnhealthy;
}

int64_t ElasticAgent::StepsOf(int local_rank) const {
  return group_.Steps(local_rank);
}

void ElasticAgent::OnWorkerFailed(int local_rank, ProcessFailure failure) {
  const WorkerGroup::Worker& w = *group_.worker(local_rank);
  // A replacement heals from a live peer: only while every other worker of
  // this node still runs (a finished peer left nothing to heal from).
  const WorkerGroup::Worker* gone = group_.NotRunningBesides(local_rank);
  if (!stop_pending_ && gone != nullptr && replacement_->enabled()) {
    DDP_LOG(WARNING) << "rank " << w.global_rank << " failed while rank "
                     << gone->global_rank
                     << " is not running: restarting the group";
  }
  if (!stop_pending_ && gone == nullptr) {
    const std::string reason =
        failure.exitcode < 0
            ? "killed by " + SignalName(-failure.exitcode)
            : "exited with code " + std::to_string(failure.exitcode);
    if (replacement_->Replace(local_rank, w.global_rank,
                              "local rank " + std::to_string(local_rank) +
                                  " (pid " + std::to_string(w.pid) + ") " +
                                  reason)) {
      group_.HoldFailure(local_rank, std::move(failure));
      return;
    }
  }
  group_.AddFailure(std::move(failure));
  if (!stop_pending_) {
    NoteGroupFailure();
    // Posted, so that exits already queued in this batch are recorded as
    // failures too (torchrun reports every failure seen in one poll).
    const int starts = group_.starts();
    loop_->Post([this, starts] {
      if (starts != group_.starts() || stop_reason_ != StopReason::kNone) {
        return;
      }
      BeginStop(StopReason::kWorkerFailure, SIGTERM, "worker failure");
    });
  }
}

void ElasticAgent::OnWorkerExit(int local_rank, ExitStatus status) {
  stragglers_->NoteExit(group_.worker(local_rank)->global_rank,
                        status.succeeded());
  if (stop_reason_ != StopReason::kNone) {
    MaybeFinishStop();
    return;
  }
  if (!status.succeeded()) {
    OnWorkerFailed(local_rank, group_.FailureOf(local_rank));
    return;
  }
  if (!stop_pending_ && !group_.AnyRunning() && !replacement_->busy()) {
    state_ = WorkerState::kSucceeded;
    stragglers_->Stop();
    DDP_LOG(DEBUG) << "worker group succeeded";
    group_.KillLeftovers();
    if (standby_ != nullptr) standby_->Kill();
    phase_ = Phase::kBarrier;
    rendezvous_->ReportSuccess(group_.round().round,
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
  WorkerGroup::Worker* w = group_.worker(stuck.local_rank);
  if (w == nullptr || !w->running || w->pid != stuck.pid) return;
  if (replacement_->busy() &&
      stuck.reason == WorkerWatchdog::Reason::kNoHeartbeat) {
    // A survivor re-forms and heals without stepping (bounded by
    // --heal_timeout): silent, not hung. Watched again.
    group_.Watch(w->local_rank);
    return;
  }
  const std::string what =
      DescribeStuck(stuck, options_.launch.watchdog_timeout_s);
  w->watchdog_kill = "killed by the ddprun watchdog: " + what;
  w->stopped_hang = stuck.reason == WorkerWatchdog::Reason::kStopped;
  hang_->OnHung(w->local_rank, w->pid, what);
}

std::vector<StackTarget> ElasticAgent::StackTargets() const {
  if (phase_ != Phase::kRunning) return {};
  return group_.StackTargets();
}

void ElasticAgent::KillHung(int local_rank, const std::string& diagnosis) {
  WorkerGroup::Worker* w = group_.worker(local_rank);
  if (w == nullptr || !w->running) return;
  const WorkerGroup::Worker* stopped = group_.StoppedWorker();
  if (replacement_->enabled() && !w->stopped_hang && stopped != nullptr) {
    // Under --restart_scope failed a stopped worker (state T) is the
    // hang's cause and the others only wait for it: it alone is killed
    // and replaced, and they re-form when it is gone.
    DDP_LOG(INFO) << "local_rank " << local_rank
                  << " waits for stopped local_rank " << stopped->local_rank
                  << ": not killed (--restart_scope failed)";
    w->watchdog_kill.clear();
    group_.Watch(local_rank);  // from its next heartbeat on
    return;
  }
  if (!diagnosis.empty()) w->watchdog_kill += "; hang diagnosis: " + diagnosis;
  group_.Kill(local_rank);
}

void ElasticAgent::DumpStacks() { hang_->DumpStacks(); }

std::string ElasticAgent::Host() {
  if (hostname_.empty()) hostname_ = FullyQualifiedHostname();
  return hostname_;
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
    group_.KillRunning();
    return;
  }
  DDP_LOG(INFO) << "received " << SignalName(sig)
                << ", forwarding it to the workers";
  if (stop_reason_ != StopReason::kNone) {
    // Already stopping (failure or restart): exit after it instead.
    stop_reason_ = StopReason::kSignal;
    stop_signal_ = sig;
    group_.Signal(sig);
    return;
  }
  BeginStop(StopReason::kSignal, sig, SignalName(sig));
}

void ElasticAgent::BeginStop(StopReason reason, int sig,
                             const std::string& why) {
  stragglers_->Stop();
  replacement_->Stop();
  if (standby_ != nullptr) standby_->Kill();  // a new group gets its own
  if (notice_ != nullptr) notice_->Stop();
  if (replacement_record_ != nullptr) {
    // Stopped while a replacement healed (a second failure, a signal, a
    // membership change): its heal did not happen.
    EndReplacementRecord(replacement_record_->local_rank(),
                         replacement_record_->generation(), -1, 0,
                         "the group stopped (" + why + ")");
  }
  stop_reason_ = reason;
  stop_signal_ = sig;
  stop_why_ = why;
  if (reason != StopReason::kSignal && reason != StopReason::kLaunchError) {
    state_ = WorkerState::kUnhealthy;
  }
  group_.Stop(sig);
  if (group_.AnyRunning()) return;  // MaybeFinishStop on the last exit
  const int starts = group_.starts();
  loop_->Post([this, starts] {
    if (starts == group_.starts()) MaybeFinishStop();
  });
}

void ElasticAgent::MaybeFinishStop() {
  if (stop_reason_ == StopReason::kNone || group_.AnyRunning() || finished_) {
    return;
  }
  group_.KillLeftovers();
  state_ = WorkerState::kStopped;
  AfterStop();
}

void ElasticAgent::AfterStop() {
  StopReason reason = stop_reason_;
  switch (reason) {
    case StopReason::kWorkerFailure: {
      const std::vector<ProcessFailure>& failures = group_.failures();
      const ProcessFailure& root = failures[RootCauseIndex(failures)];
      DDP_LOG(ERROR) << "failed (exitcode: " << root.exitcode
                     << ") local_rank: " << root.local_rank
                     << " (pid: " << root.pid
                     << ") of binary: " << EntrypointName(options_.launch);
      const std::string not_retried = NotRetriedReason(
          root.local_rank, root.exitcode, group_.starts(),
          options_.launch.retry_usage_errors, group_.StepFiles(), &progress_);
      phase_ = Phase::kReporting;
      rendezvous_->ReportFailure(group_.round().round, root.traceback,
                                 /*retry=*/not_retried.empty(),
                                 [this, not_retried](StatusOr<bool> again) {
                                   OnFailureReported(again, not_retried);
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
      ReportFailedJob();
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

void ElasticAgent::OnFailureReported(StatusOr<bool> again,
                                     const std::string& not_retried) {
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
  if (!not_retried.empty()) DDP_LOG(ERROR) << not_retried;
  Finish(WorkerState::kFailed, 1);
}

void ElasticAgent::LeaveAndFinish(WorkerState state, int exit_code) {
  phase_ = Phase::kLeaving;
  rendezvous_->Leave([this, state, exit_code] { Finish(state, exit_code); });
}

void ElasticAgent::ReportFailedJob() {
  if (group_.failures().empty()) return;
  std::vector<ProcessFailure> sorted = group_.failures();
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const ProcessFailure& a, const ProcessFailure& b) {
                     return a.local_rank < b.local_rank;
                   });
  std::string table =
      FormatFailureTable(EntrypointName(options_.launch), sorted, Host());
  console_->Write(Console::Stream::kErr, table + "\n");
  for (const RankReplacement::Replaced& r : replacement_->replaced()) {
    std::string healed = "did not heal";
    if (r.heal_seconds >= 0) {
      char s[64];
      std::snprintf(s, sizeof(s), "healed in %.2f s", r.heal_seconds);
      healed = s;
    }
    console_->Write(Console::Stream::kErr,
                    "[ddprun] earlier in this attempt rank " +
                        std::to_string(r.rank) + " was replaced alone (" +
                        r.reason + ", generation " +
                        std::to_string(r.generation) + "): " + healed + "\n");
  }
  const ProcessFailure& root = sorted[RootCauseIndex(sorted)];
  Status s = DumpRootCauseErrorFile(root, options_.agent_error_file);
  if (!s.ok()) DDP_LOG(WARNING) << s.message();
}

void ElasticAgent::Finish(WorkerState state, int exit_code) {
  if (finished_) return;
  finished_ = true;
  stragglers_->Stop();
  if (standby_ != nullptr) standby_->Kill();
  hang_->Finish();
  phase_ = Phase::kDone;
  state_ = state;
  if (on_done_) on_done_(exit_code);
}

}  // namespace ddprun::agent
