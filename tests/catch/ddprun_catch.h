// Catch2 for every test: v2 (Debian bookworm, one header) or v3 (Debian
// trixie, split headers). The few names our tests use that v3 moved are
// brought back here, so test files are written once.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <string>

#include <catch2/catch_all.hpp>

using Catch::Approx;

namespace Catch {
// v2's string matcher; v3 calls it Matchers::ContainsSubstring (its
// Matchers::Contains is the range matcher).
inline Matchers::StringContainsMatcher Contains(
    const std::string& text, CaseSensitive sensitivity = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(text, sensitivity);
}
}  // namespace Catch
#else
#include <catch2/catch.hpp>
#endif
