#pragma once

// A minimal HTTP/1.1 client for tests (test code only): one request per
// connection to 127.0.0.1, the whole answer read until the server closes
// or Content-Length is reached, every wait bounded.

#include <chrono>
#include <map>
#include <string>

namespace ddprun::testing {

struct HttpAnswer {
  int status = 0;  // 0: no answer (connect failed, timeout, garbage)
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string error;  // why status is 0
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// Sends `raw` (a whole request, as bytes) to 127.0.0.1:`port` and reads
// one answer.
HttpAnswer HttpExchange(
    int port, const std::string& raw,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

// METHOD path with `headers` (Host and Connection: close are added).
HttpAnswer HttpCall(
    int port, const std::string& method, const std::string& path,
    const std::map<std::string, std::string>& headers = {},
    const std::string& body = "",
    std::chrono::milliseconds timeout = std::chrono::milliseconds(5000));

}  // namespace ddprun::testing
