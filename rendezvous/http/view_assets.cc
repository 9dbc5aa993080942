#include "rendezvous/http/view_assets.h"

namespace ddprun::rendezvous::http {
namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

const EmbeddedFile* FindEmbedded(std::string_view path) {
  for (const EmbeddedFile& f : EmbeddedFiles()) {
    if (path == f.path) return &f;
  }
  return nullptr;
}

std::string ContentTypeOf(std::string_view path) {
  if (EndsWith(path, ".js")) return "text/javascript; charset=utf-8";
  if (EndsWith(path, ".css")) return "text/css; charset=utf-8";
  if (EndsWith(path, ".txt") || EndsWith(path, "LICENSE")) {
    return "text/plain; charset=utf-8";
  }
  return "text/html; charset=utf-8";
}

}  // namespace ddprun::rendezvous::http
