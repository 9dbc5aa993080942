// The live view (rendezvous/http/): its JSON, its Prometheus text, its
// tokens and actions, against a real rendezvous server in this process
// whose job is fed through the server's own rpcs (no agents, no sleeps
// beyond a snapshot's 100 ms).
#include "rendezvous/http/live_view.h"

#include <grpcpp/grpcpp.h>
#include <zlib.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "ddprun_catch.h"
#include "rendezvous/http/gzip.h"
#include "rendezvous/http/job_metrics.h"
#include "rendezvous/http/metrics_text.h"
#include "rendezvous/http/view_auth.h"
#include "rendezvous/http/view_json.h"
#include "tests/support/http_client.h"

namespace ddprun::rendezvous::http {
namespace {

const std::string kHostile = "<script>alert(1)</script>";

// A one-node job on a real server, joined and heartbeating through the
// server's rpcs, with two ranks' progress.
class ViewFixture {
 public:
  explicit ViewFixture(const std::string& job = "job7",
                       std::string rdzv_token = "") {
    ServerOptions so;
    so.token = std::move(rdzv_token);
    token_ = so.token;
    REQUIRE(server_.Start("127.0.0.1", 0, so).ok());
    stub_ = v1::Rendezvous::NewStub(server_.InProcessChannel());
    JoinAndBeat(job);
  }
  ~ViewFixture() {
    view_.reset();
    server_.Shutdown(std::chrono::seconds(0));
  }

  void JoinAndBeat(const std::string& job) {
    v1::JoinRequest join;
    join.set_rdzv_id(job);
    join.mutable_config()->set_min_nodes(1);
    join.mutable_config()->set_max_nodes(1);
    join.mutable_config()->set_max_restarts(3);
    v1::NodeInfo* n = join.mutable_node();
    n->set_node_id("node-a:" + job);
    n->set_instance(7);
    n->set_local_world_size(2);
    n->set_node_rank_hint(-1);
    n->set_addr("127.0.0.1");
    n->set_master_port(29500);
    n->set_host("host-" + kHostile);
    v1::JoinResponse joined;
    grpc::ClientContext jctx;
    Authorize(&jctx);
    REQUIRE(stub_->Join(&jctx, join, &joined).ok());
    v1::HeartbeatRequest beat;
    beat.set_rdzv_id(job);
    *beat.mutable_config() = join.config();
    *beat.mutable_node() = join.node();
    *beat.mutable_current() = joined.assignment();
    beat.set_worker_restarts(1);
    for (int rank = 0; rank < 2; ++rank) {
      v1::RankRate* r = beat.add_rank_rates();
      r->set_rank(rank);
      r->set_local_rank(rank);
      r->set_pid(4200 + rank);
      r->set_steps(50);
      r->set_steps_per_s(rank == 0 ? 5.0 : 1.0);
      r->set_total_steps(150);
      r->set_state(v1::RankRate::STATE_RUNNING);
      r->set_straggler(rank == 1);
      v1::Scalar* loss = r->add_scalars();
      loss->set_name("loss");
      loss->set_value(0.5);
    }
    v1::HeartbeatResponse reply;
    grpc::ClientContext hctx;
    Authorize(&hctx);
    REQUIRE(stub_->Heartbeat(&hctx, beat, &reply).ok());
  }

  void Authorize(grpc::ClientContext* ctx) const {
    if (!token_.empty()) ctx->AddMetadata("x-ddprun-token", token_);
  }

  LiveView& View(LiveViewOptions o = {}) {
    view_ = std::make_unique<LiveView>(&server_);
    o.rendezvous_token = token_;
    o.version = "9.9.9";
    REQUIRE(view_->Start(o).ok());
    return *view_;
  }

  HttpResponse Get(const std::string& path,
                   std::map<std::string, std::string> headers = {}) {
    return Call("GET", path, std::move(headers));
  }
  HttpResponse Call(const std::string& method, const std::string& target,
                    std::map<std::string, std::string> headers = {},
                    const std::string& body = "") {
    HttpRequest r;
    r.method = method;
    r.target = target;
    const size_t q = target.find('?');
    r.path = target.substr(0, q);
    r.query = q == std::string::npos ? "" : target.substr(q + 1);
    r.headers = std::move(headers);
    if (!r.headers.count("host")) r.headers["host"] = "127.0.0.1:1234";
    r.body = body;
    r.peer = "127.0.0.1";
    return view_->Handle(r);
  }

