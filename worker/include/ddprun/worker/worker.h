#pragma once

// Umbrella header of the ddprun worker runtime (everything but
// sync_batch_norm.h, which pulls torch/nn headers).
#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/env.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/generation.h"
#include "ddprun/worker/hardware.h"
#include "ddprun/worker/heal.h"
#include "ddprun/worker/host_allocator.h"
#include "ddprun/worker/metrics.h"
#include "ddprun/worker/precision.h"
#include "ddprun/worker/rng_fork.h"
#include "ddprun/worker/run_main.h"
#include "ddprun/worker/sampler.h"
#include "ddprun/worker/sharded_adam.h"
#include "ddprun/worker/shared_memory_group.h"
#include "ddprun/worker/step_commit.h"
#include "ddprun/worker/world.h"
