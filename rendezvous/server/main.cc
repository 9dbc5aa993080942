// ddprun-rendezvous: the standalone rendezvous server, and a status client.
//
//   ddprun-rendezvous --host 0.0.0.0 --port 29400 [--token T|--token_file F]
//                     [--tls_cert C --tls_key K [--tls_ca CA]]
//                     [--max_nodes_per_job N] [--max_jobs N]
//                     [--join_rate R] [--heartbeat_rate R]
//                     [--http_port P [--http_host H] [--http_token T]
//                      [--http_admin_token A]]   (the live view)
//   (the token may also come from the DDPRUN_RDZV_TOKEN environment variable,
//   or from the file DDPRUN_RDZV_TOKEN_FILE names)
//   ddprun-rendezvous --status HOST:PORT [--rdzv_id ID] [--json]
//   ddprun-rendezvous --stacks HOST:PORT --rdzv_id ID [--stacks_timeout S]
#include <signal.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <CLI/CLI.hpp>

#include "common/accept_guard.h"
#include "common/logging.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "diagnosis/stack_diagnosis.h"
#include "diagnosis/stack_summary.h"
#include "rendezvous/http/live_view.h"
#include "rendezvous/options/rendezvous_options.h"
#include "rendezvous/server/rendezvous_server.h"
#include "rendezvous/server/status_format.h"

