#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace ddprun::examples {

// The trainers' --help, the same whatever CLI11 the build found: an option
// with a value reads "--epochs INT:POSITIVE=4", as CLI11 2.1 (Debian
// bookworm) prints it; CLI11 2.4 (trixie) would print "INT:POSITIVE [4]".
// Users' scripts and our tests grep the help for defaults.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override;
};

}  // namespace ddprun::examples
