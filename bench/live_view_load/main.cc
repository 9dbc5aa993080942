// live_view_load: does a flood of live-view requests delay heartbeats?
//
//   live_view_load [--nodes 256] [--ranks 8] [--rps 1000] [--seconds 10]
//                  [--rounds 2] [--max_ratio R] [--max_p99_ms M]
//                  [--snapshot_ttl_ms T]
//
// A real rendezvous server (127.0.0.1:0) with its live view (127.0.0.1:0)
// holds one job of --nodes simulated agents, each with --ranks workers
// reporting steps, a rate and two scalars. Every agent heartbeats once a
// second (spread evenly over the second, over 16 gRPC connections, as the
// real agents do), each heartbeat's latency measured by its sender.
// Alternating phases of --seconds each: heartbeats alone (the reference),
// then heartbeats while 8 keep-alive HTTP clients send GET /api/v1/jobs at
// --rps in all (paced, open-loop), once taking the JSON as it is
// ("identity") and once gzipped, as browsers ask for it. Prints p50/p99 of
// the heartbeat latency per phase and the ratio of the p99s (each loaded
// phase / the phase alone, medians over --rounds), the HTTP rate reached
// and its latency, and how long the view holds the state's mutex for one
// snapshot.
//
// The server runs in a process of its own on half of this machine's CPUs
// (one of two), the agents and browsers in this one on the other half: on
// a cluster they are other machines, and in one process they would share
// gRPC's thread pools and the server's cores. What is measured is what the
// server's own cores do with heartbeats while they also serve the view.
//
// Exits 1 on a failed heartbeat or HTTP request, when the view answered
// less than 90 % of the requests asked in a loaded phase, and, with
// --max_ratio or --max_p99_ms, when the identity ratio or the loaded
// phases' heartbeat p99 (the higher of the two, median over rounds)
// exceeds it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "common/logging.h"
#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/http/live_view.h"
#include "rendezvous/server/rendezvous_server.h"

extern char** environ;