  RendezvousServer server_;
  std::string token_;
  std::unique_ptr<v1::Rendezvous::Stub> stub_;
  std::unique_ptr<LiveView> view_;
};

std::string HeaderOf(const HttpResponse& r, const std::string& name) {
  for (const auto& [n, v] : r.headers) {
    if (n == name) return v;
  }
  return "";
}

TEST_CASE(
    "MetricsText: escapes label values and help, replaces invalid "
    "UTF-8, writes numbers Prometheus reads",
    "[http][metrics]") {
  CHECK(MetricsText::Escape("a\"b\\c\nd", true) == "a\\\"b\\\\c\\nd");
  CHECK(MetricsText::Escape("a\"b", false) == "a\"b");
  CHECK(MetricsText::ValidUtf8("ok \xC3\xA9") == "ok \xC3\xA9");
  CHECK(MetricsText::ValidUtf8("bad \xFF\xC3") ==
        "bad \xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(MetricsText::ValidUtf8("\xED\xA0\x80") ==  // a surrogate
        "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(MetricsText::Number(3) == "3");
  CHECK(MetricsText::Number(0.1) == "0.1");
  CHECK(MetricsText::Number(0.0005) == "0.0005");
  CHECK(MetricsText::Number(1.0 / 3) == "0.3333333333333333");
  CHECK(MetricsText::Number(INFINITY) == "+Inf");
  CHECK(MetricsText::Number(NAN) == "NaN");
  MetricsText m;
  m.Family("x_total", "counter", "Help with a \\ and\na newline.");
  m.Sample({{"id", kHostile + "\"\n"}}, 2);
  CHECK(m.text() ==
        "# HELP x_total Help with a \\\\ and\\na newline.\n"
        "# TYPE x_total counter\n"
        "x_total{id=\"<script>alert(1)</script>\\\"\\n\"} 2\n");
}

TEST_CASE(
    "JobToJson: ranks with their node, ETA from the slowest rank, the "
    "timeline",
    "[http][json]") {
  ViewFixture f("job7");
  f.View();
  HttpResponse r = f.Get("/api/v1/jobs/job7");
  REQUIRE(r.status == 200);
  CHECK(r.content_type == "application/json; charset=utf-8");
  const Json j = Json::parse(r.body);
  CHECK(j["id"] == "job7");
  CHECK(j["state"] == "running");
  CHECK(j["round"] == 1);
  CHECK(j["max_restarts"] == 3);
  CHECK(j["world_size"] == 2);
  REQUIRE(j["ranks"].size() == 2);
  const Json& r1 = j["ranks"][1];
  CHECK(r1["rank"] == 1);
  CHECK(r1["pid"] == 4201);
  CHECK(r1["host"] == "host-" + kHostile);
  CHECK(r1["state"] == "running");
  CHECK(r1["straggler"] == true);
  CHECK(r1["scalars"]["loss"] == 0.5);
  CHECK(r1["eta_s"].get<double>() == Approx(100.0));  // (150-50)/1
  CHECK(j["progress"]["eta_s"].get<double>() == Approx(100.0));
  CHECK(j["median_steps_per_s"].get<double>() == Approx(3.0));
  CHECK(j["stragglers"] == 1);
  CHECK(j["nodes"][0]["worker_restarts"] == 1);
  REQUIRE(j["events"].size() == 1);
  CHECK(j["events"][0]["kind"] == "round_complete");
  CHECK(j["diagnosis"].is_null());
  CHECK(f.Get("/api/v1/jobs/nope").status == 404);
  CHECK(EtaSeconds(10, 0, 1) < 0);
  CHECK(EtaSeconds(10, 20, 0) < 0);
  CHECK(EtaSeconds(10, 20, 2) == Approx(5));
}

TEST_CASE("LiveView: a hostile job id is data, in JSON and in /metrics",
          "[http][json]") {
  ViewFixture f(kHostile);
  f.View();
  HttpResponse all = f.Get("/api/v1/jobs");
  REQUIRE(all.status == 200);
  const Json j = Json::parse(all.body);
  REQUIRE(j["jobs"].size() == 1);
  CHECK(j["jobs"][0]["id"] == kHostile);
  CHECK(j["server"]["version"] == "9.9.9");
  // Its own URL: percent-encoded, '/' included.
  CHECK(f.Get("/api/v1/jobs/%3Cscript%3Ealert(1)%3C%2Fscript%3E").status ==
        200);
  CHECK(f.Get("/api/v1/jobs/%zz").status == 400);
  // JSON is never sniffed as HTML; the page may run only its own scripts.
  CHECK(HeaderOf(all, "X-Content-Type-Options") == "nosniff");
  CHECK_THAT(HeaderOf(all, "Content-Security-Policy"),
             Catch::Contains("script-src 'self'"));
  HttpResponse m = f.Get("/metrics");
  REQUIRE(m.status == 200);
  CHECK(m.content_type == "text/plain; version=0.0.4; charset=utf-8");
  CHECK_THAT(m.body,
             Catch::Contains("ddprun_rank_steps_per_second{rdzv_id=\"" +
                             kHostile + "\",rank=\"0\",local_rank=\"0\""));
  CHECK_THAT(m.body, Catch::Contains("ddprun_rank_scalar{"));
  CHECK_THAT(m.body, Catch::Contains("name=\"loss\"} 0.5"));
  CHECK_THAT(m.body, Catch::Contains("ddprun_build_info{version=\"9.9.9\"} 1"));
  CHECK_THAT(m.body,
             Catch::Contains("ddprun_rendezvous_rpcs_total{method=\"Join\","
                             "code=\"OK\"} 1"));
  CHECK_THAT(m.body,
             Catch::Contains("ddprun_rendezvous_rpc_duration_seconds_bucket{"
                             "method=\"Heartbeat\",le=\"+Inf\"} 1"));
  // Every sample belongs to the family announced before it.
  std::string family;
  size_t at = 0;
  while (at < m.body.size()) {
    const size_t nl = m.body.find('\n', at);
    const std::string line = m.body.substr(at, nl - at);
    at = nl + 1;
    if (line.rfind("# TYPE ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
    } else if (line[0] != '#') {
      INFO(line);
      CHECK(line.rfind(family, 0) == 0);
    }
  }
}

TEST_CASE("LiveView: health, readiness, the page and its files", "[http]") {
  ViewFixture f;
  f.View();
  CHECK(f.Get("/healthz").status == 200);
  CHECK(f.Get("/readyz").status == 200);
  HttpResponse page = f.Get("/");
  REQUIRE(page.status == 200);
  CHECK(page.content_type == "text/html; charset=utf-8");
  CHECK_THAT(page.body, Catch::Contains("/static/app.js"));
  // No inline script: the CSP would refuse it, and nothing from a node is in
  // the page itself.
  CHECK(page.body.find("<script>") == std::string::npos);
  HttpResponse js = f.Get("/static/uPlot.iife.min.js");
  CHECK(js.status == 200);
  CHECK(js.content_type == "text/javascript; charset=utf-8");
  CHECK_THAT(js.body, Catch::Matchers::StartsWith(
                          "/*! https://github.com/leeoniya/uPlot"));
  CHECK_THAT(f.Get("/static/uPlot.LICENSE").body,
             Catch::Contains("The MIT License"));
  CHECK(f.Get("/static/nope.js").status == 404);
  CHECK(f.Get("/nope").status == 404);
  // No CORS: a preflight gets no Access-Control-* header.
  HttpResponse pre = f.Call("OPTIONS", "/api/v1/jobs/job7/stop");
  for (const auto& [name, value] : pre.headers) {
    CHECK(name.rfind("Access-Control", 0) != 0);
  }
}

TEST_CASE(
    "LiveView: a loopback view refuses Host headers of other names "
    "(DNS rebinding)",
    "[http]") {
  ViewFixture f;
  f.View();
  CHECK(f.Get("/api/v1/jobs", {{"host", "evil.example:8080"}}).status == 421);
  CHECK(f.Get("/api/v1/jobs", {{"host", "localhost:8080"}}).status == 200);
  CHECK(f.Get("/api/v1/jobs", {{"host", "[::1]:8080"}}).status == 200);
}

TEST_CASE("LiveView: the read token guards reading, the admin token acting",
          "[http][auth]") {
  ViewFixture f("job7", "rdzv-secret");
  LiveViewOptions o;
  o.read_token = "reader-token";
  o.admin_token = "admin-token";
  o.stacks_interval = std::chrono::seconds(60);
  f.View(o);
  // Without a token: 401 for data, the page sends to the login form; health
  // and the page's files need none.
  CHECK(f.Get("/api/v1/jobs").status == 401);
  CHECK(f.Get("/metrics").status == 401);
  HttpResponse page = f.Get("/");
  CHECK(page.status == 303);
  CHECK(HeaderOf(page, "Location") == "/login");
  CHECK(f.Get("/healthz").status == 200);
  CHECK(f.Get("/readyz").status == 200);  // reads with the rdzv token
  CHECK(f.Get("/static/app.css").status == 200);
  CHECK(f.Get("/api/v1/jobs", {{"authorization", "Bearer wrong"}}).status ==
        401);
  const std::map<std::string, std::string> reader = {
      {"authorization", "Bearer reader-token"}};
  const std::map<std::string, std::string> admin = {
      {"authorization", "Bearer admin-token"}, {"x-ddprun-action", "1"}};
  CHECK(f.Get("/api/v1/jobs", reader).status == 200);
  CHECK(f.Get("/metrics", reader).status == 200);
  CHECK(Json::parse(f.Get("/api/v1/session", reader).body)["access"] == "read");
  // Reading is not acting.
  auto with_action = reader;
  with_action["x-ddprun-action"] = "1";
  CHECK(f.Call("POST", "/api/v1/jobs/job7/stop", with_action).status == 403);
  // The admin token, but no action header (what a cross-site form sends),
  // or another origin: refused.
  CHECK(f.Call("POST", "/api/v1/jobs/job7/stop",
               {{"authorization", "Bearer admin-token"}})
            .status == 403);
  auto cross = admin;
  cross["origin"] = "http://evil.example";
  CHECK(f.Call("POST", "/api/v1/jobs/job7/stop", cross).status == 403);
  CHECK(f.Get("/api/v1/jobs/job7/stop", admin).status == 405);
  // Stack dumps: started through the Stacks rpc, then rate-limited.
  HttpResponse dump = f.Call("POST", "/api/v1/jobs/job7/stacks", admin);
  REQUIRE(dump.status == 200);
  CHECK(Json::parse(dump.body)["request_id"] == 1);
  HttpResponse again = f.Call("POST", "/api/v1/jobs/job7/stacks", admin);
  CHECK(again.status == 429);
  CHECK_FALSE(HeaderOf(again, "Retry-After").empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const Json job = Json::parse(f.Get("/api/v1/jobs/job7", reader).body);
  REQUIRE(job["diagnosis"].is_object());
  CHECK(job["diagnosis"]["complete"] == false);
  CHECK_THAT(job["diagnosis"]["reason"].get<std::string>(),
             Catch::Contains("live view"));
  // Stop: the job is closed as failed through the Close rpc.
  CHECK(f.Call("POST", "/api/v1/jobs/nope/stop", admin).status == 404);
  REQUIRE(f.Call("POST", "/api/v1/jobs/job7/stop", admin).status == 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  const Json stopped = Json::parse(f.Get("/api/v1/jobs/job7", reader).body);
  CHECK(stopped["state"] == "failed");
  CHECK_THAT(stopped["reason"].get<std::string>(),
             Catch::Contains("stopped from the live view"));
  CHECK(stopped["events"].back()["kind"] == "job_failed");
}

TEST_CASE("LiveView: the login form sets a session cookie, logout ends it",
          "[http][auth]") {
  ViewFixture f;
  LiveViewOptions o;
  o.read_token = "reader-token";
  o.admin_token = "admin-token";
  f.View(o);
  CHECK(f.Get("/login").status == 200);
  HttpResponse wrong = f.Call("POST", "/login", {}, "token=nope");
  CHECK(wrong.status == 401);
  CHECK_THAT(wrong.body, Catch::Contains("wrong token"));
  HttpResponse ok = f.Call("POST", "/login", {}, "token=admin-token");
  REQUIRE(ok.status == 303);
  const std::string cookie = HeaderOf(ok, "Set-Cookie");
  CHECK_THAT(cookie, Catch::Contains("HttpOnly"));
  CHECK_THAT(cookie, Catch::Contains("SameSite=Strict"));
  CHECK(cookie.find("admin-token") == std::string::npos);
  const std::string session = cookie.substr(0, cookie.find(';'));
  CHECK(Json::parse(f.Get("/api/v1/session", {{"cookie", "a=b; " + session}})
                        .body)["access"] == "admin");
  HttpResponse out = f.Get("/logout", {{"cookie", session}});
  CHECK(out.status == 303);
  CHECK(f.Get("/api/v1/jobs", {{"cookie", session}}).status == 401);
}

TEST_CASE("LiveView: options that would expose it are refused",
          "[http][auth]") {
  LiveViewOptions o;
  o.host = "0.0.0.0";
  Status s = CheckLiveViewOptions(o);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("--http_token"));
  o.read_token = "t";
  CHECK(CheckLiveViewOptions(o).ok());
  o.admin_token = "t";
  CHECK_THAT(CheckLiveViewOptions(o).message(), Catch::Contains("must differ"));
  o.admin_token.clear();
  o.host = "no.such.host";
  CHECK_THAT(CheckLiveViewOptions(o).message(),
             Catch::Contains("not a numeric address"));
  o.host = "127.0.0.1";
  o.read_token.clear();
  CHECK(CheckLiveViewOptions(o).ok());
  ViewAuth open("", "");
  HttpRequest r;
  CHECK(open.Of(r) == ViewAuth::Access::kRead);
  CHECK_FALSE(open.actions_enabled());
  CHECK(ConstantTimeEquals("abc", "abc"));
  CHECK_FALSE(ConstantTimeEquals("abc", "abd"));
  CHECK_FALSE(ConstantTimeEquals("abc", "abcd"));
}

std::string Gunzip(const std::string& in) {
  z_stream z{};
  REQUIRE(inflateInit2(&z, 15 + 16) == Z_OK);
  std::string out(1 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  CHECK(inflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

TEST_CASE("LiveView: /api/v1/jobs gzipped for clients that accept it",
          "[http]") {
  ViewFixture f;
  f.View();
  HttpResponse plain = f.Get("/api/v1/jobs");
  HttpResponse gz =
      f.Get("/api/v1/jobs", {{"accept-encoding", "deflate, gzip;q=0.8"}});
  REQUIRE(gz.status == 200);
  CHECK(HeaderOf(gz, "Content-Encoding") == "gzip");
  CHECK(HeaderOf(gz, "Vary") == "Accept-Encoding");
  CHECK(HeaderOf(plain, "Content-Encoding").empty());
  CHECK(Gunzip(gz.body) == plain.body);
  CHECK(gz.body.size() < plain.body.size());
  HttpRequest r;
  for (const auto& [header, accepts] :
       std::vector<std::pair<std::string, bool>>{{"gzip", true},
                                                 {"br, GZIP", true},
                                                 {"gzip;q=0", false},
                                                 {"gzip;q=0.0", false},
                                                 {"x-gzip", false},
                                                 {"", false}}) {
    r.headers["accept-encoding"] = header;
    INFO(header);
    CHECK(AcceptsGzip(r) == accepts);
  }
}

TEST_CASE("LiveView: over a socket, and Stop closes the port", "[http]") {
  ViewFixture f;
  LiveView& view = f.View();
  const int port = view.port();
  testing::HttpAnswer a = testing::HttpCall(port, "GET", "/api/v1/jobs");
  REQUIRE(a.status == 200);
  CHECK(a.Header("cache-control") == "no-store");
  CHECK(Json::parse(a.body)["jobs"][0]["id"] == "job7");
  view.Stop();
  CHECK(testing::HttpCall(port, "GET", "/healthz").status == 0);
}

}  // namespace
}  // namespace ddprun::rendezvous::http
