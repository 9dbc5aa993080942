#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "ddprun/common/status.h"
#include "rendezvous/client/rendezvous_client.h"

namespace ddprun::agent {

class StoreClient;

// --restart_scope failed (docs/restart_scope.md) on a node that does not
// serve the workers' c10d store: the agent writes its generation keys into,
// and reads the healed keys from, the round's store at
// MASTER_ADDR:MASTER_PORT over TCP (store_client.h), where another node's
// agent serves it (worker_store_host.h). Keys are named as WorkerStoreHost
// names them (TorchClientKey), so the agents and the workers all see the
// same keys.
//
// Nothing blocks the caller: a thread of its own owns the connection.
// - Set queues. The thread sends the queue in call order and forgets a Set
//   only once the reply to a later query on the same connection shows that
//   the store applied it; so a record never lands after the number naming
//   it, and a lost connection loses no Set: the thread reconnects, backing
//   off from min_backoff to max_backoff, and sends again, in order, every
//   Set not known to have landed (one may so land twice, with its value).
// - Get returns the newest value the thread read from the store for the
//   key this round (not what Set queued); nullopt when the key is missing
//   or not read yet. From a key's first Get on, the thread reads it every
//   poll_interval until the next StartRound, so a value another client
//   sets shows within about poll_interval and a round trip.
// - The thread connects only once it has something to send or read: a
//   silent connection would be closed by AgentStore's first-message
//   timeout.
// Every wait of the thread is bounded (StoreClient's deadlines), and
// StartRound and the destructor interrupt the one in progress.
//
// Errors never reach the caller: the thread retries as long as the round
// lasts, logging a warning when the store becomes unreachable and a line
// when it is reached again.
//
// Threading: StartRound, Set and Get may be called from any thread (the
// agent's loop thread); each holds one mutex briefly, never across I/O.
class RemoteWorkerStore {
 public:
  struct Options {
    // How often a key that Get asked for is read again.
    std::chrono::milliseconds poll_interval{20};
    // One connection attempt, name resolution included, and one exchange
    // (the queued Sets and their confirmation, or one read); past them the
    // connection counts as lost.
    std::chrono::milliseconds connect_timeout{2000};
    std::chrono::milliseconds query_timeout{5000};
    // The pause before reconnecting doubles from min to max while the
    // store stays unreachable.
    std::chrono::milliseconds min_backoff{50};
    std::chrono::milliseconds max_backoff{1000};
  };

  RemoteWorkerStore();
  explicit RemoteWorkerStore(Options options);
  // Stops the thread, interrupting its connect or query, and joins it:
  // returns within milliseconds.
  ~RemoteWorkerStore();
  RemoteWorkerStore(const RemoteWorkerStore&) = delete;
  RemoteWorkerStore& operator=(const RemoteWorkerStore&) = delete;

  // Points the thread at `round`'s master_addr:master_port and returns at
  // once. What the previous round queued, read or asked for is dropped
  // and its connection closed (a query in flight is abandoned).
  // INVALID_ARGUMENT when the round names no address or a port outside
  // 1..65535: nothing is then sent until the next StartRound.
  Status StartRound(const rendezvous::RendezvousResult& round) EXCLUDES(mu_);
  // Raw keys, as WorkerStoreHost::Set/Get take them.
  void Set(const std::string& key, std::string value) EXCLUDES(mu_);
  std::optional<std::string> Get(const std::string& key) const EXCLUDES(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  using KeyValue = std::pair<std::string, std::string>;

  void Loop() EXCLUDES(mu_);
  // Connects if needed, sends `unconfirmed` and waits for the reply that
  // confirms it (then empties it), and reads `watched` into values_ while
  // the round is still `round`.
  Status Exchange(StoreClient* client, const std::string& host, int port,
                  uint64_t round, std::deque<KeyValue>* unconfirmed,
                  const std::vector<std::string>& watched) EXCLUDES(mu_);
  // Interrupts the thread's connect or query.
  void Interrupt();
  void DrainInterrupts();

  const Options options_;
  int wake_fd_ = -1;  // an eventfd: StoreClient's cancel_fd

  mutable Mutex mu_;
  mutable CondVar cv_;  // Set, Get of a new key, StartRound, the destructor
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t epoch_ GUARDED_BY(mu_) = 0;  // StartRound calls so far
  std::string host_ GUARDED_BY(mu_);
  int port_ GUARDED_BY(mu_) = 0;                // 0: no store to reach
  std::deque<KeyValue> queue_ GUARDED_BY(mu_);  // not taken by the thread
  mutable std::set<std::string> watched_ GUARDED_BY(mu_);
  std::map<std::string, std::string> values_ GUARDED_BY(mu_);

  std::thread thread_;
};

}  // namespace ddprun::agent
