#include "agent/cli/option_tokenizer.h"

#include <algorithm>
#include <cctype>

#include "agent/cli/cli_values.h"

namespace ddprun::agent {
namespace {

bool IsNumber(const std::string& s) {
  if (s.size() < 2 || s[0] != '-') return false;
  bool digit = false;
  for (std::size_t i = 1; i < s.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i]))) {
      digit = true;
    } else if (s[i] != '.') {
      return false;
    }
  }
  return digit;
}

// As argparse: "-1" is a number and "-F cfg" (a space before any '=') a
// value, not options; "--opt=a b" is an option with its value.
bool IsOption(const std::string& s) {
  return s.size() > 1 && s[0] == '-' && !IsNumber(s) &&
         s.substr(0, s.find('=')).find(' ') == std::string::npos;
}

// "--num-gpus" -> "--num_gpus"; short names unchanged.
std::string Normalize(const std::string& name) {
  if (name.compare(0, 2, "--") != 0) return name;
  std::string out = name;
  std::replace(out.begin() + 2, out.end(), '-', '_');
  return out;
}

StatusOr<const OptionSpec*> Find(const std::string& written,
                                 const std::vector<OptionSpec>& specs,
                                 bool allow_abbrev) {
  const std::string name = Normalize(written);
  std::vector<const OptionSpec*> prefixed;
  for (const OptionSpec& spec : specs) {
    for (const std::string& n : spec.names) {
      const std::string candidate = Normalize(n);
      if (candidate == name) return &spec;
      if (allow_abbrev && name.size() > 2 && name.compare(0, 2, "--") == 0 &&
          candidate.compare(0, name.size(), name) == 0 &&
          std::find(prefixed.begin(), prefixed.end(), &spec) ==
              prefixed.end()) {
        prefixed.push_back(&spec);
      }
    }
  }
  if (prefixed.size() == 1) return prefixed[0];
  if (prefixed.empty()) return InvalidArgumentError("unknown flag " + written);
  std::string list;
  for (const OptionSpec* s : prefixed) {
    list += (list.empty() ? "--" : ", --") + s->dest;
  }
  return InvalidArgumentError("ambiguous flag " + written + " (could be " +
                              list + ")");
}

}  // namespace

StatusOr<TokenizedArgs> TokenizeOptions(const std::vector<std::string>& args,
                                        const std::vector<OptionSpec>& specs,
                                        bool allow_abbrev) {
  TokenizedArgs t;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" || !IsOption(arg)) {
      const std::size_t entry = arg == "--" ? i + 1 : i;
      if (entry < args.size()) {
        t.has_entrypoint = true;
        t.entrypoint = args[entry];
        t.rest.assign(args.begin() + entry + 1, args.end());
      }
      return t;
    }
    std::string name = arg, value;
    bool has_value = false;
    if (arg.compare(0, 2, "--") == 0) {
      const auto eq = arg.find('=');
      if (eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        has_value = true;
      }
    } else if (arg.size() > 2) {  // -Hfile, -H=file
      name = arg.substr(0, 2);
      value = arg.substr(arg[2] == '=' ? 3 : 2);
      has_value = true;
    }
    DDP_ASSIGN_OR_RETURN(const OptionSpec* spec,
                         Find(name, specs, allow_abbrev));
    const std::string canonical = "--" + spec->dest;
    switch (spec->kind) {
      case OptionKind::kHelp:
        t.help = true;
        return t;
      case OptionKind::kFlag:
        if (has_value) {
          return InvalidArgumentError(canonical + " takes no value (got '" +
                                      arg + "')");
        }
        break;
      case OptionKind::kValue:
        if (!has_value) {
          if (i + 1 >= args.size() || IsOption(args[i + 1]) ||
              args[i + 1] == "--") {
            return InvalidArgumentError(canonical + " expects a value");
          }
          value = args[++i];
        }
        break;
    }
    t.values[spec->dest] = value;
    t.spelled[spec->dest] = name;
  }
  return t;
}

StatusOr<long> OptionInt(const TokenizedArgs& t, const std::string& dest,
                         long def) {
  if (!t.Has(dest)) return def;
  return ParseIntValue(t.Name(dest), t.Get(dest, ""));
}

StatusOr<double> OptionDouble(const TokenizedArgs& t, const std::string& dest,
                              double def) {
  if (!t.Has(dest)) return def;
  return ParseDoubleValue(t.Name(dest), t.Get(dest, ""));
}

StatusOr<std::string> OptionChoice(const TokenizedArgs& t,
                                   const std::string& dest,
                                   const std::vector<std::string>& choices,
                                   const std::string& def) {
  if (!t.Has(dest)) return def;
  const std::string value = t.Get(dest, "");
  std::string list;
  for (const std::string& c : choices) {
    if (c == value) return value;
    list += (list.empty() ? "" : ", ") + c;
  }
  return InvalidArgumentError(t.Name(dest) + ": invalid choice '" + value +
                              "' (choose from " + list + ")");
}

}  // namespace ddprun::agent
