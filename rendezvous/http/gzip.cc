#include "rendezvous/http/gzip.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace ddprun::rendezvous::http {

std::string Gzip(std::string_view data) {
  z_stream z{};
  // 15 window bits + 16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    return "";
  }
  std::string out(deflateBound(&z, static_cast<uLong>(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return rc == Z_STREAM_END ? out : "";
}

bool AcceptsGzip(const HttpRequest& request) {
  std::string accept = request.Header("accept-encoding");
  std::transform(accept.begin(), accept.end(), accept.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  accept.erase(std::remove(accept.begin(), accept.end(), ' '), accept.end());
  size_t at = 0;
  while (at < accept.size()) {
    size_t end = accept.find(',', at);
    if (end == std::string::npos) end = accept.size();
    const std::string item = accept.substr(at, end - at);
    at = end + 1;
    if (item == "gzip") return true;
    if (item.rfind("gzip;", 0) != 0) continue;
    const size_t q = item.find("q=");
    if (q == std::string::npos ||
        std::strtod(item.c_str() + q + 2, nullptr) > 0) {
      return true;
    }
  }
  return false;
}

}  // namespace ddprun::rendezvous::http