namespace ddprun::rendezvous {
namespace {

using Steady = std::chrono::steady_clock;

struct Options {
  int nodes = 256;
  int ranks = 8;
  int rps = 1000;
  double seconds = 10;
  int rounds = 2;
  double max_ratio = 0;
  double max_p99_ms = 0;
  int snapshot_ttl_ms = -1;  // the view's default
  bool serve = false;        // internal: the server process
  std::string server_cpus;   // internal: its CPUs, a comma list ("0,1")
};

// The CPUs this process may run on, in order.
std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// Pins this process (every thread it starts from now on) to `cpus`.
bool PinTo(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  return !cpus.empty() && ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

std::string CpuList(const std::vector<int>& cpus) {
  std::string out;
  for (int c : cpus) out += (out.empty() ? "" : ",") + std::to_string(c);
  return out;
}

std::vector<int> ParseCpuList(const std::string& text) {
  std::vector<int> cpus;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    cpus.push_back(std::atoi(text.substr(at, end - at).c_str()));
    at = end + 1;
  }
  return cpus;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

class Job {
 public:
  Job(const std::string& target, int nodes, int ranks)
      : nodes_(nodes), ranks_(ranks) {
    for (int c = 0; c < 16; ++c) {
      grpc::ChannelArguments args;
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetInt("ddprun.bench.connection", c);
      stubs_.push_back(v1::Rendezvous::NewStub(grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args)));
    }
  }

  // Every node joins; returns once the round formed.
  bool Form() {
    std::vector<std::thread> joins;
    std::atomic<int> ok{0};
    assignments_.resize(nodes_);
    for (int i = 0; i < nodes_; ++i) {
      joins.emplace_back([this, i, &ok] {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
        v1::JoinRequest req;
        req.set_rdzv_id("load");
        *req.mutable_config() = Config();
        *req.mutable_node() = Node(i);
        v1::JoinResponse resp;
        if (stubs_[i % stubs_.size()]->Join(&ctx, req, &resp).ok()) {
          assignments_[i] = resp.assignment();
          ++ok;
        }
      });
    }
    for (auto& t : joins) t.join();
    return ok == nodes_;
  }

  // Heartbeats of nodes [first, first + count), each once a second at its
  // own offset, until `until`; latencies (ms) appended to `out`.
  void Beat(int first, int count, Steady::time_point start,
            Steady::time_point until, std::vector<double>* out,
            std::atomic<int>* errors) {
    int64_t tick = 0;
    while (true) {
      for (int k = 0; k < count; ++k) {
        const int i = first + k;
        const auto at = start + std::chrono::milliseconds(1000 * tick) +
                        std::chrono::microseconds(1000000LL * i / nodes_);
        if (at >= until) return;
        std::this_thread::sleep_until(at);
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
        v1::HeartbeatRequest req = Heartbeat(i, tick);
        v1::HeartbeatResponse resp;
        const auto sent = Steady::now();
        const grpc::Status s =
            stubs_[i % stubs_.size()]->Heartbeat(&ctx, req, &resp);
        const double ms =
            std::chrono::duration<double, std::milli>(Steady::now() - sent)
                .count();
        if (!s.ok() ||
            resp.action() != v1::HeartbeatResponse::ACTION_CONTINUE) {
          ++*errors;
        } else {
          out->push_back(ms);
        }
      }
      ++tick;
    }
  }

 private:
  v1::JobConfig Config() const {
    v1::JobConfig c;
    c.set_min_nodes(nodes_);
    c.set_max_nodes(nodes_);
    c.set_heartbeat_timeout_ms(30000);  // a slow phase must not lose nodes
    return c;
  }
  v1::NodeInfo Node(int i) const {
    v1::NodeInfo n;
    n.set_node_id("sim-" + std::to_string(i) + ":" + std::to_string(getpid()));
    n.set_instance(1000 + i);
    n.set_local_world_size(ranks_);
    n.set_node_rank_hint(-1);
    n.set_addr("127.0.0.1");
    n.set_master_port(20000 + i);
    n.set_host("gpu-node-" + std::to_string(i));
    return n;
  }
  v1::HeartbeatRequest Heartbeat(int i, int64_t tick) const {
    v1::HeartbeatRequest req;
    req.set_rdzv_id("load");
    *req.mutable_config() = Config();
    *req.mutable_node() = Node(i);
    *req.mutable_current() = assignments_[i];
    for (int r = 0; r < ranks_; ++r) {
      v1::RankRate* rate = req.add_rank_rates();
      rate->set_rank(i * ranks_ + r);
      rate->set_local_rank(r);
      rate->set_pid(10000 + r);
      rate->set_state(v1::RankRate::STATE_RUNNING);
      rate->set_steps(100 + tick * 4);
      rate->set_steps_per_s(4.0 + 0.01 * r);
      rate->set_total_steps(100000);
      v1::Scalar* loss = rate->add_scalars();
      loss->set_name("loss");
      loss->set_value(1.0 / (1 + tick));
      v1::Scalar* sps = rate->add_scalars();
      sps->set_name("samples_per_s");
      sps->set_value(812.5);
    }
    return req;
  }

  const int nodes_;
  const int ranks_;
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs_;
  std::vector<v1::Assignment> assignments_;
};

// A keep-alive HTTP client sending GET /api/v1/jobs at `rate` per second
// until `until`; counts answers and their latencies.
void HttpLoad(int port, double rate, bool gzip, Steady::time_point until,
              std::vector<double>* latencies, std::atomic<int>* failures,
              size_t* bytes) {
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
  int fd = -1;
  auto connect_once = [&] {
    if (fd >= 0) ::close(fd);
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  };
  connect_once();
  const std::string request =
      std::string("GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n") +
      (gzip ? "Accept-Encoding: gzip, deflate\r\n" : "") + "\r\n";
  const auto period = std::chrono::duration<double>(1.0 / rate);
  auto next = Steady::now();
  std::string buf;
  buf.resize(1 << 20);
  // Open loop, but a client that fell behind (an answer slower than its
  // period) stops at the phase's end with the rest: heartbeats stop there.
  while (next < until && Steady::now() < until) {
    std::this_thread::sleep_until(next);
    next += std::chrono::duration_cast<Steady::duration>(period);
    const auto sent = Steady::now();
    bool ok = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
              static_cast<ssize_t>(request.size());
    // Read the header block, then Content-Length bytes.
    std::string got;
    size_t want = std::string::npos, header_end = std::string::npos;
    while (ok) {
      const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) {
        ok = false;
        break;
      }
      got.append(buf.data(), static_cast<size_t>(n));
      if (header_end == std::string::npos) {
        header_end = got.find("\r\n\r\n");
        if (header_end == std::string::npos) continue;
        const size_t cl = got.find("Content-Length: ");
        if (cl == std::string::npos || cl > header_end) {
          ok = false;
          break;
        }
        want =
            header_end + 4 + std::strtoul(got.c_str() + cl + 16, nullptr, 10);
        ok = got.compare(9, 3, "200") == 0;
      }
      if (got.size() >= want) break;
    }
    if (ok) {
      latencies->push_back(
          std::chrono::duration<double, std::milli>(Steady::now() - sent)
              .count());
      *bytes = got.size();
    } else {
      ++*failures;
      connect_once();
    }
  }
  ::close(fd);
}

struct Phase {
  double p50 = 0, p99 = 0, max = 0;
  size_t beats = 0;
  int beat_errors = 0;
  double http_rps = 0, http_p50 = 0, http_p99 = 0;
  int http_failures = 0;
  size_t http_bytes = 0;
};

enum class Load { kNone, kIdentity, kGzip };

Phase RunPhase(Job* job, const Options& o, int http_port, Load load) {
  const auto start = Steady::now() + std::chrono::milliseconds(200);
  const auto until = start + std::chrono::duration_cast<Steady::duration>(
                                 std::chrono::duration<double>(o.seconds));
  constexpr int kSenders = 4;
  std::vector<std::vector<double>> beats(kSenders);
  std::atomic<int> beat_errors{0};
  std::vector<std::thread> threads;
  const int per = (o.nodes + kSenders - 1) / kSenders;
  for (int t = 0; t < kSenders; ++t) {
    const int first = t * per;
    const int count = std::min(per, o.nodes - first);
    threads.emplace_back([&, t, first, count] {
      job->Beat(first, count, start, until, &beats[t], &beat_errors);
    });
  }
  constexpr int kClients = 8;
  std::vector<std::vector<double>> http(kClients);
  std::vector<size_t> bytes(kClients);
  std::atomic<int> http_failures{0};
  if (load != Load::kNone) {
    for (int c = 0; c < kClients; ++c) {
      threads.emplace_back([&, c] {
        std::this_thread::sleep_until(start);
        HttpLoad(http_port, static_cast<double>(o.rps) / kClients,
                 load == Load::kGzip, until, &http[c], &http_failures,
                 &bytes[c]);
      });
    }
  }
  for (auto& t : threads) t.join();
  Phase p;
  std::vector<double> all;
  for (auto& b : beats) all.insert(all.end(), b.begin(), b.end());
  p.beats = all.size();
  p.p50 = Percentile(all, 0.5);
  p.p99 = Percentile(all, 0.99);
  p.max = Percentile(all, 1.0);
  p.beat_errors = beat_errors;
  std::vector<double> h;
  for (auto& x : http) h.insert(h.end(), x.begin(), x.end());
  p.http_rps = h.size() / o.seconds;
  p.http_p50 = Percentile(h, 0.5);
  p.http_p99 = Percentile(h, 0.99);
  p.http_failures = http_failures;
  p.http_bytes = *std::max_element(bytes.begin(), bytes.end());
  return p;
}

// The server process: the rendezvous server and its live view, pinned to
// --server_cpus. Prints "ready <grpc port> <http port>", then answers each
// "copy" line on stdin with the snapshot timing line; returns at EOF.
int Serve(const Options& o) {
  if (!o.server_cpus.empty() && !PinTo(ParseCpuList(o.server_cpus))) {
    fprintf(stderr, "cannot pin the server to CPUs %s: %s\n",
            o.server_cpus.c_str(), std::strerror(errno));
    return 1;
  }
  RendezvousServer server;
  ServerOptions so;
  so.limits.heartbeat_rate_per_s = 0;
  so.limits.join_rate_per_s = 0;
  auto port = server.Start("127.0.0.1", 0, so);
  if (!port.ok()) {
    fprintf(stderr, "server: %s\n", port.status().ToString().c_str());
    return 1;
  }
  http::LiveView view(&server);
  http::LiveViewOptions vo;
  vo.version = "bench";
  if (o.snapshot_ttl_ms >= 0) {
    vo.snapshot_ttl = std::chrono::milliseconds(o.snapshot_ttl_ms);
  }
  auto http_port = view.Start(vo);
  if (!http_port.ok()) {
    fprintf(stderr, "live view: %s\n", http_port.status().ToString().c_str());
    return 1;
  }
  printf("ready %d %d\n", *port, *http_port);
  fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line != "copy") continue;
    // The view's one moment under the state's mutex: a copy of Status and
    // the newest stack dumps (LiveView::Snapshot), timed here the same
    // way, with every node's last progress in it.
    std::vector<double> copies;
    for (int i = 0; i < 20; ++i) {
      const auto t0 = Steady::now();
      server.ReadState([](const RendezvousState& state) {
        StatusOr<v1::StatusResponse> all = state.GetStatus("");
        for (const v1::JobStatus& j : all->jobs()) {
          (void)state.PeekStacks(j.rdzv_id());
        }
      });
      copies.push_back(
          std::chrono::duration<double, std::milli>(Steady::now() - t0)
              .count());
    }
    printf(
        "state copy under the mutex: median %.2f ms, max %.2f ms (at most "
        "10 a second)\n",
        Percentile(copies, 0.5), Percentile(copies, 1.0));
    fflush(stdout);
  }
  view.Stop();
  server.Shutdown(std::chrono::seconds(1));
  return 0;
}

