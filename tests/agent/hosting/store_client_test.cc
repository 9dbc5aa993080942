// StoreClient (agent/hosting/store_client.h) against an AgentStore in this
// process, and against sockets that refuse, never answer, answer nonsense
// or hang up; the legacy-dialect encoder it uses (store_protocol.h) against
// the store's decoder. Real sockets on 127.0.0.1, port 0.

#include "agent/hosting/store_client.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "agent/hosting/agent_store.h"
#include "agent/hosting/store_protocol.h"
#include "ddprun_catch.h"
#include "loopback_sockets.h"
#include "store_test_client.h"
#include "tests/support/process.h"

namespace ddprun::agent {
namespace {

using namespace std::chrono_literals;
using namespace store_test;
using Clock = StoreClient::Clock;

Clock::time_point In(std::chrono::milliseconds d) { return Clock::now() + d; }

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST_CASE("AppendLegacyQuery: what it writes, StoreDecoder reads back",
          "[agent][store_client]") {
  std::vector<StoreRequest> sent(6);
  sent[0].op = StoreOp::kSet;
  sent[0].keys = {"/k"};
  sent[0].values = {std::string("v\0w", 3)};
  sent[1].op = StoreOp::kCompareSet;
  sent[1].keys = {"/k"};
  sent[1].values = {"old", "new"};
  sent[2].op = StoreOp::kAdd;
  sent[2].keys = {"/n"};
  sent[2].delta = -5;
  sent[3].op = StoreOp::kCheck;
  sent[3].keys = {"a", "b"};
  sent[4].op = StoreOp::kMultiSet;
  sent[4].keys = {"a", "b"};
  sent[4].values = {"1", "2"};
  sent[5].op = StoreOp::kNumKeys;
  std::string wire;
  for (const StoreRequest& r : sent) REQUIRE(AppendLegacyQuery(r, &wire).ok());
  CHECK(wire[0] == 0);  // legacy SET, not VALIDATE: no magic follows

  StoreDecoder decoder{StoreWireLimits()};
  decoder.Append(wire.data(), wire.size());
  for (const StoreRequest& want : sent) {
    StoreRequest got;
    StatusOr<bool> whole = decoder.Next(&got);
    REQUIRE(whole.ok());
    REQUIRE(*whole);
    CHECK(got.op == want.op);
    CHECK(got.keys == want.keys);
    CHECK(got.values == want.values);
    CHECK(got.delta == want.delta);
  }
  CHECK(decoder.dialect() == StoreDialect::kLegacy);
  CHECK(decoder.buffered() == 0);

  std::string none;
  StoreRequest ping;
  ping.op = StoreOp::kPing;
  CHECK(AppendLegacyQuery(ping, &none).code() == StatusCode::kInvalidArgument);
  StoreRequest bare;
  bare.op = StoreOp::kSet;
  CHECK(AppendLegacyQuery(bare, &none).code() == StatusCode::kInvalidArgument);
  CHECK(none.empty());
}

TEST_CASE("StoreClient: set, peek and add against an AgentStore",
          "[agent][store_client]") {
  Served s;
  StoreClient c;
  REQUIRE(c.Connect("127.0.0.1", s.port, In(5s)).ok());
  REQUIRE(c.connected());

  REQUIRE(c.Set("/k", "v", In(5s)).ok());
  StatusOr<std::optional<std::string>> v = c.Peek("/k", In(5s));
  REQUIRE(v.ok());
  CHECK(*v == std::optional<std::string>("v"));
  CHECK(s.store.Get("/k") == std::optional<std::string>("v"));

  // A missing key reads as missing, and the read does not create it.
  v = c.Peek("/missing", In(5s));
  REQUIRE(v.ok());
  CHECK(!v->has_value());
  CHECK(!s.store.Get("/missing").has_value());

  s.store.Set("/from_store", "x");
  REQUIRE(testing::WaitUntil(
      [&] {
        StatusOr<std::optional<std::string>> got =
            c.Peek("/from_store", In(5s));
        return got.ok() && *got == std::optional<std::string>("x");
      },
      5s));

  StatusOr<int64_t> n = c.Add("/n", 5, In(5s));
  REQUIRE(n.ok());
  CHECK(*n == 5);
  n = c.Add("/n", -7, In(5s));
  REQUIRE(n.ok());
  CHECK(*n == -2);
  v = c.Peek("/n", In(5s));
  REQUIRE(v.ok());
  CHECK(*v == std::optional<std::string>("-2"));

  const std::string nul("a\0b\0", 4);
  REQUIRE(c.Set("/nul", nul, In(5s)).ok());
  v = c.Peek("/nul", In(5s));
  REQUIRE(v.ok());
  CHECK(*v == std::optional<std::string>(nul));

  std::string big(size_t{1} << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  REQUIRE(c.Set("/big", big, In(5s)).ok());
  v = c.Peek("/big", In(5s));
  REQUIRE(v.ok());
  REQUIRE(v->has_value());
  CHECK(v->value() == big);
  CHECK(c.connected());
}

TEST_CASE("StoreClient: a refused port is UNAVAILABLE before the deadline",
          "[agent][store_client]") {
  LoopbackSocket refusing(/*listen=*/false);
  StoreClient c;
  const Clock::time_point start = Clock::now();
  Status s = c.Connect("127.0.0.1", refusing.port(), In(5s));
  CHECK(s.code() == StatusCode::kUnavailable);
  CHECK(SecondsSince(start) < 2.0);
  CHECK(!c.connected());
  // No connection, no query.
  CHECK(c.Set("/k", "v", In(1s)).code() == StatusCode::kUnavailable);
  CHECK(c.Peek("/k", In(1s)).status().code() == StatusCode::kUnavailable);
}

TEST_CASE("StoreClient: a server that never answers is DEADLINE_EXCEEDED",
          "[agent][store_client]") {
  LoopbackSocket silent(/*listen=*/true);
  StoreClient c;
  REQUIRE(c.Connect("127.0.0.1", silent.port(), In(5s)).ok());
  // SET has no reply: sent is all it needs.
  CHECK(c.Set("/k", "v", In(1s)).ok());
  Clock::time_point start = Clock::now();
  Status s = c.Peek("/k", In(300ms)).status();
  double took = SecondsSince(start);
  CHECK(s.code() == StatusCode::kDeadlineExceeded);
  CHECK(took >= 0.29);
  CHECK(took < 2.0);
  CHECK(!c.connected());  // a late reply must not answer the next query

  REQUIRE(c.Connect("127.0.0.1", silent.port(), In(5s)).ok());
  start = Clock::now();
  s = c.Add("/n", 1, In(200ms)).status();
  took = SecondsSince(start);
  CHECK(s.code() == StatusCode::kDeadlineExceeded);
  CHECK(took < 2.0);

  // A deadline already passed does not wait at all.
  REQUIRE(c.Connect("127.0.0.1", silent.port(), In(5s)).ok());
  start = Clock::now();
  CHECK(c.Peek("/k", Clock::now()).status().code() ==
        StatusCode::kDeadlineExceeded);
  CHECK(SecondsSince(start) < 1.0);
}

TEST_CASE("StoreClient: its cancel descriptor ends a wait at once",
          "[agent][store_client]") {
  LoopbackSocket silent(/*listen=*/true);
  const int cancel = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(cancel >= 0);
  StoreClient c(cancel);
  REQUIRE(c.Connect("127.0.0.1", silent.port(), In(5s)).ok());
  const uint64_t one = 1;
  REQUIRE(write(cancel, &one, sizeof(one)) == sizeof(one));
  const Clock::time_point start = Clock::now();
  CHECK(c.Peek("/k", In(30s)).status().code() == StatusCode::kCancelled);
  CHECK(SecondsSince(start) < 1.0);
  // Still readable (the owner drains it): Connect is cancelled too.
  CHECK(c.Connect("localhost", silent.port(), In(30s)).code() ==
        StatusCode::kCancelled);
  uint64_t drained = 0;
  REQUIRE(read(cancel, &drained, sizeof(drained)) == sizeof(drained));
  CHECK(c.Connect("localhost", silent.port(), In(30s)).ok());
  close(cancel);
}

TEST_CASE("StoreClient: a hang-up is UNAVAILABLE, a huge length INVALID",
          "[agent][store_client]") {
  LoopbackSocket server(/*listen=*/true);
  StoreClient c;
  c.set_max_reply_bytes(1024);

  // The reply is written before the query comes: the client reads it as
  // the answer all the same.
  REQUIRE(c.Connect("127.0.0.1", server.port(), In(5s)).ok());
  int peer = server.Accept();
  REQUIRE(peer >= 0);
  const std::string huge("\x01\x04\x00\x00\x00\x00\x00\x00", 8);  // 1025
  REQUIRE(send(peer, huge.data(), huge.size(), MSG_NOSIGNAL) == 8);
  CHECK(c.Peek("/k", In(5s)).status().code() == StatusCode::kInvalidArgument);
  CHECK(!c.connected());
  close(peer);

  REQUIRE(c.Connect("127.0.0.1", server.port(), In(5s)).ok());
  peer = server.Accept();
  REQUIRE(peer >= 0);
  close(peer);
  CHECK(c.Add("/n", 1, In(5s)).status().code() == StatusCode::kUnavailable);
  CHECK(!c.connected());
}

}  // namespace
}  // namespace ddprun::agent
