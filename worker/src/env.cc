#include "ddprun/worker/env.h"

#include <cerrno>
#include <cstdlib>
#include <limits>

namespace ddprun::worker {
namespace {

// Parses an optional integer variable into `out`; unset leaves `out`.
Status ParseInt(const std::function<const char*(const char*)>& getenv,
                const char* name, int min_value, int max_value, int* out,
                bool* present) {
  const char* v = getenv(name);
  *present = v != nullptr && *v != '\0';
  if (!*present) return Status::Ok();
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0') {
    return InvalidArgumentError(std::string(name) + "='" + v +
                                "' is not an integer");
  }
  if (x < min_value || x > max_value) {
    return InvalidArgumentError(
        std::string(name) + "=" + v + " is out of range [" +
        std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
  }
  *out = static_cast<int>(x);
  return Status::Ok();
}

}  // namespace

StatusOr<WorkerEnv> ParseWorkerEnv(
    const std::function<const char*(const char*)>& getenv) {
  WorkerEnv env;
  constexpr int kMax = std::numeric_limits<int>::max();
  bool has_rank, has_world, has_local, has_local_world, has_port, unused;
  DDP_RETURN_IF_ERROR(ParseInt(getenv, "RANK", 0, kMax, &env.rank, &has_rank));
  DDP_RETURN_IF_ERROR(
      ParseInt(getenv, "WORLD_SIZE", 1, kMax, &env.world_size, &has_world));
  DDP_RETURN_IF_ERROR(
      ParseInt(getenv, "LOCAL_RANK", 0, kMax, &env.local_rank, &has_local));
  DDP_RETURN_IF_ERROR(ParseInt(getenv, "LOCAL_WORLD_SIZE", 1, kMax,
                               &env.local_world_size, &has_local_world));
  DDP_RETURN_IF_ERROR(
      ParseInt(getenv, "GROUP_RANK", 0, kMax, &env.group_rank, &unused));
  DDP_RETURN_IF_ERROR(
      ParseInt(getenv, "MASTER_PORT", 1, 65535, &env.master_port, &has_port));
  DDP_RETURN_IF_ERROR(ParseInt(getenv, "TORCHELASTIC_RESTART_COUNT", 0, kMax,
                               &env.restart_count, &unused));
  DDP_RETURN_IF_ERROR(ParseInt(getenv, "TORCHELASTIC_MAX_RESTARTS", 0, kMax,
                               &env.max_restarts, &unused));
  const char* addr = getenv("MASTER_ADDR");
  bool has_addr = addr != nullptr && *addr != '\0';
  if (has_addr) env.master_addr = addr;
  if (const char* v = getenv("TORCHELASTIC_RUN_ID")) env.run_id = v;
  if (const char* v = getenv("TORCHELASTIC_ERROR_FILE")) env.error_file = v;
  if (const char* v = getenv("TORCHELASTIC_USE_AGENT_STORE")) {
    // torch compares with str(True) exactly.
    env.use_agent_store = std::string(v) == "True";
  }

  DDP_RETURN_IF_ERROR(
      ParseInt(getenv, "DDPRUN_GENERATION", 0, kMax, &env.generation, &unused));
  if (const char* v = getenv("DDPRUN_RESTART_SCOPE"); v != nullptr && *v) {
    if (std::string(v) != "group" && std::string(v) != "failed") {
      return InvalidArgumentError(std::string("DDPRUN_RESTART_SCOPE='") + v +
                                  "' is not group or failed");
    }
    env.restart_scope = v;
  }
  if (const char* v = getenv("DDPRUN_REPLACEMENT"); v != nullptr && *v) {
    if (std::string(v) != "0" && std::string(v) != "1") {
      return InvalidArgumentError(std::string("DDPRUN_REPLACEMENT='") + v +
                                  "' is not 0 or 1");
    }
    env.replacement = std::string(v) == "1";
  }
  if (env.replacement && env.restart_scope != "failed") {
    return InvalidArgumentError(
        "DDPRUN_REPLACEMENT=1 needs DDPRUN_RESTART_SCOPE=failed");
  }
  if (env.replacement && env.generation == 0) {
    return InvalidArgumentError(
        "DDPRUN_REPLACEMENT=1 needs a DDPRUN_GENERATION above 0 (generation 0 "
        "is a group start)");
  }

  env.standalone = !has_rank && !has_world && !has_addr && !has_port;
  if (env.standalone) return env;
  if (has_rank != has_world) {
    return InvalidArgumentError(has_rank ? "RANK is set but WORLD_SIZE is not"
                                         : "WORLD_SIZE is set but RANK is not");
  }
  if (env.rank >= env.world_size) {
    return InvalidArgumentError(
        "RANK=" + std::to_string(env.rank) +
        " is not below WORLD_SIZE=" + std::to_string(env.world_size));
  }
  if (!has_local) env.local_rank = has_local_world ? 0 : env.rank;
  if (!has_local_world) {
    env.local_world_size = has_local ? env.local_rank + 1 : env.world_size;
  }
  if (env.local_rank >= env.local_world_size) {
    return InvalidArgumentError("LOCAL_RANK=" + std::to_string(env.local_rank) +
                                " is not below LOCAL_WORLD_SIZE=" +
                                std::to_string(env.local_world_size));
  }
  if (env.world_size > 1 && (!has_addr || !has_port)) {
    return InvalidArgumentError(
        std::string("WORLD_SIZE=") + std::to_string(env.world_size) +
        " needs MASTER_ADDR and MASTER_PORT (missing " +
        (!has_addr ? "MASTER_ADDR" : "MASTER_PORT") + ")");
  }
  return env;
}

StatusOr<WorkerEnv> ReadWorkerEnv() {
  return ParseWorkerEnv([](const char* name) { return std::getenv(name); });
}

}  // namespace ddprun::worker
