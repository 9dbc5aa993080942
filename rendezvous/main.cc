// ddprun-rendezvous: the standalone rendezvous server, and a status client.
//
//   ddprun-rendezvous --host 0.0.0.0 --port 29400 [--token T|--token_file F]
//                     [--tls_cert C --tls_key K [--tls_ca CA]]
//                     [--max_nodes_per_job N] [--max_jobs N]
//                     [--join_rate R] [--heartbeat_rate R]
//   (the token may also come from the DDPRUN_RDZV_TOKEN environment variable,
//   or from the file DDPRUN_RDZV_TOKEN_FILE names)
//   ddprun-rendezvous --status HOST:PORT [--rdzv_id ID] [--json]
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include <grpcpp/grpcpp.h>
#include <CLI/CLI.hpp>

#include "common/logging.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/rendezvous_server.h"
#include "rendezvous/status_format.h"

namespace ddprun::rendezvous {
namespace {

struct Flags {
  std::string host = "0.0.0.0";
  int port = 29400;
  std::string token;
  std::string token_file;
  std::string tls_cert, tls_key, tls_ca;
  double join_timeout = 600, last_call_timeout = 10, heartbeat_timeout = 3;
  size_t max_nodes_per_job = 4096;
  size_t max_jobs = 10000;
  double join_rate = 2, heartbeat_rate = 20;
  std::string status_endpoint;
  std::string rdzv_id;
  bool json = false;
};

// gRPC's own multi-line diagnostics go to our log at DEBUG; the user sees
// one clear line per problem from us (LOGLEVEL=DEBUG shows gRPC's too).
void GrpcLogToDebug(gpr_log_func_args* args) {
  DDP_LOG(DEBUG) << "grpc " << args->file << ":" << args->line << " "
                 << args->message;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

int PrintStatus(const Flags& flags) {
  std::shared_ptr<grpc::ChannelCredentials> creds =
      grpc::InsecureChannelCredentials();
  if (!flags.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!ReadFile(flags.tls_ca, &ssl.pem_root_certs)) {
      std::cerr << "ddprun-rendezvous: cannot read --tls_ca " << flags.tls_ca
                << "\n";
      return 2;
    }
    if (!flags.tls_cert.empty()) ReadFile(flags.tls_cert, &ssl.pem_cert_chain);
    if (!flags.tls_key.empty()) ReadFile(flags.tls_key, &ssl.pem_private_key);
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);    // a 100k-node job's status
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);  // as the agents' channel
  auto stub = v1::Rendezvous::NewStub(
      grpc::CreateCustomChannel(flags.status_endpoint, creds, args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!flags.token.empty()) ctx.AddMetadata("x-ddprun-token", flags.token);
  v1::StatusRequest req;
  req.set_rdzv_id(flags.rdzv_id);
  v1::StatusResponse resp;
  grpc::Status s = stub->Status(&ctx, req, &resp);
  if (!s.ok()) {
    std::cerr << "ddprun-rendezvous: status from " << flags.status_endpoint
              << " failed: " << s.error_message() << "\n";
    return 1;
  }
  std::cout << (flags.json ? FormatStatusJson(resp) : FormatStatusTable(resp));
  return 0;
}

int Serve(const Flags& flags) {
  ServerOptions options;
  options.token = flags.token;
  if (!flags.tls_cert.empty() || !flags.tls_key.empty()) {
    if (!ReadFile(flags.tls_cert, &options.tls_cert_pem) ||
        !ReadFile(flags.tls_key, &options.tls_key_pem) ||
        (!flags.tls_ca.empty() &&
         !ReadFile(flags.tls_ca, &options.tls_ca_pem))) {
      std::cerr << "ddprun-rendezvous: cannot read the TLS files\n";
      return 2;
    }
  }
  auto secs = [](double s) {
    return std::chrono::duration_cast<Clock::Duration>(
        std::chrono::duration<double>(s));
  };
  options.defaults.join_timeout = secs(flags.join_timeout);
  options.defaults.last_call_timeout = secs(flags.last_call_timeout);
  options.defaults.heartbeat_timeout = secs(flags.heartbeat_timeout);
  options.defaults.max_nodes_per_job = flags.max_nodes_per_job;
  options.limits.max_jobs = flags.max_jobs;
  options.limits.join_rate_per_s = flags.join_rate;
  options.limits.heartbeat_rate_per_s = flags.heartbeat_rate;

  // Signals are taken synchronously by this thread; gRPC threads never see
  // them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  RendezvousServer server;
  StatusOr<int> port = server.Start(flags.host, flags.port, options);
  if (!port.ok()) {
    std::cerr << "ddprun-rendezvous: " << port.status().message() << "\n";
    return 1;
  }
  int sig = 0;
  sigwait(&set, &sig);
  DDP_LOG(INFO) << "signal " << sig << ": shutting down";
  server.Shutdown(std::chrono::seconds(2));
  return 0;
}

}  // namespace
}  // namespace ddprun::rendezvous

