#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddprun::rendezvous::http {

// The live view's files (assets/: the page, its script and style, the
// login form, and uPlot, vendored under assets/uplot/ with its MIT
// license), compiled into the binary at build time (embed_assets.cmake).
struct EmbeddedFile {
  const char* path;  // as served: "/", "/static/app.js", ...
  std::string_view body;
};
const std::vector<EmbeddedFile>& EmbeddedFiles();

// The file served at `path`, null when there is none.
const EmbeddedFile* FindEmbedded(std::string_view path);

// "text/javascript; charset=utf-8" for "/static/app.js" (by extension;
// "/" and "/login" are HTML).
std::string ContentTypeOf(std::string_view path);

}  // namespace ddprun::rendezvous::http
