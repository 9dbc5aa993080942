// The rendezvous target's seeds, built as requests (fuzz_seeds.h): a round
// with a worker failure and a second round, an elastic round after the last
// call, a server restart rebuilt from a heartbeat, a host failing repeatedly
// (the bad-host policy), a stack dump answered in parts and read in pages.
// The record format is rendezvous_fuzz_target.cc's.
#include <cstdint>
#include <string>
#include <vector>

#include "ddprun/v1/rendezvous.pb.h"
#include "fuzz_seeds.h"

namespace {

namespace v1 = ::ddprun::rendezvous::v1;

std::string Record(uint8_t op, const std::string& payload) {
  std::string r(1, static_cast<char>(op));
  r += static_cast<char>(payload.size() & 0xff);
  r += static_cast<char>(payload.size() >> 8);
  return r + payload;
}
std::string Msg(const google::protobuf::Message& m) {
  return m.SerializeAsString();
}
std::string Tick(uint8_t tenths) { return Record(7, std::string(1, tenths)); }

v1::JoinRequest Join(const std::string& node, int min, int max,
                     const std::string& addr, int64_t previous_round = 0) {
  v1::JoinRequest r;
  r.set_rdzv_id("job");
  r.mutable_config()->set_min_nodes(min);
  r.mutable_config()->set_max_nodes(max);
  r.mutable_config()->set_max_restarts(2);
  r.mutable_config()->set_bad_host_failures(2);
  r.mutable_config()->set_bad_host_cooldown_ms(5000);
  r.mutable_node()->set_node_id(node);
  r.mutable_node()->set_instance(7);
  r.mutable_node()->set_local_world_size(2);
  r.mutable_node()->set_node_rank_hint(-1);
  r.mutable_node()->set_addr(addr);
  r.mutable_node()->set_master_port(29500);
  r.mutable_previous()->set_round(previous_round);
  return r;
}

template <typename T>
T NodeCall(const std::string& node, int64_t round) {
  T r;
  r.set_rdzv_id("job");
  r.set_node_id(node);
  r.set_instance(7);
  r.set_round(round);
  return r;
}

}  // namespace

std::vector<std::string> DdprunFuzzSeeds() {
  std::vector<std::string> seeds;
  const auto a = Join("a", 2, 2, "10.0.0.1"), b = Join("b", 2, 2, "10.0.0.2");
  v1::HeartbeatRequest hb;
  hb.set_rdzv_id("job");
  *hb.mutable_config() = a.config();
  *hb.mutable_node() = a.node();
  hb.mutable_current()->set_round(1);
  hb.mutable_current()->set_group_world_size(2);
  // A round, a worker failure, a second round, success.
  seeds.push_back(Record(0, Msg(a)) + Record(0, Msg(b)) + Record(1, Msg(hb)) +
                  Record(2, Msg(NodeCall<v1::ReportFailureRequest>("a", 1))) +
                  Record(0, Msg(Join("a", 2, 2, "10.0.0.1", 1))) +
                  Record(0, Msg(Join("b", 2, 2, "10.0.0.2", 1))) + Tick(5) +
                  Record(3, Msg(NodeCall<v1::ReportSuccessRequest>("a", 2))) +
                  Record(3, Msg(NodeCall<v1::ReportSuccessRequest>("b", 2))) +
                  Record(6, ""));
  // An elastic 1:3 round after the last call, a leave, a close.
  v1::LeaveRequest leave;
  leave.set_rdzv_id("job");
  leave.set_node_id("a");
  leave.set_instance(7);
  v1::CloseRequest close;
  close.set_rdzv_id("job");
  seeds.push_back(Record(0, Msg(Join("a", 1, 3, "10.0.0.1"))) + Tick(110) +
                  Record(0, Msg(Join("c", 1, 3, "10.0.0.3"))) +
                  Record(4, Msg(leave)) + Record(8, std::string(1, 1)) +
                  Record(5, Msg(close)) + Record(6, ""));
  // A server restart: the job rebuilt from a heartbeat, a node lost.
  hb.mutable_current()->set_round(3);
  seeds.push_back(Record(1, Msg(hb)) + Tick(40) + Record(6, ""));
  // Repeated failures of one host (bad-host policy), then its cool-down.
  std::string bad = Record(0, Msg(a)) + Record(0, Msg(b));
  for (int round = 1; round <= 2; ++round) {
    bad += Record(2, Msg(NodeCall<v1::ReportFailureRequest>("a", round))) +
           Record(0, Msg(Join("b", 2, 2, "10.0.0.2", round))) +
           Record(0, Msg(Join("a", 2, 2, "10.0.0.1", round)));
  }
  seeds.push_back(bad + Tick(60) + Record(6, ""));
  // A stack dump across the round's nodes: node a starts it with its
  // answer in two parts, b answers, an operator polls the state and reads
  // the ranks a page at a time; Status a page at a time.
  auto stacks = [](const std::string& node, uint64_t id, uint32_t part,
                   bool more, int first_rank) {
    v1::StacksRequest r;
    r.set_rdzv_id("job");
    r.set_request_id(id);
    r.set_node_id(node);
    r.set_instance(7);
    r.set_part(part);
    r.set_more_parts(more);
    r.set_reason("watchdog on node 0");
    for (int k = 0; k < 2; ++k) {
      v1::RankStack* rank = r.add_ranks();
      rank->set_rank(first_rank + k);
      rank->set_pid(100 + first_rank + k);
      rank->set_host(node);
      rank->set_stack(
          "Current thread 0x1 (most recent call first):\n  File \"t.py\", "
          "line 9 in f\n");
    }
    return Record(9, Msg(r));
  };
  v1::StacksRequest poll;
  poll.set_rdzv_id("job");
  poll.set_request_id(1);
  poll.set_ranks_from(UINT32_MAX);
  v1::StacksRequest page = poll;
  page.set_ranks_from(1);
  v1::StatusRequest paged;
  paged.set_page_after("a");
  seeds.push_back(Record(0, Msg(a)) + Record(0, Msg(b)) + Record(1, Msg(hb)) +
                  stacks("a", 0, 0, true, 0) + stacks("a", 1, 1, false, 2) +
                  Record(9, Msg(poll)) + stacks("b", 1, 0, false, 4) +
                  Record(9, Msg(page)) + stacks("b", 1, 2, false, 6) +
                  Tick(30) + Record(9, Msg(poll)) + Record(6, Msg(paged)));
  return seeds;
}
