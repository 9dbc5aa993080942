// --rdzv_endpoint and --rdzv_conf values the fuzz target
// (tests/fuzz/rdzv_options_fuzz_target.cc) found wrong: what they used to
// become, and the error each gives now.
#include "ddprun_catch.h"

#include <string>

#include "agent/cli/cli_values.h"
#include "rendezvous/options/endpoint.h"
#include "rendezvous/options/rendezvous_options.h"

namespace ddprun::rendezvous {

TEST_CASE(
    "ParseEndpoint and ParseHostPort: brackets inside the host are refused",
    "[rendezvous][hostile]") {
  // "[[::1]:5" became the host "[::1", which printed as an endpoint that
  // does not parse back.
  for (const char* text : {"[[a]:5", "[[::1]:29400", "a]:5", "[a[b]"}) {
    INFO(text);
    StatusOr<Endpoint> e = ParseEndpoint(text);
    REQUIRE_FALSE(e.ok());
    CHECK_THAT(e.status().message(), Catch::Contains("bad host"));
    CHECK_FALSE(agent::ParseHostPort("--master_addr", text).ok());
  }
  StatusOr<Endpoint> v6 = ParseEndpoint("[fe80::1%eth0]:29500");
  REQUIRE(v6.ok());
  CHECK(v6->host == "fe80::1%eth0");
  CHECK(ParseEndpoint(v6->ToString())->host == v6->host);
}

TEST_CASE(
    "ParseRendezvousOptions: a timeout under 1 ms and a token of line ends "
    "are refused",
    "[rendezvous][hostile]") {
  auto parse = [](const RdzvConf& conf) {
    return ParseRendezvousOptions("--rdzv_conf", conf, std::nullopt, nullptr);
  };
  // 0.0001 s was 0 ms: a heartbeat loop that never waits.
  for (const char* key : {"heartbeat_interval", "join_timeout"}) {
    INFO(key);
    Status tiny = parse({{key, "0.0001"}}).status();
    CHECK(tiny.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(tiny.message(), Catch::Contains("0.001..1000000"));
  }
  StatusOr<RendezvousOptions> ms = parse({{"heartbeat_interval", "0.001"}});
  REQUIRE(ms.ok());
  CHECK(ms->heartbeat_interval == std::chrono::milliseconds(1));
  // token=<CR> passed the table (a non-empty text), then lost its line end
  // and turned authentication off without a word.
  for (const char* token : {"\r", "\n", "\r\n"}) {
    Status empty = parse({{"token", token}}).status();
    CHECK(empty.code() == StatusCode::kInvalidArgument);
    CHECK_THAT(empty.message(), Catch::Contains("authentication off"));
  }
  StatusOr<RendezvousOptions> kept = parse({{"token", "s3cret\r"}});
  REQUIRE(kept.ok());
  CHECK(kept->token == "s3cret");
}

}  // namespace ddprun::rendezvous