// The server process as seen from here: started pinned, its ports read
// back; ended (stdin closed, waited for) on destruction.
class ServerProcess {
 public:
  ~ServerProcess() {
    if (to_ >= 0) ::close(to_);
    if (from_ != nullptr) fclose(from_);
    if (pid_ > 0) {
      int status = 0;
      (void)::waitpid(pid_, &status, 0);
    }
  }

  bool Start(const Options& o, const std::string& cpus) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
      return false;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    std::vector<std::string> args = {"/proc/self/exe", "--serve",
                                     "--snapshot_ttl_ms",
                                     std::to_string(o.snapshot_ttl_ms)};
    if (!cpus.empty()) {
      args.push_back("--server_cpus");
      args.push_back(cpus);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int rc = ::posix_spawn(&pid_, "/proc/self/exe", &actions, nullptr,
                                 argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = fdopen(out[0], "r");
    if (rc != 0) {
      pid_ = 0;
      return false;
    }
    const std::string ready = ReadLine();
    return std::sscanf(ready.c_str(), "ready %d %d", &grpc_port_,
                       &http_port_) == 2;
  }

  // The server's snapshot timing line.
  std::string CopyTiming() {
    if (::write(to_, "copy\n", 5) != 5) return "";
    return ReadLine();
  }

  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }

