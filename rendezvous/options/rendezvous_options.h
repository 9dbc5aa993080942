#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddprun/common/status_or.h"
#include "rendezvous/options/rdzv_conf.h"

namespace ddprun::rendezvous {

// The agent's rendezvous settings, typed: --rdzv_conf read once (plus the
// DDPRUN_RDZV_TOKEN fallback for the token). The timeouts are sent in
// every Join and Heartbeat; the job's creator's values apply.
struct RendezvousOptions {
  // rdzv_conf heartbeat_interval: period of Heartbeat calls.
  std::chrono::milliseconds heartbeat_interval{1000};
  // rdzv_conf heartbeat_timeout: silence after which the server drops us.
  std::chrono::milliseconds heartbeat_timeout{3000};
  // rdzv_conf join_timeout: a round below min_nodes this long fails the job;
  // also the agent's own deadline for one Join.
  std::chrono::milliseconds join_timeout{600000};
  // rdzv_conf last_call_timeout: a first round waits this long for more
  // nodes after reaching min_nodes.
  std::chrono::milliseconds last_call_timeout{10000};
  // rdzv_conf connection_lost_timeout: while workers run, the server may be
  // unreachable this long (it restarts, agents re-register) before the
  // agent gets kConnectionLost.
  std::chrono::milliseconds connection_lost_timeout{60000};
  // Bad-host policy (rdzv_conf bad_host_failures, bad_host_window,
  // bad_host_cooldown): a host whose workers failed bad_host_failures times
  // within the window sits out rounds for the cool-down. 0 = off.
  uint32_t bad_host_failures = 0;
  std::chrono::milliseconds bad_host_window{600000};
  std::chrono::milliseconds bad_host_cooldown{300000};
  // Deadline of ReportFailure and Leave calls (not an rdzv_conf key).
  std::chrono::milliseconds rpc_timeout{10000};
  // x-ddprun-token metadata: rdzv_conf token / token_file, else
  // $DDPRUN_RDZV_TOKEN; empty = none.
  std::string token;
  // TLS (PEM contents of rdzv_conf tls_ca, tls_cert, tls_key): tls_ca_pem
  // set = TLS on, verifying the server with it; cert + key add a client
  // certificate (and serve as the server's when this agent hosts).
  std::string tls_ca_pem;
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // rdzv_conf is_host: true = host the rendezvous at --rdzv_endpoint,
  // false = never; nullopt = torchrun's rule (host when the endpoint names
  // this machine).
  std::optional<bool> is_host;
  // rdzv_conf standby_port: the port this agent serves the rendezvous at,
  // at its own address, when the agent hosting it on another host dies and
  // this one is its successor (cross-host failover); nullopt = the
  // endpoint's port.
  std::optional<int> standby_port;
};

// Reads `conf` (--rdzv_conf or PET_RDZV_CONF, named by `source` in errors)
// into RendezvousOptions: every key is checked against rdzv_conf.h's table
// first (ValidateRdzvConf; one warning per no-effect key is appended to
// *warnings when not null), then the timeouts (seconds, fractions
// allowed), bad_host_failures, is_host, token, and the files token_file,
// tls_ca, tls_cert and tls_key are read. `env_token` is
// $DDPRUN_RDZV_TOKEN (nullopt: unset), used when rdzv_conf gives no token.
// Errors (INVALID_ARGUMENT, one line): an unknown key, a bad value, an
// unreadable file, a token file others may read (ReadTokenFile), an empty
// token file or an empty DDPRUN_RDZV_TOKEN (either would silently turn
// authentication off). NOT_FOUND: a file vanished
// between the check and the read.
// The token in file `path` (`what` names it in errors: "--token_file F"),
// without its trailing newline. Refused (INVALID_ARGUMENT, one line) when
// the file is not a regular file or group or others may access it (mode &
// 077, as ssh refuses such a private key: any local user could read the
// token), or cannot be read. Emptiness is the caller's check.
StatusOr<std::string> ReadTokenFile(const std::string& what,
                                    const std::string& path);

StatusOr<RendezvousOptions> ParseRendezvousOptions(
    const std::string& source, const RdzvConf& conf,
    const std::optional<std::string>& env_token,
    std::vector<std::string>* warnings);

}  // namespace ddprun::rendezvous
