#include "agent/hosting/rendezvous_host.h"

#include <atomic>

#include <grpc/support/log.h>

#include "common/logging.h"
#include "rendezvous/options/endpoint.h"

namespace ddprun::agent {
namespace {

// gRPC's own log lines go through DDP_LOG (same format as ddprun's), except
// while a hosting attempt may lose a bind race: that is the normal "join it"
// case, not gRPC's multi-line "Address already in use" error.
std::atomic<int> g_grpc_log_quiet{0};

void GrpcLog(gpr_log_func_args* args) {
  if (g_grpc_log_quiet.load() > 0) return;
  if (args->severity == GPR_LOG_SEVERITY_ERROR) {
    DDP_LOG(WARNING) << "grpc " << args->file << ":" << args->line << ": "
                     << args->message;
  } else {
    DDP_LOG(DEBUG) << "grpc " << args->file << ":" << args->line << ": "
                   << args->message;
  }
}

}  // namespace

void InstallGrpcLogRouting() { gpr_set_log_function(GrpcLog); }

RendezvousHost::RendezvousHost(std::string bind_host, int port,
                               rendezvous::ServerOptions options,
                               std::string endpoint)
    : bind_host_(std::move(bind_host)),
      port_(port),
      options_(std::move(options)),
      endpoint_(std::move(endpoint)) {}

RendezvousHost::~RendezvousHost() { Shutdown(Clock::Duration::zero()); }

void RendezvousHost::SetStoreKey(const std::string& key, std::string value) {
  MutexLock lock(&mu_);
  if (store_ != nullptr) store_->Set(key, std::move(value));
}

std::optional<std::string> RendezvousHost::GetStoreKey(
    const std::string& key) const {
  MutexLock lock(&mu_);
  if (store_ == nullptr) return std::nullopt;
  return store_->Get(key);
}

void RendezvousHost::EnableAgentStore() {
  MutexLock lock(&mu_);
  agent_store_ = true;
}

StatusOr<int> RendezvousHost::ServeWithStore() {
  auto server = std::make_unique<rendezvous::RendezvousServer>();
  rendezvous::RendezvousServer* raw_server = server.get();
  AgentStore::Options so;
  so.on_http2 = [raw_server](int fd) { raw_server->AdoptConnection(fd); };
  auto store = std::make_unique<AgentStore>(so);
  AgentStore* raw_store = store.get();
  rendezvous::ServerOptions options = options_;
  options.adopt_connections = true;
  // Only this agent's job's rounds empty its workers' store (the server
  // refuses other jobs too: only_rdzv_id).
  options.defaults.on_round_complete = [raw_store, own = options.only_rdzv_id](
                                           const std::string& job,
                                           int64_t round) {
    if (!own.empty() && job != own) return;
    raw_store->Reset("rendezvous '" + job + "' round " + std::to_string(round) +
                     " formed");
  };
  DDP_RETURN_IF_ERROR(server->Start(bind_host_, port_, options).status());
  StatusOr<int> port = store->Start(bind_host_, port_);
  if (!port.ok()) {
    server->Shutdown(Clock::Duration::zero());
    return port.status();
  }
  DDP_LOG(INFO) << "rendezvous server and agent store (the workers' c10d "
                   "TCPStore) listening on "
                << bind_host_ << ":" << *port;
  store_ = std::move(store);
  server_ = std::move(server);
  (void)StartViewLocked();
  return port;
}

StatusOr<int> RendezvousHost::Serve(bool quiet) {
  MutexLock lock(&mu_);
  if (store_) return store_->port();
  if (server_) return server_->port();
  if (agent_store_) return ServeWithStore();
  auto server = std::make_unique<rendezvous::RendezvousServer>();
  if (quiet) ++g_grpc_log_quiet;
  StatusOr<int> port = server->Start(bind_host_, port_, options_);
  if (quiet) --g_grpc_log_quiet;
  if (!port.ok()) return port.status();
  server_ = std::move(server);
  (void)StartViewLocked();
  return port;
}

bool RendezvousHost::TakeOver() {
  {
    MutexLock lock(&mu_);
    if (server_ || shut_down_ || port_ == 0) return false;
  }
  if (!Serve(/*quiet=*/true).ok()) return false;  // someone serves it
  DDP_LOG(WARNING) << "rendezvous " << endpoint_
                   << " stopped answering and its port was free: this agent "
                      "hosts it now (the job is rebuilt from the agents)";
  return true;
}

void RendezvousHost::SetStandby(std::string host, int port) {
  MutexLock lock(&mu_);
  standby_host_ = std::move(host);
  standby_port_ = port;
}

std::string RendezvousHost::standby_endpoint() const {
  MutexLock lock(&mu_);
  if (standby_port_ == 0) return "";
  rendezvous::Endpoint ep;
  ep.host = standby_host_;
  ep.port = standby_port_;
  return ep.ToString();
}

bool RendezvousHost::HostStandby() {
  MutexLock lock(&mu_);
  if (server_) return true;
  if (shut_down_ || standby_port_ == 0) return false;
  rendezvous::ServerOptions options = options_;
  options.own_hosts = {standby_host_};
  auto server = std::make_unique<rendezvous::RendezvousServer>();
  StatusOr<int> port = server->Start(standby_host_, standby_port_, options);
  if (!port.ok()) {
    DDP_LOG(WARNING) << "hosting the rendezvous at standby " << standby_host_
                     << ":" << standby_port_ << ": " << port.status().message();
    return false;
  }
  server_ = std::move(server);
  (void)StartViewLocked();
  return true;
}

Status RendezvousHost::EnableLiveView(
    rendezvous::http::LiveViewOptions options) {
  MutexLock lock(&mu_);
  options.rendezvous_token = options_.token;
  view_options_ = std::move(options);
  return server_ ? StartViewLocked() : Status::Ok();
}

Status RendezvousHost::StartViewLocked() {
  if (!view_options_ || !server_ || view_) return Status::Ok();
  auto view = std::make_unique<rendezvous::http::LiveView>(server_.get());
  StatusOr<int> port = view->Start(*view_options_);
  if (!port.ok()) {
    DDP_LOG(WARNING) << "live view on " << view_options_->host << ":"
                     << view_options_->port << ": " << port.status().message();
    return port.status();
  }
  DDP_LOG(INFO) << "live view of the rendezvous at http://"
                << view_options_->host << ":" << *port << "/"
                << (view_options_->read_token.empty() ? ""
                                                      : " (token required)");
  view_ = std::move(view);
  return Status::Ok();
}

bool RendezvousHost::serving() const {
  MutexLock lock(&mu_);
  return server_ != nullptr;
}

void RendezvousHost::WaitUntilAllHeard(
    std::chrono::steady_clock::time_point deadline) {
  rendezvous::RendezvousServer* server;
  {
    MutexLock lock(&mu_);
    server = server_.get();
  }
  // Only Shutdown, on this same thread, removes the server.
  if (server != nullptr) (void)server->WaitUntilAllHeard(deadline);
}

void RendezvousHost::Shutdown(Clock::Duration grace) {
  std::unique_ptr<rendezvous::RendezvousServer> server;
  std::unique_ptr<AgentStore> store;
  std::unique_ptr<rendezvous::http::LiveView> view;
  {
    MutexLock lock(&mu_);
    shut_down_ = true;
    server = std::move(server_);
    store = std::move(store_);
    view = std::move(view_);
  }
  // The view reads the server: it goes first. No more connections for the
  // server, then the server (its round hook may still reach the stopped
  // store), then the store.
  if (view) view->Stop();
  if (store) store->Stop();
  if (server) server->Shutdown(grace);
}

}  // namespace ddprun::agent
