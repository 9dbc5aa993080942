#include "rendezvous/http/job_metrics.h"

#include <algorithm>
#include <map>

#include "rendezvous/core/job_timeline.h"
#include "rendezvous/http/metrics_text.h"
#include "rendezvous/http/view_json.h"

namespace ddprun::rendezvous::http {
namespace {

using Labels = MetricsText::Labels;

// The job's samples of one family, gathered per job, written per family.
struct RankRow {
  const v1::JobStatus* job;
  const v1::NodeStatus* node;
  const v1::RankRate* rank;
};

Labels RankLabels(const RankRow& r) {
  return {{"rdzv_id", r.job->rdzv_id()},
          {"rank", std::to_string(r.rank->rank())},
          {"local_rank", std::to_string(r.rank->local_rank())},
          {"node", r.node->node_id()},
          {"host", r.node->host().empty() ? r.node->addr() : r.node->host()}};
}

void JobFamilies(const v1::StatusResponse& status, MetricsText* m) {
  m->Family("ddprun_rendezvous_jobs", "gauge",
            "Jobs the rendezvous server holds, by state.");
  std::map<std::string, int> by_state;
  for (const char* s : {"open", "running", "succeeded", "failed"}) {
    by_state[s] = 0;
  }
  for (const auto& job : status.jobs()) ++by_state[JobStateName(job.state())];
  for (const auto& [state, n] : by_state) m->Sample({{"state", state}}, n);

  m->Family("ddprun_job_state", "gauge",
            "1 for the job's current state (open, running, succeeded, "
            "failed), 0 for the others.");
  for (const auto& job : status.jobs()) {
    const std::string now = JobStateName(job.state());
    for (const char* s : {"open", "running", "succeeded", "failed"}) {
      m->Sample({{"rdzv_id", job.rdzv_id()}, {"state", s}}, now == s ? 1 : 0);
    }
  }
  m->Family("ddprun_job_round", "gauge",
            "The job's current round number (open or running).");
  for (const auto& job : status.jobs()) {
    m->Sample({{"rdzv_id", job.rdzv_id()}}, static_cast<double>(job.round()));
  }
  m->Family("ddprun_job_restarts", "gauge",
            "Restart budget spent by the job (TORCHELASTIC_RESTART_COUNT of "
            "its next round).");
  for (const auto& job : status.jobs()) {
    m->Sample({{"rdzv_id", job.rdzv_id()}}, job.restart_count());
  }
  m->Family("ddprun_job_max_restarts", "gauge",
            "The job's restart budget (--max_restarts).");
  for (const auto& job : status.jobs()) {
    m->Sample({{"rdzv_id", job.rdzv_id()}}, job.config().max_restarts());
  }
  m->Family("ddprun_job_round_ends_total", "counter",
            "Rounds of the job that ended, by cause: worker_failure, "
            "node_lost, node_left, node_joined, node_rejoined, "
            "server_restart.");
  for (const auto& job : status.jobs()) {
    for (const v1::RoundEnds& e : job.round_ends()) {
      m->Sample({{"rdzv_id", job.rdzv_id()},
                 {"cause", JobTimeline::CauseKey(e.cause())}},
                static_cast<double>(e.count()));
    }
  }
  m->Family("ddprun_job_nodes", "gauge", "Nodes the job knows, by state.");
  for (const auto& job : status.jobs()) {
    std::map<std::string, int> nodes;
    for (const char* s :
         {"joining", "waiting", "running", "expected", "succeeded"}) {
      nodes[s] = 0;
    }
    for (const auto& n : job.nodes()) ++nodes[NodeStateName(n.state())];
    for (const auto& [state, n] : nodes) {
      m->Sample({{"rdzv_id", job.rdzv_id()}, {"state", state}}, n);
    }
  }
  m->Family("ddprun_job_stragglers", "gauge",
            "Ranks of the job its agents currently report as stragglers.");
  for (const auto& job : status.jobs()) {
    int n = 0;
    for (const auto& node : job.nodes()) {
      for (const auto& r : node.rank_rates()) n += r.straggler() ? 1 : 0;
    }
    m->Sample({{"rdzv_id", job.rdzv_id()}}, n);
  }
  m->Family("ddprun_job_eta_seconds", "gauge",
            "Seconds until the job's slowest rank reaches the total steps "
            "its worker reports (absent when not known).");
  for (const auto& job : status.jobs()) {
    double eta = -1;
    for (const auto& node : job.nodes()) {
      for (const auto& r : node.rank_rates()) {
        if (r.state() == v1::RankRate::STATE_RUNNING ||
            r.state() == v1::RankRate::STATE_UNSPECIFIED) {
          eta = std::max(
              eta, EtaSeconds(r.steps(), r.total_steps(), r.steps_per_s()));
        }
      }
    }
    if (eta >= 0) m->Sample({{"rdzv_id", job.rdzv_id()}}, eta);
  }
}

void NodeFamilies(const v1::StatusResponse& status, MetricsText* m) {
  auto labels = [](const v1::JobStatus& job, const v1::NodeStatus& n) {
    return Labels{{"rdzv_id", job.rdzv_id()},
                  {"node", n.node_id()},
                  {"host", n.host().empty() ? n.addr() : n.host()}};
  };
  m->Family("ddprun_node_heartbeat_age_seconds", "gauge",
            "Seconds since the server last heard from the node.");
  for (const auto& job : status.jobs()) {
    for (const auto& n : job.nodes()) {
      m->Sample(labels(job, n), n.heartbeat_age_ms() / 1000.0);
    }
  }
  m->Family("ddprun_node_worker_restarts_total", "counter",
            "Times the node's agent restarted its worker group (any cause).");
  for (const auto& job : status.jobs()) {
    for (const auto& n : job.nodes()) {
      m->Sample(labels(job, n), n.worker_restarts());
    }
  }
}

void RankFamilies(const v1::StatusResponse& status, MetricsText* m) {
  std::vector<RankRow> rows;
  for (const auto& job : status.jobs()) {
    for (const auto& n : job.nodes()) {
      for (const auto& r : n.rank_rates()) rows.push_back({&job, &n, &r});
    }
  }
  m->Family("ddprun_rank_steps_per_second", "gauge",
            "The rank's training steps per second over the last seconds "
            "(absent until known).");
  for (const RankRow& r : rows) {
    if (r.rank->steps_per_s() >= 0) {
      m->Sample(RankLabels(r), r.rank->steps_per_s());
    }
  }
  m->Family("ddprun_rank_steps_total", "counter",
            "Steps the rank's worker process counted (from 0 after a "
            "restart).");
  for (const RankRow& r : rows) {
    m->Sample(RankLabels(r), static_cast<double>(r.rank->steps()));
  }
  m->Family("ddprun_rank_heartbeat_age_seconds", "gauge",
            "Seconds since the server last heard from the rank's node "
            "(its agent reports the rank).");
  for (const RankRow& r : rows) {
    m->Sample(RankLabels(r), r.node->heartbeat_age_ms() / 1000.0);
  }
  m->Family("ddprun_rank_straggler", "gauge",
            "1 while the rank's agent reports it as a straggler.");
  for (const RankRow& r : rows) {
    m->Sample(RankLabels(r), r.rank->straggler() ? 1 : 0);
  }
  m->Family("ddprun_rank_up", "gauge",
            "1 while the rank's worker runs (0: succeeded, failed or "
            "stopped).");
  for (const RankRow& r : rows) {
    const auto s = r.rank->state();
    m->Sample(RankLabels(r), s == v1::RankRate::STATE_RUNNING ||
                                     s == v1::RankRate::STATE_UNSPECIFIED
                                 ? 1
                                 : 0);
  }
  m->Family("ddprun_rank_total_steps", "gauge",
            "Steps the rank's worker reports it will count in all (absent "
            "when not reported).");
  for (const RankRow& r : rows) {
    if (r.rank->total_steps() > 0) {
      m->Sample(RankLabels(r), static_cast<double>(r.rank->total_steps()));
    }
  }
  m->Family("ddprun_rank_scalar", "gauge",
            "The last value of each scalar the rank's worker reports "
            "(loss, samples_per_s, ...), by name.");
  for (const RankRow& r : rows) {
    for (const auto& s : r.rank->scalars()) {
      Labels l = RankLabels(r);
      l.emplace_back("name", s.name());
      m->Sample(l, s.value());
    }
  }
}

void RpcFamilies(const std::vector<RpcStats::Method>& rpcs, MetricsText* m) {
  m->Family("ddprun_rendezvous_rpcs_total", "counter",
            "Rendezvous rpcs answered, by method and gRPC status code.");
  for (const auto& rpc : rpcs) {
    for (int code = 0; code < RpcStats::kCodes; ++code) {
      if (rpc.calls[code] == 0) continue;
      m->Sample({{"method", rpc.name}, {"code", RpcStats::CodeName(code)}},
                static_cast<double>(rpc.calls[code]));
    }
  }
  m->Family("ddprun_rendezvous_rpc_duration_seconds", "histogram",
            "Time from a rendezvous rpc's arrival to its answer (a Join "
            "waits for its round).");
  for (const auto& rpc : rpcs) {
    for (size_t b = 0; b < RpcStats::kBuckets.size(); ++b) {
      m->Sample({{"method", rpc.name},
                 {"le", MetricsText::Number(RpcStats::kBuckets[b])}},
                static_cast<double>(rpc.le[b]), "_bucket");
    }
    m->Sample({{"method", rpc.name}, {"le", "+Inf"}},
              static_cast<double>(rpc.count), "_bucket");
    m->Sample({{"method", rpc.name}}, rpc.sum_seconds, "_sum");
    m->Sample({{"method", rpc.name}}, static_cast<double>(rpc.count), "_count");
  }
}

}  // namespace

std::string RenderMetrics(const v1::StatusResponse& status,
                          const std::vector<RpcStats::Method>& rpcs,
                          const std::string& version) {
  MetricsText m;
  m.Family("ddprun_build_info", "gauge", "The server's ddprun version.");
  m.Sample({{"version", version}}, 1);
  JobFamilies(status, &m);
  NodeFamilies(status, &m);
  RankFamilies(status, &m);
  RpcFamilies(rpcs, &m);
  return m.text();
}

}  // namespace ddprun::rendezvous::http
