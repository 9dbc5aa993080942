#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/worker/world.h"

namespace torch::nn {
class Module;
}
namespace torch::optim {
class Optimizer;
}

namespace ddprun::worker {

class DistributedDataParallel;
class ShardedAdam;

// Where training stands; saved with every checkpoint.
struct TrainState {
  int64_t epoch = 0;
  // Global optimizer steps taken so far.
  int64_t step = 0;
  // Batches of `epoch` already consumed (the sampler position): on resume
  // the trainer re-creates DistributedSampler with set_epoch(epoch) and
  // skips this many batches.
  int64_t batch_in_epoch = 0;
  // Free-form numbers the trainer wants back (best metric, LR, ...).
  std::map<std::string, double> scalars;
  // Loaded only: the saving DDP's gradient buckets (CheckpointParts::ddp),
  // empty when the checkpoint has none or they do not fit the model. A DDP
  // resumed with them (DdpOptions::layout) sums its first all-reduce as the
  // saving run's later steps did: a fresh DDP's first step buckets the
  // gradients otherwise, and over a process group (ranks on several hosts)
  // the float sums then round otherwise.
  std::vector<std::vector<size_t>> bucket_layout;
};

// What to save and restore; any pointer may be null. They must outlive the
// call.
struct CheckpointParts {
  torch::nn::Module* model = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  // Sharded state is gathered to a full state on save (collective) and each
  // rank takes its shard on load, so a checkpoint can be resumed with a
  // different world size.
  ShardedAdam* sharded_optimizer = nullptr;
  // Save/restore every rank's default CPU generator and, when the model is
  // on a CUDA device, that device's default generator, so data augmentation
  // and dropout continue identically.
  bool rng = true;
  // Its gradient buckets as they are at the save (after its first step:
  // in the order backward produced the gradients) are saved with the rest.
  const DistributedDataParallel* ddp = nullptr;
};

struct CheckpointOptions {
  std::string dir;  // created if missing
  // Save every this many steps (ShouldSave); 0 disables periodic saves.
  int64_t every_steps = 100;
  // Rotated checkpoints kept: after a save, all but the keep_last last
  // written are deleted.
  int keep_last = 2;
};

// Atomic checkpoints written by rank 0 and read by every rank.
// File: <dir>/ckpt-<step, 12 digits>.pt = a torch archive followed by a
// 32-byte trailer (magic "DDPCKPT1", payload length, FNV-1a 64 hash of the
// payload, generation: the file's place in the folder's write order).
// Rank 0 streams the archive into a fresh "<name>.tmp.<pid>" (O_EXCL, never
// through a file or symlink already there), fsyncs it, renames it over the
// final name and fsyncs the directory, so a crash at any point leaves
// either the previous checkpoint set or the new complete file; a file whose
// trailer or hash does not match (torn copy, disk error) is skipped with a
// warning.
// "Newest" is by write order, not by step: a run that writes lower steps
// into a folder holding an earlier run's higher ones (a reused output
// folder, a run that did not resume from them) finds its own checkpoints
// the newest: LoadLatest resumes from them, and the rotation keeps the
// keep_last last written (never the file just written), so the earlier
// run's go as this one's accumulate (a warning says so at the first such
// save). Saving reads only the 32-byte trailers of the files it keeps;
// loading reads the chosen file twice (its hash, then its tensors) and
// holds its tensors once, not a copy of the file.
// Assumes `dir` is visible to every rank (shared file system or one node).
// Errors: I/O failures throw WorkerError (ConfigError for an unusable
// dir), as does a file torch cannot read (naming it). Not thread-safe.
class Checkpointer {
 public:
  Checkpointer(World world, CheckpointOptions options);

  bool ShouldSave(int64_t step) const {
    return options_.every_steps > 0 && step > 0 &&
           step % options_.every_steps == 0;
  }

  // Collective (every rank calls it at the same step): gathers sharded
  // optimizer state, rank 0 writes, then a barrier so no rank runs ahead of
  // a checkpoint that may not exist yet. Returns the final path.
  std::string Save(const TrainState& state, const CheckpointParts& parts);

  // Save() to <dir>/<file_name> (e.g. "best.pt", "stage2_best.pt"), written
  // the same atomic way and replacing the previous file of that name. Such
  // files are outside the keep_last rotation (never pruned) and are not
  // picked by LoadLatest; LoadFile reads them. Collective. ConfigError for a
  // name that contains '/' or could be taken for a rotated checkpoint.
  std::string SaveNamed(const std::string& file_name, const TrainState& state,
                        const CheckpointParts& parts);

  // Collective: rank 0 picks the newest complete checkpoint (by write
  // order) and broadcasts its step; every rank loads that file into `parts`.
  // Returns nullopt (and leaves parts untouched) when the directory holds none.
  std::optional<TrainState> LoadLatest(const CheckpointParts& parts);

  // Complete, verified checkpoint files in `dir`, oldest first by write
  // order (local, no collective; reads each whole).
  static std::vector<std::string> ListComplete(const std::string& dir);

  // Loads one file without any collective (tools, tests); RNG state of
  // rank $RANK (0 if unset). Throws
  // WorkerError if it is missing or fails verification.
  static TrainState LoadFile(const std::string& path,
                             const CheckpointParts& parts);

  // True when `path` is a complete checkpoint of this format (trailer and
  // hash match); false for a missing, torn or foreign file (e.g. one that
  // Python's torch.save wrote). Local, no collective.
  static bool IsComplete(const std::string& path);

  const CheckpointOptions& options() const { return options_; }

  // Test hook: called on rank 0 after the temp file is fsynced and before
  // the rename (a crash there must lose nothing). Pass {} to clear.
  static void SetBeforeRenameHookForTesting(
      std::function<void(const std::string& tmp_path)> hook);

 private:
  // Gathers, writes <dir>/<file_name> atomically, prunes when `rotate`.
  std::string Write(const std::string& file_name, const TrainState& state,
                    const CheckpointParts& parts, bool rotate);

  World world_;
  CheckpointOptions options_;
  bool warned_other_run_ = false;
};

// The bytes of a checkpoint file before its trailer (a torch archive),
// in memory: what healing sends (heal.h). Collective when `parts` has a
// sharded optimizer or rng (their states are gathered); local otherwise.
std::string CheckpointPayload(const World& world, const TrainState& state,
                              const CheckpointParts& parts);

// Loads such bytes into `parts` (the RNG states of `rank` when parts.rng)
// and returns their TrainState; `what` names the source in errors
// (WorkerError: a part missing, a parameter of another shape). Local.
TrainState LoadCheckpointPayload(const std::string& payload,
                                 const CheckpointParts& parts, int rank,
                                 const std::string& what);

}  // namespace ddprun::worker
