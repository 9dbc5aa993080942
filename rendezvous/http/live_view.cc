#include "rendezvous/http/live_view.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>

#include <cctype>
#include <utility>

#include "common/clock.h"
#include "common/logging.h"
#include "rendezvous/http/gzip.h"
#include "rendezvous/http/job_metrics.h"
#include "rendezvous/http/view_assets.h"
#include "rendezvous/http/view_json.h"

namespace ddprun::rendezvous::http {
namespace {

using Access = ViewAuth::Access;
constexpr const char* kJsonType = "application/json; charset=utf-8";
constexpr const char* kJobsPrefix = "/api/v1/jobs/";

// Every string in the JSON came from the network and may be invalid UTF-8:
// replaced, never an exception.
std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

HttpResponse Respond(int status, std::string content_type, std::string body) {
  HttpResponse r;
  r.status = status;
  r.content_type = std::move(content_type);
  r.body = std::move(body);
  return r;
}

HttpResponse JsonError(int status, const std::string& error) {
  Json j;
  j["error"] = error;
  return Respond(status, kJsonType, Dump(j) + "\n");
}

HttpResponse Redirect(const std::string& to) {
  HttpResponse r =
      Respond(303, "text/plain; charset=utf-8", "see " + to + "\n");
  r.headers.emplace_back("Location", to);
  return r;
}

// Headers every answer carries: no caching of job data, no sniffing, no
// framing, no referrer; the page may load only its own files.
void Harden(HttpResponse* r) {
  r->headers.emplace_back("Cache-Control", "no-store");
  r->headers.emplace_back("X-Content-Type-Options", "nosniff");
  r->headers.emplace_back("X-Frame-Options", "DENY");
  r->headers.emplace_back("Referrer-Policy", "no-referrer");
  r->headers.emplace_back(
      "Content-Security-Policy",
      "default-src 'none'; script-src 'self'; style-src 'self'; "
      "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
      "frame-ancestors 'none'; base-uri 'none'");
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX-decodes `s` (and '+' as a space when `plus`); false on a bad escape.
bool PercentDecode(const std::string& s, bool plus, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) return false;
      const int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (s[i] == '+' && plus) {
      out->push_back(' ');
    } else {
      out->push_back(s[i]);
    }
  }
  return true;
}

// The value of `key` in an application/x-www-form-urlencoded body.
std::string FormValue(const std::string& body, const std::string& key) {
  size_t at = 0;
  while (at <= body.size()) {
    size_t end = body.find('&', at);
    if (end == std::string::npos) end = body.size();
    const std::string pair = body.substr(at, end - at);
    const size_t eq = pair.find('=');
    std::string name, value;
    if (eq != std::string::npos &&
        PercentDecode(pair.substr(0, eq), true, &name) && name == key &&
        PercentDecode(pair.substr(eq + 1), true, &value)) {
      return value;
    }
    at = end + 1;
  }
  return "";
}

int HttpStatusOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return 409;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return 400;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    default:
      return 502;
  }
}

std::string LoginPage(const std::string& error) {
  const EmbeddedFile* f = FindEmbedded("/login");
  std::string page(f->body);
  const std::string mark = "{{ERROR}}";
  const size_t at = page.find(mark);
  if (at != std::string::npos) page.replace(at, mark.size(), error);
  return page;
}

}  // namespace

Status CheckLiveViewOptions(const LiveViewOptions& o) {
  std::string bare = o.host;
  if (bare.size() > 2 && bare.front() == '[' && bare.back() == ']') {
    bare = bare.substr(1, bare.size() - 2);
  }
  unsigned char addr[sizeof(in6_addr)];
  if (bare != "localhost" && inet_pton(AF_INET, bare.c_str(), addr) != 1 &&
      inet_pton(AF_INET6, bare.c_str(), addr) != 1) {
    return InvalidArgumentError("--http_host " + o.host +
                                " is not a numeric address (or localhost)");
  }
  if (!IsLoopbackHost(o.host) && o.read_token.empty()) {
    return InvalidArgumentError(
        "--http_host " + o.host +
        " is not a loopback address: the live view shows every job's hosts "
        "and pids to whoever reaches it; set --http_token (or "
        "DDPRUN_HTTP_TOKEN), or keep --http_host 127.0.0.1");
  }
  if (!o.admin_token.empty() && o.admin_token == o.read_token) {
    return InvalidArgumentError(
        "--http_admin_token must differ from --http_token (readers would "
        "be able to stop jobs)");
  }
  if (o.port < 0 || o.port > 65535) {
    return InvalidArgumentError("--http_port " + std::to_string(o.port) +
                                " is out of range (0..65535)");
  }
  return Status::Ok();
}

