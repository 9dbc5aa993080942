#pragma once

#include <string>
#include <string_view>

namespace ddprun::agent {

// Cuts a byte stream into whole lines. Bytes after the last '\n' are kept
// until more data (or Flush) arrives, so a line is never emitted in pieces.
// Not thread-safe.
class LineSplitter {
 public:
  // Appends `chunk` and returns every line it completed, each prefixed with
  // `prefix` and ending in '\n', concatenated (empty if none completed).
  std::string Feed(std::string_view chunk, std::string_view prefix);

  // Returns the pending partial line with `prefix` and a '\n' added, or ""
  // when nothing is pending. Used at EOF.
  std::string Flush(std::string_view prefix);

  bool has_partial() const { return !partial_.empty(); }

 private:
  std::string partial_;
};

}  // namespace ddprun::agent
