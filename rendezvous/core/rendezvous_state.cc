#include "rendezvous/core/rendezvous_state.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string_view>

#include "common/logging.h"

namespace ddprun::rendezvous {
namespace {

constexpr size_t kMaxIdBytes = 128;
constexpr size_t kMaxNodeIdBytes = 256;
constexpr size_t kMaxAddrBytes = 256;
constexpr size_t kMaxRoleBytes = 64;
constexpr uint32_t kMaxNodes = 100000;
constexpr uint32_t kMaxLocalWorldSize = 65536;
// Reasons end up in other agents' messages and in status output; gRPC
// clients refuse error details above 8 KiB of metadata.
constexpr size_t kMaxReasonBytes = 4096;
// Far beyond any job's life, far below where round + 1 overflows.
constexpr int64_t kMaxRound = int64_t{1} << 48;

Status CheckReason(const std::string& reason) {
  if (reason.size() > kMaxReasonBytes) {
    return InvalidArgumentError("reason is longer than 4096 bytes");
  }
  return Status::Ok();
}

Status CheckRound(int64_t round) {
  if (round < 0 || round > kMaxRound) {
    return InvalidArgumentError("round " + std::to_string(round) +
                                " is out of range (0.." +
                                std::to_string(kMaxRound) + ")");
  }
  return Status::Ok();
}

Status CheckRdzvId(const std::string& id) {
  if (id.empty()) return InvalidArgumentError("rdzv_id is empty");
  if (id.size() > kMaxIdBytes) {
    return InvalidArgumentError("rdzv_id is longer than 128 bytes");
  }
  return Status::Ok();
}

Status CheckNodeId(const std::string& id, uint64_t instance) {
  if (id.empty()) return InvalidArgumentError("node_id is empty");
  if (id.size() > kMaxNodeIdBytes) {
    return InvalidArgumentError("node_id is longer than 256 bytes");
  }
  if (instance == 0) return InvalidArgumentError("node instance is 0");
  return Status::Ok();
}

Status CheckConfig(const v1::JobConfig& c) {
  if (c.min_nodes() < 1) {
    return InvalidArgumentError("min_nodes must be >= 1");
  }
  if (c.max_nodes() < c.min_nodes()) {
    return InvalidArgumentError("max_nodes " + std::to_string(c.max_nodes()) +
                                " < min_nodes " +
                                std::to_string(c.min_nodes()));
  }
  if (c.max_nodes() > kMaxNodes) {
    return InvalidArgumentError("max_nodes is above 100000");
  }
  return Status::Ok();
}

Status CheckNode(const v1::NodeInfo& n) {
  DDP_RETURN_IF_ERROR(CheckNodeId(n.node_id(), n.instance()));
  if (n.role().size() > kMaxRoleBytes) {
    return InvalidArgumentError("role is longer than 64 bytes");
  }
  if (n.local_world_size() < 1 || n.local_world_size() > kMaxLocalWorldSize) {
    return InvalidArgumentError("local_world_size must be in 1..65536, got " +
                                std::to_string(n.local_world_size()));
  }
  if (n.addr().empty() || n.addr().size() > kMaxAddrBytes) {
    return InvalidArgumentError("addr must be 1..256 bytes");
  }
  if (n.master_port() < 1 || n.master_port() > 65535) {
    return InvalidArgumentError("master_port must be in 1..65535, got " +
                                std::to_string(n.master_port()));
  }
  if (n.host().size() > kMaxAddrBytes) {
    return InvalidArgumentError("host is longer than 256 bytes");
  }
  // Told to every node of the job (which connect to it and log it).
  if (n.standby_endpoint().size() > kMaxAddrBytes + 6) {
    return InvalidArgumentError("standby_endpoint is longer than 262 bytes");
  }
  for (char ch : n.standby_endpoint()) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) &&
        std::string_view(".-_:[]%").find(ch) == std::string_view::npos) {
      return InvalidArgumentError(
          "standby_endpoint must be host:port (letters, digits, . - _ : [ ] "
          "%)");
    }
  }
  return Status::Ok();
}

