#include "rendezvous/http/view_auth.h"

#include <algorithm>
#include <cstdio>
#include <random>

namespace ddprun::rendezvous::http {

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0;
    const unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

namespace {

// 128 random bits from the kernel (std::random_device reads getrandom or
// /dev/urandom with libstdc++), as hex.
std::string NewSessionId() {
  std::random_device rd;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char buf[9];
    std::snprintf(buf, sizeof(buf), "%08x", static_cast<unsigned>(rd()));
    id += buf;
  }
  return id;
}

}  // namespace

ViewAuth::ViewAuth(std::string read_token, std::string admin_token)
    : read_token_(std::move(read_token)),
      admin_token_(std::move(admin_token)) {}

ViewAuth::Access ViewAuth::OfToken(const std::string& token) const {
  if (!admin_token_.empty() && ConstantTimeEquals(admin_token_, token)) {
    return Access::kAdmin;
  }
  if (!read_token_.empty() && ConstantTimeEquals(read_token_, token)) {
    return Access::kRead;
  }
  return Access::kNone;
}

std::string ViewAuth::SessionOf(const HttpRequest& request) {
  const std::string cookies = request.Header("cookie");
  const std::string key = std::string(kCookie) + "=";
  size_t at = 0;
  while (at < cookies.size()) {
    size_t end = cookies.find(';', at);
    if (end == std::string::npos) end = cookies.size();
    std::string part = cookies.substr(at, end - at);
    part.erase(0, part.find_first_not_of(' '));
    if (part.rfind(key, 0) == 0) return part.substr(key.size());
    at = end + 1;
  }
  return "";
}

ViewAuth::Access ViewAuth::Of(const HttpRequest& request) const {
  Access access = read_token_.empty() ? Access::kRead : Access::kNone;
  const std::string auth = request.Header("authorization");
  const std::string bearer = "Bearer ";
  if (auth.rfind(bearer, 0) == 0) {
    access = std::max(access, OfToken(auth.substr(bearer.size())));
  }
  const std::string sid = SessionOf(request);
  if (!sid.empty()) {
    MutexLock lock(&mu_);
    auto it = sessions_.find(sid);
    if (it != sessions_.end() &&
        it->second.expires > std::chrono::steady_clock::now()) {
      access = std::max(access, it->second.access);
    }
  }
  return access;
}

std::optional<std::string> ViewAuth::Login(const std::string& token) {
  const Access access = OfToken(token);
  if (access == Access::kNone) return std::nullopt;
  const auto now = std::chrono::steady_clock::now();
  const std::string sid = NewSessionId();
  {
    MutexLock lock(&mu_);
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      it = it->second.expires <= now ? sessions_.erase(it) : std::next(it);
    }
    if (sessions_.size() >= kMaxSessions) sessions_.erase(sessions_.begin());
    sessions_[sid] = {access, now + kSessionLife};
  }
  return std::string(kCookie) + "=" + sid +
         "; Path=/; HttpOnly; SameSite=Strict; Max-Age=" +
         std::to_string(std::chrono::seconds(kSessionLife).count());
}

std::string ViewAuth::Logout(const HttpRequest& request) {
  const std::string sid = SessionOf(request);
  if (!sid.empty()) {
    MutexLock lock(&mu_);
    sessions_.erase(sid);
  }
  return std::string(kCookie) +
         "=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0";
}

}  // namespace ddprun::rendezvous::http