LiveView::LiveView(RendezvousServer* server) : server_(server) {}

LiveView::~LiveView() { Stop(); }

StatusOr<int> LiveView::Start(const LiveViewOptions& options) {
  DDP_RETURN_IF_ERROR(CheckLiveViewOptions(options));
  std::shared_ptr<grpc::Channel> channel = server_->InProcessChannel();
  if (channel == nullptr) {
    return FailedPreconditionError("the rendezvous server is not running");
  }
  options_ = options;
  auth_ = std::make_unique<ViewAuth>(options.read_token, options.admin_token);
  stub_ = v1::Rendezvous::NewStub(channel);
  loopback_ = IsLoopbackHost(options.host);
  started_ = Clock::Real()->WallSeconds();
  HttpServerOptions http;
  http.threads = options.threads;
  // Heartbeats first: the view's threads yield the CPU to gRPC's.
  http.nice = 10;
  return http_.Start(
      options.host, options.port,
      [this](const HttpRequest& r) { return Handle(r); }, http);
}

void LiveView::Stop() { http_.Stop(); }

void LiveView::PrepareCall(grpc::ClientContext* ctx,
                           std::chrono::seconds timeout) const {
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
  if (!options_.rendezvous_token.empty()) {
    ctx->AddMetadata("x-ddprun-token", options_.rendezvous_token);
  }
}

