#include "examples/formats/flag_parser.h"

#include <algorithm>
#include <cctype>

namespace ddprun::examples {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}
bool IsTrue(const std::string& v) {
  const std::string l = Lower(v);
  return l == "true" || l == "yes" || l == "on" || l == "1";
}
bool IsFalse(const std::string& v) {
  const std::string l = Lower(v);
  return l == "false" || l == "no" || l == "off" || l == "0";
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min(
          {row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// "training.batch_size" -> "batch_size".
std::string Leaf(const std::string& key) {
  return key.substr(key.rfind('.') + 1);
}

}  // namespace

std::string ClosestName(const std::string& name,
                        const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = name.size() >= 5 ? 2 : 1;
  for (const std::string& k : candidates) {
    const size_t d = EditDistance(name, k);
    if (d <= best_distance && (best.empty() || d < best_distance)) {
      best = k;
      best_distance = d;
    }
  }
  return best;
}

FlagParser::FlagParser(CLI::App* app) : app_(app) {}

namespace {

// A later entry of the same name replaces an earlier one (a trainer's
// table refines the common one).
template <typename T, typename Name>
void Merge(std::vector<T>* into, const std::vector<T>& more, Name name) {
  for (const T& m : more) {
    auto same = [&](const T& e) { return name(e) == name(m); };
    into->erase(std::remove_if(into->begin(), into->end(), same), into->end());
    into->push_back(m);
  }
}

}  // namespace

void FlagParser::AddAliases(const std::vector<FlagAlias>& aliases) {
  Merge(&aliases_, aliases, [](const FlagAlias& a) { return a.alias; });
}

void FlagParser::AddForeignFlags(const std::vector<ForeignFlag>& flags) {
  Merge(&foreign_, flags, [](const ForeignFlag& f) { return f.name; });
}

void FlagParser::AddOptionalValue(const OptionalValue& option) {
  optional_.push_back(option);
}

void FlagParser::AddConfigSection(const std::string& section,
                                  ConfigSectionHandler handler) {
  sections_[section] = std::move(handler);
}

void FlagParser::AddConfigOption() {
  ConfigFileOption o;
  o.help =
      "YAML or JSON file of option values: keys are option names (or the "
      "guides' names), nested sections such as training: are read by their "
      "keys; flags on the command line override it";
  AddConfigOption(o);
}

void FlagParser::AddConfigOption(const ConfigFileOption& option) {
  config_options_.push_back(option);
  config_paths_.emplace_back();
  app_->add_option("--" + option.name, config_paths_.back(), option.help);
}

const ForeignFlag* FlagParser::FindForeign(const std::string& key) const {
  // The whole key first ("deepspeed.enabled"), then any part of a dotted
  // key: "training.multi_gpu", "deepspeed.stage".
  for (const ForeignFlag& f : foreign_) {
    if (f.name == key) return &f;
  }
  size_t begin = 0;
  while (begin <= key.size()) {
    size_t end = key.find('.', begin);
    if (end == std::string::npos) end = key.size();
    const std::string part = key.substr(begin, end - begin);
    for (const ForeignFlag& f : foreign_) {
      if (f.name == part) return &f;
    }
    begin = end + 1;
  }
  return nullptr;
}

const FlagAlias* FlagParser::FindExactAlias(const std::string& key) const {
  for (const FlagAlias& a : aliases_) {
    if (a.alias == key) return &a;
  }
  return nullptr;
}

const FlagAlias* FlagParser::FindAlias(const std::string& key) const {
  if (const FlagAlias* exact = FindExactAlias(key)) return exact;
  for (const FlagAlias& a : aliases_) {
    if (a.alias.find('.') == std::string::npos && a.alias == Leaf(key))
      return &a;
  }
  return nullptr;
}

const OptionalValue* FlagParser::FindOptional(const std::string& name) const {
  for (const OptionalValue& o : optional_) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

void FlagParser::Note(const std::string& name, const std::string& line) {
  if (noted_.insert(name).second) notes_.push_back(line);
}

void FlagParser::Seen(const std::string& name, const std::string& value) {
  foreign_seen_.emplace(name, value);
}

std::optional<std::string> FlagParser::ForeignValue(
    const std::string& name) const {
  auto it = foreign_seen_.find(name);
  if (it == foreign_seen_.end()) return std::nullopt;
  return it->second;
}

StatusOr<std::vector<std::string>> FlagParser::Rewrite(
    const std::vector<std::string>& args) {
  std::vector<std::string> out;
  std::map<std::string, std::string> spelled;  // option -> first spelling
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& token = args[i];
    if (token == "--") {
      out.insert(out.end(), args.begin() + i, args.end());
      break;
    }
    if (token.rfind("--", 0) != 0 || token.size() == 2) {
      out.push_back(token);
      continue;
    }
    const size_t eq = token.find('=');
    std::string name = token.substr(2, eq == std::string::npos ? eq : eq - 2);
    std::replace(name.begin(), name.end(), '-', '_');
    bool has_value = eq != std::string::npos;
    std::string value = has_value ? token.substr(eq + 1) : "";
    const bool next_is_value =
        i + 1 < args.size() && (args[i + 1].empty() || args[i + 1][0] != '-');

    const ForeignFlag* f = FindForeign(name);
    if (f && f->name == name && !app_->get_option_no_throw("--" + name)) {
      if (!has_value && f->arity == ForeignFlag::Arity::kOne) {
        if (i + 1 >= args.size())
          return InvalidArgumentError("--" + name + " needs a value");
        value = args[++i];
        has_value = true;
      } else if (!has_value && f->arity == ForeignFlag::Arity::kOptional &&
                 next_is_value) {
        value = args[++i];
        has_value = true;
      }
      Note(name, "--" + name + (has_value ? " " + value : "") + ": " +
                     f->explanation);
      Seen(name, value);
      continue;
    }
    const std::string spelling = "--" + name;
    if (const FlagAlias* a = FindAlias(name); a && a->alias == name) {
      name = a->target;
      if (!a->value.empty()) {
        if (has_value && IsFalse(value)) continue;  // "--fp16=false"
        value = a->value;
        has_value = true;
      }
    }
    if (const OptionalValue* o = FindOptional(name)) {
      if (!has_value) {
        value = next_is_value ? args[++i] : o->implicit;
        has_value = true;
      }
      if (IsTrue(value)) value = o->implicit;  // "--amp true"
      if (IsFalse(value)) value = o->off;
    }
    auto [it, fresh] = spelled.emplace(name, spelling);
    if (!fresh && it->second != spelling) {
      return InvalidArgumentError(it->second + " and " + spelling +
                                  " both set --" + name + "; give one of them");
    }
    out.push_back("--" + name + (has_value ? "=" + value : ""));
  }
  return out;
}

std::string FlagParser::Closest(const std::string& name) const {
  std::vector<std::string> known;
  for (const CLI::Option* o : app_->get_options()) {
    for (const std::string& l : o->get_lnames()) known.push_back(l);
  }
  for (const FlagAlias& a : aliases_) known.push_back(a.alias);
  for (const ForeignFlag& f : foreign_) known.push_back(f.name);
  for (const auto& section : sections_) known.push_back(section.first);
  return ClosestName(name, known);
}

Status FlagParser::CheckRemaining() const {
  const std::vector<std::string> rest = app_->remaining();
  if (rest.empty()) return Status::Ok();
  for (const std::string& arg : rest) {
    if (arg.size() < 2 || arg[0] != '-') continue;
    std::string name = arg.substr(arg.find_first_not_of('-'));
    name = name.substr(0, name.find('='));
    const std::string hint = Closest(name);
    return InvalidArgumentError(
        "unknown option " + arg.substr(0, arg.find('=')) +
        (hint.empty() ? " (see --help)" : " (did you mean --" + hint + "?)"));
  }
  return InvalidArgumentError("unexpected argument '" + rest.front() +
                              "' (options are --name value; see --help)");
}

StatusOr<bool> FlagParser::Parse(int argc, const char* const* argv) {
  return Parse(std::vector<std::string>(argv + std::min(argc, 1), argv + argc));
}

StatusOr<bool> FlagParser::Parse(const std::vector<std::string>& args) {
  DDP_ASSIGN_OR_RETURN(std::vector<std::string> rewritten, Rewrite(args));
  app_->allow_extras(true);
  // CLI11 takes a vector of arguments last first.
  std::vector<std::string> reversed(rewritten.rbegin(), rewritten.rend());
  try {
    app_->parse(reversed);
  } catch (const CLI::CallForHelp&) {
    help_ = app_->help();
    return false;
  } catch (const CLI::ParseError& e) {
    return InvalidArgumentError(e.what());
  }
  DDP_RETURN_IF_ERROR(CheckRemaining());
  for (size_t i = 0; i < config_options_.size(); ++i) {
    if (config_paths_[i].empty()) continue;
    DDP_RETURN_IF_ERROR(ApplyConfig(config_paths_[i], config_options_[i]));
  }
  return true;
}

Status FlagParser::ApplyConfig(const std::string& path,
                               const ConfigFileOption& option) {
  DDP_ASSIGN_OR_RETURN(std::vector<ConfigEntry> entries, ReadConfigFile(path));
  std::string unknown;
  for (const ConfigEntry& entry : entries) {
    bool is_unknown = false;
    DDP_RETURN_IF_ERROR(ApplyEntry(path, option, entry, &is_unknown));
    if (is_unknown) unknown += (unknown.empty() ? "" : ", ") + entry.key;
  }
  if (!unknown.empty()) {
    Note("--" + option.name + " " + path,
         path + ": " + option.unknown_note + ": " + unknown);
  }
  return Status::Ok();
}

namespace {

std::string Join(const std::vector<std::string>& values) {
  std::string text;
  for (const std::string& v : values) text += (text.empty() ? "" : ",") + v;
  return text;
}

}  // namespace

Status FlagParser::ApplyEntry(const std::string& path,
                              const ConfigFileOption& file,
                              const ConfigEntry& e, bool* unknown) {
  const std::string at = path + ":" + std::to_string(e.line) + ": ";
  const std::string head = e.key.substr(0, e.key.find_first_of(".["));
  if (const auto section = sections_.find(head); section != sections_.end()) {
    return section->second(at, e);
  }
  const ForeignFlag* f = FindExactAlias(e.key) ? nullptr : FindForeign(e.key);
  if (f != nullptr) {
    Note(f->name, at + e.key + ": " + f->explanation);
    Seen(f->name, Join(e.values));
    return Status::Ok();
  }
  std::string target;
  std::string fixed;
  if (const FlagAlias* a = FindAlias(e.key)) {
    target = a->target;
    fixed = a->value;
  } else {
    target = Leaf(e.key);
  }
  CLI::Option* option =
      target.empty() ? nullptr : app_->get_option_no_throw("--" + target);
  bool is_file_option = false;
  for (const ConfigFileOption& c : config_options_)
    is_file_option = is_file_option || c.name == target;
  if (option == nullptr || is_file_option || target == "help") {
    if (file.note_unknown_keys) {
      *unknown = true;
      return Status::Ok();
    }
    const std::string hint = Closest(Leaf(e.key));
    return InvalidArgumentError(at + "unknown key '" + e.key + "'" +
                                (hint.empty()
                                     ? " (see --help for the option names)"
                                     : " (did you mean '" + hint + "'?)"));
  }
  if (e.is_null) {
    return InvalidArgumentError(at + "key '" + e.key + "' has no value");
  }
  std::vector<std::string> values = e.values;
  if (!fixed.empty()) {
    // A switch turned off ("fp16: false") sets nothing.
    if (values.size() == 1 && IsFalse(values[0])) return Status::Ok();
    values = {fixed};
  } else if (const OptionalValue* o = FindOptional(target);
             o && values.size() == 1) {
    if (IsTrue(values[0])) values = {o->implicit};
    if (IsFalse(values[0])) values = {o->off};
  }
  const std::string me = "'" + e.key + "' at line " + std::to_string(e.line);
  auto [it, fresh] =
      from_config_.emplace(target, ConfigSetting{path, me, values});
  if (!fresh) {
    const ConfigSetting& first = it->second;
    if (first.path == path) {
      return InvalidArgumentError(at + "key '" + e.key + "' sets --" + target +
                                  " again (already set by " + first.where +
                                  ")");
    }
    if (first.values != values) {
      return InvalidArgumentError(
          at + "key '" + e.key + "' sets --" + target + " to " + Join(values) +
          ", but " + first.path + " set it to " + Join(first.values) + " (" +
          first.where + "); make them agree");
    }
    return Status::Ok();  // the same value twice: already applied
  }
  if (option->count() > 0) return Status::Ok();  // the command line wins
  try {
    option->add_result(values);
    option->run_callback();
  } catch (const CLI::Error& err) {
    return InvalidArgumentError(at + "key '" + e.key + "': " + err.what());
  }
  applied_[target] = at + e.key;
  return Status::Ok();
}

std::string FlagParser::ConfigSource(const std::string& name) const {
  auto it = applied_.find(name);
  return it == applied_.end() ? "" : it->second;
}

bool FlagParser::IsSet(const std::string& name) const {
  const CLI::Option* o = app_->get_option_no_throw("--" + name);
  return o != nullptr && o->count() > 0;
}

std::string FlagParser::DescribeAccepted() const {
  std::string text =
      "Every --a_b may be written --a-b. --config keys are the option names "
      "(also inside sections such as training:).";
  if (!aliases_.empty()) {
    text += "\nAlso accepted, as on the guides' command lines:";
    const char* sep = " ";
    for (const FlagAlias& a : aliases_) {
      if (a.alias.find('.') != std::string::npos) continue;
      text += sep + ("--" + a.alias) + " (= --" + a.target +
              (a.value.empty() ? "" : " " + a.value) + ")";
      sep = ", ";
    }
  }
  if (!foreign_.empty()) {
    text +=
        "\nAccepted without effect, with a line saying what happens "
        "instead:";
    const char* sep = " ";
    for (const ForeignFlag& f : foreign_) {
      // Config-only keys, and names the trainer made options of its own.
      if (f.name.find('.') != std::string::npos ||
          app_->get_option_no_throw("--" + f.name) != nullptr)
        continue;
      text += sep + ("--" + f.name);
      sep = ", ";
    }
  }
  return text;
}

}  // namespace ddprun::examples
