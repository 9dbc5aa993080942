#include "examples/formats/help_formatter.h"

#include <sstream>

namespace ddprun::examples {

std::string HelpFormatter::make_option_opts(const CLI::Option* opt) const {
  if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
  std::ostringstream out;
  if (opt->get_type_size() != 0) {
    if (!opt->get_type_name().empty()) {
      out << " " << get_label(opt->get_type_name());
    }
    if (!opt->get_default_str().empty()) out << "=" << opt->get_default_str();
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) {
      out << " ...";
    } else if (opt->get_expected_min() > 1) {
      out << " x " << opt->get_expected();
    }
    if (opt->get_required()) out << " " << get_label("REQUIRED");
  }
  if (!opt->get_envname().empty()) {
    out << " (" << get_label("Env") << ":" << opt->get_envname() << ")";
  }
  if (!opt->get_needs().empty()) {
    out << " " << get_label("Needs") << ":";
    for (const CLI::Option* o : opt->get_needs()) out << " " << o->get_name();
  }
  if (!opt->get_excludes().empty()) {
    out << " " << get_label("Excludes") << ":";
    for (const CLI::Option* o : opt->get_excludes()) {
      out << " " << o->get_name();
    }
  }
  return out.str();
}

}  // namespace ddprun::examples
