#include "rendezvous/grpc_client_options.h"

#include <fstream>
#include <optional>
#include <sstream>

#include "rendezvous/rdzv_conf.h"

namespace ddprun::rendezvous {

Status ApplyRdzvConf(const std::map<std::string, std::string>& conf,
                     GrpcClientOptions* options) {
  DDP_RETURN_IF_ERROR(ValidateRdzvConf("rdzv_conf", conf, nullptr));
  const std::pair<const char*, std::chrono::milliseconds*> keys[] = {
      {"join_timeout", &options->join_timeout},
      {"last_call_timeout", &options->last_call_timeout},
      {"heartbeat_interval", &options->heartbeat_interval},
      {"heartbeat_timeout", &options->heartbeat_timeout},
      {"connection_lost_timeout", &options->connection_lost_timeout},
      {"bad_host_window", &options->bad_host_window},
      {"bad_host_cooldown", &options->bad_host_cooldown},
  };
  for (const auto& [key, field] : keys) {
    DDP_ASSIGN_OR_RETURN(std::optional<std::chrono::milliseconds> value,
                         RdzvConfSeconds(conf, key));
    if (value.has_value()) *field = *value;
  }
  DDP_ASSIGN_OR_RETURN(std::optional<long> failures,
                       RdzvConfCount(conf, "bad_host_failures"));
  if (failures.has_value()) {
    options->bad_host_failures = static_cast<uint32_t>(*failures);
  }
  if (auto it = conf.find("token"); it != conf.end()) {
    options->token = it->second;
  }
  const std::pair<const char*, std::string*> files[] = {
      {"token_file", &options->token},
      {"tls_ca", &options->tls_ca_pem},
      {"tls_cert", &options->tls_cert_pem},
      {"tls_key", &options->tls_key_pem},
  };
  for (const auto& [key, field] : files) {
    auto it = conf.find(key);
    if (it == conf.end()) continue;
    std::ifstream in(it->second);
    if (!in) {
      return NotFoundError("rdzv_conf " + std::string(key) + "=" + it->second +
                           ": cannot read the file");
    }
    std::ostringstream text;
    text << in.rdbuf();
    *field = text.str();
  }
  // A token file usually ends with a newline that is not part of the token.
  while (!options->token.empty() &&
         (options->token.back() == '\n' || options->token.back() == '\r')) {
    options->token.pop_back();
  }
  if (options->token.empty() && conf.count("token_file") != 0) {
    return InvalidArgumentError(
        "rdzv_conf token_file=" + conf.at("token_file") +
        ": the file is empty; an empty token would turn authentication off");
  }
  return Status::Ok();
}

}  // namespace ddprun::rendezvous
