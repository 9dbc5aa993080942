#pragma once

// A WorkerProbe whose answers the test sets: which pids are stopped and the
// heartbeat stamp of each file.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "agent/watch/worker_watchdog.h"

namespace ddprun::agent::testing {

class FakeWorkerProbe : public WorkerProbe {
 public:
  bool IsStopped(int pid) override { return stopped.count(pid) > 0; }
  std::optional<int64_t> HeartbeatStamp(const std::string& path) override {
    auto it = stamps.find(path);
    if (it == stamps.end()) return std::nullopt;
    return it->second;
  }
  // Touches `path` (a new stamp).
  void Touch(const std::string& path) { stamps[path] = ++last_stamp_; }

  std::set<int> stopped;
  std::map<std::string, int64_t> stamps;

 private:
  int64_t last_stamp_ = 0;
};

}  // namespace ddprun::agent::testing
