#include "agent/frontends/deepspeed/deepspeed_hosts.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

namespace ddprun::agent {
namespace {

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n\f\v");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n\f\v");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string::size_type start = 0;
  while (true) {
    auto pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) return out;
    start = pos + 1;
  }
}

// Python's int() on a slot: optional sign and surrounding spaces.
StatusOr<int> ParseSlot(const std::string& spec, const std::string& text) {
  const std::string t = Trim(text);
  std::size_t i = (!t.empty() && (t[0] == '+' || t[0] == '-')) ? 1 : 0;
  if (i == t.size() || t.size() - i > 6) {
    return InvalidArgumentError("invalid slot '" + text + "' in '" + spec +
                                "' (expected NAME[:SLOT[,SLOT...]])");
  }
  for (std::size_t j = i; j < t.size(); ++j) {
    if (!std::isdigit(static_cast<unsigned char>(t[j]))) {
      return InvalidArgumentError("invalid slot '" + text + "' in '" + spec +
                                  "' (expected NAME[:SLOT[,SLOT...]])");
    }
  }
  return std::stoi(t);
}

// parse_node_config_list: host -> sorted unique slots, hosts in first-seen
// order (an empty slot list = the whole host).
StatusOr<std::vector<std::pair<std::string, std::vector<int>>>> ParseNodeSpecs(
    const std::string& spec) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  for (const std::string& node : Split(spec, '@')) {
    std::vector<std::string> parts = Split(node, ':');
    if (parts.size() > 2) {
      return InvalidArgumentError("invalid node '" + node + "' in '" + spec +
                                  "' (expected NAME[:SLOT[,SLOT...]])");
    }
    std::vector<int> slots;
    if (parts.size() == 2) {
      for (const std::string& s : Split(parts[1], ',')) {
        DDP_ASSIGN_OR_RETURN(int slot, ParseSlot(spec, s));
        slots.push_back(slot);
      }
    }
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const auto& e) { return e.first == parts[0]; });
    if (it == out.end()) {
      out.emplace_back(parts[0], slots);
    } else {
      it->second.insert(it->second.end(), slots.begin(), slots.end());
    }
  }
  for (auto& [host, slots] : out) {
    std::sort(slots.begin(), slots.end());
    slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
  }
  return out;
}

constexpr char kBase64[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

std::string JsonString(const std::string& s) {
  // json.dumps escapes '"', '\\', control characters and (ensure_ascii)
  // everything beyond ASCII (hostnames are ASCII; bytes are escaped one by
  // one).
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x80) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

StatusOr<ResourcePool> ParseHostfile(const std::string& source,
                                     const std::string& text) {
  ResourcePool pool;
  int line_no = 0;
  for (const std::string& raw : Split(text, '\n')) {
    ++line_no;
    const std::string line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](const std::string& why) {
      return InvalidArgumentError(source + ":" + std::to_string(line_no) +
                                  ": " + why + " in '" + line + "'");
    };
    // ^(\S+)\s+slots=(\d+): a host is one word (a '\r' inside ends it, as
    // Python's \s does).
    const auto ws = line.find_first_of(" \t\r\f\v");
    const auto val = ws == std::string::npos
                         ? std::string::npos
                         : line.find_first_not_of(" \t\r\f\v", ws);
    if (val == std::string::npos || line.compare(val, 6, "slots=") != 0) {
      return bad("expected 'HOST slots=N'");
    }
    std::size_t end = val + 6;
    while (end < line.size() &&
           std::isdigit(static_cast<unsigned char>(line[end]))) {
      ++end;
    }
    if (end == val + 6 || end - (val + 6) > 6) return bad("bad slot count");
    const std::string host = line.substr(0, ws);
    if (host[0] == '-') {
      // ssh would take it for an option (-oProxyCommand=... runs a command).
      return bad("host '" + host + "' starts with '-'");
    }
    if (std::any_of(pool.begin(), pool.end(),
                    [&](const auto& e) { return e.first == host; })) {
      return bad("host '" + host + "' listed twice");
    }
    pool.emplace_back(host, std::stoi(line.substr(val + 6, end - val - 6)));
  }
  if (pool.empty()) {
    return InvalidArgumentError(source + ": no 'HOST slots=N' line");
  }
  return pool;
}

StatusOr<ActiveResources> FilterResources(const ResourcePool& pool,
                                          const std::string& include,
                                          const std::string& exclude) {
  ActiveResources host_info;
  for (const auto& [host, count] : pool) {
    std::vector<int> ids;
    for (int i = 0; i < count; ++i) ids.push_back(i);
    host_info.emplace_back(host, std::move(ids));
  }
  return FilterResources(host_info, include, exclude);
}

