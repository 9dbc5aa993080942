#pragma once

#include <string>
#include <string_view>

#include "common/http_server.h"

namespace ddprun::rendezvous::http {

// `data` in the gzip format (RFC 1952) at zlib's fastest level: the live
// view's JSON of a large job shrinks about tenfold, and a snapshot is
// compressed once for every client that polls it.
std::string Gzip(std::string_view data);

// True when the request's Accept-Encoding lists gzip (browsers, curl
// --compressed and Prometheus send it) without refusing it (q=0).
bool AcceptsGzip(const HttpRequest& request);

}  // namespace ddprun::rendezvous::http
