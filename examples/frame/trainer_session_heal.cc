// TrainerSession under restart scope "failed" (docs/restart_scope.md): the
// state each unit of the loop starts from, the step agreement, and
// re-forming and healing after a failure.
#include <algorithm>
#include <mutex>

#include <torch/torch.h>

#include "common/logging.h"
#include "ddprun/worker/heal.h"
#include "ddprun/worker/rng_fork.h"
#include "examples/frame/norm_counts.h"
#include "examples/frame/trainer_session.h"

namespace ddprun::examples {
namespace {

// The session's numbers travel in the healed TrainState's scalars under
// this prefix, and leave them on arrival (checkpoints never hold them).
constexpr char kHealPrefix[] = "heal/";

void PutNumbers(worker::TrainState& state, const std::string& name,
                const std::vector<double>& values) {
  state.scalars[kHealPrefix + name + "/n"] = static_cast<double>(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    state.scalars[kHealPrefix + name + "/" + std::to_string(i)] = values[i];
  }
}

std::vector<double> TakeNumbers(worker::TrainState& state,
                                const std::string& name) {
  const auto n = state.scalars.find(kHealPrefix + name + "/n");
  if (n == state.scalars.end()) {
    throw worker::WorkerError("the healed state has no '" + name +
                              "': the source rank runs another program");
  }
  std::vector<double> values;
  for (int64_t i = 0; i < static_cast<int64_t>(n->second); ++i) {
    const auto v =
        state.scalars.find(kHealPrefix + name + "/" + std::to_string(i));
    if (v == state.scalars.end()) {
      throw worker::WorkerError("the healed state's '" + name +
                                "' misses value " + std::to_string(i));
    }
    values.push_back(v->second);
  }
  return values;
}

// Every default generator of `device` (the CPU's, the GPU's) starts anew
// from the seed of (the job's seed, rank, step, purpose).
void SeedGenerators(uint64_t job_seed, int rank, int64_t step, uint64_t purpose,
                    const at::Device& device) {
  const uint64_t seed = worker::MixSeed({job_seed, static_cast<uint64_t>(rank),
                                         static_cast<uint64_t>(step), purpose});
  for (auto& [kind, generator] : worker::DefaultGenerators(device)) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(seed);
  }
}

void DropHealNumbers(worker::TrainState& state) {
  for (auto it = state.scalars.begin(); it != state.scalars.end();) {
    it = it->first.rfind(kHealPrefix, 0) == 0 ? state.scalars.erase(it)
                                              : std::next(it);
  }
}

}  // namespace

void TrainerSession::AddHealState(
    std::string name, std::function<std::vector<double>()> save,
    std::function<void(const std::vector<double>&)> load) {
  heal_states_.push_back({std::move(name), std::move(save), std::move(load)});
}

void TrainerSession::SaveUnit() {
  // What the unit draws, and the generators' state a checkpoint it writes
  // records, must not depend on how this rank got here: a replacement
  // that healed into the unit holds the source rank's generators, and a
  // survivor's were moved by the unit's interrupted attempt.
  constexpr uint64_t kUnitPurpose = 0x756e6974;  // "unit"
  SeedGenerators(common_.seed, world_.rank(), state_.step, kUnitPurpose,
                 world_.device());
  unit_.state = state_;
  unit_.epoch_loss_sum = epoch_loss_sum_;
  unit_.epoch_steps = epoch_steps_;
  unit_.saved = saved_;
  unit_.trained = trained_;
  unit_.save_pending = save_pending_;
  unit_.buffers.clear();
  // A forward pass in training mode moves batch norm's running statistics
  // (and DDP broadcasts rank 0's): a step that is redone must start from
  // the values its first attempt started from.
  if (parts_.model != nullptr) {
    torch::NoGradGuard no_grad;
    for (const at::Tensor& b : parts_.model->buffers()) {
      unit_.buffers.push_back(b.detach().clone());
    }
  }
  unit_.trainer.clear();
  for (const HealState& h : heal_states_) unit_.trainer.push_back(h.save());
}

void TrainerSession::RestoreUnit() {
  state_ = unit_.state;
  epoch_loss_sum_ = unit_.epoch_loss_sum;
  epoch_steps_ = unit_.epoch_steps;
  saved_ = unit_.saved;
  trained_ = unit_.trained;
  save_pending_ = unit_.save_pending;
  pending_steps_.clear();
  if (parts_.model != nullptr) {
    torch::NoGradGuard no_grad;
    size_t i = 0;
    for (const at::Tensor& b : parts_.model->buffers()) {
      if (i < unit_.buffers.size()) b.detach().copy_(unit_.buffers[i++]);
    }
    // The interrupted step's forward counted a batch the redo counts again.
    RereadBatchCounts();
  }
  for (size_t i = 0; i < heal_states_.size() && i < unit_.trainer.size(); ++i) {
    heal_states_[i].load(unit_.trainer[i]);
  }
}

void TrainerSession::SeedStep() {
  constexpr uint64_t kTrainingPurpose = 0x7374657073;  // "steps"
  SeedGenerators(common_.seed, world_.rank(), state_.step, kTrainingPurpose,
                 world_.device());
}

