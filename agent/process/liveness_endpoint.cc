#include "agent/process/liveness_endpoint.h"

#include <cstdio>
#include <cstdlib>
#include <optional>

namespace ddprun::agent {

LivenessEndpoint::LivenessEndpoint(EventLoop* loop,
                                   std::function<std::string()> describe,
                                   Clock::Duration timeout)
    : loop_(loop), describe_(std::move(describe)), timeout_(timeout) {}

LivenessEndpoint::~LivenessEndpoint() { Stop(); }

StatusOr<int> LivenessEndpoint::Start(const std::string& host, int port) {
  {
    MutexLock lock(&mu_);
    last_beat_ = loop_->clock()->Now();
  }
  HttpServerOptions options;
  options.threads = 1;
  options.max_connections = 32;
  DDP_ASSIGN_OR_RETURN(
      int bound,
      http_.Start(
          host, port, [this](const HttpRequest& r) { return Answer(r); },
          options));
  // The first beat is posted: Start may run before the loop does.
  loop_->Post([this] { Beat(); });
  return bound;
}

void LivenessEndpoint::Stop() {
  http_.Stop();
  if (armed_) loop_->Cancel(timer_);
  armed_ = false;
}

void LivenessEndpoint::Beat() {
  const Clock::TimePoint now = loop_->clock()->Now();
  std::string state = describe_ ? describe_() : "running";
  {
    MutexLock lock(&mu_);
    last_beat_ = now;
    state_ = std::move(state);
  }
  armed_ = true;
  timer_ = loop_->RunAt(now + std::chrono::seconds(1), [this] {
    armed_ = false;
    Beat();
  });
}

HttpResponse LivenessEndpoint::Answer(const HttpRequest& request) {
  HttpResponse r;
  r.content_type = "application/json";
  r.headers.emplace_back("Cache-Control", "no-store");
  if (request.method != "GET" && request.method != "HEAD") {
    r.status = 405;
    r.body = "{\"error\": \"GET only\"}\n";
    return r;
  }
  if (request.path != "/" && request.path != "/healthz") {
    r.status = 404;
    r.body = "{\"error\": \"GET / or /healthz\"}\n";
    return r;
  }
  double age = 0;
  std::string state;
  {
    MutexLock lock(&mu_);
    age = std::chrono::duration<double>(loop_->clock()->Now() - last_beat_)
              .count();
    state = state_;
  }
  const bool alive = age < std::chrono::duration<double>(timeout_).count();
  r.status = alive ? 200 : 503;
  char body[256];
  // The state is one of the agent's own words, never input.
  std::snprintf(body, sizeof(body),
                "{\"status\": \"%s\", \"state\": \"%s\", "
                "\"last_progress_age_s\": %.3f, \"timeout_s\": %.0f}\n",
                alive ? "ok" : "unhealthy", state.c_str(), age,
                std::chrono::duration<double>(timeout_).count());
  r.body = body;
  return r;
}

std::optional<int> HealthCheckPort(const std::string& value, std::string* why) {
  char* end = nullptr;
  const long port = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || end != value.c_str() + value.size() || port < 0 ||
      port > 65535) {
    *why = "Invalid healthcheck port value: '" + value +
           "', expecting integer. Not starting healthcheck server.";
    return std::nullopt;
  }
  return static_cast<int>(port);
}

}  // namespace ddprun::agent
