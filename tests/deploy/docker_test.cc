// docker/Dockerfile checked without a container engine: the runtime stage
// installs the Debian package of every shared library the installed binaries
// load (ldd + dpkg on this Debian machine), and its HEALTHCHECK succeeds
// against its own CMD when the server requires a token.
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun_catch.h"
#include "ddprun_skip.h"

#include "tests/deploy/dockerfile.h"
#include "tests/multinode/multinode_util.h"

namespace ddprun::deploy {
namespace {

using multinode::Child;
using multinode::ReadFile;
using multinode::TempDir;
using multinode::WaitUntil;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kDockerfile = DDPRUN_SOURCE_DIR "/docker/Dockerfile";

// Runs `argv` and returns its exit code, stdout into *out.
int Run(const std::string& dir, std::vector<std::string> argv,
        std::string* out) {
  static int n = 0;
  Child child(dir, "cmd" + std::to_string(n++), std::move(argv));
  const int code = child.Wait(60s);
  *out = child.Stdout();
  return code;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST_CASE("Dockerfile: the runtime stage installs every library's package",
          "[deploy]") {
  const Dockerfile df = ParseDockerfile(ReadFile(kDockerfile));
  REQUIRE_FALSE(df.runtime_packages.empty());
  TempDir tmp;
  std::string out;
  if (Run(tmp.path(),
          {"/bin/sh", "-c", "command -v dpkg-query && command -v ldd"},
          &out) != 0) {
    DDPRUN_SKIP_UNLESS_CI("needs dpkg-query and ldd (a Debian machine)");
  }
  // The binaries the image copies (build/bin of a build without tests and
  // benchmarks): what exists of them in this build.
  std::vector<std::string> binaries, missing;
  for (const std::string& path : Lines(ReadFile(DDPRUN_RUNTIME_BINARIES))) {
    if (path.empty()) continue;
    (std::ifstream(path) ? binaries : missing).push_back(path);
  }
  for (const std::string& m : missing) WARN("not built, not checked: " << m);
  REQUIRE(binaries.size() >= 2);  // ddprun and ddprun-rendezvous at least

  // Every resolved library of every binary.
  std::set<std::string> libs;
  const std::regex resolved("=> (/[^ ]+) \\(0x");
  for (const std::string& bin : binaries) {
    INFO(bin);
    REQUIRE(Run(tmp.path(), {"/usr/bin/ldd", bin}, &out) == 0);
    CHECK(out.find("not found") == std::string::npos);
    for (std::sregex_iterator it(out.begin(), out.end(), resolved), end;
         it != end; ++it) {
      libs.insert((*it)[1]);
    }
  }
  REQUIRE_FALSE(libs.empty());

  // Which package owns each library: dpkg may register it under /usr/lib
  // or /lib (usrmerge), or only its target when it is a symlink managed by
  // update-alternatives (libblas.so.3).
  auto candidates = [](const std::string& lib) {
    const std::string real = fs::canonical(lib).string();
    return std::vector<std::string>{lib, UsrMergeTwin(lib), real,
                                    UsrMergeTwin(real)};
  };
  std::vector<std::string> query = {"/usr/bin/dpkg", "-S"};
  for (const std::string& lib : libs) {
    for (const std::string& c : candidates(lib)) query.push_back(c);
  }
  Run(tmp.path(), query, &out);  // exits 1 for the twins that do not exist
  const std::map<std::string, std::string> owner = ParseDpkgSearch(out);

  // What the runtime stage has: the slim base (the "required" packages), the
  // listed ones and everything they depend on.
  REQUIRE(Run(tmp.path(),
              {"/usr/bin/dpkg-query", "-W",
               "-f=${Package}\\t${Priority}\\t${Essential}\\t${Pre-Depends}, "
               "${Depends}\\n"},
              &out) == 0);
  const std::set<std::string> installed =
      RuntimeClosure(ParseDpkgStatus(out), df.runtime_packages);

  for (const std::string& lib : libs) {
    INFO(lib);
    auto it = owner.end();
    for (const std::string& c : candidates(lib)) {
      if (it == owner.end()) it = owner.find(c);
    }
    REQUIRE(it != owner.end());  // a library no package ships is not copied
    INFO("package " << it->second << " is not installed by the runtime stage");
    CHECK(installed.count(it->second) == 1);
  }
}

TEST_CASE("Dockerfile: HEALTHCHECK passes when the server needs a token",
          "[deploy]") {
  const Dockerfile df = ParseDockerfile(ReadFile(kDockerfile));
  REQUIRE(df.cmd.size() >= 1);
  REQUIRE(df.healthcheck.size() >= 1);
  ::unsetenv("DDPRUN_RDZV_TOKEN");
  ::unsetenv("DDPRUN_RDZV_TOKEN_FILE");
  TempDir tmp;
  const std::string token_file = tmp.path() + "/token";
  std::ofstream(token_file) << "h3alth\n";
  chmod(token_file.c_str(), 0600);  // a token file others can read is refused
  // The image's CMD on loopback and a free port, the token file named in
  // the environment as the Dockerfile says.
  std::vector<std::string> server = df.cmd;
  server[0] = std::string(DDPRUN_BIN_DIR) + "/" + server[0];
  for (size_t i = 1; i + 1 < server.size(); ++i) {
    if (server[i] == "--port") server[i + 1] = "0";
    if (server[i] == "--host") server[i + 1] = "127.0.0.1";
  }
  Child srv(tmp.path(), "server", server,
            {{"DDPRUN_RDZV_TOKEN_FILE", token_file}});
  std::string port;
  const std::regex listening("listening on 127\\.0\\.0\\.1:([0-9]+)");
  WaitUntil(
      [&] {
        std::smatch m;
        const std::string err = ReadFile(tmp.path() + "/server.err");
        if (!std::regex_search(err, m, listening)) return false;
        port = m[1];
        return true;
      },
      10000ms);
  INFO(srv.Output());
  REQUIRE_FALSE(port.empty());
  CHECK(srv.Stderr().find("token required") != std::string::npos);

  // The HEALTHCHECK command, pointed at that port.
  std::vector<std::string> check = df.healthcheck;
  check[0] = std::string(DDPRUN_BIN_DIR) + "/" + check[0];
  bool pointed = false;
  for (std::string& a : check) {
    if (a == "127.0.0.1:29400") {
      a = "127.0.0.1:" + port;
      pointed = true;
    }
  }
  REQUIRE(pointed);
  auto health = [&](std::map<std::string, std::string> env) {
    static int n = 0;
    Child c(tmp.path(), "health" + std::to_string(n++), check, std::move(env));
    const int code = c.Wait(10s);
    UNSCOPED_INFO(c.Output());
    return code;
  };
  CHECK(health({{"DDPRUN_RDZV_TOKEN_FILE", token_file}}) == 0);
  CHECK(health({{"DDPRUN_RDZV_TOKEN", "h3alth"}}) == 0);
  // Without the token the check fails: it does reach the token check.
  CHECK(health({}) != 0);
  CHECK(health({{"DDPRUN_RDZV_TOKEN", "wrong"}}) != 0);
}

}  // namespace
}  // namespace ddprun::deploy
