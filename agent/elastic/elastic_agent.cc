#include "agent/elastic/elastic_agent.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <tuple>

#include "agent/process/signal_names.h"
#include "agent/watch/step_file.h"
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

struct ElasticAgent::Worker {
  int local_rank = 0;
  int global_rank = 0;
  int pid = -1;
  bool running = false;
  ExitStatus exit;
  std::string error_file;
  WorkerWatchFiles watch;     // ddprun's files for it, "" where off
  std::string watchdog_kill;  // why the watchdog killed it, "" if it did not
  bool stopped_hang = false;  // the watchdog found it stopped (state T)
  std::unique_ptr<Process> process;
  std::unique_ptr<WorkerOutput> out;
  std::unique_ptr<WorkerOutput> err;
};

namespace {

void RemoveIfEmpty(const std::string& path) {
  struct stat st;
  if (!path.empty() && ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_size == 0) {
    ::unlink(path.c_str());
  }
}

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
      logs_(&options_.launch, options_.run_log_dir, console),
      hostname_(options_.hostname),
      progress_(options_.launch.max_restarts_without_progress) {
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
        hang_->OnStacksRequested(id, reason);
      });
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
  for (const auto& w : workers_) {
    if (w->running && w->pid == pid) return w->local_rank;
  }
  return -1;
}

