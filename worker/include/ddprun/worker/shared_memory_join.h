// Agreeing on a SharedMemoryGroup through the job's c10d store (DDP uses it;
// so can any code that wants its own shared memory collectives).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "ddprun/worker/shared_memory_group.h"
#include "ddprun/worker/world.h"

namespace ddprun::worker {

// Collective: every rank of `world` calls it at the same point. When all
// ranks are on this host (LOCAL_WORLD_SIZE == WORLD_SIZE) rank 0 makes a
// segment, publishes its name in the store, every other rank maps it and
// reports through the store whether it could; rank 0 then unlinks the name.
// Returns the group on every rank when all could, else null on every rank
// with the first failure in *why (ranks on other hosts, a full /dev/shm).
// No store traffic when the ranks span hosts. `collective_timeout` bounds
// every later barrier; the store's own timeout bounds this agreement.
// Throws CollectiveError when the store fails.
std::unique_ptr<SharedMemoryGroup> JoinSharedMemoryGroup(
    const World& world, std::chrono::milliseconds collective_timeout,
    std::string* why);

// Whether SharedMemoryGroup::AllReduceSum can reduce `t` in place: a
// contiguous float32 or float64 CPU tensor.
bool SharedMemoryReducible(const at::Tensor& t);

// DDPRUN_SHM_ALLREDUCE: unset, "" or "1": shared memory collectives where
// possible; "0": the process group only. Throws ConfigError otherwise.
bool SharedMemoryAllowedByEnv();

}  // namespace ddprun::worker
