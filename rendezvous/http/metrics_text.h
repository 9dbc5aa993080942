#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddprun::rendezvous::http {

// Prometheus's text exposition format 0.0.4 (what `promtool check metrics`
// and a Prometheus server read), written by hand: Debian's prometheus-cpp
// would bring its HTTP servers' dependencies for a serializer of this size
// (README.md, "The live view"). Families are written whole, one after the
// other; label values and help texts are escaped, invalid UTF-8 is
// replaced, numbers are written as Go's ParseFloat reads them.
//
// Not thread-safe; one writer per scrape.
class MetricsText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a family: `type` is "gauge", "counter" or "histogram"; `name`
  // must be a valid metric name (checked by the caller's tests: our names
  // are constants).
  void Family(const std::string& name, const char* type,
              const std::string& help);
  // One sample of the current family (`suffix` for a histogram's
  // "_bucket", "_sum", "_count").
  void Sample(const Labels& labels, double value, const char* suffix = "");

  const std::string& text() const { return out_; }

  // A label value or help text as the format wants it ("\\", "\"" and
  // newlines escaped; `quote`: the double quote too) after replacing
  // invalid UTF-8 with U+FFFD.
  static std::string Escape(const std::string& s, bool quote);
  // Shortest text that reads back as `v` ("0.5", "1e-05", "+Inf", "NaN").
  static std::string Number(double v);
  // `s` with every invalid UTF-8 sequence replaced by U+FFFD.
  static std::string ValidUtf8(const std::string& s);

 private:
  std::string out_;
  std::string family_;
};

}  // namespace ddprun::rendezvous::http
