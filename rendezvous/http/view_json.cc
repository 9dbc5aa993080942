#include "rendezvous/http/view_json.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "diagnosis/stack_diagnosis.h"
#include "diagnosis/stack_summary.h"
#include "rendezvous/core/job_timeline.h"

namespace ddprun::rendezvous::http {
namespace {

std::string Strip(std::string name, const std::string& prefix) {
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return name;
}

// A number the page may show, or null when not known (< 0).
Json Known(double v) { return v < 0 ? Json() : Json(v); }

Json NodeToJson(const v1::NodeStatus& n) {
  Json j;
  j["node_id"] = n.node_id();
  j["host"] = n.host();
  j["addr"] = n.addr();
  j["role"] = n.role().empty() ? "default" : n.role();
  j["state"] = NodeStateName(n.state());
  j["group_rank"] = n.group_rank() < 0 ? Json() : Json(n.group_rank());
  j["rank_offset"] = n.rank_offset() < 0 ? Json() : Json(n.rank_offset());
  j["local_world_size"] = n.local_world_size();
  j["heartbeat_age_s"] = n.heartbeat_age_ms() / 1000.0;
  j["worker_restarts"] = n.worker_restarts();
  return j;
}

Json RankToJson(const v1::RankRate& r, const v1::NodeStatus& node) {
  Json j;
  j["rank"] = r.rank();
  j["local_rank"] = r.local_rank();
  j["node_id"] = node.node_id();
  j["host"] = node.host().empty() ? node.addr() : node.host();
  j["group_rank"] = node.group_rank() < 0 ? Json() : Json(node.group_rank());
  j["pid"] = r.pid() == 0 ? Json() : Json(r.pid());
  j["state"] = RankStateName(r.state());
  j["steps"] = r.steps();
  j["steps_per_s"] = Known(r.steps_per_s());
  j["total_steps"] = r.total_steps() > 0 ? Json(r.total_steps()) : Json();
  j["eta_s"] = Known(EtaSeconds(r.steps(), r.total_steps(), r.steps_per_s()));
  j["straggler"] = r.straggler();
  Json scalars = Json::object();
  for (const v1::Scalar& s : r.scalars()) scalars[s.name()] = s.value();
  j["scalars"] = std::move(scalars);
  return j;
}

Json EventToJson(const v1::JobEvent& e) {
  Json j;
  j["time"] = e.unix_time();
  j["kind"] = EventKindName(e.kind());
  j["round"] = e.round();
  j["cause"] = e.kind() == v1::JobEvent::KIND_ROUND_ENDED
                   ? Json(JobTimeline::CauseKey(e.cause()))
                   : Json();
  j["reason"] = e.reason();
  if (e.kind() == v1::JobEvent::KIND_ROUND_COMPLETE) {
    j["nodes"] = e.nodes();
    j["world_size"] = e.world_size();
  }
  return j;
}

Json DiagnosisToJson(const v1::StacksResponse& dump) {
  std::vector<diagnosis::RankStacks> ranks;
  Json lines = Json::array();
  for (const v1::RankStack& r : dump.ranks()) {
    ranks.push_back(diagnosis::FromSummary(
        {r.rank(), r.pid(), r.group_rank(), r.host(), r.stack(), r.missing()}));
    std::string line = diagnosis::ConsoleLine(ranks.back(), 8);
    while (!line.empty() && (line.back() == '\n' || line.front() == ' ')) {
      if (line.back() == '\n') line.pop_back();
      if (!line.empty() && line.front() == ' ') line.erase(0, 1);
    }
    lines.push_back(line);
  }
  Json j;
  j["request_id"] = dump.request_id();
  j["reason"] = dump.reason();
  j["complete"] = dump.complete();
  j["paragraph"] = diagnosis::DiagnoseHang(ranks);
  j["ranks"] = std::move(lines);
  j["missing_nodes"] = Json::array();
  for (const std::string& n : dump.missing_nodes()) {
    j["missing_nodes"].push_back(n);
  }
  return j;
}

}  // namespace

std::string JobStateName(v1::JobStatus::State state) {
  return Strip(v1::JobStatus::State_Name(state), "STATE_");
}
std::string NodeStateName(v1::NodeStatus::State state) {
  return Strip(v1::NodeStatus::State_Name(state), "STATE_");
}
std::string RankStateName(v1::RankRate::State state) {
  return state == v1::RankRate::STATE_UNSPECIFIED
             ? "unknown"
             : Strip(v1::RankRate::State_Name(state), "STATE_");
}
std::string EventKindName(v1::JobEvent::Kind kind) {
  return Strip(v1::JobEvent::Kind_Name(kind), "KIND_");
}

double EtaSeconds(int64_t steps, int64_t total_steps, double steps_per_s) {
  if (total_steps <= 0 || steps_per_s <= 0 || steps > total_steps) return -1;
  return static_cast<double>(total_steps - steps) / steps_per_s;
}

Json JobToJson(const v1::JobStatus& job,
               const v1::StacksResponse* latest_stacks) {
  Json j;
  j["id"] = job.rdzv_id();
  j["state"] = JobStateName(job.state());
  j["round"] = job.round();
  j["restart_count"] = job.restart_count();
  j["max_restarts"] = job.config().max_restarts();
  j["min_nodes"] = job.config().min_nodes();
  j["max_nodes"] = job.config().max_nodes();
  j["reason"] = job.reason();

  Json nodes = Json::array();
  std::vector<std::pair<const v1::RankRate*, const v1::NodeStatus*>> ranks;
  int world_size = 0;
  for (const v1::NodeStatus& n : job.nodes()) {
    nodes.push_back(NodeToJson(n));
    if (n.state() == v1::NodeStatus::STATE_RUNNING ||
        n.state() == v1::NodeStatus::STATE_SUCCEEDED) {
      world_size += static_cast<int>(n.local_world_size());
    }
    for (const v1::RankRate& r : n.rank_rates()) ranks.emplace_back(&r, &n);
  }
  std::sort(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) {
    return a.first->rank() != b.first->rank()
               ? a.first->rank() < b.first->rank()
               : a.second->node_id() < b.second->node_id();
  });
  j["world_size"] = world_size;
  j["nodes"] = std::move(nodes);

