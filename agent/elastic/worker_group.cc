#include "agent/elastic/worker_group.h"

#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <tuple>

#include "agent/watch/step_file.h"
#include "common/logging.h"

namespace ddprun::agent {
namespace {

void RemoveIfEmpty(const std::string& path) {
  struct stat st;
  if (!path.empty() && ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      st.st_size == 0) {
    ::unlink(path.c_str());
  }
}

}  // namespace

WorkerGroup::WorkerGroup(const AgentOptions* options, EventLoop* loop,
                         ProcessLauncher* launcher, Console* console,
                         WorkerWatchdog* watchdog, ExitCallback on_exit)
    : options_(options),
      loop_(loop),
      launcher_(launcher),
      console_(console),
      watchdog_(watchdog),
      on_exit_(std::move(on_exit)) {}

WorkerGroup::~WorkerGroup() {
  if (stop_timer_armed_) loop_->Cancel(stop_timer_);
}

void WorkerGroup::Reset(const rendezvous::RendezvousResult& round) {
  if (stop_timer_armed_) loop_->Cancel(stop_timer_);
  stop_timer_armed_ = false;
  round_ = round;
  ++starts_;
  workers_.clear();
  failures_.clear();
  held_failures_.clear();
}

Status WorkerGroup::Start(WorkerLogs* logs, bool stacks,
                          const std::string& timer_file, int64_t generation) {
  for (int lr = 0; lr < options_->launch.nproc_per_node; ++lr) {
    auto w = std::make_unique<Worker>();
    w->local_rank = lr;
    w->global_rank = round_.rank_offset + lr;
    DDP_ASSIGN_OR_RETURN(WorkerLogs::Rank rank,
                         logs->OpenRank(lr, w->global_rank, round_.group_rank));
    if (logs->files()) {
      w->error_file = rank.dir + "/error.json";
      if (watchdog_) w->watch.heartbeat = rank.dir + "/heartbeat";
      if (stacks) w->watch.stacks = rank.dir + "/stacks.txt";
      w->watch.steps = rank.dir + "/steps";
    }
    w->watch.timer = timer_file;
    w->out = std::move(rank.out);
    w->err = std::move(rank.err);
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) {
    DDP_RETURN_IF_ERROR(Launch(w.get(), SpecFor(*w, generation), generation));
  }
  return Status::Ok();
}

Status WorkerGroup::Relaunch(int local_rank, int64_t generation,
                             StandbyWorker* standby, bool* by_standby) {
  if (by_standby != nullptr) *by_standby = false;
  Worker* w = worker(local_rank);
  if (w == nullptr) {
    return InvalidArgumentError("no local rank " + std::to_string(local_rank));
  }
  w->watchdog_kill.clear();
  DDP_RETURN_IF_ERROR(w->out->Reopen());
  DDP_RETURN_IF_ERROR(w->err->Reopen());
  const ProcessSpec spec = SpecFor(*w, generation);
  const bool fits =
      spec.cpu_affinity.empty() && !spec.tty_stdout && !spec.tty_stderr;
  if (standby != nullptr && fits && !standby->Ready()) {
    DDP_LOG(INFO) << (standby->pid() < 0 ? std::string("no standby worker runs")
                                         : "the standby worker (pid " +
                                               std::to_string(standby->pid()) +
                                               ") is not ready yet")
                  << ": rank " << w->global_rank << " starts as a new process";
  } else if (standby != nullptr && fits) {
    StatusOr<StandbyWorker::Handover> taken = standby->TakeOver(spec.env);
    if (taken.ok()) {
      Started(w, std::move(taken->process), taken->route.get(), generation);
      if (by_standby != nullptr) *by_standby = true;
      return Status::Ok();
    }
    DDP_LOG(WARNING) << "the standby worker cannot take rank " << w->global_rank
                     << " (" << taken.status().message()
                     << "): starting a new process";
  }
  return Launch(w, spec, generation);
}

ProcessSpec WorkerGroup::SpecFor(const Worker& w, int64_t generation) const {
  const AgentOptions& o = *options_;
  ProcessSpec spec;
  spec.argv = BuildWorkerArgv(o.launch, o.worker_torch, w.local_rank,
                              o.parent_env, round_.rank_offset);
  spec.env = BuildWorkerEnv(o.launch, o.worker_torch, round_, o.run_id,
                            w.local_rank, w.error_file, o.parent_env);
  AddWatchEnv(w.watch, o.python_stack_helper_dir, &spec.env);
  if (generation >= 0) AddReplacementEnv(generation, &spec.env);
  if (w.local_rank < static_cast<int>(o.worker_cpus.size())) {
    spec.cpu_affinity = o.worker_cpus[w.local_rank];
  }
  // As torchrun's workers write to the terminal: a stream shown live on
  // a terminal console (and kept in no file) is a terminal for the worker.
  spec.tty_stdout = w.out->live_terminal();
  spec.tty_stderr = w.err->live_terminal();
  if (spec.tty_stdout || spec.tty_stderr) {
    std::tie(spec.tty_rows, spec.tty_cols) = console_->TerminalSize();
  }
  return spec;
}

Status WorkerGroup::Launch(Worker* w, const ProcessSpec& spec,
                           int64_t generation) {
  // The route is the process's for its whole life (callbacks hold it).
  auto route = std::make_shared<StandbyWorker::Route>();
  StatusOr<std::unique_ptr<Process>> p =
      launcher_->Launch(spec, StandbyWorker::Route::Through(route));
  if (!p.ok()) return p.status();
  Started(w, std::move(p).value(), route.get(), generation);
  return Status::Ok();
}

void WorkerGroup::Started(Worker* w, std::unique_ptr<Process> process,
                          StandbyWorker::Route* route, int64_t generation) {
  route->out = [w](std::string_view c) { w->out->OnChunk(c); };
  route->err = [w](std::string_view c) { w->err->OnChunk(c); };
  route->exit = [this, starts = starts_, lr = w->local_rank](ExitStatus s) {
    OnExit(starts, lr, s);
  };
  w->process = std::move(process);
  w->pid = w->process->pid();
  w->running = true;
  w->generation = generation >= 0 ? generation : 0;
  w->exit = ExitStatus{};
  w->stopped_hang = false;
  if (watchdog_) watchdog_->Watch(w->local_rank, w->pid, w->watch.heartbeat);
}

void WorkerGroup::OnExit(int starts, int local_rank, ExitStatus status) {
  if (starts != starts_) return;
  Worker& w = *workers_[local_rank];
  w.running = false;
  w.exit = status;
  if (watchdog_) watchdog_->Forget(local_rank);
  w.out->OnEof();
  w.err->OnEof();
  // The worker's hook created its stacks file at start; one that no dump
  // wrote to is not kept (torchrun's log layout has no such file).
  RemoveIfEmpty(w.watch.stacks);
  on_exit_(local_rank, status);
}

void WorkerGroup::Stop(int sig) {
  if (watchdog_) watchdog_->ForgetAll();
  for (auto& w : workers_) {
    if (!w->running) continue;
    Status s = w->process->SignalGroup(sig);
    if (!s.ok()) DDP_LOG(WARNING) << s.message();
    if (sig == SIGTERM) (void)w->process->SignalGroup(SIGCONT);
  }
  if (!AnyRunning()) return;
  auto timeout = std::chrono::duration_cast<Clock::Duration>(
      std::chrono::duration<double>(options_->launch.shutdown_timeout_s));
  stop_timer_ =
      loop_->RunAt(loop_->clock()->Now() + timeout, [this] { KillRunning(); });
  stop_timer_armed_ = true;
}

void WorkerGroup::KillRunning() {
  if (stop_timer_armed_) loop_->Cancel(stop_timer_);
  stop_timer_armed_ = false;
  for (auto& w : workers_) {
    if (!w->running) continue;
    DDP_LOG(WARNING) << "worker pid " << w->pid
                     << " did not stop in time: sending SIGKILL";
    (void)w->process->SignalGroup(SIGKILL);
  }
}

void WorkerGroup::KillLeftovers() {
  if (stop_timer_armed_) loop_->Cancel(stop_timer_);
  stop_timer_armed_ = false;
  // Also after a successful exit; a process that left the group (setsid, a
  // deliberate daemon) is not ours to kill.
  for (auto& w : workers_) {
    if (w->process) (void)w->process->SignalGroup(SIGKILL);
  }
}

void WorkerGroup::Signal(int sig) {
  for (auto& w : workers_) {
    if (w->running) {
      (void)w->process->SignalGroup(sig);
    }
  }
}

void WorkerGroup::SignalOlderThan(int sig, int64_t generation) {
  for (auto& w : workers_) {
    if (w->running && w->generation < generation) {
      (void)w->process->SignalGroup(sig);
    }
  }
}

void WorkerGroup::Kill(int local_rank) {
  Worker* w = worker(local_rank);
  if (w == nullptr || !w->process) return;
  Status s = w->process->SignalGroup(SIGKILL);
  if (!s.ok()) DDP_LOG(WARNING) << s.message();
}

void WorkerGroup::Watch(int local_rank) {
  const Worker* w = worker(local_rank);
  if (watchdog_ && w != nullptr) {
    watchdog_->Watch(w->local_rank, w->pid, w->watch.heartbeat);
  }
}

WorkerGroup::Worker* WorkerGroup::worker(int local_rank) {
  if (local_rank < 0 || local_rank >= size()) return nullptr;
  return workers_[local_rank].get();
}

const WorkerGroup::Worker* WorkerGroup::worker(int local_rank) const {
  if (local_rank < 0 || local_rank >= size()) return nullptr;
  return workers_[local_rank].get();
}

bool WorkerGroup::AnyRunning() const {
  for (const auto& w : workers_) {
    if (w->running) return true;
  }
  return false;
}

int WorkerGroup::RunningWorker(int pid) const {
  for (const auto& w : workers_) {
    if (w->running && w->pid == pid) return w->local_rank;
  }
  return -1;
}

const WorkerGroup::Worker* WorkerGroup::NotRunningBesides(
    int local_rank) const {
  const Worker* gone = nullptr;
  for (const auto& w : workers_) {
    if (w->local_rank != local_rank && !w->running) gone = w.get();
  }
  return gone;
}

const WorkerGroup::Worker* WorkerGroup::StoppedWorker() const {
  for (const auto& w : workers_) {
    if (w->running && w->stopped_hang) return w.get();
  }
  return nullptr;
}

int64_t WorkerGroup::Steps(int local_rank) const {
  const Worker* w = worker(local_rank);
  if (w == nullptr || w->watch.steps.empty()) return -1;
  return ReadStepFile(w->watch.steps).steps;
}

std::vector<int> WorkerGroup::pids() const {
  std::vector<int> pids;
  for (const auto& w : workers_) pids.push_back(w->pid);
  return pids;
}

std::vector<StragglerWatch::Target> WorkerGroup::StragglerTargets() const {
  std::vector<StragglerWatch::Target> targets;
  for (const auto& w : workers_) {
    targets.push_back({w->global_rank, w->local_rank, w->pid, w->watch.steps});
  }
  return targets;
}

std::vector<StackTarget> WorkerGroup::StackTargets() const {
  std::vector<StackTarget> targets;
  for (const auto& w : workers_) {
    if (!w->running || w->watch.stacks.empty()) continue;
    targets.push_back({w->global_rank, w->pid, w->watch.stacks});
  }
  return targets;
}

std::vector<std::string> WorkerGroup::StepFiles() const {
  std::vector<std::string> files;
  for (const auto& w : workers_) {
    if (!w->watch.steps.empty()) files.push_back(w->watch.steps);
  }
  return files;
}

ProcessFailure WorkerGroup::FailureOf(int local_rank) const {
  const Worker& w = *workers_.at(local_rank);
  ProcessFailure failure =
      MakeProcessFailure(w.local_rank, w.global_rank, w.pid, w.exit.exitcode,
                         w.error_file, loop_->clock()->WallSeconds());
  if (!w.watchdog_kill.empty() && failure.error_json.empty()) {
    failure.traceback = w.watchdog_kill;
  }
  return failure;
}

void WorkerGroup::AddFailure(ProcessFailure failure) {
  failures_.push_back(std::move(failure));
}

void WorkerGroup::HoldFailure(int local_rank, ProcessFailure failure) {
  held_failures_[local_rank] = std::move(failure);
}

void WorkerGroup::AddHeldFailure(int local_rank) {
  auto it = held_failures_.find(local_rank);
  if (it == held_failures_.end()) return;
  failures_.push_back(std::move(it->second));
  held_failures_.erase(it);
}

ProcessFailure* WorkerGroup::HeldFailure(int local_rank) {
  auto it = held_failures_.find(local_rank);
  return it == held_failures_.end() ? nullptr : &it->second;
}

}  // namespace ddprun::agent
