#include "agent/elastic/file_timer_server.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include <nlohmann/json.hpp>

namespace ddprun::agent {
namespace {

Status Bad(std::string_view line, const std::string& why) {
  std::string shown(line.substr(0, 200));
  return InvalidArgumentError("FileTimer request '" + shown + "': " + why);
}

// An integral JSON number that fits an int.
bool IntValue(const nlohmann::json& v, int* out) {
  if (!v.is_number_integer()) return false;
  const auto n = v.get<long long>();
  if (n < std::numeric_limits<int>::min() ||
      n > std::numeric_limits<int>::max()) {
    return false;
  }
  *out = static_cast<int>(n);
  return true;
}

}  // namespace

StatusOr<TimerRequest> ParseTimerRequest(std::string_view line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/
                                           false);
  if (j.is_discarded()) return Bad(line, "not JSON");
  if (!j.is_object()) return Bad(line, "not a JSON object");
  TimerRequest r;
  for (const char* key : {"pid", "scope_id", "expiration_time", "signal"}) {
    if (!j.contains(key)) return Bad(line, std::string("no \"") + key + "\"");
  }
  if (!IntValue(j["pid"], &r.pid) || r.pid <= 0) {
    return Bad(line, "\"pid\" is not a process id");
  }
  if (!j["scope_id"].is_string()) return Bad(line, "\"scope_id\" is not text");
  r.scope_id = j["scope_id"].get<std::string>();
  if (!j["expiration_time"].is_number()) {
    return Bad(line, "\"expiration_time\" is not a number");
  }
  r.expiration_time = j["expiration_time"].get<double>();
  if (!std::isfinite(r.expiration_time)) {
    return Bad(line, "\"expiration_time\" is not finite");
  }
  if (!IntValue(j["signal"], &r.signal)) {
    return Bad(line, "\"signal\" is not an integer");
  }
  return r;
}

std::string DescribeExpired(const ExpiredTimer& t, double now) {
  std::string scopes;
  for (const std::string& s : t.expired_scopes) {
    scopes += (scopes.empty() ? "'" : ", '") + s + "'";
  }
  char late[32];
  std::snprintf(late, sizeof(late), "%.1f s", now - t.expiration_time);
  return "its FileTimer scope " + scopes + " expired " + late +
         " ago (torch.distributed.elastic.timer)";
}

void FileTimerServer::Register(const TimerRequest& request) {
  const auto key = std::make_pair(request.pid, request.scope_id);
  if (request.expiration_time < 0) {
    timers_.erase(key);
  } else {
    timers_[key] = request;
  }
}

std::vector<ExpiredTimer> FileTimerServer::TakeExpired(double now) {
  std::map<int, std::vector<const TimerRequest*>> by_pid;
  for (const auto& [key, timer] : timers_) {
    if (timer.expiration_time <= now) by_pid[key.first].push_back(&timer);
  }
  std::vector<ExpiredTimer> out;
  for (auto& [pid, expired] : by_pid) {
    std::stable_sort(expired.begin(), expired.end(),
                     [](const TimerRequest* a, const TimerRequest* b) {
                       return a->expiration_time < b->expiration_time;
                     });
    ExpiredTimer verdict;
    verdict.pid = pid;
    for (const TimerRequest* t : expired) {
      verdict.expired_scopes.push_back(t->scope_id);
      if (verdict.signal <= 0 && t->signal > 0) {
        verdict.signal = t->signal;
        verdict.scope_id = t->scope_id;
        verdict.expiration_time = t->expiration_time;
      }
    }
    if (verdict.signal > 0) out.push_back(std::move(verdict));
  }
  for (const auto& [pid, expired] : by_pid) {
    for (auto it = timers_.lower_bound({pid, std::string()});
         it != timers_.end() && it->first.first == pid;) {
      it = timers_.erase(it);
    }
  }
  return out;
}

std::optional<double> FileTimerServer::NextExpiration() const {
  std::optional<double> next;
  for (const auto& [key, timer] : timers_) {
    if (!next || timer.expiration_time < *next) next = timer.expiration_time;
  }
  return next;
}

}  // namespace ddprun::agent
