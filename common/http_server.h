#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun {

// A request as the handler sees it.
struct HttpRequest {
  std::string method;  // "GET", "HEAD", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // the target up to '?', not decoded
  std::string query;   // after '?', not decoded; "" when none
  // Header fields by lower-case name (a repeated field: the last one).
  std::map<std::string, std::string> headers;
  std::string body;
  std::string peer;  // the client's address, numeric
  // The header field `name` (lower case), "" when absent.
  std::string Header(const std::string& name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  // More header fields (name, value); the server adds Content-Length,
  // Content-Type and Connection.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct HttpServerOptions {
  // Threads that serve connections (handlers run on them).
  int threads = 2;
  // Connections open at once; one more is accepted and closed at once.
  int max_connections = 256;
  // A request's header block and body; larger ones get 431 / 413 and the
  // connection is closed.
  size_t max_header_bytes = 8 * 1024;
  size_t max_body_bytes = 16 * 1024;
  // A request must arrive whole within this time of its first byte being
  // awaited; an idle keep-alive connection is closed after it too.
  std::chrono::milliseconds read_timeout{10000};
  // A response must be written within this time, else the connection is
  // closed (a client that does not read cannot hold a thread).
  std::chrono::milliseconds write_timeout{10000};
  // The serving threads' nice value (setpriority on each thread; 0 = the
  // process's). A status page that runs niced never takes a CPU from the
  // threads that answer heartbeats when both want one.
  int nice = 0;
};

// A small HTTP/1.1 server on Boost.Beast for the launcher side: the
// rendezvous server's live view and metrics (rendezvous/http/), the agent's
// TORCHELASTIC_HEALTH_CHECK_PORT. Serves plain HTTP (no TLS) with
// keep-alive; every request goes to one handler.
//
// Threading: Start/Stop from one thread. The server runs on its own
// `threads` threads, never on the caller's; the handler is called on them,
// concurrently, and must be thread-safe. A handler blocks its thread only:
// it should copy what it needs and return (no socket is written while it
// runs).
// Errors: a handler's exception is not caught (handlers return errors as
// responses); a socket error closes that connection only.
class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  HttpServer();
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Listens on host:port (port 0: any free port; host a numeric address,
  // "localhost", "0.0.0.0" or "::") and returns the bound port.
  // UNAVAILABLE when the address cannot be bound, INVALID_ARGUMENT for a
  // host that is no address, FAILED_PRECONDITION when already started.
  StatusOr<int> Start(const std::string& host, int port, Handler handler,
                      HttpServerOptions options = {});
  // Closes the listener and every connection, joins the threads.
  // Idempotent; the handler is not called after it returns.
  void Stop();

  int port() const { return port_; }

  struct Impl;  // http_server.cc's: Boost.Beast stays out of this header

 private:
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace ddprun
