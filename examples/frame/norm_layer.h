#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "ddprun/worker/world.h"

namespace ddprun::examples {

// Which normalisation a model's conv blocks use (the trainers' --norm and
// --sync_batchnorm flags).
//  - kGroup: GroupNorm; per-sample, so the batch size and the number of
//    ranks do not matter (Fast-DDPM's choice for batch 1 per GPU). Under
//    autocast it normalises in float32 (input cast up, float32 out), as
//    torch's CUDA autocast does; LibTorch 1.13's CPU group_norm takes no
//    bf16 input with float32 weights.
//  - kBatch: torch BatchNorm; batch statistics of this rank's batch only.
//  - kSyncBatch: worker::SyncBatchNorm; batch statistics over the global
//    batch of every rank (each training forward is a collective).
enum class NormKind { kGroup, kBatch, kSyncBatch };

// Maps --norm ("group" or "batch") and --sync_batchnorm to a NormKind.
// Throws worker::ConfigError naming the flags when --sync_batchnorm is given
// with group norm (there is nothing to synchronise) or `norm` is unknown.
NormKind ParseNormKind(const std::string& norm, bool sync_batchnorm);

// "group", "batch" or "sync_batch" (for log lines).
std::string NormKindName(NormKind kind);

// A normalisation layer over `channels` channels of (N, C, *spatial) input
// with `spatial_dims` 2 or 3. Group norm uses gcd(`groups`, channels)
// groups. `world` is used by kSyncBatch only (copied into the layer).
torch::nn::AnyModule MakeNorm(NormKind kind, int64_t channels, int spatial_dims,
                              int64_t groups, const worker::World& world);

// Makes every rank's floating-point buffers of `module` (batch-norm
// running mean/var) equal to rank 0's, as DDP's buffer broadcast does, and
// returns the largest absolute difference there was between any rank's and
// rank 0's: 0 when the ranks already agreed (DDP, or SyncBatchNorm). Call it
// before evaluating so every rank uses the same statistics. Collective (a
// broadcast and a max all-reduce); returns 0 in a standalone world or
// without buffers.
double AlignBuffersWithRank0(const worker::World& world,
                             torch::nn::Module& module);

}  // namespace ddprun::examples
