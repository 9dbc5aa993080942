#include "ddprun/worker/step_commit.h"

#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ddprun/worker/errors.h"
#include "ddprun/worker/stack_dump.h"

namespace ddprun::worker {
namespace {

std::vector<uint8_t> Bytes(const char* s) {
  return std::vector<uint8_t>(s, s + std::char_traits<char>::length(s));
}

std::string Key(int64_t step, const char* name) {
  return "commit/" + std::to_string(step) + "/" + name;
}

}  // namespace

StepCommit::StepCommit(World world, std::chrono::milliseconds slice)
    : world_(std::move(world)), slice_(slice) {}

StepCommit::~StepCommit() = default;

bool StepCommit::Agree(int64_t step) {
  ActivityScope activity("step agreement (restart scope failed)");
  const std::string decision = Key(step, "decision");
  try {
    auto store = world_.store();
    if (!store) throw CollectiveError("no store (re-forming did not complete)");
    const int64_t n = store->add(Key(step, "count"), 1);
    added_ = step;
    if (n == world_.world_size()) {
      // The last to arrive decides, and reads the decision in the same
      // round trip: "commit", or an "abort" written first by a rank that
      // saw the generation move. No wait: one round trip fewer on the
      // step's critical path.
      const std::vector<uint8_t> v =
          store->compareSet(decision, {}, Bytes("commit"));
      store->deleteKey(Key(step - 1, "count"));
      store->deleteKey(Key(step - 1, "decision"));
      return std::string(v.begin(), v.end()) == "commit";
    }
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + world_.collective_timeout();
    for (;;) {
      if (!waiter_ || waiter_generation_ != world_.generation()) {
        waiter_ = world_.ConnectStore();
        waiter_generation_ = world_.generation();
      }
      try {
        waiter_->wait({decision}, slice_);
        break;
      } catch (const std::exception&) {
        // A timed out wait leaves the connection unusable (LibTorch 1.13).
        waiter_.reset();
      }
      if (world_.LatestGeneration() > world_.generation()) {
        store->compareSet(decision, {}, Bytes("abort"));
        break;
      }
      if (Clock::now() >= deadline) {
        throw CollectiveError(
            "step " + std::to_string(step) + ": no commit decision within " +
            std::to_string(world_.collective_timeout().count() / 1000) +
            " s (a rank neither finished the step nor died)");
      }
    }
    const std::vector<uint8_t> v = store->get(decision);
    return std::string(v.begin(), v.end()) == "commit";
  } catch (const WorkerError&) {
    throw;
  } catch (const std::exception& e) {
    throw CollectiveError("step " + std::to_string(step) +
                          " agreement through the store failed on rank " +
                          std::to_string(world_.rank()) + ": " + e.what());
  }
}

void StepCommit::AbortUnlessAdded(int64_t step) noexcept {
  if (added_ == step) return;
  try {
    if (auto store = world_.store()) {
      store->compareSet(Key(step, "decision"), {}, Bytes("abort"));
    }
  } catch (...) {
    // The waiting ranks see the generation move instead.
  }
}

}  // namespace ddprun::worker
