// Every hostile client issue 39 found, in sequence, against one live static
// 2-node job (real processes): two ddprun agents on loopback, node 0's agent
// serving the rendezvous and the workers' c10d store on --master_port,
// Debian's torch 1.13 Gloo workers training while the attacks run
// (data/hostile_job.py). After the attacks the job must finish with exactly
// the result of the same job run without them, with no restart, and node 0's
// agent must have stayed up and light on CPU throughout. Each attack is also
// tested alone, against the store or the server in-process, in
// tests/agent/hosting/agent_store_hostile_test.cc and tests/rendezvous/.

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "tests/agent/hosting/store_test_client.h"
#include "tests/multinode/multinode_util.h"

namespace ddprun::multinode {
namespace {

namespace v1 = ::ddprun::rendezvous::v1;
using agent::store_test::Client;
namespace st = agent::store_test;

std::string U32(uint32_t v) {
  std::string b;
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<char>(v >> (8 * i)));
  return b;
}

// A client the attacks did not touch is served: a PING (torch >= 2.2's
// dialect) comes back within `timeout`.
bool Pings(int port, std::chrono::milliseconds timeout) {
  Client c(port);
  c.Validate();
  c.Type(st::kPing).Int<uint32_t>(0x5eed).Send();
  return c.Read(4, timeout) == U32(0x5eed);
}

// CPU seconds a process has used (user + system), from /proc.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(f);
  }
  return ticks / sysconf(_SC_CLK_TCK);
}

std::unique_ptr<v1::Rendezvous::Stub> Stub(int port) {
  return v1::Rendezvous::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
}

void Deadline(grpc::ClientContext* ctx, std::chrono::seconds s) {
  ctx->set_deadline(std::chrono::system_clock::now() + s);
}

class Job {
 public:
  Job(const TempDir& dir, int port) : dir_(dir), port_(port) {
    const std::map<std::string, std::string> env = {
        {"MN_OUT", dir.path()},
        {"PYTHON_EXEC", "/usr/bin/python3"},
        {"OMP_NUM_THREADS", "1"}};
    for (int rank : {1, 0}) {
      std::vector<std::string> argv = Ddprun(
          {"--nnodes=2", "--nproc_per_node=1",
           "--node_rank=" + std::to_string(rank), "--master_addr=127.0.0.1",
           "--master_port=" + std::to_string(port), "--rdzv_id=hostile",
           "/usr/bin/python3", "-u", kData + "/hostile_job.py"});
      agents_.push_back(std::make_unique<Child>(
          dir.path(), "node" + std::to_string(rank), argv, env));
    }
  }
  Child& node0() { return *agents_[1]; }
  std::string Output() {
    return "node 0:\n" + agents_[1]->Output() + "\nnode 1:\n" +
           agents_[0]->Output();
  }
  bool Ready() {
    return WaitUntil(
        [&] {
          return access((dir_.path() + "/ready_0").c_str(), F_OK) == 0 &&
                 access((dir_.path() + "/ready_1").c_str(), F_OK) == 0;
        },
        150s);
  }
  void Go() { std::ofstream(dir_.path() + "/go").close(); }
  // Both agents' exit codes.
  std::pair<int, int> Wait() {
    const int code1 = agents_[0]->Wait(200s);
    const int code0 = agents_[1]->Wait(30s);
    return {code0, code1};
  }
  nlohmann::json Result(int rank) {
    const std::string text =
        ReadFile(dir_.path() + "/result_" + std::to_string(rank) + ".json");
    return text.empty() ? nlohmann::json() : nlohmann::json::parse(text);
  }

 private:
  const TempDir& dir_;
  int port_;
  std::vector<std::unique_ptr<Child>> agents_;
};

