#pragma once

#include <optional>
#include <string>

#include "ddprun/common/status_or.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

// docs/restart_scope.md, "Generations": the raw key that holds the newest
// generation's number (decimal), written by the agent that replaced a rank.
inline constexpr char kGenerationKey[] = "/ddprun/generation";

// Restart scope "failed" (docs/restart_scope.md): the c10d store the
// workers of a round share, as their agent sees it. An agent that replaces
// a rank writes the generation keys there: into the store it serves, or
// over TCP into the one another node's agent serves.
//
// Implementations: agent/hosting/worker_store_host.h (the real store, an
// AgentStore in this process), agent/hosting/remote_worker_store.h (a
// client of another node's); main.cc picks per round. Fakes in tests.
// Called on the agent's loop thread; Set and Get never block.
class WorkerStore {
 public:
  virtual ~WorkerStore() = default;

  // A round was joined and its workers are about to start: true when this
  // node can write the round's store (it serves it, or reaches the node
  // that does; Set and Get then work until the next call), false when it
  // cannot. An error when it should serve it and cannot (MASTER_PORT is
  // taken): the agent reports a launch error.
  virtual StatusOr<bool> StartRound(
      const rendezvous::RendezvousResult& round) = 0;

  // Raw keys (no worker prefix). Sets are applied in call order, soon
  // (this node's store: its next turn, microseconds; another node's: a
  // round trip), a record never after the number that names it. Get
  // returns the newest value seen, nullopt for a key missing or not read
  // yet (another node's store is read again every few milliseconds).
  virtual void Set(const std::string& key, std::string value) = 0;
  virtual std::optional<std::string> Get(const std::string& key) const = 0;
};

}  // namespace ddprun::agent
