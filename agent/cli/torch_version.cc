#include "agent/cli/torch_version.h"

#include <cctype>

namespace ddprun::agent {
namespace {

// Reads a run of digits at `*pos` (at most 6, so no overflow). -1 if none.
int ReadNumber(const std::string& s, std::size_t* pos) {
  int n = 0, digits = 0;
  while (*pos < s.size() && std::isdigit(static_cast<unsigned char>(s[*pos]))) {
    if (++digits > 6) return -1;
    n = n * 10 + (s[*pos] - '0');
    ++*pos;
  }
  return digits == 0 ? -1 : n;
}

}  // namespace

StatusOr<TorchVersion> ParseTorchVersion(const std::string& source,
                                         const std::string& text) {
  auto bad = [&] {
    return InvalidArgumentError(source + ": invalid torch version '" + text +
                                "' (expected MAJOR.MINOR, e.g. 2.6 or 1.13)");
  };
  std::size_t pos = 0;
  TorchVersion v;
  v.major = ReadNumber(text, &pos);
  if (v.major < 0) return bad();
  if (pos < text.size()) {
    if (text[pos] != '.') return bad();
    ++pos;
    v.minor = ReadNumber(text, &pos);
    if (v.minor < 0) return bad();
  }
  // The rest (".0", "a0", "+cu130", ".dev2024") is a PEP 440 tail: only
  // printable characters without spaces.
  for (; pos < text.size(); ++pos) {
    const unsigned char c = static_cast<unsigned char>(text[pos]);
    if (!std::isalnum(c) && c != '.' && c != '+' && c != '-' && c != '_') {
      return bad();
    }
  }
  v.text = text;
  v.source = source;
  return v;
}

const char* NcclAsyncErrorHandlingVar(const TorchVersion& v) {
  return v.AtLeast(2, 2) ? "TORCH_NCCL_ASYNC_ERROR_HANDLING"
                         : "NCCL_ASYNC_ERROR_HANDLING";
}

bool ExportsSignalsToHandle(const TorchVersion& v) { return v.AtLeast(2, 9); }

const char* LegacyLocalRankFlag(const TorchVersion& v) {
  return v.AtLeast(2, 0) ? "--local-rank" : "--local_rank";
}

}  // namespace ddprun::agent
