#include "tests/deploy/dockerfile.h"

#include <regex>
#include <sstream>

namespace ddprun::deploy {
namespace {

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Instructions with continuations joined and comment lines dropped.
std::vector<std::string> Instructions(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    if (t.back() == '\\') {
      cur += t.substr(0, t.size() - 1) + " ";
      continue;
    }
    out.push_back(cur + t);
    cur.clear();
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// The strings of the first JSON array in `s` (no escapes needed here).
std::vector<std::string> ExecForm(const std::string& s) {
  std::vector<std::string> out;
  const auto open = s.find('[');
  const auto close = s.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return out;
  const std::string body = s.substr(open, close - open);
  const std::regex str("\"([^\"]*)\"");
  for (std::sregex_iterator it(body.begin(), body.end(), str), end; it != end;
       ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

std::string StripArch(const std::string& pkg) {
  return Trim(pkg.substr(0, pkg.find(':')));
}

}  // namespace

Dockerfile ParseDockerfile(const std::string& text) {
  Dockerfile df;
  for (const std::string& ins : Instructions(text)) {
    std::istringstream words(ins);
    std::string keyword;
    words >> keyword;
    if (keyword == "FROM") {
      df = Dockerfile{};  // a new stage: only the last one counts
    } else if (keyword == "CMD") {
      df.cmd = ExecForm(ins);
    } else if (keyword == "HEALTHCHECK") {
      const auto cmd = ins.find(" CMD ");
      if (cmd != std::string::npos) df.healthcheck = ExecForm(ins.substr(cmd));
    } else if (keyword == "RUN") {
      bool installing = false;
      for (std::string w; words >> w;) {
        if (w == "&&" || w == ";") {
          installing = false;
        } else if (w == "install") {
          installing = true;
        } else if (installing && w[0] != '-') {
          df.runtime_packages.push_back(w);
        }
      }
    }
  }
  return df;
}

std::string UsrMergeTwin(const std::string& path) {
  if (path.rfind("/usr/lib/", 0) == 0) return path.substr(4);
  if (path.rfind("/lib/", 0) == 0) return "/usr" + path;
  return path;
}

std::map<std::string, std::string> ParseDpkgSearch(const std::string& out) {
  std::map<std::string, std::string> owner;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("diversion ", 0) == 0) continue;
    const auto sep = line.find(": /");
    if (sep == std::string::npos) continue;
    const std::string pkgs = line.substr(0, sep);
    owner[line.substr(sep + 2)] = StripArch(pkgs.substr(0, pkgs.find(',')));
  }
  return owner;
}

std::map<std::string, DpkgPackage> ParseDpkgStatus(const std::string& out) {
  std::map<std::string, DpkgPackage> db;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::istringstream fields(line);
    for (std::string x; std::getline(fields, x, '\t');) f.push_back(x);
    if (f.size() < 4 || f[0].empty()) continue;
    DpkgPackage& p = db[f[0]];
    p.base = f[1] == "required" || f[2] == "yes";
    std::istringstream deps(f[3]);
    for (std::string entry; std::getline(deps, entry, ',');) {
      std::vector<std::string> alternatives;
      std::istringstream alts(entry);
      for (std::string alt; std::getline(alts, alt, '|');) {
        const std::string name = StripArch(alt.substr(0, alt.find('(')));
        if (!name.empty()) alternatives.push_back(name);
      }
      if (!alternatives.empty()) p.depends.push_back(alternatives);
    }
  }
  return db;
}

std::set<std::string> RuntimeClosure(
    const std::map<std::string, DpkgPackage>& db,
    const std::vector<std::string>& listed) {
  std::vector<std::string> todo(listed.begin(), listed.end());
  todo.push_back("apt");
  for (const auto& [name, p] : db) {
    if (p.base) todo.push_back(name);
  }
  std::set<std::string> have;
  while (!todo.empty()) {
    const std::string name = todo.back();
    todo.pop_back();
    if (!have.insert(name).second) continue;
    auto it = db.find(name);
    if (it == db.end()) continue;
    for (const auto& alternatives : it->second.depends) {
      for (const std::string& alt : alternatives) {
        if (db.count(alt)) {
          todo.push_back(alt);
          break;
        }
      }
    }
  }
  return have;
}

}  // namespace ddprun::deploy
