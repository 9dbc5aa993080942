#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/http_server.h"
#include "common/mutex.h"
#include "common/thread_annotations.h"
#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/http/view_auth.h"
#include "rendezvous/server/rendezvous_server.h"

namespace ddprun::rendezvous::http {

struct LiveViewOptions {
  // Where to listen (`--http_host`, `--http_port`; port 0 = any free one).
  std::string host = "127.0.0.1";
  int port = 0;
  // ViewAuth's tokens (`--http_token`, `--http_admin_token`).
  std::string read_token;
  std::string admin_token;
  // The rendezvous server's own token, which the actions' rpcs carry.
  std::string rendezvous_token;
  // Shown on the page and in ddprun_build_info.
  std::string version;
  // A snapshot of the server's state serves every request within this
  // time of it: a flood of requests takes the state's mutex at most
  // 1/snapshot_ttl times a second.
  std::chrono::milliseconds snapshot_ttl{100};
  // One stack dump per job per interval from the page (429 sooner).
  std::chrono::milliseconds stacks_interval{10000};
  int threads = 2;
};

// INVALID_ARGUMENT (naming the flag) for options that would expose the
// view: a non-loopback host without a read token, equal read and admin
// tokens.
Status CheckLiveViewOptions(const LiveViewOptions& options);

// The rendezvous server's live view over HTTP (ddprun-rendezvous
// --http_port, and the server an agent hosts: ddprun --http_port):
//   GET  /                      the page (updates itself 4 times a second)
//   GET  /api/v1/jobs           every job as JSON (README: the schema)
//   GET  /api/v1/jobs/<id>      one job (id percent-encoded), 404 if none
//   GET  /api/v1/session        what this client may do
//   GET  /metrics               Prometheus text format
//   GET  /healthz, /readyz      live; serving rendezvous rpcs (no token)
//   GET  /login, POST /login, GET /logout      the token form
//   POST /api/v1/jobs/<id>/stacks, /stop       actions (admin token)
// Reads take a snapshot of the state (RendezvousServer::ReadState: a copy
// under the state's mutex, at most once per snapshot_ttl) and build the
// answer outside it: heartbeats never wait for a socket. Actions go
// through the server's rpcs (Stacks, Close) in-process, as any client's
// would. No CORS: an action needs the X-Ddprun-Action header (which a
// cross-site form cannot send, and no preflight is ever answered) and a
// same-origin Origin when one is sent; a loopback bind checks that the
// Host header names a loopback address (DNS rebinding).
//
// Threading: Start/Stop from one thread; Handle runs on the HTTP server's
// threads (and in tests on any thread). The server must outlive Stop().
class LiveView {
 public:
  explicit LiveView(RendezvousServer* server);
  ~LiveView();  // Stop()
  LiveView(const LiveView&) = delete;
  LiveView& operator=(const LiveView&) = delete;

  // Checks `options` (CheckLiveViewOptions), listens, returns the port.
  // Errors as HttpServer::Start; FAILED_PRECONDITION when the rendezvous
  // server is not running.
  StatusOr<int> Start(const LiveViewOptions& options);
  void Stop();
  int port() const { return http_.port(); }

  // One request, without a socket (the HTTP server calls it).
  HttpResponse Handle(const HttpRequest& request);

 private:
  struct JobsView {
    double time = 0;
    std::string all;                           // /api/v1/jobs
    std::map<std::string, std::string> by_id;  // /api/v1/jobs/<id>
    // `all` gzipped, made by the first client that accepts it.
    const std::string& AllGzipped() const;
    mutable std::once_flag gzip_once;
    mutable std::string all_gzip;
  };

  HttpResponse Route(const HttpRequest& request);
  HttpResponse JobRoute(const HttpRequest& request, ViewAuth::Access access);
  HttpResponse Login(const HttpRequest& request);
  HttpResponse Ready();
  HttpResponse DumpStacks(const std::string& id, const HttpRequest& request);
  HttpResponse StopJob(const std::string& id, const HttpRequest& request);
  // Copies Status (every job) and, unless `stacks` is null, each job's
  // newest stack dump.
  bool Snapshot(v1::StatusResponse* status,
                std::map<std::string, v1::StacksResponse>* stacks) const;
  std::shared_ptr<const JobsView> Jobs() EXCLUDES(jobs_mu_);
  std::shared_ptr<const std::string> Metrics() EXCLUDES(metrics_mu_);
  // A call to the server's own rpcs: its deadline and the server's token.
  void PrepareCall(grpc::ClientContext* ctx,
                   std::chrono::seconds timeout) const;
  // The Host header names a loopback address (for loopback binds).
  bool HostAllowed(const HttpRequest& request) const;

  RendezvousServer* const server_;
  LiveViewOptions options_;
  std::unique_ptr<ViewAuth> auth_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  bool loopback_ = true;
  double started_ = 0;

  Mutex jobs_mu_;
  std::shared_ptr<const JobsView> jobs_ GUARDED_BY(jobs_mu_);
  std::chrono::steady_clock::time_point jobs_at_ GUARDED_BY(jobs_mu_);
  Mutex metrics_mu_;
  std::shared_ptr<const std::string> metrics_ GUARDED_BY(metrics_mu_);
  std::chrono::steady_clock::time_point metrics_at_ GUARDED_BY(metrics_mu_);
  Mutex actions_mu_;
  std::map<std::string, std::chrono::steady_clock::time_point> last_dump_
      GUARDED_BY(actions_mu_);

  HttpServer http_;  // last: stopped first
};

}  // namespace ddprun::rendezvous::http
