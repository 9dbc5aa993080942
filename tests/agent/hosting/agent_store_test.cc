// The agent store (agent/hosting/agent_store.h) against a client written
// here from torch's TCPStore wire format: each query of both dialects,
// malformed messages, waits with a deadline, Reset between rounds, and the
// HTTP/2 hand-off. Real sockets on 127.0.0.1, port 0.

#include "agent/hosting/agent_store.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "agent/hosting/rendezvous_factory.h"
#include "ddprun_catch.h"
#include "store_test_client.h"

namespace ddprun::agent {
namespace {

using namespace store_test;

TEST_CASE("AgentStore: every query of torch >= 2.2's dialect",
          "[agent][agent_store]") {
  Served s;
  Client c(s.port);
  c.Validate();
  c.Type(kPing).Int<uint32_t>(0xdeadbeef).Send();
  CHECK(c.ReadInt<uint32_t>() == 0xdeadbeef);

  c.Type(kSet).Str("/worker/attempt_0/a").Str("1").Send();
  c.Type(kGet).Str("/worker/attempt_0/a").Send();
  CHECK(c.ReadBytes() == "1");

  // COMPARE_SET: absent + empty expected sets; absent + other expected
  // answers the expected value; present + match swaps; mismatch keeps.
  c.Type(kCompareSet).Str("cs").Str("").Str("x").Send();
  CHECK(c.ReadBytes() == "x");
  c.Type(kCompareSet).Str("cs2").Str("e").Str("y").Send();
  CHECK(c.ReadBytes() == "e");
  c.Type(kCompareSet).Str("cs").Str("x").Str("z").Send();
  CHECK(c.ReadBytes() == "z");
  c.Type(kCompareSet).Str("cs").Str("x").Str("w").Send();
  CHECK(c.ReadBytes() == "z");

  c.Type(kAdd).Str("n").Int<int64_t>(5).Send();
  CHECK(c.ReadInt<int64_t>() == 5);
  c.Type(kAdd).Str("n").Int<int64_t>(-7).Send();
  CHECK(c.ReadInt<int64_t>() == -2);

  c.Type(kCheck).Int<uint64_t>(2).Str("n").Str("cs").Send();
  CHECK(c.ReadInt<uint8_t>() == 0);  // READY
  c.Type(kCheck).Int<uint64_t>(2).Str("n").Str("nope").Send();
  CHECK(c.ReadInt<uint8_t>() == 1);  // NOT_READY

  c.Type(kWait).Int<uint64_t>(1).Str("n").Send();
  CHECK(c.ReadInt<uint8_t>() == 0);  // STOP_WAITING at once

  c.Type(kAppend).Str("log").Str("ab").Send();
  c.Type(kAppend).Str("log").Str("cd").Send();
  c.Type(kMultiSet).Int<uint64_t>(2).Str("m1").Str("v1").Str("m2").Str("v2");
  c.Send();
  c.Type(kMultiGet).Int<uint64_t>(3).Str("log").Str("m1").Str("m2").Send();
  CHECK(c.ReadBytes() == "abcd");
  CHECK(c.ReadBytes() == "v1");
  CHECK(c.ReadBytes() == "v2");

  c.Type(kNumKeys).Send();
  const int64_t keys = c.ReadInt<int64_t>();
  CHECK(keys == 6);  // a cs n log m1 m2 (cs2 was never set)
  c.Type(kDelete).Str("m1").Send();
  CHECK(c.ReadInt<int64_t>() == 1);
  c.Type(kDelete).Str("m1").Send();
  CHECK(c.ReadInt<int64_t>() == 0);
  CHECK(s.store.num_keys() == 5);
}

TEST_CASE("AgentStore: a WAIT is answered when another client sets the key",
          "[agent][agent_store]") {
  Served s;
  Client waiter(s.port), setter(s.port);
  waiter.Validate();
  setter.Validate();
  waiter.Type(kWait).Int<uint64_t>(2).Str("k1").Str("k2").Send();
  setter.Type(kSet).Str("k1").Str("1").Send();
  CHECK(waiter.Read(1, 300ms).empty());  // k2 still missing
  setter.Type(kAdd).Str("k2").Int<int64_t>(1).Send();
  CHECK(setter.ReadInt<int64_t>() == 1);
  CHECK(waiter.ReadInt<uint8_t>() == 0);

  // CANCEL_WAIT (a client whose own timeout passed): WAIT_CANCELED.
  waiter.Type(kWait).Int<uint64_t>(1).Str("never").Send();
  waiter.Type(kCancelWait).Send();
  CHECK(waiter.ReadInt<uint8_t>() == 1);
  setter.Type(kSet).Str("never").Str("x").Send();
  CHECK(waiter.Read(1, 300ms).empty());  // the cancelled wait stays silent
}

TEST_CASE("AgentStore: the agent's own keys reach clients, in order, and "
          "wake their waits",
          "[agent][agent_store]") {
  Served s;
  Client waiter(s.port), reader(s.port);
  waiter.Validate();
  reader.Validate();
  waiter.Type(kWait).Int<uint64_t>(1).Str("/ddprun/generation").Send();
  s.store.Set("/ddprun/generation/1", "{\"replaced\":[1]}");
  s.store.Set("/ddprun/generation", "1");
  CHECK(waiter.ReadInt<uint8_t>() == 0);  // STOP_WAITING
  // Read as the workers read a key that may be missing.
  reader.Type(kCompareSet).Str("/ddprun/generation/1").Str("?").Str("?").Send();
  CHECK(reader.ReadBytes() == "{\"replaced\":[1]}");
  reader.Type(kSet).Str("/ddprun/generation/1/healed").Str("1").Send();
  reader.Type(kGet).Str("/ddprun/generation/1/healed").Send();
  CHECK(reader.ReadBytes() == "1");
  CHECK(s.store.Get("/ddprun/generation/1/healed") == "1");
  CHECK_FALSE(s.store.Get("/ddprun/generation/2").has_value());
  // A new round drops them.
  s.store.Reset("round 2");
  CHECK_FALSE(s.store.Get("/ddprun/generation").has_value());
}

TEST_CASE("AgentStore: torch 1.13's dialect (no handshake)",
          "[agent][agent_store]") {
  Served s;
  Client c(s.port);
  // What torch 1.13's TCPStore client sends first: ADD "init/" 1.
  c.Type(kLAdd).Str("init/").Int<int64_t>(1).Send();
  CHECK(c.ReadInt<int64_t>() == 1);
  c.Type(kLSet).Str("/k").Str("v").Send();
  c.Type(kLWait).Int<uint64_t>(1).Str("/k").Send();
  CHECK(c.ReadInt<uint8_t>() == 0);
  c.Type(kLGet).Str("/k").Send();
  CHECK(c.ReadBytes() == "v");
  // 1.13's watch_key is not served: a clear close, the server lives on.
  c.Type(kLWatchKey).Str("/k").Send();
  CHECK(c.Closed());
  Client again(s.port);
  again.Type(kLGet).Str("/k").Send();
  CHECK(again.ReadBytes() == "v");
}

TEST_CASE("AgentStore: malformed messages close only their connection",
          "[agent][agent_store]") {
  Served s;
  Client good(s.port);
  good.Validate();
  good.Type(kSet).Str("k").Str("v").Send();
  SECTION("an unknown query type") {
    Client bad(s.port);
    bad.Validate();
    bad.Type(99).Send();
    CHECK(bad.Closed());
  }
  SECTION("a key length over the limit") {
    Client bad(s.port);
    bad.Validate();
    bad.Type(kSet).Int<uint64_t>(uint64_t{1} << 40).Send();
    CHECK(bad.Closed());
  }
  SECTION("a count over the limit") {
    Client bad(s.port);
    bad.Validate();
    bad.Type(kWait).Int<uint64_t>(uint64_t{1} << 40).Send();
    CHECK(bad.Closed());
  }
  SECTION("GET of a missing key") {
    Client bad(s.port);
    bad.Validate();
    bad.Type(kGet).Str("missing").Send();
    CHECK(bad.Closed());
  }
  SECTION("ADD to a value that is not a number") {
    Client bad(s.port);
    bad.Validate();
    bad.Type(kAdd).Str("k").Int<int64_t>(1).Send();
    CHECK(bad.Closed());
  }
  SECTION("VALIDATE with a wrong magic number") {
    Client bad(s.port);
    bad.Validate();
    bad.Type(kValidate).Int<uint32_t>(7).Send();
    CHECK(bad.Closed());
  }
  SECTION("torch 2.1's per-query magic") {
    Client bad(s.port);
    bad.Int<uint32_t>(0x3C85F7CE).Type(1).Str("k").Str("v").Send();
    CHECK(bad.Closed());
  }
  SECTION("a TLS handshake") {
    Client bad(s.port);
    bad.Raw("\x16\x03\x01").Send();
    CHECK(bad.Closed());
  }
  SECTION("a half message, then the client goes away") {
    auto bad = std::make_unique<Client>(s.port);
    bad->Validate();
    bad->Type(kSet).Int<uint64_t>(10).Raw("abc").Send();
    bad.reset();
  }
  good.Type(kGet).Str("k").Send();
  CHECK(good.ReadBytes() == "v");
}

TEST_CASE("AgentStore: a WAIT past the store's deadline closes its connection",
          "[agent][agent_store]") {
  AgentStore::Options o;
  o.max_wait = 300ms;
  Served s(o);
  Client c(s.port);
  c.Validate();
  const auto start = std::chrono::steady_clock::now();
  c.Type(kWait).Int<uint64_t>(1).Str("never").Send();
  CHECK(c.Closed(5s));
  CHECK(std::chrono::steady_clock::now() - start >= 250ms);
}

TEST_CASE("AgentStore: Reset drops the keys and fails the old round's waits",
          "[agent][agent_store]") {
  Served s;
  Client old_worker(s.port);
  old_worker.Validate();
  old_worker.Type(kSet).Str("/worker/attempt_0/rank_1").Str("addr").Send();
  old_worker.Type(kWait).Int<uint64_t>(1).Str("/worker/attempt_0/x").Send();
  Client idle(s.port);  // connected, nothing sent yet (1.13's 2nd socket)
  // A fixed pause: the store shows the key (num_keys) but not that the
  // wait behind it is parked, which is what Reset must fail.
  std::this_thread::sleep_for(100ms);
  REQUIRE(s.store.num_keys() == 1);
  s.store.Reset("round 1 formed");
  CHECK(s.store.num_keys() == 0);
  CHECK(old_worker.Closed());
  // A connection of the old round that speaks only now is closed too.
  idle.Type(kLSet).Str("/worker/attempt_0/late").Str("x").Send();
  CHECK(idle.Closed());
  CHECK(s.store.num_keys() == 0);
  // The new round's workers start from an empty store.
  Client fresh(s.port);
  fresh.Validate();
  fresh.Type(kCheck).Int<uint64_t>(1).Str("/worker/attempt_0/rank_1").Send();
  CHECK(fresh.ReadInt<uint8_t>() == 1);
}

TEST_CASE("AgentStore: HTTP/2 connections go to the rendezvous",
          "[agent][agent_store]") {
  std::atomic<int> handed{-1};
  AgentStore::Options o;
  o.on_http2 = [&handed](int fd) {
    // The preface is still unread: the adopter gets the stream whole.
    char b[24];
    const ssize_t n = recv(fd, b, sizeof(b), MSG_WAITALL);
    const std::string got(b, n > 0 ? n : 0);
    const std::string reply =
        got == std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24) ? "ok"
                                                                   : "no";
    handed = fd;
    (void)!send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
  };
  Served s(o);
  Client h2(s.port);
  h2.Raw(std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24)).Send();
  CHECK(h2.Read(2) == "ok");
  CHECK(handed.load() >= 0);
  if (handed.load() >= 0) close(handed.load());
  // The store still serves beside it.
  Client c(s.port);
  c.Validate();
  c.Type(kPing).Int<uint32_t>(1).Send();
  CHECK(c.ReadInt<uint32_t>() == 1);
}

