// The agent_store target's seeds, built as conversations (fuzz_seeds.h):
// torch >= 2.2 and torch 1.13 clients doing every query, a WAIT answered by
// another client's SET, a cancelled WAIT, the store's limits reached (size,
// APPEND growth, a MULTI_GET asking for the same value many times, replies
// never read), HTTP/2 and TLS openings, torch 2.1's per-query magic, a
// Reset between rounds. The record format is agent_store_fuzz_target.cc's.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_seeds.h"
#include "tests/agent/hosting/store_query.h"

namespace {

using namespace ddprun::agent::store_test;

class Script {
 public:
  // Client `c` sends `bytes` (records of at most 255 bytes).
  Script& Send(int c, const std::string& bytes) {
    for (size_t at = 0; at < bytes.size(); at += 255) {
      const std::string part = bytes.substr(at, 255);
      out_ += static_cast<char>(c);
      out_ += static_cast<char>(part.size());
      out_ += part;
    }
    return *this;
  }
  Script& Send(int c, const Query& q) { return Send(c, q.bytes()); }
  Script& Read(int c) { return Op(c, 5); }
  Script& Bye(int c) { return Op(c, 6); }
  Script& Reset() { return Op(0, 7); }
  const std::string& str() const { return out_; }

 private:
  Script& Op(int c, int op) {
    out_ += static_cast<char>(c + 4 * op);
    out_ += '\0';
    return *this;
  }
  std::string out_;
};

std::string Validate() {
  return Query(kValidate).Int<uint32_t>(0x3C85F7CE).bytes();
}

}  // namespace

std::vector<std::string> DdprunFuzzSeeds() {
  std::vector<std::string> seeds;
  // Every modern query; client 1 waits for a key client 0 sets.
  seeds.push_back(
      Script()
          .Send(0, Validate())
          .Send(1, Validate())
          .Send(1, Query(kWait).Int<uint64_t>(2).Str("k1").Str("k2"))
          .Send(0, Query(kSet).Str("k1").Str("v1"))
          .Send(0, Query(kAdd).Str("k2").Int<int64_t>(3))
          .Read(1)
          .Send(0, Query(kCompareSet).Str("cs").Str("").Str("x"))
          .Send(0, Query(kCompareSet).Str("cs").Str("x").Str("y"))
          .Send(0, Query(kCheck).Int<uint64_t>(2).Str("k1").Str("nope"))
          .Send(0, Query(kAppend).Str("log").Str("ab"))
          .Send(0, Query(kAppend).Str("log").Str("cd"))
          .Send(0, Query(kMultiSet)
                       .Int<uint64_t>(2)
                       .Str("m1")
                       .Str("a")
                       .Str("m2")
                       .Str("b"))
          .Send(0, Query(kMultiGet).Int<uint64_t>(3).Str("log").Str("m1").Str(
                       "m2"))
          .Send(0, Query(kNumKeys))
          .Send(0, Query(kDelete).Str("m1"))
          .Send(0, Query(kPing).Int<uint32_t>(7))
          .Send(1, Query(kWait).Int<uint64_t>(1).Str("never"))
          .Send(1, Query(kCancelWait))
          .Read(0)
          .Read(1)
          .str());
  // torch 1.13: ADD init/ first, then SET, WAIT, GET; its idle second
  // socket; watch_key (not served).
  seeds.push_back(
      Script()
          .Send(0, Query(kLAdd).Str("init/").Int<int64_t>(1))
          .Send(0, Query(kLSet).Str("/worker/attempt_0/a").Str("1"))
          .Send(0, Query(kLWait).Int<uint64_t>(1).Str("/worker/attempt_0/a"))
          .Send(0, Query(kLGet).Str("/worker/attempt_0/a"))
          .Read(0)
          .Send(1, Query(kLWatchKey).Str("/worker/attempt_0/a"))
          .str());
  // Limits: the store's size, APPEND growth, an amplifying MULTI_GET, GETs
  // never read, a Reset, then a new round.
  std::string big(250, 'v');
  Query many(kMultiGet);
  many.Int<uint64_t>(60);
  for (int i = 0; i < 60; ++i) many.Str("big");
  Script limits;
  limits.Send(0, Validate()).Send(0, Query(kSet).Str("big").Str(big));
  for (int i = 0; i < 20; ++i) {
    limits.Send(0, Query(kSet).Str("k" + std::to_string(i)).Str(big));
  }
  limits.Send(1, Validate()).Bye(1).Send(1, Validate());
  for (int i = 0; i < 6; ++i)
    limits.Send(1, Query(kAppend).Str("grow").Str(big.substr(0, 60)));
  limits.Send(2, Validate()).Send(2, many);
  for (int i = 0; i < 8; ++i) limits.Send(3, Query(kGet).Str("big"));
  limits.Reset().Send(0, Validate()).Send(0, Query(kNumKeys)).Read(0).Read(3);
  seeds.push_back(limits.str());
  // Openings that are not a store client, and one split.
  seeds.push_back(
      Script()
          .Send(0, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
          .Send(1, "PR")
          .Send(1, "I ")
          .Send(2, "\x16\x03\x01")
          .Send(3,
                Query(0xCE).Int<uint8_t>(0xF7).Int<uint8_t>(0x85).Int<uint8_t>(
                    0x3C))
          .str());
  // Oversized lengths and counts, an unknown type, a bad magic.
  seeds.push_back(Script()
                      .Send(0, Validate())
                      .Send(0, Query(kSet).Int<uint64_t>(uint64_t{1} << 40))
                      .Send(1, Validate())
                      .Send(1, Query(kWait).Int<uint64_t>(uint64_t{1} << 40))
                      .Send(2, Validate())
                      .Send(2, Query(99))
                      .Send(3, Query(kValidate).Int<uint32_t>(7))
                      .str());
  return seeds;
}
