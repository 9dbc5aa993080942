#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "common/status.h"

namespace ddprun::rendezvous {

// How an agent reaches the rendezvous server, and the job timeouts it asks
// for (sent in every Join/Heartbeat; the job's creator's values apply).
struct GrpcClientOptions {
  // "host[:port]" or "[v6]:port" of the server (--rdzv_endpoint); the port
  // defaults to 29400. Required.
  std::string endpoint;
  // Value for the x-ddprun-token metadata; empty = none.
  std::string token;
  // TLS (PEM contents): tls_ca_pem set = TLS on, verifying the server with
  // it; tls_cert_pem + tls_key_pem add a client certificate.
  std::string tls_ca_pem;
  std::string tls_cert_pem;
  std::string tls_key_pem;
  // rdzv_conf heartbeat_interval: period of Heartbeat calls.
  std::chrono::milliseconds heartbeat_interval{1000};
  // rdzv_conf heartbeat_timeout: silence after which the server drops us.
  std::chrono::milliseconds heartbeat_timeout{3000};
  // rdzv_conf join_timeout: a round below min_nodes this long fails the job.
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
  // Deadline of ReportFailure and Leave calls.
  std::chrono::milliseconds rpc_timeout{10000};
  // Failover (an agent that may host the endpoint itself): called from the
  // client's threads when the server does not answer; it may start serving
  // the endpoint in this process and returns true when it did. The client
  // then re-registers its round at once. Must be thread-safe and cheap when
  // it declines (a bind probe). Null: never.
  std::function<bool()> take_over;
};

// Applies rdzv_conf keys: join_timeout, last_call_timeout,
// heartbeat_interval, heartbeat_timeout, connection_lost_timeout,
// bad_host_window, bad_host_cooldown (seconds, fractions allowed);
// bad_host_failures (a count, 0..1000); token (the value), token_file, tls_ca,
// tls_cert, tls_key (paths of files to read). Other known keys are left to the
// caller (is_host...). `conf` is first checked with ValidateRdzvConf
// (rendezvous/rdzv_conf.h, the one list of keys): INVALID_ARGUMENT for an
// unknown key, a bad number or a file that cannot be read.
Status ApplyRdzvConf(const std::map<std::string, std::string>& conf,
                     GrpcClientOptions* options);

}  // namespace ddprun::rendezvous