namespace ddprun::rendezvous {
namespace {

struct Flags {
  std::string host = "0.0.0.0";
  int port = 29400;
  std::string token;
  bool token_given = false;  // --token, even an empty one
  std::string token_file;
  bool token_file_given = false;
  std::string tls_cert, tls_key, tls_ca;
  double join_timeout = 600, last_call_timeout = 10, heartbeat_timeout = 3;
  size_t max_nodes_per_job = 4096;
  size_t max_jobs = 10000;
  double join_rate = 2, heartbeat_rate = 20;
  std::string status_endpoint;
  std::string stacks_endpoint;
  double stacks_timeout = 10;
  std::string rdzv_id;
  bool json = false;
  // The live view (rendezvous/http/live_view.h); port -1 = off.
  int http_port = -1;
  std::string http_host = "127.0.0.1";
  std::string http_token;
  std::string http_admin_token;
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

// Bad input: one line, exit 2 (as the ddprun front ends).
int UsageError(const std::string& what) {
  std::cerr << "ddprun-rendezvous: error: " << what << "\n";
  return 2;
}

// `value` must be finite and within [min, max] (`min` itself excluded when
// `min_excluded`); `range` says so in the error.
Status CheckNumber(const char* flag, double value, double min,
                   bool min_excluded, double max, const char* range) {
  if (std::isfinite(value) && value <= max &&
      (min_excluded ? value > min : value >= min)) {
    return Status::Ok();
  }
  std::ostringstream v;
  v << value;
  return InvalidArgumentError(std::string(flag) + ": invalid value " + v.str() +
                              " (" + range + ")");
}

Status CheckNumbers(const Flags& f) {
  // Seconds as the protocol carries them (uint32 milliseconds): > 0 and at
  // most ~49 days, so that no conversion overflows.
  const char* kSeconds = "seconds, more than 0 and at most 4294967";
  const std::pair<const char*, double> timeouts[] = {
      {"--join_timeout", f.join_timeout},
      {"--last_call_timeout", f.last_call_timeout},
      {"--heartbeat_timeout", f.heartbeat_timeout}};
  for (const auto& [flag, value] : timeouts) {
    DDP_RETURN_IF_ERROR(CheckNumber(flag, value, 0, true, 4294967, kSeconds));
  }
  const char* kRate = "calls per second, 0 to 1000000; 0 = off";
  DDP_RETURN_IF_ERROR(
      CheckNumber("--join_rate", f.join_rate, 0, false, 1e6, kRate));
  return CheckNumber("--heartbeat_rate", f.heartbeat_rate, 0, false, 1e6,
                     kRate);
}

// The token, from (in this order) --token, --token_file, DDPRUN_RDZV_TOKEN
// (an env var keeps the token out of `ps`) or the file
// DDPRUN_RDZV_TOKEN_FILE names (the server and a --status call, e.g. the
// Docker HEALTHCHECK, find the token the same way). None of them = no
// token. One that is given but empty is an error: an empty token would
// silently turn authentication off.
Status ResolveToken(Flags* f) {
  std::string source;
  std::string file;
  const char* env_token = std::getenv("DDPRUN_RDZV_TOKEN");
  const char* env_file = std::getenv("DDPRUN_RDZV_TOKEN_FILE");
  if (f->token_file_given && f->token_file.empty()) {
    return InvalidArgumentError("--token_file: empty path");
  }
  if (f->token_given) {
    source = "--token";
  } else if (!f->token_file.empty()) {
    source = "--token_file " + f->token_file;
    file = f->token_file;
  } else if (env_token != nullptr) {
    source = "DDPRUN_RDZV_TOKEN";
    f->token = env_token;
  } else if (env_file != nullptr && *env_file != '\0') {
    source = "DDPRUN_RDZV_TOKEN_FILE=" + std::string(env_file);
    file = env_file;
  } else {
    return Status::Ok();
  }
  if (!file.empty()) {
    DDP_ASSIGN_OR_RETURN(f->token, ReadTokenFile(source, file));
  }
  if (f->token.empty()) {
    return InvalidArgumentError(
        source +
        " gives an empty token, which would turn authentication off; give "
        "a non-empty token, or none at all to run without one");
  }
  return Status::Ok();
}

// A stub for the server at `endpoint` (--status, --stacks), with the CA of
// --tls_ca; null after printing the error.
std::unique_ptr<v1::Rendezvous::Stub> MakeStub(const Flags& flags,
                                               const std::string& endpoint) {
  std::shared_ptr<grpc::ChannelCredentials> creds =
      grpc::InsecureChannelCredentials();
  if (!flags.tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!ReadFile(flags.tls_ca, &ssl.pem_root_certs)) {
      UsageError("cannot read --tls_ca " + flags.tls_ca);
      return nullptr;
    }
    if (!flags.tls_cert.empty()) ReadFile(flags.tls_cert, &ssl.pem_cert_chain);
    if (!flags.tls_key.empty()) ReadFile(flags.tls_key, &ssl.pem_private_key);
    creds = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);    // a 100k-node job's status
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);  // as the agents' channel
  return v1::Rendezvous::NewStub(
      grpc::CreateCustomChannel(endpoint, creds, args));
}

int PrintStatus(const Flags& flags) {
  auto stub = MakeStub(flags, flags.status_endpoint);
  if (stub == nullptr) return 2;
  v1::StatusRequest req;
  req.set_rdzv_id(flags.rdzv_id);
  v1::StatusResponse all;
  // Every job comes a page at a time (the server builds each under its
  // lock); a named job in one answer.
  while (true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    if (!flags.token.empty()) ctx.AddMetadata("x-ddprun-token", flags.token);
    v1::StatusResponse resp;
    grpc::Status s = stub->Status(&ctx, req, &resp);
    if (!s.ok()) {
      std::cerr << "ddprun-rendezvous: status from " << flags.status_endpoint
                << " failed: " << EscapeControlChars(s.error_message()) << "\n";
      return 1;
    }
    for (v1::JobStatus& job : *resp.mutable_jobs()) {
      *all.add_jobs() = std::move(job);
    }
    if (resp.next_page_after().empty() ||
        resp.next_page_after() <= req.page_after()) {
      break;
    }
    req.set_page_after(resp.next_page_after());
  }
  std::cout << (flags.json ? FormatStatusJson(all) : FormatStatusTable(all));
  return 0;
}

// One Stacks call of --stacks (deadline: the earlier of `until` and 5 s);
// prints the error and returns false when it fails.
bool CallStacks(v1::Rendezvous::Stub* stub, const Flags& flags,
                const v1::StacksRequest& req,
                std::chrono::system_clock::time_point until,
                v1::StacksResponse* resp) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::min(
      until, std::chrono::system_clock::now() + std::chrono::seconds(5)));
  if (!flags.token.empty()) ctx.AddMetadata("x-ddprun-token", flags.token);
  grpc::Status s = stub->Stacks(&ctx, req, resp);
  if (!s.ok()) {
    std::cerr << "ddprun-rendezvous: stacks of '"
              << EscapeControlChars(flags.rdzv_id) << "' from "
              << flags.stacks_endpoint
              << " failed: " << EscapeControlChars(s.error_message()) << "\n";
  }
  return s.ok();
}