// A heartbeat's reported assignment is trusted to rebuild a job after a
// server restart, so it must at least be self-consistent.
Status CheckAssignment(const v1::Assignment& a, const v1::JobConfig& c) {
  DDP_RETURN_IF_ERROR(CheckRound(a.round()));
  if (a.restart_count() < 0 ||
      a.restart_count() > static_cast<int64_t>(c.max_restarts())) {
    return InvalidArgumentError("assignment restart count " +
                                std::to_string(a.restart_count()) +
                                " is out of range (0..max_restarts " +
                                std::to_string(c.max_restarts()) + ")");
  }
  if ((a.round() > 0 &&
       (a.group_world_size() < 1 ||
        a.group_world_size() > static_cast<int>(c.max_nodes()) ||
        a.group_rank() < 0 || a.group_rank() >= a.group_world_size()))) {
    return InvalidArgumentError("assignment is inconsistent (round " +
                                std::to_string(a.round()) + ", group rank " +
                                std::to_string(a.group_rank()) + " of " +
                                std::to_string(a.group_world_size()) + ")");
  }
  return Status::Ok();
}

constexpr size_t kMaxStacksReasonBytes = 256;
constexpr int kMaxRanksPerAnswer = 65536;
constexpr int kMaxRates = 65536;
// A rank's summary is cut to 4096 bytes by its agent
// (diagnosis::kMaxSummaryBytes); twice that leaves room for other agents'
// versions without letting one rank fill a request.
constexpr size_t kMaxRankStackBytes = 8192;
constexpr size_t kMaxRankFieldBytes = 256;

Status CheckRankStacks(const v1::StacksRequest& request) {
  if (request.ranks_size() > kMaxRanksPerAnswer) {
    return InvalidArgumentError("more than 65536 ranks in one answer");
  }
  for (const v1::RankStack& r : request.ranks()) {
    if (r.stack().size() > kMaxRankStackBytes) {
      return InvalidArgumentError("the stack of rank " +
                                  std::to_string(r.rank()) +
                                  " is longer than 8192 bytes");
    }
    if (r.host().size() > kMaxRankFieldBytes ||
        r.missing().size() > kMaxRankFieldBytes) {
      return InvalidArgumentError("the host or missing text of rank " +
                                  std::to_string(r.rank()) +
                                  " is longer than 256 bytes");
    }
  }
  return Status::Ok();
}

constexpr int kMaxScalars = 8;
constexpr size_t kMaxScalarNameBytes = 32;

// A heartbeat's worker progress (rank_rates) ends up in Status, status pages
// and Prometheus labels: bounded, finite, names of a plain alphabet.
Status CheckProgress(const v1::HeartbeatRequest& req) {
  if (req.worker_restarts() < 0) {
    return InvalidArgumentError("worker_restarts is negative");
  }
  std::set<int32_t> seen;
  for (const v1::RankRate& r : req.rank_rates()) {
    const std::string rank = "rank " + std::to_string(r.rank());
    if (!seen.insert(r.rank()).second) {
      return InvalidArgumentError(rank + " is reported twice");
    }
    if (!std::isfinite(r.steps_per_s())) {
      return InvalidArgumentError(rank + ": steps_per_s is not finite");
    }
    if (r.steps() < 0 || r.total_steps() < 0) {
      return InvalidArgumentError(rank + ": negative step count");
    }
    if (r.scalars_size() > kMaxScalars) {
      return InvalidArgumentError(rank + ": more than 8 scalars");
    }
    std::set<std::string_view> names;
    for (const v1::Scalar& sc : r.scalars()) {
      const std::string& name = sc.name();
      if (name.empty() || name.size() > kMaxScalarNameBytes) {
        return InvalidArgumentError(rank +
                                    ": a scalar name must be 1..32 bytes");
      }
      for (char ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch)) &&
            std::string_view("_.:/-").find(ch) == std::string_view::npos) {
          return InvalidArgumentError(
              rank + ": scalar names are letters, digits and _ . : / -");
        }
      }
      if (!names.insert(name).second) {
        return InvalidArgumentError(rank + ": scalar '" + name +
                                    "' appears twice");
      }
      if (!std::isfinite(sc.value())) {
        return InvalidArgumentError(rank + ": scalar '" + name +
                                    "' is not finite");
      }
    }
  }
  return Status::Ok();
}