TEST_CASE(
    "AgentStore: a connection that says nothing is closed after the "
    "first-message timeout, torch 1.13's watch socket is kept",
    "[agent][agent_store]") {
  AgentStore::Options o;
  o.first_message_timeout = 300ms;
  Served s(o);
  Client silent(s.port);
  Client half(s.port);
  half.Type(kLSet).Int<uint64_t>(100).Raw("abc").Send();  // never whole
  // torch 1.13: the client's first query, answered; then its second
  // socket (watch_key's), which it never writes to.
  Client worker(s.port);
  worker.Type(kLAdd).Str("init/").Int<int64_t>(1).Send();
  CHECK(worker.ReadInt<int64_t>() == 1);
  Client watch(s.port);
  CHECK(silent.Closed(3s));
  CHECK(half.Closed(3s));
  CHECK_FALSE(watch.Closed(700ms));
  worker.Type(kLGet).Str("init/").Send();
  CHECK(worker.ReadBytes() == "1");
}

TEST_CASE(
    "AgentStore: the watch socket of a torch 1.13 client made without "
    "wait_for_workers (connected before its first query) is kept",
    "[agent][agent_store]") {
  AgentStore::Options o;
  o.first_message_timeout = 300ms;
  Served s(o);
  // As ddprun's C++ workers connect: the store socket, at once the watch
  // socket, then the first query.
  Client worker(s.port);
  Client watch(s.port);
  std::this_thread::sleep_for(100ms);
  worker.Type(kLAdd).Str("init/").Int<int64_t>(1).Send();
  CHECK(worker.ReadInt<int64_t>() == 1);
  CHECK_FALSE(watch.Closed(1s));
  Client stray(s.port);  // silent, and no client left to pair with
  CHECK(stray.Closed(3s));
  worker.Type(kLGet).Str("init/").Send();
  CHECK(worker.ReadBytes() == "1");
}

TEST_CASE("HostedBindAddress: a loopback endpoint is served on the loopback",
          "[agent][agent_store]") {
  CHECK(HostedBindAddress("localhost") == "127.0.0.1");
  CHECK(HostedBindAddress("127.0.0.1") == "127.0.0.1");
  CHECK(HostedBindAddress("127.0.0.2") == "127.0.0.2");
  CHECK(HostedBindAddress("::1") == "::1");
  // A name other nodes resolve for themselves: every interface.
  CHECK(HostedBindAddress("node0.invalid") == "0.0.0.0");
  CHECK(HostedBindAddress("192.0.2.1") == "0.0.0.0");  // not this host's
}

}  // namespace
}  // namespace ddprun::agent