bool LiveView::HostAllowed(const HttpRequest& request) const {
  if (!loopback_) return true;
  std::string host = request.Header("host");
  if (host.empty()) return true;  // HTTP/1.0: no virtual hosts, no rebinding
  if (host.front() == '[') {
    host = host.substr(0, host.find(']') + 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  return IsLoopbackHost(host);
}

HttpResponse LiveView::Handle(const HttpRequest& request) {
  HttpResponse r = HostAllowed(request)
                       ? Route(request)
                       : JsonError(421,
                                   "the Host header names no loopback "
                                   "address; this live view serves "
                                   "127.0.0.1 only");
  Harden(&r);
  return r;
}

HttpResponse LiveView::Route(const HttpRequest& req) {
  const std::string& path = req.path;
  const bool get = req.method == "GET" || req.method == "HEAD";
  if (path == "/healthz" && get) {
    return Respond(200, "text/plain; charset=utf-8", "ok\n");
  }
  if (path == "/readyz" && get) return Ready();
  if (path.rfind("/static/", 0) == 0 && get) {
    // The page's own files: no job data in them, served without a token
    // (the login form uses the style sheet).
    if (const EmbeddedFile* f = FindEmbedded(path)) {
      return Respond(200, ContentTypeOf(path), std::string(f->body));
    }
    return JsonError(404, "no such file");
  }
  if (path == "/login") {
    if (req.method == "POST") return Login(req);
    if (get) return Respond(200, ContentTypeOf("/login"), LoginPage(""));
  }
  if (path == "/logout" && get) {
    HttpResponse r = Redirect(auth_->login_required() ? "/login" : "/");
    r.headers.emplace_back("Set-Cookie", auth_->Logout(req));
    return r;
  }
  const Access access = auth_->Of(req);
  if (access == Access::kNone) {
    if (path == "/" && get) return Redirect("/login");
    HttpResponse r =
        JsonError(401,
                  "this live view needs its token: Authorization: Bearer "
                  "<--http_token>, or log in at /login");
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    return r;
  }
  if (path == "/" && get) {
    return Respond(200, ContentTypeOf("/"),
                   std::string(FindEmbedded("/")->body));
  }
  if (path == "/api/v1/session" && get) {
    Json j;
    j["access"] = access == Access::kAdmin ? "admin" : "read";
    j["actions"] = auth_->actions_enabled();
    j["login"] = auth_->login_required() || auth_->actions_enabled();
    return Respond(200, kJsonType, Dump(j) + "\n");
  }
  if (path == "/api/v1/jobs" && get) {
    std::shared_ptr<const JobsView> jobs = Jobs();
    if (!jobs) return JsonError(503, "the rendezvous server is stopping");
    if (AcceptsGzip(req) && !jobs->AllGzipped().empty()) {
      HttpResponse r = Respond(200, kJsonType, jobs->AllGzipped());
      r.headers.emplace_back("Content-Encoding", "gzip");
      r.headers.emplace_back("Vary", "Accept-Encoding");
      return r;
    }
    HttpResponse r = Respond(200, kJsonType, jobs->all);
    r.headers.emplace_back("Vary", "Accept-Encoding");
    return r;
  }
  if (path == "/metrics" && get) {
    std::shared_ptr<const std::string> text = Metrics();
    if (!text) return JsonError(503, "the rendezvous server is stopping");
    return Respond(200, "text/plain; version=0.0.4; charset=utf-8", *text);
  }
  if (path.rfind(kJobsPrefix, 0) == 0) return JobRoute(req, access);
  if (req.method == "OPTIONS") {
    // No CORS: a preflight gets no Access-Control-Allow-* header.
    return JsonError(405, "no cross-origin requests");
  }
  return JsonError(404, "no such page: " + path);
}

HttpResponse LiveView::JobRoute(const HttpRequest& req, Access access) {
  // /api/v1/jobs/<percent-encoded id>[/<action>]: a '/' inside an id is
  // %2F, so the raw '/' separates.
  const std::string rest = req.path.substr(std::string(kJobsPrefix).size());
  const size_t slash = rest.find('/');
  std::string id;
  if (!PercentDecode(rest.substr(0, slash), false, &id) || id.empty()) {
    return JsonError(400, "bad job id in the path");
  }
  const std::string action =
      slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (action.empty()) {
    if (req.method != "GET" && req.method != "HEAD") {
      return JsonError(405, "GET only");
    }
    std::shared_ptr<const JobsView> jobs = Jobs();
    if (!jobs) return JsonError(503, "the rendezvous server is stopping");
    auto it = jobs->by_id.find(id);
    if (it == jobs->by_id.end()) return JsonError(404, "no job '" + id + "'");
    return Respond(200, kJsonType, it->second);
  }
  if (action != "stacks" && action != "stop") {
    return JsonError(404, "no such action: " + action);
  }
  if (req.method != "POST") return JsonError(405, "POST only");
  if (!auth_->actions_enabled()) {
    return JsonError(403,
                     "actions are off: start the server with "
                     "--http_admin_token (or DDPRUN_HTTP_ADMIN_TOKEN)");
  }
  if (access != Access::kAdmin) {
    return JsonError(403, "actions need the admin token");
  }
  if (req.Header("x-ddprun-action") != "1") {
    return JsonError(403, "actions need the header X-Ddprun-Action: 1");
  }
  const std::string origin = req.Header("origin");
  if (!origin.empty() && origin != "http://" + req.Header("host")) {
    return JsonError(403, "cross-origin action refused");
  }
  return action == "stacks" ? DumpStacks(id, req) : StopJob(id, req);
}

HttpResponse LiveView::Login(const HttpRequest& req) {
  if (!auth_->login_required() && !auth_->actions_enabled()) {
    return Redirect("/");
  }
  std::optional<std::string> cookie =
      auth_->Login(FormValue(req.body, "token"));
  if (!cookie) {
    return Respond(401, ContentTypeOf("/login"), LoginPage("wrong token"));
  }
  HttpResponse r = Redirect("/");
  r.headers.emplace_back("Set-Cookie", *cookie);
  return r;
}

HttpResponse LiveView::Ready() {
  // Ready = the rendezvous answers rpcs: a Status call in-process, as a
  // client's, token and all (NOT_FOUND for the made-up job is an answer).
  grpc::ClientContext ctx;
  PrepareCall(&ctx, std::chrono::seconds(1));
  v1::StatusRequest sreq;
  sreq.set_rdzv_id("ddprun/readyz probe");
  v1::StatusResponse sresp;
  const grpc::Status s = stub_->Status(&ctx, sreq, &sresp);
  if (s.ok() || s.error_code() == grpc::StatusCode::NOT_FOUND) {
    return Respond(200, "text/plain; charset=utf-8", "ready\n");
  }
  return Respond(503, "text/plain; charset=utf-8",
                 "not ready: " + s.error_message() + "\n");
}

HttpResponse LiveView::DumpStacks(const std::string& id,
                                  const HttpRequest& req) {
  const auto now = std::chrono::steady_clock::now();
  {
    MutexLock lock(&actions_mu_);
    auto it = last_dump_.find(id);
    if (it != last_dump_.end() && now - it->second < options_.stacks_interval) {
      const auto wait = std::chrono::duration_cast<std::chrono::seconds>(
                            options_.stacks_interval - (now - it->second))
                            .count() +
                        1;
      HttpResponse r = JsonError(
          429,
          "one stack dump per job every " +
              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                 options_.stacks_interval)
                                 .count()) +
              " s from the live view; try again in " + std::to_string(wait) +
              " s");
      r.headers.emplace_back("Retry-After", std::to_string(wait));
      return r;
    }
  }
  grpc::ClientContext ctx;
  PrepareCall(&ctx, std::chrono::seconds(5));
  v1::StacksRequest sreq;
  sreq.set_rdzv_id(id);
  sreq.set_reason("requested from the live view by " +
                  (req.peer.empty() ? std::string("a client") : req.peer));
  v1::StacksResponse sresp;
  const grpc::Status s = stub_->Stacks(&ctx, sreq, &sresp);
  if (!s.ok())
    return JsonError(HttpStatusOf(s.error_code()), s.error_message());
  {
    MutexLock lock(&actions_mu_);
    if (last_dump_.size() >= 10000) last_dump_.clear();
    last_dump_[id] = now;
  }
  DDP_LOG(INFO) << "live view: stack dump " << sresp.request_id() << " of '"
                << EscapeControlChars(id) << "' requested by " << req.peer;
  Json j;
  j["request_id"] = sresp.request_id();
  j["message"] = "stack dump " + std::to_string(sresp.request_id()) +
                 " started: every node answers at its next heartbeat";
  return Respond(200, kJsonType, Dump(j) + "\n");
}

