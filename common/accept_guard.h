#pragma once

#include <cstdint>

namespace ddprun {

// Keeps a process's listening sockets alive when file descriptors run out.
//
// gRPC 1.51's listener treats a failed accept4() (EMFILE / ENFILE) as fatal
// and stops accepting for good, silently: a flood of idle connections up to
// the fd limit wedged the rendezvous server even after they closed. Once
// enabled, the guard owns the process's accept4() (it is defined in this
// library and so replaces libc's for every caller, gRPC included) and:
// - sheds a new connection (accepts and closes it at once) whose descriptor
//   would be at or above `limit - headroom`, so the process keeps
//   `headroom` descriptors for its own files, pipes and outgoing sockets
//   (Linux hands out the lowest free number: fd >= N means N are open);
// - on EMFILE/ENFILE accepts the pending connection with a reserved
//   descriptor and closes it, instead of failing;
// - logs one WARNING per 10 s while it sheds (how many, the limit, the fix)
//   and one INFO line when connections are accepted again.
// A shed client sees its connection closed and retries (gRPC: UNAVAILABLE).
// Callers of accept4() never see EMFILE/ENFILE; a nonblocking listener gets
// EAGAIN once its backlog is drained, as without the guard.
//
// Threading: thread-safe; accept4() may run on any thread.
struct AcceptGuardStats {
  int64_t shed = 0;  // connections shed since the guard was enabled
  int limit = 0;     // RLIMIT_NOFILE soft limit seen when enabling
  int cap = 0;       // descriptors >= cap are shed
};

// Enables the guard (idempotent; a later call updates the headroom).
// `headroom` <= 0 picks max(32, limit / 8). `what` names the listener in
// the log lines, e.g. "rendezvous server".
void EnableAcceptGuard(const char* what, int headroom = 0);

AcceptGuardStats GetAcceptGuardStats();

// Raises the RLIMIT_NOFILE soft limit to the hard limit (a server that may
// hold one connection per node needs more than the usual 1024) and returns
// the new soft limit. Children inherit it: only for processes that start no
// programs of their own.
int RaiseFdLimit();

}  // namespace ddprun