// --stacks: a dump of every rank's stacks of a running job, which goes on.
// Every agent is told on its next heartbeat, collects its workers' stacks
// and answers; polled (its state only) until all answered or
// --stacks_timeout, then its ranks are read page by page. Everything that
// came from the agents is printed escaped (one line per rank).
int PrintStacks(const Flags& flags) {
  if (flags.rdzv_id.empty()) {
    return UsageError("--stacks needs --rdzv_id (the job to dump)");
  }
  auto stub = MakeStub(flags, flags.stacks_endpoint);
  if (stub == nullptr) return 2;
  const auto until = std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::duration<double>(flags.stacks_timeout));
  v1::StacksRequest req;
  req.set_rdzv_id(flags.rdzv_id);
  req.set_reason("ddprun-rendezvous --stacks");
  req.set_ranks_from(UINT32_MAX);  // the state only, until the end
  v1::StacksResponse state;
  while (true) {
    if (!CallStacks(stub.get(), flags, req, until, &state)) return 1;
    req.set_request_id(state.request_id());
    if (state.complete() ||
        std::chrono::system_clock::now() + std::chrono::milliseconds(200) >=
            until) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::vector<diagnosis::RankStacks> ranks;
  std::string lines;
  // Reading the pages gets 5 s of its own past --stacks_timeout.
  const auto read_until =
      std::chrono::system_clock::now() + std::chrono::seconds(5);
  req.set_ranks_from(0);
  while (true) {
    v1::StacksResponse page;
    if (!CallStacks(stub.get(), flags, req, read_until, &page)) {
      lines += "  ranks from index " + std::to_string(req.ranks_from()) +
               " of the dump: not read\n";
      break;
    }
    for (const v1::RankStack& r : page.ranks()) {
      ranks.push_back(
          diagnosis::FromSummary({r.rank(), r.pid(), r.group_rank(), r.host(),
                                  r.stack(), r.missing()}));
      lines += diagnosis::ConsoleLine(ranks.back(), 8);
    }
    if (page.ranks_next() <= req.ranks_from()) break;
    req.set_ranks_from(page.ranks_next());
  }
  for (const std::string& node : state.missing_nodes()) {
    lines += "  " + EscapeControlChars(node) + ": no answer within " +
             std::to_string(static_cast<int>(flags.stacks_timeout)) + " s\n";
  }
  std::cout << "stacks of '" << EscapeControlChars(flags.rdzv_id) << "' (dump "
            << state.request_id() << "):\n"
            << lines << "diagnosis: "
            << EscapeControlChars(diagnosis::DiagnoseHang(ranks)) << "\n"
            << "every thread's stack: <log_dir of each node>/attempt_<k>/"
               "<local_rank>/stacks.txt\n";
  return state.complete() ? 0 : 1;
}

http::LiveViewOptions LiveViewOptionsOf(const Flags& flags) {
  http::LiveViewOptions o;
  o.host = flags.http_host;
  o.port = flags.http_port;
  o.read_token = flags.http_token;
  o.admin_token = flags.http_admin_token;
  o.rendezvous_token = flags.token;
  o.version = DDPRUN_VERSION;
  return o;
}

// The live view's tokens: the flags, else DDPRUN_HTTP_TOKEN and
// DDPRUN_HTTP_ADMIN_TOKEN (keeps them out of `ps`). Given but empty is an
// error, as for --token.
Status ResolveHttpTokens(Flags* f, bool token_given, bool admin_given) {
  struct Token {
    std::string* value;
    bool given;
    const char* flag;
    const char* env;
  };
  const Token tokens[] = {
      {&f->http_token, token_given, "--http_token", "DDPRUN_HTTP_TOKEN"},
      {&f->http_admin_token, admin_given, "--http_admin_token",
       "DDPRUN_HTTP_ADMIN_TOKEN"}};
  for (const Token& t : tokens) {
    const char* from_env = std::getenv(t.env);
    if (!t.given && from_env != nullptr) *t.value = from_env;
    if ((t.given || from_env != nullptr) && t.value->empty()) {
      return InvalidArgumentError(std::string(t.given ? t.flag : t.env) +
                                  " gives an empty token; give a non-empty "
                                  "one, or none");
    }
  }
  if (f->http_port >= 0) {
    DDP_RETURN_IF_ERROR(http::CheckLiveViewOptions(LiveViewOptionsOf(*f)));
  }
  return Status::Ok();
}

