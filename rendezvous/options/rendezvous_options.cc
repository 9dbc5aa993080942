#include "rendezvous/options/rendezvous_options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ddprun::rendezvous {

StatusOr<std::string> ReadTokenFile(const std::string& what,
                                    const std::string& path) {
  // Opened once, checked on the descriptor: the file checked is the file
  // read. O_NONBLOCK: a FIFO must not block the check.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return InvalidArgumentError(
        what + ": cannot read the token file: " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return InvalidArgumentError(what +
                                ": the token file is not a regular file");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o",
                  static_cast<unsigned>(st.st_mode & 07777));
    return InvalidArgumentError(
        what + ": permissions " + mode +
        " are too open: other users could read the token (chmod 600 " + path +
        ", or give the token in DDPRUN_RDZV_TOKEN)");
  }
  std::string token;
  char buf[4096];
  while (token.size() < (1 << 20)) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    token.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) {
    token.pop_back();
  }
  return token;
}

StatusOr<RendezvousOptions> ParseRendezvousOptions(
    const std::string& source, const RdzvConf& conf,
    const std::optional<std::string>& env_token,
    std::vector<std::string>* warnings) {
  DDP_RETURN_IF_ERROR(ValidateRdzvConf(source, conf, warnings));
  RendezvousOptions options;
  const std::pair<const char*, std::chrono::milliseconds*> timeouts[] = {
      {"join_timeout", &options.join_timeout},
      {"last_call_timeout", &options.last_call_timeout},
      {"heartbeat_interval", &options.heartbeat_interval},
      {"heartbeat_timeout", &options.heartbeat_timeout},
      {"connection_lost_timeout", &options.connection_lost_timeout},
      {"bad_host_window", &options.bad_host_window},
      {"bad_host_cooldown", &options.bad_host_cooldown},
  };
  for (const auto& [key, field] : timeouts) {
    DDP_ASSIGN_OR_RETURN(std::optional<std::chrono::milliseconds> value,
                         RdzvConfSeconds(conf, key));
    if (value.has_value()) *field = *value;
  }
  DDP_ASSIGN_OR_RETURN(std::optional<long> failures,
                       RdzvConfCount(conf, "bad_host_failures"));
  if (failures.has_value()) {
    options.bad_host_failures = static_cast<uint32_t>(*failures);
  }
  DDP_ASSIGN_OR_RETURN(options.is_host, RdzvConfBool(conf, "is_host"));
  DDP_ASSIGN_OR_RETURN(options.standby_port,
                       RdzvConfPort(conf, "standby_port"));
  if (auto it = conf.find("token"); it != conf.end()) {
    options.token = it->second;
  }
  if (auto it = conf.find("token_file"); it != conf.end()) {
    DDP_ASSIGN_OR_RETURN(
        options.token,
        ReadTokenFile("rdzv_conf token_file=" + it->second, it->second));
  }
  const std::pair<const char*, std::string*> files[] = {
      {"tls_ca", &options.tls_ca_pem},
      {"tls_cert", &options.tls_cert_pem},
      {"tls_key", &options.tls_key_pem},
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
  std::string& token = options.token;
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) {
    token.pop_back();
  }
  if (token.empty() && conf.count("token") != 0) {
    return InvalidArgumentError(
        "rdzv_conf token: only line ends; an empty token would turn "
        "authentication off");
  }
  if (token.empty() && conf.count("token_file") != 0) {
    return InvalidArgumentError(
        "rdzv_conf token_file=" + conf.at("token_file") +
        ": the file is empty; an empty token would turn authentication off");
  }
  if (token.empty() && env_token.has_value()) {
    if (env_token->empty()) {
      return InvalidArgumentError(
          "DDPRUN_RDZV_TOKEN is set but empty, which would turn "
          "authentication off; give a token, or unset it to run without one");
    }
    token = *env_token;
  }
  return options;
}

}  // namespace ddprun::rendezvous
