#pragma once

// Reading docker/Dockerfile and the dpkg database for the Docker tests.

#include <map>
#include <set>
#include <string>
#include <vector>

namespace ddprun::deploy {

// What the last stage (the runtime image) of a Dockerfile says.
struct Dockerfile {
  std::vector<std::string> runtime_packages;  // its `apt-get install` names
  std::vector<std::string> cmd;               // exec-form CMD
  std::vector<std::string> healthcheck;       // exec-form HEALTHCHECK CMD
};
// Continuation lines are joined and comment lines dropped first.
Dockerfile ParseDockerfile(const std::string& text);

// "/lib/x" <-> "/usr/lib/x" (dpkg registers a library under one of the two
// on a merged-/usr system); other paths unchanged.
std::string UsrMergeTwin(const std::string& path);

// `dpkg -S PATH...` output -> path -> owning package (without ":arch").
std::map<std::string, std::string> ParseDpkgSearch(const std::string& out);

struct DpkgPackage {
  bool base = false;  // Priority required or Essential: in debian:*-slim
  std::vector<std::vector<std::string>> depends;  // Pre-Depends + Depends,
                                                  // alternatives per entry
};
// `dpkg-query -W -f='${Package}\t${Priority}\t${Essential}\t
// ${Pre-Depends}, ${Depends}\n'` output, by package name.
std::map<std::string, DpkgPackage> ParseDpkgStatus(const std::string& out);

// The packages an image has after `apt-get install listed...` on a slim
// base: the base packages, apt, `listed`, and their dependencies (each
// entry's first alternative known to `db`), recursively.
std::set<std::string> RuntimeClosure(
    const std::map<std::string, DpkgPackage>& db,
    const std::vector<std::string>& listed);

}  // namespace ddprun::deploy