// Each node's share of a round is at most this many ranks (WORLD_SIZE and
// the rank offsets are 32-bit everywhere downstream: a round of max_nodes
// such nodes stays below 2^31).
Status CheckWorldSize(const v1::JobConfig& c, const v1::NodeInfo& n) {
  const int64_t most = INT32_MAX / std::max<int64_t>(1, c.max_nodes());
  if (static_cast<int64_t>(n.local_world_size()) > most) {
    return InvalidArgumentError(
        "local_world_size " + std::to_string(n.local_world_size()) +
        " with max_nodes " + std::to_string(c.max_nodes()) +
        " could make a round of more than 2^31-1 ranks (at most " +
        std::to_string(most) + " per node)");
  }
  return Status::Ok();
}

std::vector<BoardNode> RunningNodes(const RendezvousJob& job) {
  std::vector<BoardNode> running;
  const v1::JobStatus status = job.GetStatus();
  for (const v1::NodeStatus& n : status.nodes()) {
    if (n.state() == v1::NodeStatus::STATE_RUNNING) {
      running.push_back({n.node_id(), n.addr()});
    }
  }
  return running;
}

}  // namespace

RendezvousState::RendezvousState(Clock* clock, JobDefaults defaults,
                                 StateLimits limits)
    : clock_(clock),
      defaults_(defaults),
      limits_(limits),
      join_limiter_(clock, limits.join_rate_per_s, limits.join_burst),
      heartbeat_limiter_(clock, limits.heartbeat_rate_per_s,
                         limits.heartbeat_burst) {}

Status RendezvousState::CheckRate(RateLimiter* limiter, const char* rpc,
                                  const std::string& rdzv_id,
                                  const v1::NodeInfo& node) {
  // One bucket per agent process (node id and instance): an impostor using
  // another process's node id spends its own allowance, not the victim's.
  // The key's parts are unambiguous: the instance is fixed-width.
  char instance[17];
  std::snprintf(instance, sizeof(instance), "%016llx",
                static_cast<unsigned long long>(node.instance()));
  if (limiter->Allow(std::string(instance) + rdzv_id + '\n' + node.node_id())) {
    return Status::Ok();
  }
  const std::string& node_id = node.node_id();
  return ResourceExhaustedError(std::string(rpc) +
                                " rate limit exceeded for node '" + node_id +
                                "' in rendezvous '" + rdzv_id + "'; slow down");
}

StatusOr<RendezvousJob*> RendezvousState::FindJob(
    const std::string& rdzv_id) const {
  auto it = jobs_.find(rdzv_id);
  if (it == jobs_.end()) {
    return NotFoundError("unknown rendezvous '" + rdzv_id + "'");
  }
  return it->second.get();
}

StatusOr<RendezvousJob*> RendezvousState::GetOrCreate(
    const std::string& rdzv_id, const v1::JobConfig& config, bool* created) {
  *created = false;
  auto it = jobs_.find(rdzv_id);
  if (it != jobs_.end()) {
    DDP_RETURN_IF_ERROR(it->second->CheckConfig(config));
    return it->second.get();
  }
  if (jobs_.size() >= limits_.max_jobs) {
    return ResourceExhaustedError(
        "rendezvous server holds " + std::to_string(limits_.max_jobs) +
        " jobs already; no new job '" + rdzv_id + "'");
  }
  *created = true;
  auto job =
      std::make_unique<RendezvousJob>(rdzv_id, config, defaults_, clock_);
  RendezvousJob* raw = job.get();
  jobs_.emplace(rdzv_id, std::move(job));
  deadline_changed_ = true;
  DDP_LOG(INFO) << "rendezvous '" << rdzv_id << "' created: nnodes "
                << config.min_nodes() << ":" << config.max_nodes()
                << ", max_restarts " << config.max_restarts();
  return raw;
}

