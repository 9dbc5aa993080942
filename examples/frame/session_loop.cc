// TrainerSession's epoch/step loop: per-step bookkeeping, the epoch record,
// the best checkpoint and the final save; and the loop's free helpers.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include <torch/torch.h>

#include "ddprun/worker/heartbeat.h"
#include "ddprun/worker/stack_dump.h"
#include "examples/frame/trainer_session.h"

namespace ddprun::examples {

TrainerSession::Plan TrainerSession::BeginRun(const LoopConfig& config) {
  if (!runner_) {
    throw worker::WorkerError("TrainerSession::Run before Prepare");
  }
  if (config.micro_batch < 1 || config.accumulation < 1) {
    throw worker::ConfigError("batch size and accumulation must be >= 1");
  }
  Plan plan;
  plan.config = config;
  plan.end_epoch = config.end_epoch > 0 ? config.end_epoch : common_.epochs;
  plan.samples_per_step =
      config.samples_per_step > 0
          ? config.samples_per_step
          : config.micro_batch * config.accumulation * world_.world_size();
  worker::SamplerOptions options;
  options.shuffle = config.shuffle;
  options.seed = common_.seed;
  plan.sampler = std::make_unique<worker::DistributedSampler>(
      config.dataset_size, world_.world_size(), world_.rank(), options);
  CheckMinMicroBatch(config, plan.sampler->num_samples());
  // The epoch's shape depends on the count only (the same on every rank).
  std::vector<int64_t> positions(plan.sampler->num_samples());
  std::iota(positions.begin(), positions.end(), 0);
  const int64_t steps =
      StepMicroBatches(positions, config.micro_batch, config.accumulation,
                       config.min_micro_batch)
          .size();
  plan.progress = std::make_unique<worker::ProgressMeter>(
      world_, plan.end_epoch, steps * plan.end_epoch,
      std::chrono::milliseconds(
          static_cast<int64_t>(common_.progress_interval_s * 1000)));
  // ddprun's live view: the count this process's Heartbeat()s reach at the
  // end of this run (a resumed run counts from 0 again; a later stage of
  // ddpm or cascade goes on from the earlier ones'), for its ETA.
  worker::ReportTotalSteps(
      worker::Steps() +
      std::max<int64_t>(0, steps * plan.end_epoch - state_.step));
  profiler_.BeginEpoch();
  return plan;
}

void TrainerSession::CheckMinMicroBatch(const LoopConfig& config,
                                        int64_t per_rank) {
  const int64_t min = config.min_micro_batch;
  if (min <= 1) return;
  const std::string why =
      config.min_micro_batch_reason.empty()
          ? ""
          : " (" + config.min_micro_batch_reason + ")";
  const std::string ranks =
      world_.world_size() > 1
          ? " with " + std::to_string(world_.world_size()) + " ranks"
          : "";
  if (config.micro_batch < min) {
    throw worker::ConfigError(
        config.batch_flag + " " +
        std::to_string(config.micro_batch * config.batch_flag_scale) +
        " gives each rank micro-batches of " +
        std::to_string(config.micro_batch) + " sample(s), but this model " +
        "trains on at least " + std::to_string(min) + why + ": use " +
        config.batch_flag + " " +
        std::to_string(min * config.batch_flag_scale) + " or more" + ranks);
  }
  if (per_rank < min) {
    throw worker::ConfigError(
        "the training set gives each rank " + std::to_string(per_rank) +
        " sample(s) an epoch" + ranks + ", but this model trains on at least " +
        std::to_string(min) + " at a time" + why +
        ": use more training data or fewer ranks");
  }
  const int64_t tail = per_rank % config.micro_batch;
  if (tail != 0 && tail < min) {
    LogMain("the last micro-batch of each epoch (" + std::to_string(tail) +
            " of " + std::to_string(per_rank) +
            " samples per rank) is merged into the one before it: this "
            "model trains on at least " +
            std::to_string(min) + " at a time" + why);
  }
}

std::vector<std::vector<std::vector<int64_t>>> TrainerSession::EpochSteps(
    Plan& plan, int64_t epoch) {
  plan.sampler->set_epoch(epoch);
  auto steps =
      StepMicroBatches(plan.sampler->Indices(), plan.config.micro_batch,
                       plan.config.accumulation, plan.config.min_micro_batch);
  // A resume inside this epoch skips the steps the checkpoint consumed.
  const int64_t skip =
      state_.epoch == epoch
          ? std::min<int64_t>(state_.batch_in_epoch, steps.size())
          : 0;
  steps.erase(steps.begin(), steps.begin() + skip);
  return steps;
}

void TrainerSession::AfterStep(Plan& plan, int64_t epoch,
                               int64_t batch_in_epoch, double local_loss) {
  profiler_.CountStep();
  {
    auto metrics = profiler_.Measure(Phase::kMetrics);
    // ddprun's live view shows them beside the rank's step rate.
    worker::ReportScalar("loss", local_loss);
    if (plan.progress->rate_measured()) {
      worker::ReportScalar("samples_per_s",
                           plan.progress->samples_per_second());
    }
    worker::Heartbeat();  // --watchdog_timeout: this rank progresses
    ++state_.step;
    state_.epoch = epoch;
    state_.batch_in_epoch = batch_in_epoch;
    trained_ = true;
    plan.progress->Update(epoch, state_.step, local_loss,
                          plan.samples_per_step);
    StepRecord record;
    record.epoch = epoch;
    record.step = state_.step;
    record.loss = local_loss;
    record.learning_rate = runner_->learning_rate();
    if (plan.progress->rate_measured()) {
      record.samples_per_s = plan.progress->samples_per_second();
    }
    record.loss_scale = runner_->loss_scale();
    pending_steps_.push_back(record);
  }
  // Every rank runs the same steps, so every rank flushes at the same one.
  // Restart scope "failed": the loss is the mean over ranks already, and
  // the observers get only committed steps, each once.
  if (commit_ ||
      static_cast<int64_t>(pending_steps_.size()) >= kStepsPerLossReduce) {
    FlushSteps();
  }
  // The step is done: a failure from here on redoes what follows it.
  if (commit_) SaveUnit();
  if (checkpointer_->ShouldSave(state_.step)) {
    auto save = profiler_.Measure(Phase::kCheckpoint);
    checkpointer_->Save(state_, parts_);
    saved_ = MarkOf(state_);
  }
}

void TrainerSession::FlushSteps() {
  if (pending_steps_.empty()) return;
  auto metrics = profiler_.Measure(Phase::kMetrics);
  if (world_.distributed() && !commit_) {
    // fp64: the same value on every rank whatever the reduction order.
    std::vector<double> local;
    for (const StepRecord& r : pending_steps_) local.push_back(r.loss);
    at::Tensor losses =
        torch::tensor(local, torch::kFloat64).to(world_.device());
    world_.AllReduce(losses, worker::ReduceOp::kSum);
    profiler_.CountLoopCollective();
    losses = losses.cpu().contiguous();
    const double* sums = losses.data_ptr<double>();
    for (size_t i = 0; i < pending_steps_.size(); ++i) {
      pending_steps_[i].loss = sums[i] / world_.world_size();
    }
  }
  for (const StepRecord& record : pending_steps_) {
    epoch_loss_sum_ += record.loss;
    ++epoch_steps_;
    for (const auto& o : observers_) o->OnStep(record);
  }
  pending_steps_.clear();
}

void TrainerSession::EndEpoch(Plan& plan, int64_t epoch,
                              nlohmann::json record) {
  const double loss_sum = epoch_loss_sum_;
  const int64_t steps = epoch_steps_;
  epoch_loss_sum_ = 0;
  epoch_steps_ = 0;
  {
    auto metrics = profiler_.Measure(Phase::kMetrics);
    plan.progress->Flush();
  }
  state_.epoch = epoch + 1;
  state_.batch_in_epoch = 0;
  trained_ = true;
  if (!record.is_object()) record = nlohmann::json::object();
  record["epoch"] = epoch + 1;
  record["step"] = state_.step;
  record["train_loss"] = steps > 0 ? loss_sum / steps : 0.0;
  // An epoch of one step right after the start measured no rate: none is
  // written rather than a 0 that plots as a collapse.
  if (plan.progress->rate_measured()) {
    record["samples_per_s"] = plan.progress->samples_per_second();
  }
  record["world_size"] = world_.world_size();
  if (precision().loss_scaling) {
    record["loss_scale"] = runner_->loss_scale();
    record["skipped_steps"] = runner_->skipped_steps();
  }
  // The numbers travel in the checkpoints: a re-run that trains nothing
  // still reports them, and the best value survives restarts.
  for (const auto& [key, value] : record.items()) {
    if (value.is_number()) state_.scalars["metric/" + key] = value;
  }
  UpdateBest(plan.config.best, record);
  if (profiler_.enabled()) {
    record["profile"] = profiler_.Summary();
    if (ddp_ && world_.distributed()) {
      // What each synchronised step all-reduces: with the wait above, how
      // much of a step the gradient exchange costs on this interconnect.
      size_t bytes = 0;
      const std::vector<size_t> buckets = ddp_->bucket_bytes();
      for (size_t b : buckets) bytes += b;
      record["profile"]["allreduce_mb_per_step"] = bytes / 1e6;
      record["profile"]["buckets"] = buckets.size();
      // "shared_memory" or "process_group" (ddp.h): a job whose ranks
      // share a host but exchange over Gloo shows it here.
      record["profile"]["grad_transport"] = ddp_->gradient_transport();
    }
    LogMain(StepProfiler::Table(
        record["profile"],
        "profile of epoch " + std::to_string(epoch + 1) + " (rank 0)"));
    // The observers' epoch-end writes go to the next epoch's window.
    profiler_.BeginEpoch();
  }
  auto metrics = profiler_.Measure(Phase::kMetrics);
  for (const auto& o : observers_) o->OnEpoch(record);
  last_metrics_ = std::move(record);
  if (commit_) {
    // Restart scope "failed": no rank leaves the epoch's end before rank 0
    // wrote its record; if rank 0 dies before, the end is redone.
    world_.Barrier();
    SaveUnit();
  }
}

void TrainerSession::UpdateBest(const BestCheckpoint& best,
                                const nlohmann::json& record) {
  if (best.metric.empty()) return;
  const auto it = record.find(best.metric);
  if (it == record.end() || !it->is_number()) return;
  const double value = it->get<double>();
  const std::string key = "best/" + best.file;
  const auto previous = state_.scalars.find(key);
  bool better = std::isfinite(value) &&
                (previous == state_.scalars.end() ||
                 (best.higher_is_better ? value > previous->second
                                        : value < previous->second));
  // Ranks compute the same metric from the same reduced numbers; rank 0's
  // decision makes sure they also agree to enter the collective save.
  if (world_.distributed()) {
    auto metrics = profiler_.Measure(Phase::kMetrics);
    at::Tensor flag =
        torch::tensor({better ? int64_t{1} : int64_t{0}}).to(world_.device());
    world_.Broadcast(flag, 0);
    profiler_.CountLoopCollective();
    better = flag.cpu().item<int64_t>() != 0;
  }
  if (!better) return;
  state_.scalars[key] = value;
  std::string path;
  {
    auto save = profiler_.Measure(Phase::kCheckpoint);
    path = checkpointer_->SaveNamed(best.file, state_, parts_);
  }
  LogMain("best " + best.metric + " " + std::to_string(value) + " at epoch " +
          std::to_string(state_.epoch) + ": " + path);
}

uint64_t TrainerSession::ValidationSeed(int64_t epoch) const {
  constexpr uint64_t kValidationPurpose = 0x76616c;  // "val"
  return worker::MixSeed({common_.seed, static_cast<uint64_t>(epoch),
                          static_cast<uint64_t>(world_.rank()),
                          kValidationPurpose});
}

void TrainerSession::SaveIfChanged() {
  // Nothing trained (a finished run, a finished stage): nothing written.
  if (!trained_ || MarkOf(state_) == saved_) return;
  const auto start = StepProfiler::Clock::now();
  checkpointer_->Save(state_, parts_);
  saved_ = MarkOf(state_);
  if (profiler_.enabled()) {
    LogMain("profile: final checkpoint " +
            std::to_string(std::chrono::duration<double, std::milli>(
                               StepProfiler::Clock::now() - start)
                               .count()) +
            " ms (after the last epoch's window)");
  }
}

void MetricsFileObserver::OnEpoch(const nlohmann::json& record) {
  if (world_.reforms() && world_.is_main()) {
    std::ifstream in(output_dir_ + "/metrics.jsonl");
    std::string line, last;
    while (std::getline(in, line)) {
      if (!line.empty()) last = line;
    }
    const nlohmann::json previous = nlohmann::json::parse(last, nullptr, false);
    if (previous.is_object() &&
        previous.value("epoch", -1) == record.value("epoch", -2) &&
        previous.value("step", -1) == record.value("step", -2)) {
      worker::LogMain(world_, "metrics of epoch " +
                                  std::to_string(record.value("epoch", 0)) +
                                  " are written already (an epoch's end "
                                  "redone after a failure)");
      return;
    }
  }
  WriteEpochMetrics(world_, output_dir_, record);
}

std::vector<int64_t> RankShare(const worker::World& world,
                               const std::vector<int64_t>& items) {
  std::vector<int64_t> mine;
  for (size_t i = world.rank(); i < items.size(); i += world.world_size())
    mine.push_back(items[i]);
  return mine;
}

std::pair<std::vector<int64_t>, std::vector<int64_t>> SplitTrainVal(
    int64_t n, double val_fraction, uint64_t seed) {
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  const int64_t n_val = std::clamp<int64_t>(std::llround(n * val_fraction), 1,
                                            std::max<int64_t>(n - 1, 1));
  return {std::vector<int64_t>(order.begin() + n_val, order.end()),
          std::vector<int64_t>(order.begin(), order.begin() + n_val)};
}

std::vector<std::vector<std::vector<int64_t>>> StepMicroBatches(
    const std::vector<int64_t>& positions, int64_t micro_batch,
    int64_t accumulation, int64_t min_micro_batch) {
  std::vector<std::vector<std::vector<int64_t>>> steps;
  for (const auto& step :
       MakeBatches(positions, micro_batch * accumulation, false)) {
    steps.push_back(MakeBatches(step, micro_batch, false));
  }
  if (steps.empty() ||
      static_cast<int64_t>(steps.back().back().size()) >= min_micro_batch) {
    return steps;
  }
  // Only the epoch's very last micro-batch can be short.
  std::vector<int64_t> tail = std::move(steps.back().back());
  steps.back().pop_back();
  if (steps.back().empty()) {
    steps.pop_back();
    if (steps.empty()) {
      steps.emplace_back();
      steps.back().push_back(std::move(tail));
      return steps;
    }
  }
  std::vector<int64_t>& before = steps.back().back();
  before.insert(before.end(), tail.begin(), tail.end());
  return steps;
}

}  // namespace ddprun::examples
