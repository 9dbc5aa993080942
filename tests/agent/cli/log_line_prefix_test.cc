#include "agent/cli/log_line_prefix.h"

#include "ddprun_catch.h"
#include <string>

namespace ddprun::agent {
namespace {

PrefixValues Values() {
  PrefixValues v;
  v.role = "trainer";
  v.rank = 5;
  v.local_rank = 1;
  v.hostname = "gpu-node-7";
  v.node_rank = 2;
  v.local_world_size = 4;
  return v;
}

std::string Prefix(const std::string& templ) {
  auto p = LogLinePrefix(templ, Values());
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  return *p;
}

std::string Error(const std::string& templ) {
  auto p = LogLinePrefix(templ, Values());
  REQUIRE_FALSE(p.ok());
  CHECK(p.status().code() == StatusCode::kInvalidArgument);
  CHECK(p.status().message().find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE") !=
        std::string::npos);
  return p.status().message();
}

TEST_CASE("LogLinePrefix: torchrun's default and its template", "[cli]") {
  CHECK(Prefix("") == "[trainer1]:");
  // torchrun's own test: "[rank${rank}]: " -> "[rank0]: creating ...".
  CHECK(Prefix("[rank${rank}]: ") == "[rank5]: ");
  CHECK(Prefix("${role_name}/$local_rank|$rank:") == "trainer/1|5:");
  CHECK(Prefix("$$${rank}$$") == "$5$");
  // Not placeholders (Python's Template leaves them): "$ ", "$1", a final $.
  CHECK(Prefix("$ x $1 $") == "$ x $1 $");
  CHECK(Prefix("${rank}${rank}_x") == "55_x");
}

TEST_CASE("LogLinePrefix: ddprun's host, node rank and local world size",
          "[cli]") {
  // pytorch#75087: which host and node a line came from.
  CHECK(Prefix("[${hostname}:${rank}]:") == "[gpu-node-7:5]:");
  CHECK(Prefix("[$hostname/n${node_rank}/${local_rank}of$local_world_size] ") ==
        "[gpu-node-7/n2/1of4] ");
  // torch's three keep their meaning beside them.
  CHECK(Prefix("${role_name}${local_rank}@${node_rank}") == "trainer1@2");
}

TEST_CASE("LogLinePrefix: bad placeholders are one clear error", "[cli]") {
  // "$rank_x" is the (unknown) name rank_x, as in Python.
  CHECK(Error("$rank_x").find("unknown placeholder 'rank_x'") !=
        std::string::npos);
  const std::string unknown = Error("[${group_rank}]");
  CHECK(unknown.find("unknown placeholder 'group_rank'") != std::string::npos);
  CHECK(unknown.find("${role_name}, ${rank}, ${local_rank}, ${hostname}, "
                     "${node_rank}, ${local_world_size}") != std::string::npos);
  // Near misses of the extensions stay errors.
  CHECK(Error("${host}").find("unknown placeholder 'host'") !=
        std::string::npos);
  CHECK(Error("$node_rank_").find("unknown placeholder 'node_rank_'") !=
        std::string::npos);
  CHECK(Error("[${rank]").find("without a closing") != std::string::npos);
  CHECK(Error("${}").find("bad placeholder") != std::string::npos);
  CHECK(Error("${1x}").find("bad placeholder") != std::string::npos);
}

}  // namespace
}  // namespace ddprun::agent
