#include "rendezvous/server/rendezvous_server.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>
#include <grpcpp/support/server_interceptor.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/accept_guard.h"
#include "common/logging.h"
#include "common/net.h"
#include "rendezvous/server/rendezvous_service.h"

namespace ddprun::rendezvous {

namespace {

constexpr int kHandshakeTimeoutMs = 10000;

// A busy port gets our one-line error instead of gRPC's multi-line one.
// (gRPC's own bind below still decides; this is only the common case, and
// a host that does not resolve is left for gRPC to report.)
Status CheckPortFree(const std::string& host, int port) {
  StatusOr<bool> in_use = PortInUse(host, port);
  if (in_use.ok() && *in_use) {
    return UnavailableError("cannot listen on " + host + ":" +
                            std::to_string(port) + ": address already in use");
  }
  return Status::Ok();
}

}  // namespace

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" ||
         host.rfind("127.", 0) == 0;
}

RendezvousServer::RendezvousServer()
    : rpc_stats_(std::make_unique<RpcStats>()) {}

RendezvousServer::~RendezvousServer() { Shutdown(Clock::Duration::zero()); }

StatusOr<int> RendezvousServer::Start(const std::string& host, int port,
                                      const ServerOptions& options) {
  if (server_) return FailedPreconditionError("server already started");
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (options.adopt_connections && !options.tls_cert_pem.empty()) {
    return InvalidArgumentError(
        "a rendezvous server on adopted connections serves no TLS");
  }
  if (!options.tls_cert_pem.empty() || !options.tls_key_pem.empty()) {
    if (options.tls_cert_pem.empty() || options.tls_key_pem.empty()) {
      return InvalidArgumentError("TLS needs both a certificate and a key");
    }
    grpc::SslServerCredentialsOptions ssl(
        options.tls_ca_pem.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = options.tls_ca_pem;
    ssl.pem_key_cert_pairs.push_back(
        {options.tls_key_pem, options.tls_cert_pem});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  if (port != 0 && !options.adopt_connections) {
    DDP_RETURN_IF_ERROR(CheckPortFree(host, port));
  }
  // Running out of descriptors must cost new connections, not the listener.
  EnableAcceptGuard("rendezvous server");
  auto service = std::make_unique<RendezvousService>(
      options.clock, options.defaults, options.token, options.limits,
      options.failover, options.own_hosts, options.only_rdzv_id);
  const std::string address =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
      std::to_string(port);
  grpc::ServerBuilder builder;
  int bound = 0;
  if (options.adopt_connections) {
    bound = port;
  } else {
    builder.AddListeningPort(address, creds, &bound);
  }
  builder.RegisterService(service.get());
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(RpcStats::InterceptorFactory(rpc_stats_.get()));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  // gRPC sets SO_REUSEPORT by default: a second server on a busy port would
  // silently share it (split brain). Refuse instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // A parked Join is liveness evidence only while its connection is: ping
  // idle connections so a vanished node's call is cancelled in ~15 s.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A connection that does not speak HTTP/2 within 10 s is closed (gRPC's
  // default is 120 s): idle sockets cannot hold descriptors for long.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             kHandshakeTimeoutMs);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || (bound == 0 && !options.adopt_connections)) {
    service->StopTimer();
    return UnavailableError("cannot listen on " + address +
                            " (address in use or not local?)");
  }
  service_ = std::move(service);
  server_ = std::move(server);
  port_ = bound;
  // Adopting connections, the server listens on nothing itself: its owner
  // (the agent store) says where it listens once it does.
  if (!options.adopt_connections) {
    DDP_LOG(INFO) << "rendezvous server listening on " << host << ":" << bound
                  << (options.token.empty() ? "" : " (token required)")
                  << (options.tls_cert_pem.empty() ? "" : " (TLS)");
  }
  if (options.token.empty() && options.tls_cert_pem.empty() &&
      !IsLoopbackHost(host)) {
    DDP_LOG(WARNING) << "rendezvous server on " << host << ":" << bound
                     << " has neither a token nor TLS: anyone who can reach "
                        "it can join or close jobs (set --token, "
                        "--token_file or DDPRUN_RDZV_TOKEN, or --tls_cert "
                        "--tls_key)";
  }
  return bound;
}

bool RendezvousServer::WaitUntilAllHeard(
    std::chrono::steady_clock::time_point deadline) {
  return !service_ || service_->WaitUntilAllHeard(deadline);
}

void RendezvousServer::AdoptConnection(int fd) {
  if (!server_) {
    close(fd);
    return;
  }
  // gRPC names such a peer "fd:<fd>": its calls are limited by the address
  // it connected from instead.
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  char host[INET6_ADDRSTRLEN] = "";
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    if (addr.ss_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&addr)->sin_addr, host,
                sizeof(host));
    } else if (addr.ss_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr,
                host, sizeof(host));
    }
  }
  if (host[0] != '\0') service_->NoteAdoptedPeer(fd, host);
  grpc::AddInsecureChannelFromFd(server_.get(), fd);
}

bool RendezvousServer::ReadState(
    const std::function<void(const RendezvousState&)>& read) const {
  if (!service_) return false;
  service_->ReadState(read);
  return true;
}

std::shared_ptr<grpc::Channel> RendezvousServer::InProcessChannel() const {
  if (!server_) return nullptr;
  grpc::ChannelArguments args;
  return server_->InProcessChannel(args);
}

void RendezvousServer::Shutdown(Clock::Duration grace) {
  if (!server_) return;
  service_->FinishAll();
  server_->Shutdown(
      std::chrono::system_clock::now() +
      std::chrono::duration_cast<std::chrono::nanoseconds>(grace));
  server_->Wait();
  service_->StopTimer();
  server_.reset();
  service_.reset();
}

}  // namespace ddprun::rendezvous