Status RendezvousState::Join(const v1::JoinRequest& request, WaiterId waiter) {
  DDP_RETURN_IF_ERROR(CheckRdzvId(request.rdzv_id()));
  DDP_RETURN_IF_ERROR(CheckConfig(request.config()));
  DDP_RETURN_IF_ERROR(CheckNode(request.node()));
  DDP_RETURN_IF_ERROR(CheckWorldSize(request.config(), request.node()));
  // The previous round moves a fresh job's round number (server restart).
  DDP_RETURN_IF_ERROR(CheckRound(request.previous().round()));
  DDP_RETURN_IF_ERROR(CheckReason(request.unhealthy()));
  DDP_RETURN_IF_ERROR(
      CheckRate(&join_limiter_, "Join", request.rdzv_id(), request.node()));
  // A fresh agent (no previous round, not a node of the job) that reuses the
  // rdzv_id of a finished job starts a new job: re-running a command must
  // not hit a closed rendezvous (torchrun's RendezvousClosedError). Nodes of
  // the finished job still get the clear "closed" error.
  std::unique_ptr<RendezvousJob> finished;
  if (auto it = jobs_.find(request.rdzv_id());
      it != jobs_.end() && it->second->finished() &&
      request.previous().round() == 0 &&
      !it->second->HasNode(request.node().node_id())) {
    finished = std::move(it->second);
    jobs_.erase(it);
  }
  bool created = false;
  const size_t before = outcomes_.size();
  StatusOr<RendezvousJob*> found =
      GetOrCreate(request.rdzv_id(), request.config(), &created);
  Status s =
      found.ok() ? (*found)->Join(request, waiter, &outcomes_) : found.status();
  if (!s.ok()) {
    if (found.ok() && !request.unhealthy().empty()) {
      // An unhealthy node's report stays counted, in a job it created too.
      deadline_changed_ |= (*found)->TakeDeadlineMoved();
      return s;
    }
    if (created) jobs_.erase(request.rdzv_id());
    if (finished) jobs_[request.rdzv_id()] = std::move(finished);
    return s;
  }
  RendezvousJob* job = *found;
  TrackWaiter(request.rdzv_id(), waiter, before);
  deadline_changed_ |= job->TakeDeadlineMoved();
  return Status::Ok();
}

StatusOr<v1::HeartbeatResponse> RendezvousState::Heartbeat(
    const v1::HeartbeatRequest& req) {
  DDP_RETURN_IF_ERROR(CheckRdzvId(req.rdzv_id()));
  DDP_RETURN_IF_ERROR(CheckNode(req.node()));
  DDP_RETURN_IF_ERROR(CheckProgress(req));
  DDP_RETURN_IF_ERROR(
      CheckRate(&heartbeat_limiter_, "Heartbeat", req.rdzv_id(), req.node()));
  if (jobs_.count(req.rdzv_id()) == 0 && req.current().round() == 0) {
    // Not joined yet (its Join is on its way): nothing to do, nothing kept.
    v1::HeartbeatResponse reply;
    reply.set_action(v1::HeartbeatResponse::ACTION_CONTINUE);
    return reply;
  }
  DDP_RETURN_IF_ERROR(CheckConfig(req.config()));
  DDP_RETURN_IF_ERROR(CheckAssignment(req.current(), req.config()));
  bool created = false;
  DDP_ASSIGN_OR_RETURN(RendezvousJob * job,
                       GetOrCreate(req.rdzv_id(), req.config(), &created));
  if (created) {
    // The server restarted under a running job: rebuild it from the nodes.
    job->AdoptRunningRound(req.current());
    DDP_LOG(INFO) << "rendezvous '" << req.rdzv_id()
                  << "' re-registered by node '" << req.node().node_id()
                  << "' at round " << req.current().round();
  }
  auto reply = job->Heartbeat(req, &outcomes_);
  if (!reply.ok() && created) {
    jobs_.erase(req.rdzv_id());
  } else {
    deadline_changed_ |= job->TakeDeadlineMoved();
  }
  if (reply.ok()) {
    AddStacksRequest(req.rdzv_id(), req.node().node_id(), &*reply);
    NoteRates(req, &*reply);
  }
  return reply;
}

std::optional<Successor> RendezvousState::SuccessorOf(
    const std::string& rdzv_id,
    const std::vector<std::string>& own_hosts) const {
  auto it = jobs_.find(rdzv_id);
  if (it == jobs_.end()) return std::nullopt;
  return ChooseSuccessor(it->second->LiveNodes(), own_hosts);
}

