#pragma once

#include <memory>
#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::deploy {

// Moves the calling thread into a fresh network namespace whose only
// interface is lo (brought up, 127.0.0.1/8) and a fresh UTS namespace with
// the given hostname (lo also carries 127.0.0.2, see the .cc), so that every
// process it forks listens and connects on loopback only, and on ports no other
// test on the machine can hold. The destructor moves the thread back to the
// namespaces it came from; processes still running inside keep the namespace
// alive, so stop them first. Needs CAP_SYS_ADMIN (root). Not thread-safe: one
// per thread.
class LoopbackNamespace {
 public:
  // Errors: PERMISSION_DENIED (no CAP_SYS_ADMIN), INTERNAL otherwise; on
  // error the thread is back in its original namespaces.
  static StatusOr<std::unique_ptr<LoopbackNamespace>> Enter(
      const std::string& hostname);
  ~LoopbackNamespace();
  LoopbackNamespace(const LoopbackNamespace&) = delete;
  LoopbackNamespace& operator=(const LoopbackNamespace&) = delete;

 private:
  LoopbackNamespace(int old_net, int old_uts)
      : old_net_(old_net), old_uts_(old_uts) {}
  void Restore();

  int old_net_;  // fds of /proc/self/task/<tid>/ns/{net,uts}
  int old_uts_;
};

}  // namespace ddprun::deploy
