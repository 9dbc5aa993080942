#include "tests/chaos/chaos_job.h"

#include <signal.h>

#include "ddprun_catch.h"

namespace ddprun::chaos {

std::vector<std::string> GrpcFlags(int port, const std::string& id,
                                   const std::string& nnodes, int nproc,
                                   int node_rank, const std::string& host,
                                   const std::string& rdzv_conf) {
  return {"--nnodes=" + nnodes,
          "--nproc_per_node=" + std::to_string(nproc),
          "--rdzv_backend=grpc",
          "--rdzv_endpoint=" + host + ":" + std::to_string(port),
          "--rdzv_id=" + id,
          "--node_rank=" + std::to_string(node_rank),
          "--max_restarts=3",
          "--shutdown_timeout=5",
          "--exit_barrier_timeout=20",
          "--rdzv_conf=" + rdzv_conf};
}

void StartTwoNodes(Scenario& s, const TwoNodes& nodes, const Workload& w) {
  for (int node = 0; node < 2; ++node) {
    std::vector<std::string> flags =
        GrpcFlags(nodes.port, s.marker(), nodes.nnodes, nodes.nproc, node,
                  nodes.host, nodes.rdzv_conf);
    flags.insert(flags.end(), nodes.extra_flags.begin(),
                 nodes.extra_flags.end());
    s.StartAgent(node == 0 ? "a" : "b", flags, w,
                 nodes.prefixes.empty() ? std::vector<std::string>{}
                                        : nodes.prefixes.at(node));
  }
}

int64_t SavedBefore(const std::vector<Event>& events, double t) {
  int64_t saved = 0;
  for (const Event& e : events) {
    if (e.kind == "saved" && e.t <= t) saved = std::max(saved, e.step);
  }
  return saved;
}

double CheckRecovered(const Scenario& s, const Workload& w, const Expect& e) {
  std::optional<Result> base = Baseline(e.world, w.steps);
  REQUIRE(base.has_value());
  std::optional<Result> got = ReadResult(s.out());
  REQUIRE(got.has_value());
  if (e.exact) {
    CHECK(Fnv(*got) == Fnv(*base));
    CHECK(MaxAbsDiff(*got, *base) == 0.0);
  } else {
    CHECK(MaxAbsDiff(*got, *base) <= 1e-4);
  }
  std::optional<Event> restart = s.StartAfter(e.t0);
  REQUIRE(restart.has_value());
  if (e.spends_budget) {
    CHECK(restart->attempt >= 1);
  } else {
    CHECK(restart->attempt == 0);
  }
  // At most one checkpoint interval lost: the restart resumed from the
  // newest checkpoint that existed when the fault hit (or a newer one).
  CHECK(restart->step >= e.saved_before);
  CHECK(s.NoOrphans());
  const double took = restart->t - e.t0;
  PrintRecovery(e.what, took);
  return took;
}

double KillAgentSurvivorFinishes(Scenario& s, const Workload& w, Child& victim,
                                 Child& survivor, const std::string& what,
                                 std::chrono::seconds survivor_deadline) {
  Expect e;
  e.what = what;
  e.exact = false;  // the survivor goes on alone: world 2 -> 1
  e.spends_budget = false;
  e.t0 = WallNow();
  e.saved_before = s.LastSaved();
  victim.Kill(SIGKILL);
  CHECK(victim.Wait(5s) == 128 + SIGKILL);
  const int code = survivor.Wait(survivor_deadline);
  INFO(s.Logs());
  REQUIRE(code == 0);
  std::optional<Event> restart = s.StartAfter(e.t0);
  REQUIRE(restart.has_value());
  CHECK(restart->world == 1);
  return CheckRecovered(s, w, e);
}

}  // namespace ddprun::chaos
