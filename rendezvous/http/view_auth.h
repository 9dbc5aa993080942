#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "common/http_server.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace ddprun::rendezvous::http {

// Who may do what on the live view. Two tokens, two rights:
// - reading (the page, the JSON, /metrics) needs `read_token` when one is
//   set (a non-loopback bind must set one); without it anyone who reaches
//   the port reads;
// - acting (dump stacks, stop a job) needs `admin_token`, always; without
//   it there are no actions. The admin token reads too.
// A client proves a token with `Authorization: Bearer <token>` (scripts,
// Prometheus) or with the session cookie that the login form sets
// (browsers): HttpOnly, SameSite=Strict, valid 12 h or until the server
// restarts; the cookie carries a random session id, never the token.
// Tokens are compared in time that does not depend on where they differ.
//
// Threading: thread-safe.
class ViewAuth {
 public:
  enum class Access { kNone, kRead, kAdmin };

  ViewAuth(std::string read_token, std::string admin_token);

  Access Of(const HttpRequest& request) const EXCLUDES(mu_);
  // The login form's token: a Set-Cookie value for a new session with its
  // rights, or nullopt when the token is neither.
  std::optional<std::string> Login(const std::string& token) EXCLUDES(mu_);
  // A Set-Cookie value that ends the request's session.
  std::string Logout(const HttpRequest& request) EXCLUDES(mu_);

  bool login_required() const { return !read_token_.empty(); }
  bool actions_enabled() const { return !admin_token_.empty(); }

  static constexpr const char* kCookie = "ddprun_session";
  static constexpr size_t kMaxSessions = 10000;
  static constexpr std::chrono::hours kSessionLife{12};

 private:
  Access OfToken(const std::string& token) const;
  static std::string SessionOf(const HttpRequest& request);

  const std::string read_token_;
  const std::string admin_token_;
  mutable Mutex mu_;
  struct Session {
    Access access;
    std::chrono::steady_clock::time_point expires;
  };
  std::map<std::string, Session> sessions_ GUARDED_BY(mu_);
};

// Compares in time that depends only on the lengths.
bool ConstantTimeEquals(const std::string& a, const std::string& b);

}  // namespace ddprun::rendezvous::http
