// RemoteWorkerStore (agent/hosting/remote_worker_store.h) against
// AgentStores in this process: Sets in order, Get following another
// client's writes, rounds, a store that goes away and comes back, and a
// destructor that does not wait for a silent store. Real sockets on
// 127.0.0.1, port 0; every wait has a deadline.

#include "agent/hosting/remote_worker_store.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "agent/hosting/agent_store.h"
#include "agent/hosting/store_client.h"
#include "ddprun_catch.h"
#include "loopback_sockets.h"
#include "store_test_client.h"
#include "tests/support/process.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using namespace store_test;
using Clock = std::chrono::steady_clock;

rendezvous::RendezvousResult RoundAt(int port, int64_t number = 1) {
  rendezvous::RendezvousResult r;
  r.round = number;
  r.group_rank = 1;
  r.master_addr = "127.0.0.1";
  r.master_port = port;
  return r;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Keys as WorkerStoreHost names them: the store holds "/" + key.
std::optional<std::string> InStore(const AgentStore& store,
                                   const std::string& key) {
  return store.Get("/" + key);
}

TEST_CASE("RemoteWorkerStore: Sets land in call order",
          "[agent][remote_worker_store]") {
  Served s;
  RemoteWorkerStore remote;
  REQUIRE(remote.StartRound(RoundAt(s.port)).ok());
  // While the Sets stream in, the number read never names a record that
  // is not there yet (RankReplacement's record, then its generation).
  constexpr int kGenerations = 300;
  int seen = 0;
  int early = 0;
  std::thread reader([&] {
    const Clock::time_point deadline = Clock::now() + 10s;
    while (seen < kGenerations && Clock::now() < deadline) {
      std::optional<std::string> g = InStore(s.store, "ddprun/generation");
      if (!g.has_value()) continue;
      seen = std::max(seen, std::stoi(*g));
      if (!InStore(s.store, "ddprun/generation/" + *g).has_value()) ++early;
    }
  });
  for (int g = 1; g <= kGenerations; ++g) {
    remote.Set("ddprun/generation/" + std::to_string(g), "record");
    remote.Set("ddprun/generation", std::to_string(g));
  }
  reader.join();
  CHECK(seen == kGenerations);
  CHECK(early == 0);
  for (int g = 1; g <= kGenerations; ++g) {
    CHECK(InStore(s.store, "ddprun/generation/" + std::to_string(g)) ==
          std::optional<std::string>("record"));
  }
}

TEST_CASE("RemoteWorkerStore: Get follows another client's Set",
          "[agent][remote_worker_store]") {
  Served s;
  RemoteWorkerStore remote;
  REQUIRE(remote.StartRound(RoundAt(s.port)).ok());
  CHECK(!remote.Get("ddprun/generation/1/healed").has_value());

  // A worker's client: torch's "/" before the key.
  StoreClient worker;
  REQUIRE(worker.Connect("127.0.0.1", s.port, Clock::now() + 5s).ok());
  const Clock::time_point start = Clock::now();
  REQUIRE(worker.Set("/ddprun/generation/1/healed", "7", start + 5s).ok());
  CHECK(testing::WaitUntil(
      [&] {
        return remote.Get("ddprun/generation/1/healed") ==
               std::optional<std::string>("7");
      },
      5s, 1ms));
  INFO("seconds until Get saw it: " << SecondsSince(start));
  CHECK(SecondsSince(start) < 1.0);  // 20 ms reads and a round trip

  // Newer values replace older ones.
  REQUIRE(
      worker.Set("/ddprun/generation/1/healed", "8", Clock::now() + 5s).ok());
  CHECK(testing::WaitUntil(
      [&] {
        return remote.Get("ddprun/generation/1/healed") ==
               std::optional<std::string>("8");
      },
      5s, 1ms));
}

TEST_CASE("RemoteWorkerStore: a new round drops the old one's state",
          "[agent][remote_worker_store]") {
  Served a;
  Served b;
  a.store.Set("/k", "a");
  b.store.Set("/k", "b");
  LoopbackSocket refusing(/*listen=*/false);
  RemoteWorkerStore remote;

  // Round 1: values read from a.
  REQUIRE(remote.StartRound(RoundAt(a.port, 1)).ok());
  remote.Get("k");
  REQUIRE(testing::WaitUntil(
      [&] { return remote.Get("k") == std::optional<std::string>("a"); }, 5s));

  // Round 2, whose store refuses: a Set stays queued.
  REQUIRE(remote.StartRound(RoundAt(refusing.port(), 2)).ok());
  CHECK(!remote.Get("k").has_value());  // dropped at once
  remote.Set("stale", "2");

  // Round 3 on b: the stale Set is not sent there, and k is b's.
  REQUIRE(remote.StartRound(RoundAt(b.port, 3)).ok());
  CHECK(!remote.Get("k").has_value());
  remote.Set("fresh", "3");
  REQUIRE(testing::WaitUntil(
      [&] { return InStore(b.store, "fresh").has_value(); }, 5s));
  CHECK(!InStore(b.store, "stale").has_value());
  CHECK(!InStore(a.store, "stale").has_value());
  CHECK(testing::WaitUntil(
      [&] { return remote.Get("k") == std::optional<std::string>("b"); }, 5s));

  // A round that names no store.
  rendezvous::RendezvousResult none = RoundAt(0, 4);
  CHECK(remote.StartRound(none).code() == StatusCode::kInvalidArgument);
  none.master_port = 70000;
  CHECK(remote.StartRound(none).code() == StatusCode::kInvalidArgument);
  none = RoundAt(b.port, 5);
  none.master_addr.clear();
  CHECK(remote.StartRound(none).code() == StatusCode::kInvalidArgument);
}

TEST_CASE(
    "RemoteWorkerStore: Sets queued while the store is gone land "
    "when it is back on its port",
    "[agent][remote_worker_store]") {
  auto first = std::make_unique<Served>();
  const int port = first->port;
  RemoteWorkerStore::Options o;
  o.max_backoff = 200ms;
  RemoteWorkerStore remote(o);
  REQUIRE(remote.StartRound(RoundAt(port)).ok());
  remote.Set("a", "1");
  REQUIRE(testing::WaitUntil(
      [&] { return InStore(first->store, "a").has_value(); }, 5s));
  remote.Get("healed");  // keeps the thread reading through the outage

  first.reset();
  for (int i = 0; i < 50; ++i) remote.Set("b", std::to_string(i));
  remote.Set("c", "last");
  std::this_thread::sleep_for(500ms);  // several failed reconnects

  AgentStore second{AgentStore::Options()};
  REQUIRE(second.Start("127.0.0.1", port).ok());
  REQUIRE(testing::WaitUntil([&] { return InStore(second, "c").has_value(); },
                             10s));
  CHECK(InStore(second, "b") == std::optional<std::string>("49"));
  CHECK(!InStore(second, "a").has_value());  // landed in the first store
  second.Set("/healed", "yes");
  CHECK(testing::WaitUntil(
      [&] { return remote.Get("healed") == std::optional<std::string>("yes"); },
      5s));
}

TEST_CASE(
    "RemoteWorkerStore: a Set the store took but never confirmed is "
    "sent again",
    "[agent][remote_worker_store]") {
  // A listener that never reads: the Sets' bytes reach its socket, the
  // reply that would confirm them never comes; closing it resets the
  // connection, and a real store takes over its port.
  auto silent = std::make_unique<LoopbackSocket>(/*listen=*/true);
  const int port = silent->port();
  RemoteWorkerStore::Options o;
  o.min_backoff = o.max_backoff = 50ms;
  RemoteWorkerStore remote(o);
  REQUIRE(remote.StartRound(RoundAt(port)).ok());
  remote.Set("ddprun/generation/1", "record");
  remote.Set("ddprun/generation", "1");
  std::this_thread::sleep_for(200ms);  // sent, waiting for the reply
  silent.reset();

  AgentStore store{AgentStore::Options()};
  REQUIRE(store.Start("127.0.0.1", port).ok());
  CHECK(testing::WaitUntil(
      [&] { return InStore(store, "ddprun/generation").has_value(); }, 10s));
  CHECK(InStore(store, "ddprun/generation/1") ==
        std::optional<std::string>("record"));
}

TEST_CASE(
    "RemoteWorkerStore: StartRound and the destructor do not wait "
    "for a silent store",
    "[agent][remote_worker_store]") {
  LoopbackSocket silent(/*listen=*/true);  // connects, never answers
  Served s;
  s.store.Set("/k", "v");
  RemoteWorkerStore::Options o;
  o.query_timeout = 30s;
  o.connect_timeout = 30s;

  {
    RemoteWorkerStore remote(o);
    REQUIRE(remote.StartRound(RoundAt(silent.port(), 1)).ok());
    remote.Set("x", "1");
    remote.Get("k");
    std::this_thread::sleep_for(200ms);  // the thread waits for a reply
    // The next round's store answers long before the query's deadline.
    const Clock::time_point start = Clock::now();
    REQUIRE(remote.StartRound(RoundAt(s.port, 2)).ok());
    remote.Get("k");
    CHECK(testing::WaitUntil(
        [&] { return remote.Get("k") == std::optional<std::string>("v"); },
        5s));
    CHECK(SecondsSince(start) < 1.0);
  }

  Clock::time_point start;
  {
    RemoteWorkerStore remote(o);
    REQUIRE(remote.StartRound(RoundAt(silent.port(), 1)).ok());
    remote.Get("k");
    std::this_thread::sleep_for(200ms);
    start = Clock::now();
  }
  CHECK(SecondsSince(start) < 1.0);

  // In the back-off after failures.
  LoopbackSocket refusing(/*listen=*/false);
  {
    o.min_backoff = o.max_backoff = 30s;
    RemoteWorkerStore remote(o);
    REQUIRE(remote.StartRound(RoundAt(refusing.port(), 1)).ok());
    remote.Set("x", "1");
    std::this_thread::sleep_for(200ms);
    start = Clock::now();
  }
  CHECK(SecondsSince(start) < 1.0);
}

}  // namespace
}  // namespace ddprun::agent
