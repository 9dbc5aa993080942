#include "ddprun/worker/heal.h"

#include <chrono>
#include <cstring>
#include <string>

#include <ATen/ATen.h>

#include "common/logging.h"
#include "ddprun/worker/errors.h"
#include "ddprun/worker/stack_dump.h"

namespace ddprun::worker {

const char* ShardedOptimizerCannotHeal() {
  return "restart scope failed cannot heal a sharded optimizer (ZeRO): the "
         "failed rank's shard of the optimizer state is lost, so this worker "
         "stops and the agent restarts the group from the last checkpoint";
}

HealResult Heal(const World& world, bool has_state, const TrainState& state,
                const CheckpointParts& parts) {
  ActivityScope activity("heal (restart scope failed)");
  if (parts.sharded_optimizer != nullptr) {
    throw CollectiveError(ShardedOptimizerCannotHeal());
  }
  const auto start = std::chrono::steady_clock::now();
  const GenerationRecord& record = world.generation_record();
  const int source = record.source;
  HealResult result;
  result.source = source;

  // 1. Who holds state, at which step.
  at::Tensor mine =
      at::tensor({has_state ? int64_t{1} : int64_t{0}, state.step}, at::kLong);
  std::vector<at::Tensor> all = world.AllGather(mine);
  if (all.at(source)[0].item<int64_t>() == 0) {
    throw CollectiveError(
        "generation " + std::to_string(record.generation) +
        ": the source rank " + std::to_string(source) +
        " holds no training state (it is a replacement that has not healed "
        "yet); the agent must restart the group");
  }

  // 2. The source's state to everyone.
  CheckpointParts sent = parts;
  sent.rng = false;
  std::string payload;
  if (world.rank() == source) payload = CheckpointPayload(world, state, sent);
  at::Tensor size =
      at::tensor({static_cast<int64_t>(payload.size())}, at::kLong);
  world.Broadcast(size, source);
  result.bytes = size.item<int64_t>();
  at::Tensor bytes = at::empty({result.bytes}, at::kByte);
  if (world.rank() == source) {
    std::memcpy(bytes.data_ptr(), payload.data(), payload.size());
  }
  world.Broadcast(bytes, source);
  if (world.rank() == source) {
    result.state = state;
  } else {
    payload.assign(static_cast<const char*>(bytes.data_ptr()),
                   static_cast<size_t>(result.bytes));
    result.state = LoadCheckpointPayload(
        payload, sent, world.rank(),
        "the state healed from rank " + std::to_string(source));
  }

  // 3. Everyone has it.
  world.Barrier();
  if (world.rank() == source) world.MarkHealed();
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  DDP_LOG(INFO) << "rank " << world.rank() << " healed (generation "
                << record.generation << ") from rank " << source << " at step "
                << result.state.step << ": " << result.bytes << " bytes in "
                << result.seconds << " s";
  return result;
}

}  // namespace ddprun::worker
