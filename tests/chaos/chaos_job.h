#pragma once

// Shared steps of the chaos scenarios: a 2-node grpc job on loopback and the
// checks every scenario makes once it is over.

#include <chrono>
#include <string>
#include <vector>

#include "tests/chaos/chaos_harness.h"

namespace ddprun::chaos {

// Short rendezvous timeouts so that node loss costs seconds.
inline const char* kFastRdzvConf =
    "heartbeat_timeout=2,last_call_timeout=1,join_timeout=20,"
    "connection_lost_timeout=20";

// For scenarios where a node goes away: last_call_timeout >
// heartbeat_timeout, so the survivor's next round can only complete after
// the server declared the node lost, and the failure its worker saw is
// charged to the node loss (no restart budget). With a shorter last call the
// round may complete first and the budget is spent (timing-dependent).
inline const char* kNodeLossRdzvConf =
    "heartbeat_timeout=2,last_call_timeout=3,join_timeout=20,"
    "connection_lost_timeout=20";

// ddprun flags of node `node_rank` in a grpc job `id` on `host`:`port`.
std::vector<std::string> GrpcFlags(
    int port, const std::string& id, const std::string& nnodes, int nproc,
    int node_rank, const std::string& host = "127.0.0.1",
    const std::string& rdzv_conf = kFastRdzvConf);

// The two nodes of a grpc job named s.marker(): agent "a" (node rank 0)
// and "b" (node rank 1).
struct TwoNodes {
  int port = 0;
  std::string nnodes = "2";
  int nproc = 1;
  std::string host = "127.0.0.1";
  std::string rdzv_conf = kFastRdzvConf;
  std::vector<std::string> extra_flags;
  // Per node, what to run ddprun behind (ip netns exec NS); empty = none.
  std::vector<std::vector<std::string>> prefixes;
};
void StartTwoNodes(Scenario& s, const TwoNodes& nodes, const Workload& w);

// What a scenario expects of the job once its agents are done.
struct Expect {
  std::string what;          // "worker SIGKILL", for the recovery line
  int world = 2;             // baseline world size
  bool exact = true;         // bit-exact result (same world size throughout)
  double t0 = 0;             // wall time of the fault
  int64_t saved_before = 0;  // newest checkpoint when the fault hit
  // A worker failure spends restart budget (TORCHELASTIC_RESTART_COUNT
  // grows); the loss of a node does not (the membership changed).
  bool spends_budget = true;
};

// Checks (Catch2 CHECK/REQUIRE) that the job's result equals the
// uninterrupted run (bit-exact, or within 1e-4 when the world size
// changed), that a restart came after the fault and resumed from at least
// `saved_before` (at most one checkpoint interval lost), prints the
// recovery line and returns the recovery time in seconds (-1 if none).
double CheckRecovered(const Scenario& s, const Workload& w, const Expect& e);

// A node lost while the job trains: kills agent `victim` with SIGKILL
// (checks it died of it within 5 s) and expects `survivor` to finish the job
// alone: exit 0 within `survivor_deadline`, a restart after the kill with
// world size 1, then CheckRecovered for `what` (within 1e-4 of the
// uninterrupted run; the lost node spends no restart budget; resumed from
// the newest checkpoint at the kill or a newer one). Returns the recovery
// time in seconds.
double KillAgentSurvivorFinishes(Scenario& s, const Workload& w, Child& victim,
                                 Child& survivor, const std::string& what,
                                 std::chrono::seconds survivor_deadline);

// The newest checkpoint saved before wall time `t` (0 if none).
int64_t SavedBefore(const std::vector<Event>& events, double t);

}  // namespace ddprun::chaos