TEST_CASE(
    "static job: every hostile client of issue 39 in sequence, and the job "
    "finishes with the undisturbed run's result",
    "[multinode][python][agent_store][hostile]") {
  if (!HaveTorch()) DDPRUN_SKIP("no torch for /usr/bin/python3");

  // The same job, undisturbed.
  nlohmann::json expected[2];
  {
    TempDir dir;
    Job job(dir, FreeLoopbackPort());
    job.Go();
    const auto [code0, code1] = job.Wait();
    INFO(job.Output());
    REQUIRE(code0 == 0);
    REQUIRE(code1 == 0);
    for (int r = 0; r < 2; ++r) {
      expected[r] = job.Result(r);
      REQUIRE(expected[r].is_object());
    }
  }

  // The thousand silent sockets below need descriptors.
  rlimit nofile{};
  getrlimit(RLIMIT_NOFILE, &nofile);
  nofile.rlim_cur = nofile.rlim_max;
  setrlimit(RLIMIT_NOFILE, &nofile);

  TempDir dir;
  const int port = FreeLoopbackPort();
  Job job(dir, port);
  REQUIRE(job.Ready());
  INFO(job.Output());
  const pid_t agent0 = job.node0().pid();
  const double cpu_before = CpuSeconds(agent0);

  // 1. MULTI_GET of one 1 MiB value a million times (a terabyte reply).
  {
    Client setter(port);
    setter.Validate();
    setter.Type(st::kSet).Str("hostile/big").Str(std::string(1 << 20, 'v'))
        .Send();
    Client abuser(port);
    abuser.Validate();
    abuser.Type(st::kMultiGet).Int<uint64_t>(1 << 20);
    for (int i = 0; i < (1 << 20); ++i) abuser.Str("hostile/big");
    REQUIRE(abuser.SendAll());
    CHECK(abuser.Closed(30s));
    CHECK(Pings(port, 5s));
  }
  // 2. GETs of that value whose replies are never read.
  {
    Client abuser(port);
    abuser.Validate();
    for (int i = 0; i < 1024; ++i) abuser.Type(st::kGet).Str("hostile/big");
    REQUIRE(abuser.SendAll());
    std::this_thread::sleep_for(1s);
    CHECK(Pings(port, 5s));
  }
  // 3. 8 MiB of one-byte queries (GETNUMKEYS), every reply read.
  {
    Client flood(port);
    flood.Validate();
    constexpr size_t kQueries = size_t{8} << 20;
    std::atomic<size_t> got{0};
    std::thread reader([&] {
      char b[1 << 16];
      size_t bytes = 0;
      while (bytes < kQueries * 8) {
        pollfd p{flood.fd(), POLLIN, 0};
        if (poll(&p, 1, 20000) <= 0) return;
        const ssize_t n = recv(flood.fd(), b, sizeof(b), 0);
        if (n <= 0) return;
        bytes += static_cast<size_t>(n);
        got = bytes / 8;
      }
    });
    const std::string chunk(64 << 10, static_cast<char>(st::kNumKeys));
    const auto start = SteadyClock::now();
    for (size_t sent = 0; sent < kQueries;) {
      const ssize_t n = send(flood.fd(), chunk.data(),
                             std::min(chunk.size(), kQueries - sent),
                             MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    CHECK(WaitUntil([&] { return got == kQueries; }, 10s));
    const double took =
        std::chrono::duration<double>(SteadyClock::now() - start).count();
    INFO("8 MiB of one-byte queries answered in " << took << " s");
    CHECK(took < 10);
    shutdown(flood.fd(), SHUT_RDWR);
    reader.join();
  }
  // 4. A thousand silent sockets; a fresh client is served within 2 s.
  {
    std::vector<std::unique_ptr<Client>> silent;
    for (int i = 0; i < 1000; ++i) silent.push_back(std::make_unique<Client>(port));
    CHECK(Pings(port, 2s));
  }
  // 5. The store's size limit: values past it are refused, the job's
  //    keys stay (the attacker deletes only what it wrote).
  {
    Client filler(port);
    filler.Validate();
    const std::string mib(1 << 20, 'f');
    int stored = 0;
    for (; stored < 1200; ++stored) {
      filler.Type(st::kSet).Str("hostile/fill/" + std::to_string(stored))
          .Str(mib);
      if (!filler.SendAll()) break;
      filler.Type(st::kPing).Int<uint32_t>(stored);
      if (!filler.SendAll() || filler.Read(4, 10s) != U32(stored)) break;
    }
    INFO(stored << " MiB stored before the store refused");
    CHECK(stored < 1100);  // refused at its 1 GiB limit, not after
    Client cleaner(port);
    cleaner.Validate();
    for (int i = 0; i <= stored; ++i) {
      cleaner.Type(st::kDelete).Str("hostile/fill/" + std::to_string(i));
    }
    cleaner.Type(st::kDelete).Str("hostile/big");
    REQUIRE(cleaner.SendAll());
    for (int i = 0; i <= stored + 1; ++i) (void)cleaner.ReadInt<int64_t>();
    CHECK(Pings(port, 5s));
  }
  // 6. A split HTTP/2 preface ("PR", then nothing) must not spin node 0's
  //    agent.
  {
    Client half(port);
    half.Raw("PR").Send();
    const double cpu0 = CpuSeconds(agent0);
    std::this_thread::sleep_for(2s);
    const double spent = CpuSeconds(agent0) - cpu0;
    INFO("node 0's agent used " << spent << " CPU-s in 2 s beside a split "
                                             "preface");
    CHECK(spent < 0.5);
  }
  // 7. Joins for made-up rendezvous ids, with fresh instance ids.
  {
    auto stub = Stub(port);
    for (int i = 1; i <= 3; ++i) {
      v1::JoinRequest req;
      req.set_rdzv_id("intruder" + std::to_string(i));
      req.mutable_config()->set_min_nodes(1);
      req.mutable_config()->set_max_nodes(1);
      req.mutable_node()->set_node_id("intruder");
      req.mutable_node()->set_instance(100 + i);
      req.mutable_node()->set_local_world_size(1);
      req.mutable_node()->set_addr("127.0.0.1");
      req.mutable_node()->set_master_port(1);
      grpc::ClientContext ctx;
      Deadline(&ctx, 5s);
      v1::JoinResponse resp;
      CHECK(stub->Join(&ctx, req, &resp).error_code() ==
            grpc::StatusCode::PERMISSION_DENIED);
    }
  }
  // 8. The job's Status, then Stacks: an answer for a real node from
  //    another instance, and a flood of dump requests.
  {
    auto stub = Stub(port);
    v1::StatusRequest sreq;
    sreq.set_rdzv_id("hostile");
    v1::StatusResponse status;
    grpc::ClientContext sctx;
    Deadline(&sctx, 5s);
    REQUIRE(stub->Status(&sctx, sreq, &status).ok());
    REQUIRE(status.jobs_size() == 1);
    REQUIRE(status.jobs(0).nodes_size() == 2);
    v1::StacksRequest forged;
    forged.set_rdzv_id("hostile");
    forged.set_node_id(status.jobs(0).nodes(0).node_id());
    forged.set_instance(424242);
    v1::RankStack* rs = forged.add_ranks();
    rs->set_rank(0);
    v1::StacksResponse sresp;
    grpc::ClientContext fctx;
    Deadline(&fctx, 5s);
    CHECK(stub->Stacks(&fctx, forged, &sresp).error_code() ==
          grpc::StatusCode::ALREADY_EXISTS);
    // Past the server's burst of 2000 dumps, faster than its refill of 500
    // a second: 8 callers at once (one after another, a loaded 2-core
    // machine answered under 500 a second and the bucket never ran dry),
    // until the first refusal, at most 16000 requests.
    std::atomic<int> refused{0}, sent{0};
    std::vector<std::thread> callers;
    for (int c = 0; c < 8; ++c) {
      callers.emplace_back([&, c] {
        for (int i = 0; i < 2000 && refused == 0; ++i) {
          v1::StacksRequest flood;
          flood.set_rdzv_id("hostile");
          flood.set_reason("flood " + std::to_string(c) + "." +
                           std::to_string(i));
          v1::StacksResponse answer;
          grpc::ClientContext ctx;
          Deadline(&ctx, 5s);
          ++sent;
          refused += stub->Stacks(&ctx, flood, &answer).error_code() ==
                     grpc::StatusCode::RESOURCE_EXHAUSTED;
        }
      });
    }
    for (std::thread& t : callers) t.join();
    INFO(refused << " of " << sent << " dump requests refused");
    CHECK(refused > 0);
    CHECK(sent > 2000);
  }
  // 9. A flood of Status of every job.
  {
    auto stub = Stub(port);
    int refused = 0;
    for (int i = 0; i < 300; ++i) {
      v1::StatusRequest req;
      v1::StatusResponse resp;
      grpc::ClientContext ctx;
      Deadline(&ctx, 5s);
      refused += stub->Status(&ctx, req, &resp).error_code() ==
                 grpc::StatusCode::RESOURCE_EXHAUSTED;
    }
    INFO(refused << " of 300 Status calls refused");
    CHECK(refused > 0);
  }
  const double cpu_attacks = CpuSeconds(agent0) - cpu_before;
  INFO("node 0's agent used " << cpu_attacks << " CPU-s during the attacks");

  job.Go();
  const auto [code0, code1] = job.Wait();
  INFO(job.Output());
  REQUIRE(code0 == 0);
  REQUIRE(code1 == 0);
  // The same numbers, and no restart (restart_count is in the result).
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json got = job.Result(r);
    INFO("rank " << r << ": " << got.dump());
    CHECK(got == expected[r]);
  }
}

}  // namespace
}  // namespace ddprun::multinode
