#include "agent/process/line_splitter.h"

namespace ddprun::agent {

std::string LineSplitter::Feed(std::string_view chunk,
                               std::string_view prefix) {
  std::string out;
  size_t start = 0;
  for (;;) {
    size_t nl = chunk.find('\n', start);
    if (nl == std::string_view::npos) break;
    out.append(prefix);
    out.append(partial_);
    partial_.clear();
    out.append(chunk.substr(start, nl + 1 - start));
    start = nl + 1;
  }
  partial_.append(chunk.substr(start));
  return out;
}

std::string LineSplitter::Flush(std::string_view prefix) {
  if (partial_.empty()) return "";
  std::string out(prefix);
  out.append(partial_);
  out.push_back('\n');
  partial_.clear();
  return out;
}

}  // namespace ddprun::agent
