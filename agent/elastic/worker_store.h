#pragma once

#include <optional>
#include <string>

#include "ddprun/common/status_or.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// Restart scope "failed" (docs/restart_scope.md): the c10d store the
// workers of a round share, as their agent sees it. The agent that serves
// it writes the generation keys there when it replaces a rank; an agent
// that does not serve it cannot replace ranks (its workers' failures
// restart the group).
//
// Implementations: agent/hosting/worker_store_host.h (the real store, an
// AgentStore in this process); fakes in tests. Called on the agent's loop
// thread; Set and Get never block.
class WorkerStore {
 public:
  virtual ~WorkerStore() = default;

  // A round was joined and its workers are about to start: true when this
  // node serves the round's store (Set and Get then work until the next
  // call), false when another node does. An error when it should serve it
  // and cannot (MASTER_PORT is taken): the agent reports a launch error.
  virtual StatusOr<bool> StartRound(
      const rendezvous::RendezvousResult& round) = 0;

  // Raw keys (no worker prefix). Sets are applied in call order within
  // the store's next turn (microseconds), a record never after the number
  // that names it; Get returns nullopt for a missing key.
  virtual void Set(const std::string& key, std::string value) = 0;
  virtual std::optional<std::string> Get(const std::string& key) const = 0;
};

}  // namespace ddprun::agent