Status RendezvousState::ReportFailure(const v1::ReportFailureRequest& request,
                                      WaiterId waiter) {
  DDP_RETURN_IF_ERROR(CheckRdzvId(request.rdzv_id()));
  DDP_RETURN_IF_ERROR(CheckNodeId(request.node_id(), request.instance()));
  DDP_RETURN_IF_ERROR(CheckReason(request.reason()));
  DDP_RETURN_IF_ERROR(CheckRound(request.round()));
  DDP_ASSIGN_OR_RETURN(RendezvousJob * job, FindJob(request.rdzv_id()));
  const size_t before = outcomes_.size();
  DDP_RETURN_IF_ERROR(job->ReportFailure(request, waiter, &outcomes_));
  TrackWaiter(request.rdzv_id(), waiter, before);
  deadline_changed_ |= job->TakeDeadlineMoved();
  return Status::Ok();
}

Status RendezvousState::ReportSuccess(const v1::ReportSuccessRequest& request,
                                      WaiterId waiter) {
  DDP_RETURN_IF_ERROR(CheckRdzvId(request.rdzv_id()));
  DDP_RETURN_IF_ERROR(CheckNodeId(request.node_id(), request.instance()));
  DDP_RETURN_IF_ERROR(CheckRound(request.round()));
  DDP_ASSIGN_OR_RETURN(RendezvousJob * job, FindJob(request.rdzv_id()));
  const size_t before = outcomes_.size();
  DDP_RETURN_IF_ERROR(job->ReportSuccess(request, waiter, &outcomes_));
  TrackWaiter(request.rdzv_id(), waiter, before);
  return Status::Ok();
}

StatusOr<v1::ReplaceRankResponse> RendezvousState::ReplaceRank(
    const v1::ReplaceRankRequest& request) {
  DDP_RETURN_IF_ERROR(CheckRdzvId(request.rdzv_id()));
  DDP_RETURN_IF_ERROR(CheckNodeId(request.node_id(), request.instance()));
  DDP_RETURN_IF_ERROR(CheckReason(request.reason()));
  DDP_RETURN_IF_ERROR(CheckRound(request.round()));
  if (request.generation() < 0 || !std::isfinite(request.heal_seconds()) ||
      request.heal_seconds() < 0) {
    return InvalidArgumentError("ReplaceRank: a negative generation or heal "
                                "time");
  }
  DDP_ASSIGN_OR_RETURN(RendezvousJob * job, FindJob(request.rdzv_id()));
  return job->ReplaceRank(request);
}

Status RendezvousState::Leave(const v1::LeaveRequest& request) {
  DDP_RETURN_IF_ERROR(CheckRdzvId(request.rdzv_id()));
  DDP_RETURN_IF_ERROR(CheckNodeId(request.node_id(), request.instance()));
  DDP_RETURN_IF_ERROR(CheckReason(request.reason()));
  DDP_ASSIGN_OR_RETURN(RendezvousJob * job, FindJob(request.rdzv_id()));
  deadline_changed_ = true;
  return job->Leave(request, &outcomes_);
}

Status RendezvousState::Close(const v1::CloseRequest& request) {
  DDP_RETURN_IF_ERROR(CheckRdzvId(request.rdzv_id()));
  DDP_RETURN_IF_ERROR(CheckReason(request.reason()));
  DDP_ASSIGN_OR_RETURN(RendezvousJob * job, FindJob(request.rdzv_id()));
  job->Close(request.succeeded(), request.reason(), &outcomes_);
  return Status::Ok();
}

StatusOr<v1::StatusResponse> RendezvousState::GetStatus(
    const std::string& rdzv_id) const {
  v1::StatusResponse reply;
  if (!rdzv_id.empty()) {
    DDP_ASSIGN_OR_RETURN(RendezvousJob * job, FindJob(rdzv_id));
    *reply.add_jobs() = job->GetStatus();
    AddRates(reply.mutable_jobs(0));
    return reply;
  }
  for (const auto& [id, job] : jobs_) {
    *reply.add_jobs() = job->GetStatus();
    AddRates(reply.mutable_jobs(reply.jobs_size() - 1));
  }
  return reply;
}

