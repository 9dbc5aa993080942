// The step agreement of restart scope "failed" (docs/restart_scope.md): a
// step is applied on every rank or on none, so that after a rank dies every
// rank redoes the interrupted step from the same state.
#pragma once

#include <chrono>
#include <cstdint>

#include <c10/util/intrusive_ptr.h>

#include "ddprun/worker/world.h"

namespace c10d {
class Store;
}

namespace ddprun::worker {

// Before the optimizer applies step s, every rank calls Agree(s), on the
// store of the world's generation:
//   1. n = ADD("commit/<s>/count", 1); the rank that makes n == world size
//      compare-sets "commit/<s>/decision" from "" to "commit" (and deletes
//      step s-1's keys: every rank is past them);
//   2. every rank waits for the decision; between waits of `slice` it reads
//      the agent's generation, and once that moved past the world's it
//      compare-sets the decision from "" to "abort";
//   3. the first value written is everyone's decision.
// A rank whose collective of step s failed never adds for s, so s cannot
// commit; AbortUnlessAdded(s) writes "abort" at once so that the waiting
// ranks need not wait for the generation to move.
// Not thread-safe; one per rank (it keeps a store connection of its own for
// the waits, replaced after a wait that timed out).
class StepCommit {
 public:
  explicit StepCommit(World world, std::chrono::milliseconds slice =
                                       std::chrono::milliseconds(200));
  ~StepCommit();
  StepCommit(const StepCommit&) = delete;
  StepCommit& operator=(const StepCommit&) = delete;

  // True: apply step `step`; false: do not (re-form and redo it). Throws
  // CollectiveError when the store fails, or when no decision came within
  // the world's collective timeout while the generation stayed the same.
  bool Agree(int64_t step);

  // After a failure inside step `step` (local, never throws): unless this
  // rank already added for it, makes the decision "abort" so that no rank
  // waits for it.
  void AbortUnlessAdded(int64_t step) noexcept;

 private:
  World world_;
  std::chrono::milliseconds slice_;
  int64_t added_ = -1;  // the last step this rank added for
  // The connection the waits use, and the generation it belongs to.
  c10::intrusive_ptr<c10d::Store> waiter_;
  int64_t waiter_generation_ = -1;
};

}  // namespace ddprun::worker
