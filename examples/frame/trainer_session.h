#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddprun/worker/checkpoint.h"
#include "ddprun/worker/ddp.h"
#include "ddprun/worker/metrics.h"
#include "ddprun/worker/precision.h"
#include "ddprun/worker/rng_fork.h"
#include "ddprun/worker/sampler.h"
#include "ddprun/worker/step_commit.h"
#include "ddprun/worker/world.h"
#include "examples/frame/batch_loader.h"
#include "examples/frame/mixed_precision.h"
#include "examples/frame/step_profiler.h"
#include "examples/frame/step_runner.h"
#include "examples/frame/train_loop.h"
#include "examples/frame/trainer_cli.h"
#include "examples/frame/trainer_support.h"
#include "examples/frame/training_observer.h"

namespace ddprun::examples {

// What TrainerSession::Prepare wraps. The model is on the session's device
// (PlaceOnDevice) and the optimizer was built on its parameters.
struct TrainingSetup {
  std::shared_ptr<torch::nn::Module> model;
  torch::optim::Optimizer* optimizer = nullptr;  // exactly one of these two
  worker::ShardedAdam* sharded_optimizer = nullptr;
  // false: no DDP (the optimizer reduces gradients itself, ZeRO-2).
  bool use_ddp = true;
  worker::DdpOptions ddp;
  double clip_grad_norm = 0;  // > 0: clip before each optimizer step
  // Epochs of the whole run; 0: --epochs (ddpm: --epochs x stages).
  int64_t total_epochs = 0;
};

// The frame every trainer runs in, so that a trainer's code is its model,
// its data and its step. In order:
//   TrainerSession session(cli);     // after cli.Parse: world, threads,
//                                    // seed, precision, loader threads
//   auto [train, val] = session.Split(n, val_fraction, path, 16, 8);
//   session.PlaceOnDevice(*model);   // then build the optimizer
//   session.Prepare({model.ptr(), &optimizer});  // checkpoints, resume, DDP
//   session.Run<Batch>(loop_config, {begin_epoch, load, step, validate});
//   session.Done("val C-index " + ...);
// with step = [&](std::vector<Batch>& micro) {
//   return session.Step(micro.size(), [&](int64_t m) {
//     auto autocast = session.Autocast();   // forward only
//     return loss_of(micro[m]); }); }.
// Checkpoints: rank 0 writes <checkpoint dir>/ckpt-<step>.pt every
// --checkpoint_every steps and at the end (keep last 2), and the best one by
// LoopConfig::best. Resume: the newest complete checkpoint of the
// checkpoint dir (a restart), else --resume_from FILE (any checkpoint of
// ours: periodic, final or best). A run whose checkpoint is final (epoch =
// total epochs) logs that the run is complete and Run() trains nothing and
// writes nothing; a larger --epochs trains on.
// Outputs: TrainingObservers (training_observer.h) get every step, epoch
// record and image; metrics.jsonl is the first one. The step loss the
// observers see is the mean over ranks, but the loop reduces it in batches
// (one collective per epoch, or per kStepsPerLossReduce steps): a per-step
// collective is a per-step barrier, which costs scaling on small steps. So
// OnStep comes at those points, for each step since the last one, and the
// progress line's loss is rank 0's own between them.
// Restart scope "failed" (DDPRUN_RESTART_SCOPE=failed from ddprun
// --restart_scope failed, docs/restart_scope.md; worker::World::reforms()):
// a failed rank is started again alone and the others keep running. Run()
// then works in units: an optimizer step (the step callback, with the
// step's loss averaged over ranks and the step agreement of
// worker::StepCommit before the optimizer applies it), a checkpoint save,
// an epoch's validation and record. The state at the start of each unit
// (TrainState, the epoch's loss sum, the model's buffers, AddHealState's)
// is kept; a CollectiveError inside a unit puts it back, the world re-forms
// (worker::World::Reform), every rank takes the state of the generation's
// source rank (worker::Heal) and builds its DDP anew, and the loop goes on
// from that state: the interrupted unit is redone, the step callback
// called again with the same batches. A replacement process
// (DDPRUN_REPLACEMENT=1) heals in Prepare() instead of resuming from disk
// and enters the loop at the same position. At the start of each step the
// default generators are re-seeded from (--seed, rank, step), so a redone
// step, and a replacement, draw what the uninterrupted run drew. Each
// step's record reaches the observers right after it commits, with the mean
// loss over ranks. For this a trainer makes no collective of its own
// between the constructor and Prepare(), nor in its step callback after
// Step() returns. A sharded optimizer cannot be healed: the worker exits
// (CollectiveError) and the agent restarts the group.
// Every call is collective (every rank makes the same calls in the same
// order) unless noted. Errors: ConfigError (exit 2) for bad input, e.g. a
// --resume_from that is missing or not one of our checkpoints.
class TrainerSession {
 public:
  // Most steps whose losses wait for one all-reduce (see the class comment).
  static constexpr int64_t kStepsPerLossReduce = 64;

