#include "ddprun_catch.h"

#include <unistd.h>

#include "rendezvous/options/endpoint.h"

namespace ddprun::rendezvous {
namespace {

TEST_CASE("ParseEndpoint: host, port, IPv6 and errors", "[rendezvous]") {
  auto e = ParseEndpoint("node1:29500");
  REQUIRE(e.ok());
  CHECK(e->host == "node1");
  CHECK(e->port == 29500);
  auto d = ParseEndpoint("node1");
  REQUIRE(d.ok());
  CHECK(d->port == 29400);  // torchrun's c10d default
  auto v6 = ParseEndpoint("[fe80::1]:1234");
  REQUIRE(v6.ok());
  CHECK(v6->host == "fe80::1");
  CHECK(v6->ToString() == "[fe80::1]:1234");
  CHECK(ParseEndpoint("fe80::1").status().code() ==
        StatusCode::kInvalidArgument);
  CHECK_THAT(ParseEndpoint("host:http").status().message(),
             Catch::Contains("bad port 'http'"));
  CHECK(ParseEndpoint(":29400").status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(ParseEndpoint("h:70000").status().code() ==
        StatusCode::kInvalidArgument);
  CHECK(ParseEndpoint("h:0", 0).ok());  // port 0 where the caller allows it
}

TEST_CASE("IsThisHost: loopback and this hostname are local", "[rendezvous]") {
  CHECK(IsThisHost("localhost"));
  CHECK(IsThisHost("127.0.0.1"));
  char name[256] = {};
  REQUIRE(gethostname(name, sizeof(name) - 1) == 0);
  CHECK(IsThisHost(name));
  CHECK_FALSE(IsThisHost("192.0.2.1"));  // TEST-NET-1: never assigned
}

}  // namespace
}  // namespace ddprun::rendezvous