v1::StatusResponse RendezvousState::GetStatusPage(
    const std::string& page_after) const {
  v1::StatusResponse reply;
  size_t cost = 0;
  for (auto it = jobs_.upper_bound(page_after); it != jobs_.end(); ++it) {
    if (reply.jobs_size() > 0 && cost >= kStatusPageCost) {
      reply.set_next_page_after(reply.jobs(reply.jobs_size() - 1).rdzv_id());
      break;
    }
    v1::JobStatus* job = reply.add_jobs();
    *job = it->second->GetStatus();
    AddRates(job);
    cost += 1 + job->nodes_size();
    for (const v1::NodeStatus& n : job->nodes()) cost += n.rank_rates_size();
  }
  return reply;
}

void RendezvousState::TrackWaiter(const std::string& rdzv_id, WaiterId waiter,
                                  size_t first_new_outcome) {
  bool answered = false;
  for (size_t i = first_new_outcome; i < outcomes_.size(); ++i) {
    answered |= outcomes_[i].waiter == waiter;
    waiter_job_.erase(outcomes_[i].waiter);
  }
  if (!answered) waiter_job_[waiter] = rdzv_id;
}

void RendezvousState::CancelWaiter(WaiterId waiter) {
  auto it = waiter_job_.find(waiter);
  if (it == waiter_job_.end()) return;
  auto job = jobs_.find(it->second);
  waiter_job_.erase(it);
  if (job != jobs_.end()) job->second->CancelWaiter(waiter, &outcomes_);
  deadline_changed_ = true;
}