  explicit TrainerSession(TrainerCli& cli);
  ~TrainerSession();
  TrainerSession(const TrainerSession&) = delete;
  TrainerSession& operator=(const TrainerSession&) = delete;

  const worker::World& world() const { return world_; }
  c10::Device device() const { return world_.device(); }
  CommonOptions& common() { return common_; }
  int num_workers() const { return num_workers_; }
  // Rank 0 logs `line` (local).
  void LogMain(const std::string& line) const;

  // --amp / --mixed_precision on this device, resolved at the first call
  // (so --auto_optimize may set common().amp before it); logs the fallback
  // note of fp16 on a CPU once.
  const Precision& precision();
  // The autocast of precision() for a forward pass (local).
  worker::AutocastScope Autocast() {
    const Precision& p = precision();
    return worker::AutocastScope(p.autocast, world_.device(), p.dtype);
  }

  // Seeded train/val split of n items read from `source` (named in the
  // error when nothing is left to train on). --debug keeps the first
  // debug_train / debug_val of each and trains one epoch.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> Split(
      int64_t n, double val_fraction, const std::string& source,
      size_t debug_train, size_t debug_val);
  // The same for a split the data defines (e.g. a fold column): --debug
  // and the "nothing to train on" error apply to `train` and `val` as given.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> Split(
      std::vector<int64_t> train, std::vector<int64_t> val,
      const std::string& source, size_t debug_train, size_t debug_val);

  // Moves the model to the device (before its optimizer takes the
  // parameters). Local.
  void PlaceOnDevice(torch::nn::Module& model);
  // State of the trainer's own that a step or an epoch's end changes besides
  // the model and optimizer (e.g. sums behind an epoch's metrics), for
  // restart scope "failed": `save` is called at the start of every unit and
  // `load` when that unit is redone and on a replacement, with what `save`
  // returned there or on the source rank. Call before Prepare(); local.
  // Unused under restart scope "group".
  void AddHealState(std::string name, std::function<std::vector<double>()> save,
                    std::function<void(const std::vector<double>&)> load);

  // Checkpointer, resume, DDP and the step runner (see class comment).
  void Prepare(const TrainingSetup& setup);
  // True when the resumed state already finished every epoch.
  bool complete() const { return state_.epoch >= total_epochs_; }
  const worker::TrainState& state() const { return state_; }
  worker::DistributedDataParallel* ddp() { return ddp_.get(); }

  // One optimizer step over n micro-batches (StepRunner::Step). Under
  // restart scope "failed" the returned loss is the mean over ranks, and a
  // step the ranks did not all finish throws CollectiveError (unapplied).
  double Step(int64_t n, const std::function<at::Tensor(int64_t)>& loss) {
    return runner_->Step(n, loss);
  }

  // Runs the epochs up to config.end_epoch (or --epochs) that are not done.
  template <typename Batch>
  void Run(const LoopConfig& config, const LoopCallbacks<Batch>& callbacks);

  // Observers get every step, epoch and image from now on.
  void AddObserver(std::shared_ptr<TrainingObserver> observer);
  // Hands a picture of what the model produces (CPU tensor [H, W] or
  // [C, H, W] in [0, 1]) to the observers, at the current step. Local.
  void EmitImage(const std::string& tag, const at::Tensor& image);

  // The last epoch's record; after a run that trained nothing, the numbers
  // of the checkpoint's last record. Never null (an empty object at worst).
  const nlohmann::json& last_metrics() const { return last_metrics_; }
  // Logs "done: step N, <summary>" (rank 0) and tells the observers the
  // run finished when this process trained.
  void Done(const std::string& summary);

 private:
  // Per Run(): the sampler over the training positions and the progress
  // line.
  struct Plan {
    LoopConfig config;
    int64_t end_epoch = 0;
    int64_t samples_per_step = 0;
    std::unique_ptr<worker::DistributedSampler> sampler;
    std::unique_ptr<worker::ProgressMeter> progress;
  };
  // The state the newest checkpoint on disk holds (none: step -1).
  struct Mark {
    int64_t epoch = -1, step = -1, batch_in_epoch = -1;
    bool operator==(const Mark& o) const {
      return epoch == o.epoch && step == o.step &&
             batch_in_epoch == o.batch_in_epoch;
    }
  };
  static Mark MarkOf(const worker::TrainState& s) {
    return {s.epoch, s.step, s.batch_in_epoch};
  }

  // What a unit of restart scope "failed" starts from (see the class
  // comment), and the session's part of what healing sends.
  struct HealState {
    std::string name;
    std::function<std::vector<double>()> save;
    std::function<void(const std::vector<double>&)> load;
  };
  struct Unit {
    worker::TrainState state;
    double epoch_loss_sum = 0;
    int64_t epoch_steps = 0;
    Mark saved;
    bool trained = false;
    bool save_pending = false;
    std::vector<at::Tensor> buffers;
    std::vector<std::vector<double>> trainer;  // per heal_states_ entry
  };

  worker::TrainState Resume();
  // Restart scope "failed" (trainer_session_heal.cc).
  void SaveUnit();
  void RestoreUnit();
  // Re-seeds the default generators for the step after state_.step.
  void SeedStep();
  // The step's mean loss over ranks, then the agreement; throws
  // CollectiveError when the step aborts.
  void AgreeOnStep(double* loss);
  // Heals from the generation's source (worker::Heal), then builds the
  // DDP anew; on a failure re-forms and tries again (bounded by the heal
  // timeout: World::Reform throws).
  void HealAndRebuild(std::string why);
  // After a CollectiveError inside a unit: puts the unit's start back,
  // re-forms, heals.
  void Recover(const std::string& why);
  // Destroys the DDP (keeping its bucket layout for the next).
  void DropDdp();
  // A periodic checkpoint whose save a failure interrupted.
  void SaveIfDue();
  template <typename Batch>
  void RunEpochs(Plan& plan, const LoopCallbacks<Batch>& callbacks);

  Plan BeginRun(const LoopConfig& config);
  // LoopConfig::min_micro_batch at the start of a run: throws ConfigError
  // for a micro-batch or a rank's share (`per_rank` samples an epoch) below
  // it; logs the merge of a short last micro-batch.
  void CheckMinMicroBatch(const LoopConfig& config, int64_t per_rank);
  std::vector<std::vector<std::vector<int64_t>>> EpochSteps(Plan& plan,
                                                            int64_t epoch);
  void AfterStep(Plan& plan, int64_t epoch, int64_t batch_in_epoch,
                 double local_loss);
  // Averages the pending steps' losses over ranks in one collective (under
  // restart scope "failed" they are averaged already), hands their records
  // to the observers and adds the losses to the epoch's sum.
  void FlushSteps();
  void EndEpoch(Plan& plan, int64_t epoch, nlohmann::json record);
  void UpdateBest(const BestCheckpoint& best, const nlohmann::json& record);
  // The seed of epoch's validation on this rank (see Run).
  uint64_t ValidationSeed(int64_t epoch) const;
  void SaveIfChanged();

  worker::World world_;
  CommonOptions& common_;  // the TrainerCli's (outlives the session)
  int num_workers_ = 0;
  std::optional<Precision> precision_;
  std::unique_ptr<worker::Checkpointer> checkpointer_;
  worker::CheckpointParts parts_;
  worker::TrainState state_;
  Mark saved_;
  int64_t total_epochs_ = 0;
  std::shared_ptr<torch::nn::Module> model_;
  std::optional<worker::DdpOptions> ddp_options_;  // none: no DDP
  std::unique_ptr<worker::DistributedDataParallel> ddp_;
  std::vector<std::vector<size_t>> bucket_layout_;  // of the last DDP
  std::unique_ptr<StepRunner> runner_;
  // This epoch's mean-over-ranks step losses and their count.
  double epoch_loss_sum_ = 0;
  int64_t epoch_steps_ = 0;
  // Restart scope "failed": null under "group".
  std::unique_ptr<worker::StepCommit> commit_;
  std::vector<HealState> heal_states_;
  Unit unit_;
  int64_t step_in_flight_ = -1;  // the step being agreed on, or -1
  bool has_state_ = true;        // false on a replacement until it healed
  bool save_pending_ = false;    // inside Run's end-of-run save
  // The GradScaler's state and skipped steps a heal brought before the
  // step runner existed (a replacement).
  std::optional<std::vector<double>> healed_runner_;
  StepProfiler profiler_;  // --profile
  // Steps whose loss (still this rank's own) waits for FlushSteps.
  std::vector<StepRecord> pending_steps_;
  std::vector<std::shared_ptr<TrainingObserver>> observers_;
  nlohmann::json last_metrics_ = nlohmann::json::object();
  bool trained_ = false;
};

