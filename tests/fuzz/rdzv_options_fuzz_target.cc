// libFuzzer target over the rendezvous options a user types: --rdzv_endpoint
// (ParseEndpoint, rendezvous/options/endpoint.h; ParseHostPort for
// --master_addr/--local_addr-style values, agent/cli/cli_values.h) and
// --rdzv_conf (ParseRdzvConf, then the key table's checks and the typed
// RendezvousOptions, rendezvous/options/).
//
// Input: the endpoint on the first line, the --rdzv_conf text after it.
// File keys (token_file, tls_*) are checked but not read: ValidateRdzvConf
// only tests that the named file is readable.
//
// Invariants (abort() on violation): a parsed endpoint has a host and a
// port in 1..65535, and its ToString() parses back to the same host and
// port (what the agent hands gRPC is what the user meant); the same for
// ParseHostPort; a parsed --rdzv_conf has trimmed, non-empty keys and
// values; a conf the table accepts reads through every typed getter of its
// keys' kinds, within the kinds' ranges; RendezvousOptions parse only from
// a conf the table accepts, with every timeout at least 1 ms, and a token
// given in the conf is never turned into none (authentication off).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "agent/cli/cli_values.h"
#include "fuzz_check.h"
#include "rendezvous/options/endpoint.h"
#include "rendezvous/options/rdzv_conf.h"
#include "rendezvous/options/rendezvous_options.h"

namespace ddprun::rendezvous {
namespace {

using fuzz::Check;

bool Trimmed(const std::string& s) {
  return !s.empty() && s.front() != ' ' && s.front() != '\t' &&
         s.back() != ' ' && s.back() != '\t';
}

// A typed getter's answer for a conf the table accepted: it reads, and
// within [lo, hi] when the key is there.
template <typename T>
void CheckRange(const StatusOr<std::optional<T>>& v, T lo, T hi,
                const char* what) {
  Check(v.ok(), "a valid conf's value does not read");
  Check(!v->has_value() || (**v >= lo && **v <= hi), what);
}

void Endpoints(const std::string& text) {
  for (int default_port : {29400, 0}) {
    StatusOr<Endpoint> e = ParseEndpoint(text, default_port);
    if (!e.ok()) continue;
    Check(!e->host.empty(), "an endpoint without a host");
    Check(e->port >= (default_port == 0 ? 0 : 1) && e->port <= 65535,
          "an endpoint port out of range");
    StatusOr<Endpoint> again = ParseEndpoint(e->ToString(), default_port);
    Check(again.ok() && again->host == e->host && again->port == e->port,
          "an endpoint's ToString() parses to another endpoint");
  }
  StatusOr<agent::HostPort> hp = agent::ParseHostPort("--rdzv_endpoint", text);
  if (hp.ok()) {
    Check(!hp->host.empty(), "a host:port without a host");
    Check(hp->port >= -1 && hp->port <= 65535, "a port out of range");
    const bool v6 = hp->host.find(':') != std::string::npos;
    std::string round = v6 ? "[" + hp->host + "]" : hp->host;
    if (hp->port >= 0) round += ":" + std::to_string(hp->port);
    StatusOr<agent::HostPort> again =
        agent::ParseHostPort("--rdzv_endpoint", round);
    Check(again.ok() && again->host == hp->host && again->port == hp->port,
          "a host:port does not parse back");
  }
}

void Conf(const std::string& text) {
  StatusOr<std::map<std::string, std::string>> conf =
      agent::ParseRdzvConf("--rdzv_conf", text);
  if (!conf.ok()) return;
  for (const auto& [key, value] : *conf) {
    Check(Trimmed(key) && Trimmed(value), "an untrimmed or empty entry");
  }
  RdzvConf without_files = *conf;
  for (const RdzvConfKey& k : RdzvConfKeys()) {
    if (k.kind == RdzvConfKind::kFile) without_files.erase(k.name);
  }
  std::vector<std::string> warnings;
  const bool valid =
      ValidateRdzvConf("--rdzv_conf", without_files, &warnings).ok();
  if (valid) {
    using std::chrono::milliseconds;
    for (const RdzvConfKey& k : RdzvConfKeys()) {
      switch (k.kind) {
        case RdzvConfKind::kSeconds:
          CheckRange(RdzvConfSeconds(without_files, k.name), milliseconds(1),
                     milliseconds(1000000000), "seconds out of range");
          break;
        case RdzvConfKind::kCount:
          CheckRange(RdzvConfCount(without_files, k.name), 0L, 1000L,
                     "a count out of range");
          break;
        case RdzvConfKind::kBool:
          Check(RdzvConfBool(without_files, k.name).ok(),
                "a valid conf's bool does not read");
          break;
        case RdzvConfKind::kPort:
          CheckRange(RdzvConfPort(without_files, k.name), 1, 65535,
                     "a port out of range");
          break;
        default:
          break;
      }
    }
  }
  StatusOr<RendezvousOptions> options = ParseRendezvousOptions(
      "--rdzv_conf", without_files, std::nullopt, nullptr);
  if (!options.ok()) return;
  Check(valid, "options parsed from a conf the table refuses");
  for (auto ms : {options->heartbeat_interval, options->heartbeat_timeout,
                  options->join_timeout, options->last_call_timeout,
                  options->connection_lost_timeout, options->bad_host_window,
                  options->bad_host_cooldown}) {
    Check(ms >= std::chrono::milliseconds(1), "a timeout under 1 ms");
  }
  if (without_files.count("token") != 0) {
    Check(!options->token.empty(),
          "a token given in --rdzv_conf turned into none");
  }
}

}  // namespace
}  // namespace ddprun::rendezvous

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t nl = text.find('\n');
  ddprun::rendezvous::Endpoints(text.substr(0, nl));
  if (nl != std::string::npos) ddprun::rendezvous::Conf(text.substr(nl + 1));
  return 0;
}