int Serve(const Flags& flags) {
  ServerOptions options;
  options.token = flags.token;
  if (!flags.tls_cert.empty() || !flags.tls_key.empty()) {
    if (!ReadFile(flags.tls_cert, &options.tls_cert_pem) ||
        !ReadFile(flags.tls_key, &options.tls_key_pem) ||
        (!flags.tls_ca.empty() &&
         !ReadFile(flags.tls_ca, &options.tls_ca_pem))) {
      return UsageError("cannot read the TLS files");
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

  // One connection per node: more than the usual 1024 descriptors.
  const int fd_limit = RaiseFdLimit();
  DDP_LOG(DEBUG) << "open file limit " << fd_limit;
  RendezvousServer server;
  StatusOr<int> port = server.Start(flags.host, flags.port, options);
  if (!port.ok()) {
    std::cerr << "ddprun-rendezvous: " << port.status().message() << "\n";
    return 1;
  }
  http::LiveView view(&server);
  if (flags.http_port >= 0) {
    StatusOr<int> http_port = view.Start(LiveViewOptionsOf(flags));
    if (!http_port.ok()) {
      std::cerr << "ddprun-rendezvous: live view: "
                << http_port.status().message() << "\n";
      server.Shutdown(std::chrono::seconds(0));
      return 1;
    }
    DDP_LOG(INFO) << "live view at http://" << flags.http_host << ":"
                  << *http_port << "/"
                  << (flags.http_token.empty() ? "" : " (token required)")
                  << (flags.http_admin_token.empty() ? ""
                                                     : " (actions enabled)");
  }
  int sig = 0;
  sigwait(&set, &sig);
  DDP_LOG(INFO) << "signal " << sig << ": shutting down";
  view.Stop();  // before the server it reads
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
  app.set_version_flag("--version",
                       std::string("ddprun-rendezvous ") + DDPRUN_VERSION);
  app.add_option("--host", flags.host, "address to listen on")
      ->capture_default_str();
  app.add_option("--port", flags.port, "port to listen on; 0 = any free port")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
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
      ->capture_default_str();
  app.add_option("--heartbeat_rate,--heartbeat-rate", flags.heartbeat_rate,
                 "Heartbeat calls per second per node (burst 50); 0 = no limit")
      ->capture_default_str();
  app.add_option("--status", flags.status_endpoint,
                 "print the live state of the server at HOST:PORT and exit");
  app.add_option("--stacks", flags.stacks_endpoint,
                 "dump every rank's stacks of the running job --rdzv_id at "
                 "the server HOST:PORT (the job goes on), print them and "
                 "the hang diagnosis, and exit (1: some node did not "
                 "answer)");
  app.add_option("--stacks_timeout,--stacks-timeout", flags.stacks_timeout,
                 "with --stacks: seconds to wait for every node")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 600.0));
  app.add_option("--rdzv_id,--rdzv-id", flags.rdzv_id,
                 "with --status: only this job; with --stacks: the job");
  app.add_flag("--json", flags.json, "with --status: print JSON");
  app.add_option("--http_port,--http-port", flags.http_port,
                 "serve the live view (page, /api/v1/jobs, /metrics, "
                 "/healthz, /readyz) on this port; 0 = any free port; "
                 "default: off")
      ->check(CLI::Range(0, 65535));
  app.add_option("--http_host,--http-host", flags.http_host,
                 "address of the live view; not a loopback address needs "
                 "--http_token")
      ->capture_default_str();
  app.add_option("--http_token,--http-token", flags.http_token,
                 "token to read the live view (Bearer or the login form; "
                 "or DDPRUN_HTTP_TOKEN)");
  app.add_option("--http_admin_token,--http-admin-token",
                 flags.http_admin_token,
                 "token for the live view's actions (dump stacks, stop a "
                 "job; or DDPRUN_HTTP_ADMIN_TOKEN); none: no actions");
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    return ddprun::rendezvous::UsageError(e.what());
  }
  flags.token_given = app.count("--token") > 0;
  flags.token_file_given = app.count("--token_file") > 0;
  if (ddprun::Status s = ddprun::rendezvous::CheckNumbers(flags); !s.ok()) {
    return ddprun::rendezvous::UsageError(s.message());
  }
  if (ddprun::Status s = ddprun::rendezvous::ResolveToken(&flags); !s.ok()) {
    return ddprun::rendezvous::UsageError(s.message());
  }
  if (ddprun::Status s = ddprun::rendezvous::ResolveHttpTokens(
          &flags, app.count("--http_token") > 0,
          app.count("--http_admin_token") > 0);
      !s.ok()) {
    return ddprun::rendezvous::UsageError(s.message());
  }
  if (!flags.status_endpoint.empty()) {
    return ddprun::rendezvous::PrintStatus(flags);
  }
  if (!flags.stacks_endpoint.empty()) {
    return ddprun::rendezvous::PrintStacks(flags);
  }
  return ddprun::rendezvous::Serve(flags);
}