HttpResponse LiveView::StopJob(const std::string& id, const HttpRequest& req) {
  grpc::ClientContext ctx;
  PrepareCall(&ctx, std::chrono::seconds(5));
  v1::CloseRequest creq;
  creq.set_rdzv_id(id);
  creq.set_succeeded(false);
  creq.set_reason("stopped from the live view by " +
                  (req.peer.empty() ? std::string("a client") : req.peer));
  v1::CloseResponse cresp;
  const grpc::Status s = stub_->Close(&ctx, creq, &cresp);
  if (!s.ok())
    return JsonError(HttpStatusOf(s.error_code()), s.error_message());
  DDP_LOG(WARNING) << "live view: job '" << EscapeControlChars(id)
                   << "' stopped by " << req.peer;
  Json j;
  j["message"] =
      "job stopped: its agents stop their workers at their next "
      "heartbeat";
  return Respond(200, kJsonType, Dump(j) + "\n");
}

bool LiveView::Snapshot(
    v1::StatusResponse* status,
    std::map<std::string, v1::StacksResponse>* stacks) const {
  return server_->ReadState([&](const RendezvousState& state) {
    StatusOr<v1::StatusResponse> all = state.GetStatus("");
    if (!all.ok()) return;
    *status = *std::move(all);
    for (const v1::JobStatus& job : status->jobs()) {
      if (stacks == nullptr) break;
      StatusOr<v1::StacksResponse> dump = state.PeekStacks(job.rdzv_id());
      if (dump.ok()) {
        (*stacks)[job.rdzv_id()] = *std::move(dump);
      }
    }
  });
}

const std::string& LiveView::JobsView::AllGzipped() const {
  std::call_once(gzip_once, [this] { all_gzip = Gzip(all); });
  return all_gzip;
}

std::shared_ptr<const LiveView::JobsView> LiveView::Jobs() {
  MutexLock lock(&jobs_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (jobs_ && now - jobs_at_ < options_.snapshot_ttl) return jobs_;
  v1::StatusResponse status;
  std::map<std::string, v1::StacksResponse> stacks;
  if (!Snapshot(&status, &stacks)) return nullptr;
  auto view = std::make_shared<JobsView>();
  view->time = Clock::Real()->WallSeconds();
  Json all;
  all["server"]["version"] = options_.version;
  all["server"]["started"] = started_;
  all["time"] = view->time;
  all["jobs"] = Json::array();
  for (const v1::JobStatus& job : status.jobs()) {
    auto dump = stacks.find(job.rdzv_id());
    Json j = JobToJson(job, dump == stacks.end() ? nullptr : &dump->second);
    view->by_id[job.rdzv_id()] = Dump(j) + "\n";
    all["jobs"].push_back(std::move(j));
  }
  view->all = Dump(all) + "\n";
  jobs_ = std::move(view);
  jobs_at_ = now;
  return jobs_;
}

std::shared_ptr<const std::string> LiveView::Metrics() {
  MutexLock lock(&metrics_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (metrics_ && now - metrics_at_ < options_.snapshot_ttl) return metrics_;
  v1::StatusResponse status;
  if (!Snapshot(&status, nullptr)) return nullptr;
  metrics_ = std::make_shared<const std::string>(
      RenderMetrics(status, server_->rpc_stats().Get(), options_.version));
  metrics_at_ = now;
  return metrics_;
}

}  // namespace ddprun::rendezvous::http
