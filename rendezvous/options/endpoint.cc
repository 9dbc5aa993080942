#include "rendezvous/options/endpoint.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <set>

namespace ddprun::rendezvous {
namespace {

std::string NumericHost(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST];
  if (getnameinfo(sa, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) {
    return "";
  }
  std::string s = buf;
  // Link-local IPv6 comes back as "fe80::1%eth0": compare without the scope.
  const size_t pct = s.find('%');
  return pct == std::string::npos ? s : s.substr(0, pct);
}

std::set<std::string> LocalAddresses() {
  std::set<std::string> out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const socklen_t len =
        family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    const std::string ip = NumericHost(i->ifa_addr, len);
    if (!ip.empty()) out.insert(ip);
  }
  freeifaddrs(ifs);
  return out;
}

}  // namespace

std::string Endpoint::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

StatusOr<Endpoint> ParseEndpoint(const std::string& text, int default_port) {
  Endpoint e;
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) {
      return InvalidArgumentError("endpoint '" + text + "': missing ']'");
    }
    e.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') {
        return InvalidArgumentError("endpoint '" + text +
                                    "': expected ':' after ']'");
      }
      port_text = text.substr(close + 2);
    }
  } else {
    const size_t colon = text.find(':');
    if (colon != std::string::npos &&
        text.find(':', colon + 1) != std::string::npos) {
      return InvalidArgumentError("endpoint '" + text +
                                  "': write IPv6 addresses as [addr]:port");
    }
    e.host = text.substr(0, colon);
    if (colon != std::string::npos) port_text = text.substr(colon + 1);
  }
  if (e.host.empty()) {
    return InvalidArgumentError("endpoint '" + text + "' has no host");
  }
  // No host or address has brackets: "[[::1]:5" would reach gRPC as the
  // host "[::1", and print as an endpoint that does not parse back.
  if (e.host.find_first_of("[]") != std::string::npos) {
    return InvalidArgumentError("endpoint '" + text + "': bad host '" + e.host +
                                "'");
  }
  if (port_text.empty()) {
    e.port = default_port;
  } else {
    char* end = nullptr;
    const long port = std::strtol(port_text.c_str(), &end, 10);
    if (*end != '\0' || port < 0 || port > 65535) {
      return InvalidArgumentError("endpoint '" + text + "': bad port '" +
                                  port_text + "'");
    }
    e.port = static_cast<int>(port);
  }
  if (e.port == 0 && default_port != 0) {
    return InvalidArgumentError("endpoint '" + text +
                                "': port must be 1..65535");
  }
  return e;
}

bool IsThisHost(const std::string& host) {
  if (host == "localhost") return true;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && host == name) return true;
  const std::set<std::string> local = LocalAddresses();
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  bool found = false;
  for (addrinfo* ai = res; ai != nullptr && !found; ai = ai->ai_next) {
    found = local.count(NumericHost(ai->ai_addr, ai->ai_addrlen)) != 0;
  }
  freeaddrinfo(res);
  return found;
}

}  // namespace ddprun::rendezvous