void ElasticAgent::NoteKill(int local_rank, const std::string& why,
                            bool replace) {
  Worker& w = *workers_[local_rank];
  if (replace || w.watchdog_kill.empty()) w.watchdog_kill = why;
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
  if (options_.health != nullptr) {
    // The node proves it is healthy before it joins (a signal meanwhile
    // leaves, as during a Join).
    const int check = ++health_checks_;
    options_.health->Check(starts_ > 0, [this, check](Status healthy) {
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
  hang_->StartGroup(round_);
  replaced_failures_.clear();
  stop_pending_ = false;
  stop_reason_ = StopReason::kNone;
  bool serves_store = false;
  if (options_.worker_store != nullptr) {
    DDP_ASSIGN_OR_RETURN(serves_store,
                         options_.worker_store->StartRound(round_));
  }
  replacement_->StartGroup(round_, serves_store);
  DDP_RETURN_IF_ERROR(logs_.StartAttempt(round_.restart_count));
  for (int lr = 0; lr < o.nproc_per_node; ++lr) {
    auto w = std::make_unique<Worker>();
    w->local_rank = lr;
    w->global_rank = round_.rank_offset + lr;
    DDP_ASSIGN_OR_RETURN(WorkerLogs::Rank logs,
                         logs_.OpenRank(lr, w->global_rank, round_.group_rank));
    if (logs_.files()) {
      w->error_file = logs.dir + "/error.json";
      if (watchdog_) w->watch.heartbeat = logs.dir + "/heartbeat";
      if (hang_->collects_stacks()) w->watch.stacks = logs.dir + "/stacks.txt";
      w->watch.steps = logs.dir + "/steps";
    }
    if (file_timer_) w->watch.timer = file_timer_->path();
    w->out = std::move(logs.out);
    w->err = std::move(logs.err);
    workers_.push_back(std::move(w));
  }
  if (file_timer_) file_timer_->Reset();  // torch: a server per group
  for (auto& w : workers_) {
    DDP_RETURN_IF_ERROR(LaunchWorker(w.get(), -1));
  }
  // Every worker is reported (pid, state); those with a step file also
  // with their counts.
  std::vector<StragglerWatch::Target> watched;
  for (const auto& w : workers_) {
    watched.push_back({w->global_rank, w->local_rank, w->pid, w->watch.steps});
  }
  stragglers_->Start(std::move(watched));
  DDP_LOG(DEBUG) << "started " << workers_.size() << " workers, attempt "
                 << round_.restart_count;
  return Status::Ok();
}

Status ElasticAgent::LaunchWorker(Worker* w, int64_t replacement_generation) {
  const LaunchOptions& o = options_.launch;
  ProcessSpec spec;
  spec.argv = BuildWorkerArgv(o, options_.worker_torch, w->local_rank,
                              options_.parent_env, round_.rank_offset);
  spec.env = BuildWorkerEnv(o, options_.worker_torch, round_, options_.run_id,
                            w->local_rank, w->error_file, options_.parent_env);
  AddWatchEnv(w->watch, options_.python_stack_helper_dir, &spec.env);
  if (replacement_generation >= 0) {
    AddReplacementEnv(replacement_generation, &spec.env);
  }
  if (w->local_rank < static_cast<int>(options_.worker_cpus.size())) {
    spec.cpu_affinity = options_.worker_cpus[w->local_rank];
  }
  // As torchrun's workers write to the terminal: a stream shown live on
  // a terminal console (and kept in no file) is a terminal for the worker.
  spec.tty_stdout = w->out->live_terminal();
  spec.tty_stderr = w->err->live_terminal();
  if (spec.tty_stdout || spec.tty_stderr) {
    std::tie(spec.tty_rows, spec.tty_cols) = console_->TerminalSize();
  }
  ProcessCallbacks cb;
  int generation = generation_;
  cb.on_stdout = [w](std::string_view c) { w->out->OnChunk(c); };
  cb.on_stderr = [w](std::string_view c) { w->err->OnChunk(c); };
  int lr = w->local_rank;
  cb.on_exit = [this, generation, lr](ExitStatus s) {
    OnWorkerExit(generation, lr, s);
  };
  StatusOr<std::unique_ptr<Process>> p = launcher_->Launch(spec, cb);
  if (!p.ok()) return p.status();
  w->process = std::move(p).value();
  w->pid = w->process->pid();
  w->running = true;
  w->exit = ExitStatus{};
  w->stopped_hang = false;
  if (watchdog_) watchdog_->Watch(w->local_rank, w->pid, w->watch.heartbeat);
  return Status::Ok();
}

Status ElasticAgent::StartReplacement(int local_rank, int64_t generation) {
  Worker& w = *workers_[local_rank];
  w.watchdog_kill.clear();
  // The replacement's output goes on in the rank's files.
  DDP_RETURN_IF_ERROR(w.out->Reopen());
  DDP_RETURN_IF_ERROR(w.err->Reopen());
  DDP_RETURN_IF_ERROR(LaunchWorker(&w, generation));
  stragglers_->Restarted(w.global_rank, w.pid);
  if (options_.generation_signal != 0) {
    // The opt-in notice: the survivors need not wait for a collective to
    // fail to learn of the new generation.
    for (const auto& other : workers_) {
      if (other->running && other->local_rank != local_rank) {
        (void)other->process->SignalGroup(options_.generation_signal);
      }
    }
  }
  DDP_LOG(INFO) << "[" << options_.launch.role << "] rank " << w.global_rank
                << " started again alone (generation " << generation
                << ", pid " << w.pid << ")";
  return Status::Ok();
}

void ElasticAgent::RestartGroup(int local_rank, const std::string& why) {
  if (stop_reason_ != StopReason::kNone || finished_) return;
  auto it = replaced_failures_.find(local_rank);
  if (it != replaced_failures_.end()) {
    failures_.push_back(it->second);
    replaced_failures_.erase(it);
  }
  NoteGroupFailure();
  BeginStop(StopReason::kWorkerFailure, SIGTERM, why);
}

void ElasticAgent::NoteGroupFailure() {
  stop_pending_ = true;
  failure_seen_at_ = loop_->clock()->Now();
  state_ = WorkerState::kUnhealthy;
}

int64_t ElasticAgent::StepsOf(int local_rank) const {
  if (local_rank < 0 || local_rank >= static_cast<int>(workers_.size())) {
    return -1;
  }
  const std::string& path = workers_[local_rank]->watch.steps;
  return path.empty() ? -1 : ReadStepFile(path).steps;
}

void ElasticAgent::OnWorkerFailed(int local_rank, ProcessFailure failure) {
  const Worker& w = *workers_[local_rank];
  // A replacement heals from a live peer: only while every other worker of
  // this node still runs (a finished peer left nothing to heal from).
  const Worker* gone = nullptr;
  for (const auto& other : workers_) {
    if (other->local_rank != local_rank && !other->running) gone = other.get();
  }
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
      replaced_failures_[local_rank] = std::move(failure);
      return;
    }
  }
  failures_.push_back(std::move(failure));
  if (!stop_pending_) {
    NoteGroupFailure();
    // Posted, so that exits already queued in this batch are recorded as
    // failures too (torchrun reports every failure seen in one poll).
    const int generation = generation_;
    loop_->Post([this, generation] {
      if (generation != generation_ || stop_reason_ != StopReason::kNone)
        return;
      BeginStop(StopReason::kWorkerFailure, SIGTERM, "worker failure");
    });
  }
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
  // The worker's hook created its stacks file at start; one that no dump
  // wrote to is not kept (torchrun's log layout has no such file).
  RemoveIfEmpty(w.watch.stacks);
  if (stop_reason_ != StopReason::kNone) {
    MaybeFinishStop();
    return;
  }
  if (!status.succeeded()) {
    ProcessFailure failure = MakeProcessFailure(
        w.local_rank, w.global_rank, w.pid, status.exitcode, w.error_file,
        loop_->clock()->WallSeconds());
    if (!w.watchdog_kill.empty() && failure.error_json.empty()) {
      failure.traceback = w.watchdog_kill;
    }
    OnWorkerFailed(local_rank, std::move(failure));
    return;
  }
  if (!stop_pending_ && !AnyRunning() && !replacement_->busy()) {
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
  if (replacement_->busy() &&
      stuck.reason == WorkerWatchdog::Reason::kNoHeartbeat) {
    // A survivor re-forms and heals without stepping (bounded by
    // --heal_timeout): silent, not hung. Watched again.
    watchdog_->Watch(w.local_rank, w.pid, w.watch.heartbeat);
    return;
  }
  const std::string what =
      DescribeStuck(stuck, options_.launch.watchdog_timeout_s);
  w.watchdog_kill = "killed by the ddprun watchdog: " + what;
  w.stopped_hang = stuck.reason == WorkerWatchdog::Reason::kStopped;
  hang_->OnHung(w.local_rank, w.pid, what);
}

std::vector<StackTarget> ElasticAgent::StackTargets() const {
  std::vector<StackTarget> targets;
  if (phase_ != Phase::kRunning) return targets;
  for (const auto& w : workers_) {
    if (!w->running || w->watch.stacks.empty()) continue;
    targets.push_back({w->global_rank, w->pid, w->watch.stacks});
  }
  return targets;
}

void ElasticAgent::KillHung(int local_rank, const std::string& diagnosis) {
  if (local_rank < 0 || local_rank >= static_cast<int>(workers_.size())) {
    return;
  }
  Worker& w = *workers_[local_rank];
  if (!w.running) return;
  if (replacement_->enabled() && !w.stopped_hang) {
    // Under --restart_scope failed a stopped worker (state T) is the
    // hang's cause and the others only wait for it: it alone is killed
    // and replaced, and they re-form when it is gone.
    for (const auto& other : workers_) {
      if (other->running && other->stopped_hang) {
        DDP_LOG(INFO) << "local_rank " << local_rank
                      << " waits for stopped local_rank " << other->local_rank
                      << ": not killed (--restart_scope failed)";
        w.watchdog_kill.clear();
        // Watched again from its next heartbeat on.
        if (watchdog_) watchdog_->Watch(w.local_rank, w.pid, w.watch.heartbeat);
        return;
      }
    }
  }
  if (!diagnosis.empty()) w.watchdog_kill += "; hang diagnosis: " + diagnosis;
  Status s = w.process->SignalGroup(SIGKILL);
  if (!s.ok()) DDP_LOG(WARNING) << s.message();
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
  replacement_->Stop();
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
      std::vector<std::string> step_files;
      for (const auto& w : workers_) {
        if (!w->watch.steps.empty()) step_files.push_back(w->watch.steps);
      }
      const std::string not_retried = NotRetriedReason(
          root.local_rank, root.exitcode, starts_,
          options_.launch.retry_usage_errors, step_files, &progress_);
      phase_ = Phase::kReporting;
      rendezvous_->ReportFailure(round_.round, root.traceback,
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
  if (failures_.empty()) return;
  std::vector<ProcessFailure> sorted = failures_;
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
  hang_->Finish();
  phase_ = Phase::kDone;
  state_ = state;
  if (on_done_) on_done_(exit_code);
}

}  // namespace ddprun::agent