void RendezvousState::Tick() {
  const Clock::TimePoint now = clock_->Now();
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    RendezvousJob& job = *it->second;
    job.Tick(&outcomes_);
    // Forget finished jobs after their TTL, and jobs nobody is in any more
    // (every agent left): a later launch with the same id starts afresh
    // instead of hitting a join_timeout failure of an empty job.
    if (job.abandoned() || (job.finished() && now - job.finished_at() >=
                                                  defaults_.finished_job_ttl)) {
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
}

std::optional<Clock::TimePoint> RendezvousState::NextDeadline() const {
  std::optional<Clock::TimePoint> next;
  for (const auto& [id, job] : jobs_) {
    auto d = job->NextDeadline();
    if (d && (!next || *d < *next)) next = d;
  }
  return next;
}

bool RendezvousState::TakeDeadlineChanged() {
  const bool changed = deadline_changed_;
  deadline_changed_ = false;
  return changed;
}

std::vector<Outcome> RendezvousState::TakeOutcomes() {
  std::vector<Outcome> out;
  out.swap(outcomes_);
  for (const Outcome& o : out) waiter_job_.erase(o.waiter);
  return out;
}

bool RendezvousState::AllHeard() const {
  for (const auto& [id, job] : jobs_) {
    if (!job->AllHeard()) return false;
  }
  return true;
}

// --------------------------------------------------------------------------
// RendezvousState's hang diagnosis across a job's nodes: stack dumps (the
// Stacks rpc: validation, the job's running nodes, the board of stack_board.h)
// and the step rates heartbeats carry (stragglers).

StatusOr<v1::StacksResponse> RendezvousState::Stacks(
    const v1::StacksRequest& request) {
  // Boards of jobs the server forgot go first.
  for (auto it = boards_.begin(); it != boards_.end();) {
    it = jobs_.count(it->first) ? std::next(it) : boards_.erase(it);
  }
  if (request.rdzv_id().empty()) {
    return InvalidArgumentError("rdzv_id is empty");
  }
  if (request.reason().size() > kMaxStacksReasonBytes) {
    return InvalidArgumentError("stacks reason is longer than 256 bytes");
  }
  DDP_RETURN_IF_ERROR(CheckRankStacks(request));
  const bool answers = !request.node_id().empty();
  if (!answers && (request.ranks_size() > 0 || request.part() > 0 ||
                   request.more_parts())) {
    return InvalidArgumentError("ranks without the node_id that sends them");
  }
  if (request.request_id() == 0 && request.part() > 0) {
    return InvalidArgumentError(
        "a request that starts a stack dump carries part 0 of its answer");
  }
  DDP_ASSIGN_OR_RETURN(RendezvousJob * job, FindJob(request.rdzv_id()));
  if (answers) {
    // Only the process that joined as the node answers for it: another
    // caller cannot replace a node's stacks.
    DDP_RETURN_IF_ERROR(CheckNodeId(request.node_id(), request.instance()));
    DDP_RETURN_IF_ERROR(
        job->CheckMember(request.node_id(), request.instance()));
  }
  const std::vector<BoardNode> running = RunningNodes(*job);
  auto board = boards_.find(request.rdzv_id());
  uint64_t id = request.request_id();
  if (id == 0) {
    if (running.empty()) {
      return FailedPreconditionError("no round of rendezvous '" +
                                     request.rdzv_id() + "' runs");
    }
    board = boards_.try_emplace(request.rdzv_id()).first;
    id = board->second.Start(
        request.reason().empty() ? "requested" : request.reason(), running,
        clock_->Now());
  } else if (board == boards_.end()) {
    return NotFoundError("stack dump " + std::to_string(id) +
                         " is not the job's latest (0)");
  }
  if (answers) {
    std::vector<v1::RankStack> ranks(request.ranks().begin(),
                                     request.ranks().end());
    DDP_RETURN_IF_ERROR(
        board->second.Answer(id, request.node_id(), request.part(),
                             request.more_parts(), std::move(ranks)));
  }
  return board->second.Get(id, running, request.ranks_from());
}

StatusOr<v1::StacksResponse> RendezvousState::PeekStacks(
    const std::string& rdzv_id) const {
  auto board = boards_.find(rdzv_id);
  DDP_ASSIGN_OR_RETURN(RendezvousJob * job, FindJob(rdzv_id));
  if (board == boards_.end()) return NotFoundError("no stack dump");
  return board->second.Get(board->second.latest(), RunningNodes(*job));
}

void RendezvousState::AddStacksRequest(const std::string& rdzv_id,
                                       const std::string& node_id,
                                       v1::HeartbeatResponse* reply) const {
  auto it = boards_.find(rdzv_id);
  if (it == boards_.end()) return;
  std::string reason;
  const uint64_t id = it->second.PendingFor(node_id, clock_->Now(), &reason);
  if (id == 0) return;
  reply->set_stacks_request(id);
  reply->set_stacks_reason(reason);
}

void RendezvousState::NoteRates(const v1::HeartbeatRequest& req,
                                v1::HeartbeatResponse* reply) {
  reply->set_median_steps_per_s(-1);
  auto job = jobs_.find(req.rdzv_id());
  if (job == jobs_.end()) {
    rates_.erase(req.rdzv_id());
    return;
  }
  auto& nodes = rates_[req.rdzv_id()];
  if ((req.rank_rates_size() > 0 || req.worker_restarts() > 0) &&
      req.rank_rates_size() <= kMaxRates) {
    NodeProgress& progress = nodes[req.node().node_id()];
    progress.ranks.assign(req.rank_rates().begin(), req.rank_rates().end());
    progress.worker_restarts = req.worker_restarts();
  } else {
    nodes.erase(req.node().node_id());
  }
  std::vector<double> known;
  for (auto it = nodes.begin(); it != nodes.end();) {
    if (!job->second->HasNode(it->first)) {
      it = nodes.erase(it);
      continue;
    }
    for (const v1::RankRate& r : it->second.ranks) {
      if (r.steps_per_s() >= 0) known.push_back(r.steps_per_s());
    }
    ++it;
  }
  if (nodes.empty()) rates_.erase(req.rdzv_id());
  if (known.empty()) return;
  std::sort(known.begin(), known.end());
  const size_t n = known.size();
  reply->set_median_steps_per_s(
      n % 2 ? known[n / 2] : (known[n / 2 - 1] + known[n / 2]) / 2);
}

void RendezvousState::AddRates(v1::JobStatus* job) const {
  auto rates = rates_.find(job->rdzv_id());
  if (rates == rates_.end()) return;
  for (v1::NodeStatus& n : *job->mutable_nodes()) {
    auto it = rates->second.find(n.node_id());
    if (it == rates->second.end()) continue;
    for (const v1::RankRate& r : it->second.ranks) *n.add_rank_rates() = r;
    n.set_worker_restarts(it->second.worker_restarts);
  }
}

}  // namespace ddprun::rendezvous