void TrainerSession::AgreeOnStep(double* loss) {
  if (world_.distributed()) {
    // fp64: the same value on every rank whatever the reduction order.
    at::Tensor sum = torch::tensor({*loss}, torch::kFloat64).to(device());
    world_.AllReduce(sum, worker::ReduceOp::kSum);
    *loss = sum.cpu().item<double>() / world_.world_size();
  }
  if (!commit_->Agree(step_in_flight_)) {
    throw worker::CollectiveError(
        "step " + std::to_string(step_in_flight_) +
        " aborted: not every rank finished it (generation " +
        std::to_string(world_.generation()) + " lost a rank)");
  }
}

void TrainerSession::HealAndRebuild(std::string why) {
  for (;;) {
    try {
      worker::TrainState sent = state_;
      PutNumbers(sent, "session/epoch_loss",
                 {epoch_loss_sum_, static_cast<double>(epoch_steps_)});
      PutNumbers(
          sent, "session/saved",
          {static_cast<double>(saved_.epoch), static_cast<double>(saved_.step),
           static_cast<double>(saved_.batch_in_epoch), trained_ ? 1.0 : 0.0,
           save_pending_ ? 1.0 : 0.0});
      if (runner_) PutNumbers(sent, "session/runner", runner_->HealState());
      for (const HealState& h : heal_states_) {
        PutNumbers(sent, "trainer/" + h.name, h.save());
      }
      worker::HealResult healed =
          worker::Heal(world_, has_state_, sent, parts_);
      RereadBatchCounts();  // the source's buffers
      worker::TrainState got = std::move(healed.state);
      const std::vector<double> loss = TakeNumbers(got, "session/epoch_loss");
      const std::vector<double> saved = TakeNumbers(got, "session/saved");
      if (loss.size() != 2 || saved.size() != 5) {
        throw worker::WorkerError(
            "the healed session state has the wrong "
            "shape: the source rank runs another "
            "program");
      }
      std::optional<std::vector<double>> runner;
      if (got.scalars.count(std::string(kHealPrefix) + "session/runner/n")) {
        runner = TakeNumbers(got, "session/runner");
      }
      for (const HealState& h : heal_states_) {
        h.load(TakeNumbers(got, "trainer/" + h.name));
      }
      DropHealNumbers(got);
      state_ = std::move(got);
      epoch_loss_sum_ = loss[0];
      epoch_steps_ = static_cast<int64_t>(loss[1]);
      saved_ = {static_cast<int64_t>(saved[0]), static_cast<int64_t>(saved[1]),
                static_cast<int64_t>(saved[2])};
      trained_ = saved[3] != 0;
      save_pending_ = saved[4] != 0;
      pending_steps_.clear();
      if (runner && runner_) {
        runner_->RestoreHealState(*runner);
      } else if (runner) {
        healed_runner_ = std::move(runner);
      }
      has_state_ = true;
      // Built anew on every rank alike, without a broadcast: the heal made
      // every rank's parameters and buffers equal.
      if (ddp_options_) {
        worker::DdpOptions options = *ddp_options_;
        options.broadcast_initial_state = false;
        // The source's buckets, so that a Gloo all-reduce sums as before.
        options.layout_root = healed.source;
        options.layout = bucket_layout_;
        ddp_ = std::make_unique<worker::DistributedDataParallel>(world_, model_,
                                                                 options);
      }
      if (runner_) runner_->Rebind(ddp_.get());
      parts_.ddp = ddp_.get();
      const std::vector<int>& replaced = world_.generation_record().replaced;
      if (world_.rank() == healed.source ||
          std::find(replaced.begin(), replaced.end(), world_.rank()) !=
              replaced.end()) {
        DDP_LOG(WARNING) << "rank " << world_.rank() << " healed from rank "
                         << healed.source << " (generation "
                         << world_.generation() << ") at step " << state_.step
                         << " in " << healed.seconds << " s";
      }
      return;
    } catch (const worker::CollectiveError& e) {
      why = e.what();
    }
    // A second failure while healing: the next generation, or the heal
    // timeout (Reform throws).
    DropDdp();
    world_.Reform(why);
  }
}

void TrainerSession::DropDdp() {
  if (!ddp_) return;
  bucket_layout_ = ddp_->bucket_layout();
  // Its reducer holds the old process group, whose connections must close
  // for the peers still inside a collective with this rank.
  parts_.ddp = nullptr;
  ddp_.reset();
  if (runner_) runner_->Rebind(nullptr);
}

void TrainerSession::Recover(const std::string& why) {
  if (parts_.sharded_optimizer != nullptr) {
    throw worker::CollectiveError(
        std::string(worker::ShardedOptimizerCannotHeal()) + " (" + why + ")");
  }
  if (step_in_flight_ >= 0) commit_->AbortUnlessAdded(step_in_flight_);
  step_in_flight_ = -1;
  RestoreUnit();
  DropDdp();
  world_.Reform(why);
  HealAndRebuild(why);
  SaveUnit();
}

void TrainerSession::SaveIfDue() {
  if (checkpointer_->ShouldSave(state_.step) && !(MarkOf(state_) == saved_)) {
    auto save = profiler_.Measure(Phase::kCheckpoint);
    checkpointer_->Save(state_, parts_);
    saved_ = MarkOf(state_);
  }
}

}  // namespace ddprun::examples