int main(int argc, char** argv) {
  using ddprun::rendezvous::Flags;
  ddprun::SetLogTag("rdzv");
  gpr_set_log_function(ddprun::rendezvous::GrpcLogToDebug);
  Flags flags;
  CLI::App app{"ddprun rendezvous server"};
  app.add_option("--host", flags.host, "address to listen on")
      ->capture_default_str();
  app.add_option("--port", flags.port, "port to listen on; 0 = any free port")
      ->capture_default_str();
  app.add_option("--token", flags.token, "shared token clients must send");
  app.add_option("--token_file,--token-file", flags.token_file,
                 "file holding the token (trailing newline ignored)");
  app.add_option("--tls_cert,--tls-cert", flags.tls_cert, "server cert (PEM)");
  app.add_option("--tls_key,--tls-key", flags.tls_key, "server key (PEM)");
  app.add_option("--tls_ca,--tls-ca", flags.tls_ca,
                 "CA (PEM). Server: clients must present a cert it "
                 "signed. --status: the CA that signed the server's cert");
  app.add_option("--join_timeout,--join-timeout", flags.join_timeout,
                 "default join_timeout, seconds")
      ->capture_default_str();
  app.add_option("--last_call_timeout,--last-call-timeout",
                 flags.last_call_timeout, "default last_call_timeout, seconds")
      ->capture_default_str();
  app.add_option("--heartbeat_timeout,--heartbeat-timeout",
                 flags.heartbeat_timeout, "default heartbeat_timeout, seconds")
      ->capture_default_str();
  app.add_option("--max_nodes_per_job,--max-nodes-per-job",
                 flags.max_nodes_per_job,
                 "nodes one job may have (joining, waiting, running)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--max_jobs,--max-jobs", flags.max_jobs,
                 "jobs the server holds at once")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--join_rate,--join-rate", flags.join_rate,
                 "Join calls per second per node (burst 20); 0 = no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--heartbeat_rate,--heartbeat-rate", flags.heartbeat_rate,
                 "Heartbeat calls per second per node (burst 50); 0 = no limit")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--status", flags.status_endpoint,
                 "print the live state of the server at HOST:PORT and exit");
  app.add_option("--rdzv_id,--rdzv-id", flags.rdzv_id,
                 "with --status: only this job");
  app.add_flag("--json", flags.json, "with --status: print JSON");
  CLI11_PARSE(app, argc, argv);

  // Precedence: --token, then --token_file, then DDPRUN_RDZV_TOKEN (an env
  // var keeps the token out of `ps`), then the file DDPRUN_RDZV_TOKEN_FILE
  // names (the server and a --status call, e.g. the Docker HEALTHCHECK, find
  // the token the same way).
  if (const char* env = std::getenv("DDPRUN_RDZV_TOKEN");
      env != nullptr && flags.token.empty() && flags.token_file.empty()) {
    flags.token = env;
  }
  if (const char* env = std::getenv("DDPRUN_RDZV_TOKEN_FILE");
      env != nullptr && *env != '\0' && flags.token.empty() &&
      flags.token_file.empty()) {
    flags.token_file = env;
  }
  if (!flags.token_file.empty() && flags.token.empty()) {
    if (!ddprun::rendezvous::ReadFile(flags.token_file, &flags.token)) {
      std::cerr << "ddprun-rendezvous: cannot read the token file "
                << flags.token_file << "\n";
      return 2;
    }
    while (!flags.token.empty() &&
           (flags.token.back() == '\n' || flags.token.back() == '\r')) {
      flags.token.pop_back();
    }
  }
  if (!flags.status_endpoint.empty()) {
    return ddprun::rendezvous::PrintStatus(flags);
  }
  return ddprun::rendezvous::Serve(flags);
}
