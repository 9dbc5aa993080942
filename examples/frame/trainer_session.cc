// TrainerSession: set-up, resume and the pieces around the loop (the loop's
// own members are in session_loop.cc).
#include "examples/frame/trainer_session.h"

#include <errno.h>  // program_invocation_short_name

#include <filesystem>

#include <torch/torch.h>

#include "ddprun/worker/errors.h"
#include "examples/frame/outputs_observer.h"

namespace ddprun::examples {

TrainerSession::TrainerSession(TrainerCli& cli)
    : world_(InitTrainerWorld(cli.common())),
      common_(cli.common()),
      num_workers_(
          AutoNumWorkers(common_.num_workers, world_.local_world_size())),
      profiler_(common_.profile, world_.device()) {
  observers_.push_back(
      std::make_shared<MetricsFileObserver>(world_, common_.output_dir));
  if (world_.reforms()) {
    commit_ = std::make_unique<worker::StepCommit>(world_);
    has_state_ = !world_.env().replacement;
  }
}

TrainerSession::~TrainerSession() = default;

void TrainerSession::LogMain(const std::string& line) const {
  worker::LogMain(world_, line);
}

const Precision& TrainerSession::precision() {
  if (!precision_) {
    precision_ =
        ResolvePrecision(common_.amp, common_.mixed_precision, world_.device());
    if (!precision_->note.empty()) LogMain("note: " + precision_->note);
  }
  return *precision_;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> TrainerSession::Split(
    int64_t n, double val_fraction, const std::string& source,
    size_t debug_train, size_t debug_val) {
  auto [train, val] = SplitTrainVal(n, val_fraction, common_.seed);
  return Split(std::move(train), std::move(val), source, debug_train,
               debug_val);
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> TrainerSession::Split(
    std::vector<int64_t> train, std::vector<int64_t> val,
    const std::string& source, size_t debug_train, size_t debug_val) {
  if (common_.debug) {
    train.resize(std::min(train.size(), debug_train));
    val.resize(std::min(val.size(), debug_val));
    common_.epochs = 1;
  }
  if (train.empty()) {
    throw worker::ConfigError(source + ": no rows left for training");
  }
  return {std::move(train), std::move(val)};
}

void TrainerSession::PlaceOnDevice(torch::nn::Module& model) {
  model.to(world_.device());
}

worker::TrainState TrainerSession::Resume() {
  const std::string& from = common_.resume_from;
  // A typo is reported even when a restart makes the flag moot.
  if (!from.empty() && !std::filesystem::is_regular_file(from)) {
    throw worker::ConfigError("--resume_from " + from + ": no such file");
  }
  if (std::optional<worker::TrainState> s = checkpointer_->LoadLatest(parts_)) {
    LogMain("resumed from checkpoint at step " + std::to_string(s->step) +
            " (epoch " + std::to_string(s->epoch) + ", batch " +
            std::to_string(s->batch_in_epoch) + ")");
    saved_ = MarkOf(*s);
    return *s;
  }
  if (from.empty()) return worker::TrainState();
  if (!worker::Checkpointer::IsComplete(from)) {
    throw worker::ConfigError(
        "--resume_from " + from +
        " is not a complete checkpoint of these trainers (a torn copy, or "
        "a file another program wrote, such as Python's torch.save)");
  }
  worker::TrainState s;
  try {
    s = worker::Checkpointer::LoadFile(from, parts_);
  } catch (const worker::WorkerError& e) {
    // E.g. a checkpoint of another model size: the user's input is wrong.
    throw worker::ConfigError("--resume_from " + from + ": " + e.what());
  }
  LogMain("resumed from " + from + " at step " + std::to_string(s.step));
  return s;
}

void TrainerSession::Prepare(const TrainingSetup& setup) {
  if (!setup.model ||
      (setup.optimizer == nullptr) == (setup.sharded_optimizer == nullptr)) {
    throw worker::WorkerError(
        "TrainerSession::Prepare needs a model and exactly one optimizer");
  }
  checkpointer_ = std::make_unique<worker::Checkpointer>(
      world_, worker::CheckpointOptions{common_.CheckpointDir(),
                                        common_.checkpoint_every,
                                        /*keep_last=*/2});
  parts_.model = setup.model.get();
  parts_.optimizer = setup.optimizer;
  parts_.sharded_optimizer = setup.sharded_optimizer;
  model_ = setup.model;
  if (setup.use_ddp) ddp_options_ = setup.ddp;
  total_epochs_ = setup.total_epochs > 0 ? setup.total_epochs : common_.epochs;
  const bool replacement = commit_ && !has_state_;
  if (replacement) {
    // A replacement: its state comes from a live peer, and its DDP is built
    // (without the initial broadcast) as the survivors rebuild theirs.
    HealAndRebuild("rank " + std::to_string(world_.rank()) +
                   " replaces a failed rank");
  } else {
    state_ = Resume();
  }
  for (const auto& [name, value] : state_.scalars) {
    if (name.rfind("metric/", 0) == 0) last_metrics_[name.substr(7)] = value;
  }
  if (complete() && !replacement) {
    const std::string source = common_.resume_from.empty() || saved_.step >= 0
                                   ? common_.CheckpointDir()
                                   : common_.resume_from;
    LogMain("run complete: the checkpoint (" + source + ") finished epoch " +
            std::to_string(state_.epoch) + " of " +
            std::to_string(total_epochs_) + " (step " +
            std::to_string(state_.step) +
            "); nothing to train, nothing written (a larger --epochs trains "
            "on)");
  }
  if (!complete()) {
    // A re-run of a finished run writes nothing, not even an empty event
    // file.
    observers_.push_back(std::make_shared<RunOutputsObserver>(
        world_, common_.output_dir, program_invocation_short_name,
        state_.step));
  }
  if (ddp_options_ && !ddp_) {
    worker::DdpOptions options = *ddp_options_;
    // Resumed: the first step buckets the gradients as the saving run's
    // steps did, so that a job spanning hosts resumes bit for bit.
    options.layout = std::move(state_.bucket_layout);
    state_.bucket_layout.clear();
    ddp_ = std::make_unique<worker::DistributedDataParallel>(
        world_, setup.model, options);
  }
  parts_.ddp = ddp_.get();
  StepRunnerOptions options;
  options.loss_scaling = precision().loss_scaling;
  options.clip_grad_norm = setup.clip_grad_norm;
  options.profiler = &profiler_;
  if (commit_) {
    options.before_apply = [this](double* loss) { AgreeOnStep(loss); };
  }
  runner_ = std::make_unique<StepRunner>(
      world_, setup.model->parameters(), setup.optimizer,
      setup.sharded_optimizer, ddp_.get(), options);
  if (healed_runner_) {
    runner_->RestoreHealState(*healed_runner_);
    healed_runner_.reset();
  }
  // The survivors redo a run's end-of-run save (Run): so does a
  // replacement healed there, whatever run its trainer enters next.
  if (replacement && save_pending_) {
    SaveIfChanged();
    save_pending_ = false;
  }
}

void TrainerSession::AddObserver(std::shared_ptr<TrainingObserver> observer) {
  observers_.push_back(std::move(observer));
}

void TrainerSession::EmitImage(const std::string& tag,
                               const at::Tensor& image) {
  for (const auto& o : observers_) o->OnImage(tag, state_.step, image);
}

void TrainerSession::Done(const std::string& summary) {
  LogMain("done: step " + std::to_string(state_.step) + ", " + summary);
  if (!trained_) return;
  for (const auto& o : observers_) o->OnFinish();
}

}  // namespace ddprun::examples
