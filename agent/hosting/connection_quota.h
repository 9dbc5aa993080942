#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ddprun::agent {

// Which connections the agent store's port keeps when they are many or
// say nothing. Bookkeeping only: no sockets, no clock of its own (the
// caller passes the time); the caller closes what it is told to.
//
// A connection is unidentified until it has sent a whole first message (a
// TCPStore query; an HTTP/2 connection leaves the quota when it is handed
// to the rendezvous server, whose handshake timeout takes over). Policy:
// - an unidentified connection has `first_message_timeout` from its accept
//   to send a whole first message, else it is closed;
// - except a silent one (no byte yet) that pairs with a connection from the
//   same host: torch 1.13's TCPStore client opens a second socket for
//   watch_key and never writes to it; closing that socket makes the
//   worker's thread spin on it (measured: a core at 100 %; 4 workers of
//   restart scope "failed", 3 clients each, ran their validation 2.5x
//   slower). The client opens it right after its first query is answered
//   (the partner: the latest connection identified before it came), or,
//   without wait_for_workers (ddprun's C++ workers), before its first query
//   (then the first identified after it came, at the latest when the
//   silent one's timeout expires). Each identified connection pairs with
//   at most one silent connection, so the silent ones kept never outnumber
//   the clients; a paired one is kept until it speaks (then it has the
//   timeout from that moment) or closes;
// - at most `max_unidentified` unpaired unidentified connections: a new one
//   over it closes the oldest (a flood of silent sockets cannot keep a
//   worker out);
// - at most `max_per_host` connections from one host and `max_total` in
//   all: a new one over either closes the oldest unpaired unidentified
//   connection (of that host, for the host limit) or, if there is none, is
//   refused. Identified connections are never closed by the quota (torch
//   keeps an idle store connection per worker for the whole job).
//
// Threading: not thread-safe (the agent store's loop thread).
class ConnectionQuota {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  struct Limits {
    size_t max_total = 512;
    size_t max_per_host = 256;
    size_t max_unidentified = 64;
    std::chrono::milliseconds first_message_timeout = std::chrono::seconds(10);
  };

  struct Admission {
    bool admitted = true;
    std::string refusal;          // why not, when not admitted
    std::vector<uint64_t> evict;  // close these (oldest unidentified)
  };

  explicit ConnectionQuota(Limits limits) : limits_(limits) {}

  // A new connection `id` (ids grow with accept order) from `host`.
  Admission Admit(uint64_t id, const std::string& host, TimePoint now);
  // It sent its first bytes.
  void Spoke(uint64_t id, TimePoint now);
  // It sent a whole first message.
  void Identified(uint64_t id);
  // It was closed or handed off.
  void Remove(uint64_t id);

  // Unidentified connections past their deadline (to be closed, each with
  // the reason); `*next` becomes the earliest deadline left (or
  // TimePoint::max()).
  struct Expired {
    uint64_t id;
    std::string reason;
  };
  std::vector<Expired> Expire(TimePoint now, TimePoint* next);

  size_t size() const { return conns_.size(); }
  size_t unidentified() const { return unpaired_.size(); }
  const Limits& limits() const { return limits_; }

 private:
  enum class State { kSilent, kSpoke, kIdentified };
  static constexpr uint64_t kNone = ~uint64_t{0};
  struct Conn {
    std::string host;
    State state = State::kSilent;
    TimePoint deadline;
    // Order of events (admissions, identifications) for pairing.
    uint64_t admitted_seq = 0;
    uint64_t identified_seq = 0;
    bool paired = false;       // a silent socket kept for an identified one
    uint64_t partner = kNone;  // the other side of a pair, while both live
  };
  // Pairs silent, unpaired `id` with a connection of its host identified
  // before it was admitted and without a partner; false when none.
  bool TryPair(uint64_t id);
  void Unpair(uint64_t id);
  // Closes the oldest unpaired unidentified connection (of `host` unless it
  // is empty) not yet in `evicting`; false when there is none.
  bool PickVictim(const std::string& host, std::set<uint64_t>* evicting) const;

  const Limits limits_;
  uint64_t seq_ = 0;
  std::map<uint64_t, Conn> conns_;
  std::map<std::string, size_t> per_host_;
  std::set<uint64_t> unpaired_;  // unidentified and not paired, by age
  // Identified connections without a partner, by host.
  std::map<std::string, std::set<uint64_t>> free_identified_;
};

}  // namespace ddprun::agent