 private:
  std::string ReadLine() {
    char line[512];
    if (from_ == nullptr || fgets(line, sizeof(line), from_) == nullptr) {
      return "";
    }
    return line;
  }

  pid_t pid_ = 0;
  int to_ = -1;
  FILE* from_ = nullptr;
  int grpc_port_ = 0;
  int http_port_ = 0;
};

int Run(const Options& o) {
  // The server on the first half of the CPUs (at least one), the clients
  // on the rest; on one CPU, both on it.
  const std::vector<int> cpus = AllowedCpus();
  std::vector<int> server_cpus, client_cpus;
  if (cpus.size() >= 2) {
    const size_t half = cpus.size() / 2;
    server_cpus.assign(cpus.begin(), cpus.begin() + half);
    client_cpus.assign(cpus.begin() + half, cpus.end());
  }
  ServerProcess server;
  if (!server.Start(o, CpuList(server_cpus))) {
    fprintf(stderr, "the server process did not start\n");
    return 1;
  }
  if (!client_cpus.empty() && !PinTo(client_cpus)) {
    fprintf(stderr, "cannot pin the clients to CPUs %s: %s\n",
            CpuList(client_cpus).c_str(), std::strerror(errno));
    return 1;
  }
  Job job("127.0.0.1:" + std::to_string(server.grpc_port()), o.nodes, o.ranks);
  if (!job.Form()) {
    fprintf(stderr, "the round of %d nodes did not form\n", o.nodes);
    return 1;
  }
  printf(
      "%d nodes x %d ranks, heartbeats 1/s per node, %d GET "
      "/api/v1/jobs/s in the loaded phases, %.0f s per phase; server on "
      "CPU %s, agents and browsers on CPU %s\n",
      o.nodes, o.ranks, o.rps, o.seconds,
      server_cpus.empty() ? "any" : CpuList(server_cpus).c_str(),
      client_cpus.empty() ? "any" : CpuList(client_cpus).c_str());
  printf("%-7s %-9s %8s %8s %8s %8s %10s %10s %10s %9s\n", "round", "phase",
         "beats", "p50_ms", "p99_ms", "max_ms", "http_rps", "http_p50",
         "http_p99", "body_KB");
  std::vector<double> ratios, gzip_ratios, loaded_p99s;
  int rc = 0;
  for (int round = 1; round <= o.rounds; ++round) {
    Phase alone = RunPhase(&job, o, server.http_port(), Load::kNone);
    Phase identity = RunPhase(&job, o, server.http_port(), Load::kIdentity);
    Phase gzip = RunPhase(&job, o, server.http_port(), Load::kGzip);
    for (const auto& [name, p] :
         {std::make_pair("alone", alone), std::make_pair("identity", identity),
          std::make_pair("gzip", gzip)}) {
      printf("%-7d %-9s %8zu %8.2f %8.2f %8.2f %10.0f %10.2f %10.2f %9.0f\n",
             round, name, p.beats, p.p50, p.p99, p.max, p.http_rps, p.http_p50,
             p.http_p99, p.http_bytes / 1024.0);
      if (p.beat_errors > 0 || p.http_failures > 0) {
        printf("  %s: %d heartbeat errors, %d HTTP failures\n", name,
               p.beat_errors, p.http_failures);
        rc = 1;
      }
      // The load must have been served for the phase to measure it.
      if (std::string(name) != "alone" && p.http_rps < 0.9 * o.rps) {
        printf("  %s: the view answered %.0f requests/s of the %d asked\n",
               name, p.http_rps, o.rps);
        rc = 1;
      }
    }
    ratios.push_back(alone.p99 > 0 ? identity.p99 / alone.p99 : 0);
    gzip_ratios.push_back(alone.p99 > 0 ? gzip.p99 / alone.p99 : 0);
    loaded_p99s.push_back(std::max(identity.p99, gzip.p99));
    fflush(stdout);
  }
  printf("%s", server.CopyTiming().c_str());
  const double ratio = Percentile(ratios, 0.5);
  const double loaded_p99 = Percentile(loaded_p99s, 0.5);
  printf(
      "heartbeat p99 loaded / alone: identity %.2f, gzip %.2f (medians "
      "of %d rounds)\n",
      ratio, Percentile(gzip_ratios, 0.5), o.rounds);
  if (o.max_ratio > 0 && ratio > o.max_ratio) {
    printf("FAIL: ratio %.2f > --max_ratio %.2f\n", ratio, o.max_ratio);
    rc = 1;
  }
  if (o.max_p99_ms > 0 && loaded_p99 > o.max_p99_ms) {
    printf("FAIL: loaded heartbeat p99 %.2f ms > --max_p99_ms %.2f\n",
           loaded_p99, o.max_p99_ms);
    rc = 1;
  }
  return rc;
}

}  // namespace
}  // namespace ddprun::rendezvous

