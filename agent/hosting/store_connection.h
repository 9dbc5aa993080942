#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "agent/hosting/store_session.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// Listens on host:port (port 0: any free port) with a nonblocking,
// close-on-exec TCP socket, put in *fd; returns the bound port.
// INVALID_ARGUMENT when `host` does not resolve, UNAVAILABLE when none of
// its addresses can be bound (the port is taken).
StatusOr<int> ListenOn(const std::string& host, int port, int* fd);

// The socket side of one connection on the agent store's port: what its
// first bytes are (peeked, so that an HTTP/2 connection reaches the
// rendezvous server unread), reading into its StoreSession within a
// per-round budget, writing the session's replies. Never blocks (the
// socket is nonblocking). Owns the descriptor: the destructor closes it
// unless ReleaseFd() gave it away.
//
// Threading: not thread-safe; the AgentStore's loop thread owns it and runs
// its session under the store's lock (this class takes no lock).
class StoreConnection {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  StoreConnection(uint64_t id, int fd, const sockaddr_storage& peer,
                  socklen_t peer_len, const StoreSession::Options* options);
  ~StoreConnection();
  StoreConnection(const StoreConnection&) = delete;
  StoreConnection& operator=(const StoreConnection&) = delete;

  // The poll(2) events it waits for now. Sniffing, after a prefix of the
  // HTTP/2 preface: none until the back-off ends (*next is lowered to
  // then). A store client: POLLIN while its session wants input (a client
  // that does not read its replies stops being read), POLLOUT while
  // replies are unsent; *next is lowered to a parked WAIT's deadline.
  short PollEvents(TimePoint now, TimePoint* next);

  // While sniffing(): peeks at the first bytes. A prefix of the HTTP/2
  // preface is peeked again after a back-off (1 ms doubling to 100 ms):
  // the bytes stay in the socket, so poll(2) would report them at once.
  // False: close it, for *reason ("" when the peer went away).
  bool Sniff(TimePoint now, std::string* reason);
  // Reads at most 4 x 64 KiB while the session wants input; *got: bytes
  // arrived. False: close it (the peer went away).
  bool Read(short revents, bool* got);
  // Sends what the socket takes of the replies. False: close it.
  bool Flush();
  // Gives the descriptor away (the HTTP/2 hand-off).
  int ReleaseFd();

  uint64_t id() const { return id_; }
  int fd() const { return fd_; }
  const std::string& peer() const { return peer_; }  // "host:port"
  const std::string& host() const { return host_; }
  bool sniffing() const { return sniffing_; }
  bool http2() const { return http2_; }
  bool spoke() const { return spoke_; }  // sent a byte
  StoreSession& session() { return session_; }

  // The loop's bookkeeping.
  uint64_t generation = 0;  // Resets before it was accepted
  bool registered = false;  // in the store's table of client descriptors
  bool runnable = false;    // its session has queries left to run
  bool dead = false;        // closed (or handed off) at the loop's next reap

 private:
  const uint64_t id_;
  int fd_;
  std::string peer_, host_;
  bool sniffing_ = true;
  bool http2_ = false;
  bool spoke_ = false;
  TimePoint sniff_retry_{};
  std::chrono::milliseconds sniff_backoff_{1};
  StoreSession session_;
};

}  // namespace ddprun::agent
