#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "common/clock.h"
#include "common/event_loop.h"
#include "common/http_server.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// torchelastic's TORCHELASTIC_HEALTH_CHECK_PORT, served for real (torch's
// open-source health check server only logs "No health check server
// started"): a scheduler's liveness probe (a Kubernetes httpGet, a SLURM
// health check script) gets `GET /` or `/healthz` answered
//   200 {"status": "ok", "state": "rendezvous", "last_progress_age_s": 0.4}
// while the agent's event loop runs its timers (every second), also during
// a long rendezvous, and 503 "unhealthy" once it has not for `timeout`
// (torch's own default: 60 s): a wedged agent is restarted, a waiting one
// is not. The answer names no job, host or token: it needs none.
//
// Threading: construct, Start and Stop on the loop's thread (Start before
// the loop runs is fine); the server answers on its own thread and never
// waits for the loop.
class LivenessEndpoint {
 public:
  // `describe` runs on the loop with each beat and names the agent's state
  // ("rendezvous", "running", ...). `loop` must outlive Stop().
  LivenessEndpoint(EventLoop* loop, std::function<std::string()> describe,
                   Clock::Duration timeout = std::chrono::seconds(60));
  ~LivenessEndpoint();  // Stop()

  // Listens on host:port (port 0 = any free port) and starts beating.
  StatusOr<int> Start(const std::string& host, int port);
  void Stop();

  // The answer now (the HTTP server calls it).
  HttpResponse Answer(const HttpRequest& request) EXCLUDES(mu_);

 private:
  void Beat();

  EventLoop* const loop_;
  const std::function<std::string()> describe_;
  const Clock::Duration timeout_;
  mutable Mutex mu_;
  Clock::TimePoint last_beat_ GUARDED_BY(mu_);
  std::string state_ GUARDED_BY(mu_) = "starting";
  EventLoop::TimerId timer_ = 0;
  bool armed_ = false;
  HttpServer http_;
};

// The port in TORCHELASTIC_HEALTH_CHECK_PORT's value: nullopt (with a
// warning line in *why) for a value that is no port, as torch logs and
// goes on without a server.
std::optional<int> HealthCheckPort(const std::string& value, std::string* why);

}  // namespace ddprun::agent
