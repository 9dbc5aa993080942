#pragma once

#include <memory>
#include <optional>
#include <string>

#include "agent/hosting/agent_store.h"
#include "agent/hosting/rendezvous_host.h"
#include "ddprun/common/status_or.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// --restart_scope failed (docs/restart_scope.md): the workers' c10d store
// served by an agent, so that it outlives every worker and the agent can
// write the generation keys into it. Static multi-node mode: node 0's
// agent store beside the rendezvous (RendezvousHost::EnableAgentStore),
// reset by each round. Every other mode: the round's group rank 0 serves
// an AgentStore of its own on the round's MASTER_ADDR:MASTER_PORT (the
// port its rendezvous verified free), a new one per round.
//
// main() adapts it to agent/elastic/worker_store.h. Threading: the agent's
// loop thread; the stores serve on threads of their own.
class WorkerStoreHost {
 public:
  // `static_host`: static mode's hosted rendezvous with its agent store
  // (null on other nodes and in other modes); must outlive this.
  explicit WorkerStoreHost(RendezvousHost* static_host);
  ~WorkerStoreHost();

  // True when this node serves `round`'s store; UNAVAILABLE when it should
  // and MASTER_PORT is taken.
  StatusOr<bool> StartRound(const rendezvous::RendezvousResult& round);
  // Keys as a worker's TCPStore client names them (the wire adds "/").
  void Set(const std::string& key, std::string value);
  std::optional<std::string> Get(const std::string& key) const;

 private:
  RendezvousHost* const static_host_;
  bool serving_ = false;
  std::unique_ptr<AgentStore> own_;  // the other modes, group rank 0
};

}  // namespace ddprun::agent