  Json rank_list = Json::array();
  std::vector<double> rates;
  double eta = -1;
  int64_t steps_min = -1, total_max = 0;
  int stragglers = 0;
  for (const auto& [r, n] : ranks) {
    rank_list.push_back(RankToJson(*r, *n));
    if (r->state() == v1::RankRate::STATE_FAILED ||
        r->state() == v1::RankRate::STATE_SUCCEEDED) {
      continue;
    }
    if (r->steps_per_s() >= 0) rates.push_back(r->steps_per_s());
    stragglers += r->straggler() ? 1 : 0;
    // The job is done when its slowest rank is.
    eta = std::max(eta,
                   EtaSeconds(r->steps(), r->total_steps(), r->steps_per_s()));
    if (r->total_steps() > 0) {
      steps_min = steps_min < 0 ? r->steps() : std::min(steps_min, r->steps());
      total_max = std::max(total_max, r->total_steps());
    }
  }
  j["ranks"] = std::move(rank_list);
  double median = -1;
  if (!rates.empty()) {
    std::sort(rates.begin(), rates.end());
    const size_t k = rates.size();
    median = k % 2 ? rates[k / 2] : (rates[k / 2 - 1] + rates[k / 2]) / 2;
  }
  j["median_steps_per_s"] = Known(median);
  j["stragglers"] = stragglers;
  Json progress;
  progress["steps"] = steps_min < 0 ? Json() : Json(steps_min);
  progress["total_steps"] = total_max > 0 ? Json(total_max) : Json();
  progress["eta_s"] = Known(eta);
  j["progress"] = std::move(progress);

  Json events = Json::array();
  for (const v1::JobEvent& e : job.events()) events.push_back(EventToJson(e));
  j["events"] = std::move(events);
  Json ends = Json::object();
  for (const v1::RoundEnds& e : job.round_ends()) {
    ends[JobTimeline::CauseKey(e.cause())] = e.count();
  }
  j["round_ends"] = std::move(ends);
  j["diagnosis"] =
      latest_stacks != nullptr ? DiagnosisToJson(*latest_stacks) : Json();
  return j;
}

}  // namespace ddprun::rendezvous::http