StatusOr<ActiveResources> FilterResources(const ActiveResources& host_info,
                                          const std::string& include,
                                          const std::string& exclude) {
  if (!include.empty() && !exclude.empty()) {
    return InvalidArgumentError(
        "--include and --exclude are mutually exclusive");
  }
  // parse_resource_filter as deepspeed's tests call it (host_info = the
  // hostfile's slots): every listed slot must be one the host has.
  std::vector<std::pair<std::string, std::vector<int>>> included;
  if (!include.empty()) {
    DDP_ASSIGN_OR_RETURN(included, ParseNodeSpecs(include));
  }
  const std::map<std::string, std::vector<int>> active(host_info.begin(),
                                                       host_info.end());
  std::map<std::string, std::vector<int>> chosen;
  if (include.empty() && exclude.empty()) {
    chosen = active;
  } else {
    const std::string& spec = include.empty() ? exclude : include;
    const char* flag = include.empty() ? "--exclude" : "--include";
    std::vector<std::pair<std::string, std::vector<int>>> nodes = included;
    if (!exclude.empty()) {
      DDP_ASSIGN_OR_RETURN(nodes, ParseNodeSpecs(exclude));
      chosen = active;
    }
    for (const auto& [host, slots] : nodes) {
      auto it = active.find(host);
      if (it == active.end()) {
        return InvalidArgumentError(std::string(flag) + " " + spec +
                                    ": host '" + host +
                                    "' is not in the hostfile");
      }
      for (int slot : slots) {
        if (std::find(it->second.begin(), it->second.end(), slot) ==
            it->second.end()) {
          std::string have;
          for (int id : it->second) {
            have += (have.empty() ? "" : ",") + std::to_string(id);
          }
          return InvalidArgumentError(
              std::string(flag) + " " + spec + ": host '" + host +
              "' has no slot " + std::to_string(slot) +
              " (its slots: " + (have.empty() ? "none" : have) + ")");
        }
      }
      std::vector<int>& target = chosen[host];
      if (!include.empty()) {
        target = slots.empty() ? it->second : slots;
      } else if (slots.empty()) {
        target.clear();
      } else {
        for (int slot : slots) {
          target.erase(std::remove(target.begin(), target.end(), slot),
                       target.end());
        }
      }
    }
  }
  ActiveResources out;
  for (const auto& entry : host_info) {
    auto it = chosen.find(entry.first);
    if (it != chosen.end() && !it->second.empty()) {
      out.emplace_back(entry.first, it->second);
    }
  }
  return out;
}

std::string EncodeWorldInfo(const ActiveResources& resources) {
  std::string json = "{";
  for (std::size_t i = 0; i < resources.size(); ++i) {
    if (i > 0) json += ", ";
    json += JsonString(resources[i].first) + ": [";
    for (std::size_t j = 0; j < resources[i].second.size(); ++j) {
      if (j > 0) json += ", ";
      json += std::to_string(resources[i].second[j]);
    }
    json += "]";
  }
  json += "}";
  std::string out;
  std::size_t i = 0;
  for (; i + 2 < json.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(json[i]) << 16) |
                       (static_cast<unsigned char>(json[i + 1]) << 8) |
                       static_cast<unsigned char>(json[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += kBase64[(v >> k) & 63];
  }
  if (i + 1 == json.size()) {
    const unsigned v = static_cast<unsigned char>(json[i]) << 16;
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == json.size()) {
    const unsigned v = (static_cast<unsigned char>(json[i]) << 16) |
                       (static_cast<unsigned char>(json[i + 1]) << 8);
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += kBase64[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

StatusOr<ActiveResources> DecodeWorldInfo(const std::string& encoded) {
  auto bad = [&encoded](const std::string& why) {
    return InvalidArgumentError("--world_info '" + encoded + "': " + why);
  };
  std::string json;
  unsigned buffer = 0;
  int bits = 0;
  for (char c : encoded) {
    if (c == '=') break;
    const char* p = std::strchr(kBase64, c);
    if (c == '\0' || p == nullptr) return bad("not URL-safe base64");
    buffer = (buffer << 6) | static_cast<unsigned>(p - kBase64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      json += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  nlohmann::ordered_json doc =
      nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || doc.empty()) {
    return bad("not a JSON object of host: [slots]");
  }
  ActiveResources out;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (!it.value().is_array() || it.value().empty()) {
      return bad("host '" + it.key() + "' has no slot list");
    }
    std::vector<int> slots;
    for (const auto& slot : it.value()) {
      if (!slot.is_number_integer()) return bad("a slot is not an integer");
      slots.push_back(slot.get<int>());
    }
    out.emplace_back(it.key(), slots);
  }
  return out;
}

}  // namespace ddprun::agent
