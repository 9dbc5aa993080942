#include "ddprun/worker/shared_memory_join.h"

#include <cstdlib>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ddprun/worker/errors.h"

namespace ddprun::worker {
namespace {

std::string AsString(const std::vector<uint8_t>& v) {
  return std::string(v.begin(), v.end());
}
std::vector<uint8_t> AsBytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

}  // namespace

std::unique_ptr<SharedMemoryGroup> JoinSharedMemoryGroup(
    const World& world, std::chrono::milliseconds collective_timeout,
    std::string* why) {
  why->clear();
  auto store = world.store();
  if (!world.distributed() || !store) {
    *why = "a single rank";
    return nullptr;
  }
  if (world.local_world_size() != world.world_size()) {
    *why = "the ranks span hosts";
    return nullptr;
  }
  const int rank = world.rank(), size = world.world_size();
  SharedMemoryGroup::Options options;
  options.timeout = collective_timeout;
  if (const char* poll = std::getenv("DDPRUN_SHM_POLL_US")) {
    char* end = nullptr;
    const long us = std::strtol(poll, &end, 10);
    if (end == poll || *end != '\0' || us < 0 || us > 1000000) {
      throw ConfigError(std::string("DDPRUN_SHM_POLL_US must be an integer "
                                    "in [0, 1000000], not \"") +
                        poll + "\"");
    }
    options.poll = std::chrono::microseconds(us);
  }
  try {
    // Groups joined through this store so far, counted the same on every
    // rank: a join completes on all ranks before any starts the next one.
    const int64_t index = (store->add("ddprun/shm/joined", 1) - 1) / size;
    const std::string prefix = "ddprun/shm/" + std::to_string(index) + "/";
    std::unique_ptr<SharedMemoryGroup> group;
    std::string mine = "ok";
    if (rank == 0) {
      auto made = SharedMemoryGroup::Create(size, options);
      if (made.ok()) {
        group = std::move(made.value());
        store->set(prefix + "name", AsBytes(group->name()));
      } else {
        mine = "rank 0: " + made.status().message();
        store->set(prefix + "name", AsBytes(""));
      }
    } else {
      const std::string name = AsString(store->get(prefix + "name"));
      if (name.empty()) {
        mine = "rank 0 made no segment";
      } else {
        auto opened = SharedMemoryGroup::Open(name, rank, size, options);
        if (opened.ok()) {
          group = std::move(opened.value());
        } else {
          mine = "rank " + std::to_string(rank) + ": " +
                 opened.status().message();
        }
      }
    }
    store->set(prefix + "ok/" + std::to_string(rank), AsBytes(mine));
    for (int r = 0; r < size; ++r) {
      std::string theirs = AsString(store->get(prefix + "ok/" + std::to_string(r)));
      if (theirs != "ok" && why->empty()) *why = theirs;
    }
    if (!why->empty()) return nullptr;  // the destructor unlinks on rank 0
    group->Unlink();  // everyone has mapped it
    return group;
  } catch (const std::exception& e) {
    throw CollectiveError(std::string("joining the shared memory group: ") +
                          e.what());
  }
}

bool SharedMemoryReducible(const at::Tensor& t) {
  return t.device().is_cpu() && t.is_contiguous() &&
         (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble);
}

bool SharedMemoryAllowedByEnv() {
  const char* v = std::getenv("DDPRUN_SHM_ALLREDUCE");
  if (v == nullptr || std::string(v) == "1" || std::string(v).empty()) {
    return true;
  }
  if (std::string(v) == "0") return false;
  throw ConfigError(std::string("DDPRUN_SHM_ALLREDUCE must be 0 or 1, not \"") +
                    v + "\"");
}

}  // namespace ddprun::worker
