#pragma once

// Test helper shared by the RendezvousState unit tests: simulated agents on
// a FakeClock. Header-only; test code only.
#include "ddprun_catch.h"

#include <functional>
#include <map>
#include <string>

#include "common/clock.h"
#include "rendezvous/core/rendezvous_state.h"

namespace ddprun::rendezvous {

// One simulated agent per node id; records the answers to its parked calls.
class Harness {
 public:
  explicit Harness(int min, int max, int max_restarts = 0,
                   JobDefaults defaults = {}, StateLimits limits = {})
      : state_(&clock_, defaults, limits) {
    config_.set_min_nodes(min);
    config_.set_max_nodes(max);
    config_.set_max_restarts(max_restarts);
    config_.set_join_timeout_ms(60000);
    config_.set_last_call_timeout_ms(5000);
    config_.set_heartbeat_timeout_ms(3000);
  }

  v1::JoinRequest Request(const std::string& node, int lws = 1, int hint = -1,
                          const std::string& role = "default") {
    v1::JoinRequest r;
    r.set_rdzv_id("job");
    *r.mutable_config() = config_;
    v1::NodeInfo* n = r.mutable_node();
    n->set_node_id(node);
    n->set_instance(Instance(node));
    n->set_role(role);
    n->set_local_world_size(lws);
    n->set_node_rank_hint(hint);
    n->set_addr(hosts_.count(node)
                    ? hosts_.at(node)
                    : "10.0.0." + std::to_string(Instance(node)));
    n->set_master_port(29500 + static_cast<int>(Instance(node)));
    *r.mutable_previous() = assignments_[node];
    return r;
  }

  // Joins and returns the waiter id; the answer lands in Answer(node).
  Status Join(const v1::JoinRequest& r) {
    const WaiterId w = next_waiter_++;
    waiter_node_[w] = r.node().node_id();
    Status s = state_.Join(r, w);
    Collect();
    return s;
  }
  Status Join(const std::string& node, int lws = 1, int hint = -1) {
    return Join(Request(node, lws, hint));
  }

  StatusOr<v1::HeartbeatResponse> TryHeartbeat(const std::string& node) {
    v1::HeartbeatRequest r;
    r.set_rdzv_id("job");
    *r.mutable_config() = config_;
    *r.mutable_node() = Request(node).node();
    *r.mutable_current() = assignments_[node];
    auto reply = state_.Heartbeat(r);
    Collect();
    return reply;
  }
  v1::HeartbeatResponse Heartbeat(const std::string& node) {
    auto reply = TryHeartbeat(node);
    REQUIRE(reply.ok());
    return *reply;
  }

  // The reply lands in Answer(node + "/failure").failure.
  Status Fail(const std::string& node) {
    v1::ReportFailureRequest r;
    r.set_rdzv_id("job");
    r.set_node_id(node);
    r.set_instance(Instance(node));
    r.set_round(assignments_[node].round());
    r.set_reason("exit code 1");
    const WaiterId w = next_waiter_++;
    waiter_node_[w] = node + "/failure";
    Status s = state_.ReportFailure(r, w);
    Collect();
    return s;
  }

  Status Succeed(const std::string& node) {
    v1::ReportSuccessRequest r;
    r.set_rdzv_id("job");
    r.set_node_id(node);
    r.set_instance(Instance(node));
    r.set_round(assignments_[node].round());
    const WaiterId w = next_waiter_++;
    waiter_node_[w] = node + "/success";
    Status s = state_.ReportSuccess(r, w);
    Collect();
    return s;
  }

  void Advance(Clock::Duration d) {
    clock_.Advance(d);
    state_.Tick();
    Collect();
  }

  // The answer to the node's last parked call, if any arrived.
  bool Answered(const std::string& key) const {
    return answers_.count(key) != 0;
  }
  const Outcome& Answer(const std::string& key) const {
    return answers_.at(key);
  }
  void ForgetAnswers() { answers_.clear(); }
  const v1::Assignment& Of(const std::string& node) {
    return assignments_[node];
  }
  v1::JobStatus Job() {
    auto s = state_.GetStatus("job");
    REQUIRE(s.ok());
    return s->jobs(0);
  }

  FakeClock clock_;
  RendezvousState state_;
  v1::JobConfig config_;
  // Host (NodeInfo.addr) of a node; default "10.0.0.<instance>".
  std::map<std::string, std::string> hosts_;

  // The instance node `node`'s agent process sends.
  static uint64_t Instance(const std::string& node) {
    return std::hash<std::string>()(node) % 200 + 1;
  }

 private:
  void Collect() {
    for (Outcome& o : state_.TakeOutcomes()) {
      const std::string& key = waiter_node_.at(o.waiter);
      if (o.status.ok() && o.assignment.round() > 0) {
        assignments_[key] = o.assignment;
      }
      answers_[key] = o;
    }
  }

  WaiterId next_waiter_ = 1;
  std::map<WaiterId, std::string> waiter_node_;
  std::map<std::string, Outcome> answers_;
  std::map<std::string, v1::Assignment> assignments_;
};

}  // namespace ddprun::rendezvous