int main(int argc, char** argv) {
  ddprun::SetMinLogLevel(ddprun::LogLevel::kWarning);
  ddprun::rendezvous::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> double {
      if (i + 1 >= argc) {
        fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::atof(argv[++i]);
    };
    if (a == "--nodes") {
      o.nodes = static_cast<int>(next());
    } else if (a == "--ranks") {
      o.ranks = static_cast<int>(next());
    } else if (a == "--rps") {
      o.rps = static_cast<int>(next());
    } else if (a == "--seconds") {
      o.seconds = next();
    } else if (a == "--rounds") {
      o.rounds = static_cast<int>(next());
    } else if (a == "--max_ratio") {
      o.max_ratio = next();
    } else if (a == "--max_p99_ms") {
      o.max_p99_ms = next();
    } else if (a == "--snapshot_ttl_ms") {
      o.snapshot_ttl_ms = static_cast<int>(next());
    } else if (a == "--serve") {
      o.serve = true;
    } else if (a == "--server_cpus" && i + 1 < argc) {
      o.server_cpus = argv[++i];
    } else {
      fprintf(stderr,
              "usage: %s [--nodes N] [--ranks R] [--rps N] [--seconds S] "
              "[--rounds K] [--max_ratio X] [--max_p99_ms M] "
              "[--snapshot_ttl_ms T]\n",
              argv[0]);
      return 2;
    }
  }
  if (o.nodes < 1 || o.ranks < 1 || o.rps < 1 || o.seconds <= 0 ||
      o.rounds < 1) {
    fprintf(stderr, "%s: every value must be positive\n", argv[0]);
    return 2;
  }
  return o.serve ? ddprun::rendezvous::Serve(o) : ddprun::rendezvous::Run(o);
}
