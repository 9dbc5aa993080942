// Healing under restart scope "failed" (docs/restart_scope.md): after the
// ranks re-form, the generation's source rank hands every other rank what a
// checkpoint would give it, through the new process group.
#pragma once

#include <cstdint>

#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/world.h"

namespace ddprun::worker {

struct HealResult {
  TrainState state;    // the source's, on every rank
  int source = 0;      // the rank it came from
  int64_t bytes = 0;   // the payload's size
  double seconds = 0;  // from the first collective to the healed mark
};

// Collective over the world's process group, by every rank of the current
// generation right after World::Reform (a replacement: right after its
// world formed, before any other collective):
//  1. the ranks all-gather whether each holds training state (`has_state`:
//     false on a replacement that has not healed yet) and its step; a
//     source without state is a CollectiveError on every rank (the agent
//     named a rank that cannot heal anyone);
//  2. the source broadcasts CheckpointPayload(state, parts without rng):
//     parameters, buffers, optimizer state, TrainState; every other rank
//     loads it into `parts` (values are copied into the existing tensors,
//     so DDP and the optimizer keep theirs);
//  3. a barrier, then the source marks the generation healed
//     (World::MarkHealed).
// Random generators are not sent: under restart scope "failed" every rank
// re-seeds its own at each step. A sharded optimizer (ZeRO) cannot be
// healed: the dead rank's shard is gone; that is a CollectiveError (the
// agent then restarts the group from the last checkpoint). Throws
// CollectiveError when a collective fails (a second failure: re-form
// again), WorkerError when the payload does not fit `parts`.
HealResult Heal(const World& world, bool has_state, const TrainState& state,
                const CheckpointParts& parts);

// The message of the CollectiveError a sharded optimizer gets under restart
// scope "failed" (also thrown by ShardedAdam's constructor on a
// replacement).
const char* ShardedOptimizerCannotHeal();

}  // namespace ddprun::worker