template <typename Batch>
void TrainerSession::Run(const LoopConfig& config,
                         const LoopCallbacks<Batch>& callbacks) {
  Plan plan = BeginRun(config);
  if (!commit_) {
    RunEpochs(plan, callbacks);
    SaveIfChanged();
    return;
  }
  // Restart scope "failed": after a failure every rank goes on from the
  // healed state, which this run cannot take back to an earlier run (ddpm's
  // previous stage).
  const int64_t first_epoch = state_.epoch;
  SaveUnit();
  for (;;) {
    try {
      SaveIfDue();
      RunEpochs(plan, callbacks);
      // The end-of-run save is a unit of its own: a replacement that heals
      // here makes it too, before its trainer moves on (ddpm's next stage).
      save_pending_ = true;
      SaveUnit();
      SaveIfChanged();
      save_pending_ = false;
      return;
    } catch (const worker::CollectiveError& e) {
      Recover(e.what());
    }
    if (state_.epoch < first_epoch) {
      throw worker::CollectiveError(
          "healed to epoch " + std::to_string(state_.epoch + 1) +
          ", which an earlier run (stage) trains: this rank cannot go back; "
          "the group must restart");
    }
  }
}

template <typename Batch>
void TrainerSession::RunEpochs(Plan& plan,
                               const LoopCallbacks<Batch>& callbacks) {
  for (int64_t epoch = state_.epoch; epoch < plan.end_epoch; ++epoch) {
    if (callbacks.begin_epoch) {
      auto wait = profiler_.Measure(Phase::kDataWait);
      callbacks.begin_epoch(epoch);
    }
    const int64_t skip = state_.epoch == epoch ? state_.batch_in_epoch : 0;
    const auto steps = EpochSteps(plan, epoch);
    std::vector<std::vector<int64_t>> micro;
    for (const auto& s : steps) micro.insert(micro.end(), s.begin(), s.end());
    BatchLoader<Batch> loader(std::move(micro), callbacks.load, num_workers_,
                              2 * static_cast<int>(plan.config.accumulation));
    for (size_t s = 0; s < steps.size(); ++s) {
      std::vector<Batch> batches;
      {
        auto wait = profiler_.Measure(Phase::kDataWait);
        for (size_t m = 0; m < steps[s].size(); ++m) {
          batches.push_back(ValueOrThrow(loader.Next()));
        }
      }
      if (commit_) {
        SeedStep();
        step_in_flight_ = state_.step + 1;
      }
      const double loss = callbacks.step(batches);
      step_in_flight_ = -1;
      AfterStep(plan, epoch, skip + static_cast<int64_t>(s) + 1, loss);
    }
    // Before validation: its pictures come after the epoch's steps.
    FlushSteps();
    nlohmann::json record = nlohmann::json::object();
    if (callbacks.validate) {
      auto validation = profiler_.Measure(Phase::kValidation);
      // Noise a validation samples depends on (seed, epoch, rank) only, and
      // training draws after it what it would have drawn without it: a
      // resume from a checkpoint taken before the validation repeats the
      // uninterrupted run.
      worker::RngFork fork(ValidationSeed(epoch), world_.device());
      record = callbacks.validate(epoch);
    }
    EndEpoch(plan, epoch, std::move(record));
  }
}

}  // namespace ddprun::examples
