#include "tests/support/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>

namespace ddprun::testing {
namespace {

using Clock = std::chrono::steady_clock;

int Remaining(Clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        until - Clock::now())
                        .count();
  return left < 0 ? 0 : static_cast<int>(left);
}

// Parses `text` once the header block is complete; false while more is
// needed.
bool Parse(const std::string& text, bool closed, HttpAnswer* out) {
  const size_t end = text.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  const std::string head = text.substr(0, end);
  size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  const size_t sp = status_line.find(' ');
  if (sp == std::string::npos) return false;
  const int status = std::atoi(status_line.c_str() + sp + 1);
  std::map<std::string, std::string> headers;
  size_t at = line_end == std::string::npos ? head.size() : line_end + 2;
  while (at < head.size()) {
    size_t next = head.find("\r\n", at);
    if (next == std::string::npos) next = head.size();
    const std::string line = head.substr(at, next - at);
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(c));
      std::string value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      // A repeated header (Set-Cookie) keeps every value, one per line.
      std::string& slot = headers[name];
      slot = slot.empty() ? value : slot + "\n" + value;
    }
    at = next + 2;
  }
  const std::string body = text.substr(end + 4);
  auto cl = headers.find("content-length");
  if (cl != headers.end()) {
    const size_t want = std::strtoul(cl->second.c_str(), nullptr, 10);
    if (body.size() < want && !closed) return false;
    out->body = body.substr(0, want);
  } else {
    if (!closed) return false;
    out->body = body;
  }
  out->status = status;
  out->headers = std::move(headers);
  return true;
}

}  // namespace

HttpAnswer HttpExchange(int port, const std::string& raw,
                        std::chrono::milliseconds timeout) {
  HttpAnswer out;
  const auto until = Clock::now() + timeout;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    out.error = "socket failed";
    return out;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    out.error = "connect failed";
    return out;
  }
  size_t sent = 0;
  while (sent < raw.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, Remaining(until)) <= 0) break;
    const ssize_t n =
        ::send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  std::string text;
  bool closed = false;
  while (!Parse(text, closed, &out)) {
    if (closed) {
      out.error = text.empty() ? "connection closed without an answer"
                               : "incomplete answer: " + text.substr(0, 200);
      break;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, Remaining(until)) <= 0) {
      out.error = "timed out";
      break;
    }
    char buf[8192];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      closed = true;
    } else {
      text.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

HttpAnswer HttpCall(int port, const std::string& method,
                    const std::string& path,
                    const std::map<std::string, std::string>& headers,
                    const std::string& body,
                    std::chrono::milliseconds timeout) {
  std::string raw = method + " " + path + " HTTP/1.1\r\n";
  if (!headers.count("Host")) {
    raw += "Host: 127.0.0.1:" + std::to_string(port) + "\r\n";
  }
  for (const auto& [name, value] : headers) raw += name + ": " + value + "\r\n";
  raw += "Connection: close\r\n";
  if (!body.empty() || method == "POST") {
    raw += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  }
  raw += "\r\n" + body;
  return HttpExchange(port, raw, timeout);
}

}  // namespace ddprun::testing
