#include "agent/torch_probe/python_sys_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "agent/torch_probe/elf_deps.h"
#include "agent/process/run_capture.h"
#include "common/file_util.h"

namespace ddprun::agent {
namespace {

constexpr const char* kMagic = "ddprun-sys-path-1";
constexpr const char* kCacheHeader = "ddprun-python-sys-path 1";

// Prints sys.path (without the entry for the script's directory) and what
// decides it, NUL-separated. Imports only sys and site.
constexpr const char* kSnippet =
    "import sys\n"
    "try:\n"
    "    import site\n"
    "    u = site.getusersitepackages() if site.ENABLE_USER_SITE else ''\n"
    "except Exception:\n"
    "    u = ''\n"
    "s = bool(getattr(sys.flags, 'safe_path', False))\n"
    "p = sys.path if s else sys.path[1:]\n"
    "sys.stdout.write('\\0'.join(['ddprun-sys-path-1', sys.executable or '',\n"
    "                             u or '', '1' if s else '0'] + p))\n";

// Variables that change sys.path (besides the interpreter and cwd).
constexpr const char* kKeyVars[] = {
    "PYTHONPATH",     "PYTHONHOME",     "PYTHONNOUSERSITE",
    "PYTHONUSERBASE", "PYTHONSAFEPATH", "PYTHONPLATLIBDIR",
    "HOME",           "PYENV_VERSION",  "VIRTUAL_ENV"};

std::string Get(const std::map<std::string, std::string>& env,
                const char* name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

std::string Hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::uint64_t Fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// "<mtime ns>" of a path, or "absent".
std::string Stamp(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "absent";
  return std::to_string(static_cast<long long>(st.st_mtim.tv_sec) *
                            1000000000LL +
                        st.st_mtim.tv_nsec);
}

// "<dev> <ino> <size> <mtime ns>" of the file a path resolves to.
std::string Identity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return "";
  std::ostringstream os;
  os << st.st_dev << ' ' << st.st_ino << ' ' << st.st_size << ' '
     << (static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL +
         st.st_mtim.tv_nsec);
  return os.str();
}

struct CacheEntry {
  std::string key;  // hex
  std::string exe_identity;
  PythonSysPath paths;
  std::vector<std::pair<std::string, std::string>> stamps;  // state, path
};

// Reads a cache file; false when absent or malformed.
bool ReadCache(const std::string& file, CacheEntry* entry) {
  std::ifstream in(file);
  std::string line;
  if (!std::getline(in, line) || line != kCacheHeader) return false;
  bool have_key = false, have_exe = false;
  while (std::getline(in, line)) {
    auto space = line.find(' ');
    if (space == std::string::npos) return false;
    const std::string tag = line.substr(0, space),
                      rest = line.substr(space + 1);
    if (tag == "key") {
      entry->key = rest;
      have_key = true;
    } else if (tag == "exe") {
      entry->exe_identity = rest;
      have_exe = true;
    } else if (tag == "safe") {
      entry->paths.safe_path = rest == "1";
    } else if (tag == "stamp") {
      auto sep = rest.find(' ');
      if (sep == std::string::npos) return false;
      entry->stamps.emplace_back(rest.substr(0, sep), rest.substr(sep + 1));
    } else if (tag == "entry") {
      entry->paths.entries.push_back(rest);
    } else {
      return false;
    }
  }
  return have_key && have_exe;
}

void WriteCache(const std::string& dir, const std::string& file,
                const CacheEntry& entry) {
  // Paths with a newline cannot be stored line by line: no cache for them.
  for (const auto& e : entry.paths.entries) {
    if (e.find('\n') != std::string::npos) return;
  }
  for (const auto& [state, path] : entry.stamps) {
    if (path.find('\n') != std::string::npos) return;
  }
  for (std::size_t pos = 1; pos != std::string::npos;) {
    pos = dir.find('/', pos);
    ::mkdir(dir.substr(0, pos).c_str(), 0700);
    if (pos != std::string::npos) ++pos;
  }
  std::ostringstream out;
  out << kCacheHeader << '\n'
      << "key " << entry.key << '\n'
      << "exe " << entry.exe_identity << '\n'
      << "safe " << (entry.paths.safe_path ? "1" : "0") << '\n';
  for (const auto& [state, path] : entry.stamps) {
    out << "stamp " << state << ' ' << path << '\n';
  }
  for (const auto& e : entry.paths.entries) out << "entry " << e << '\n';
  // A cache: a write that fails costs the next launch one interpreter start.
  (void)WriteFileAtomically(file, {out.str()});
}

StatusOr<PythonSysPath> AskInterpreter(
    const std::string& interpreter,
    const std::map<std::string, std::string>& env,
    std::chrono::milliseconds timeout, std::string* user_site) {
  DDP_ASSIGN_OR_RETURN(
      CaptureResult r,
      RunAndCapture({interpreter, "-c", kSnippet}, env, timeout, 1 << 20));
  if (r.exit_code != 0) {
    return FailedPreconditionError("'" + interpreter + "' exited with " +
                                   std::to_string(r.exit_code));
  }
  std::vector<std::string> fields;
  std::string::size_type start = 0;
  while (start <= r.out.size()) {
    auto nul = r.out.find('\0', start);
    fields.push_back(r.out.substr(start, nul - start));
    if (nul == std::string::npos) break;
    start = nul + 1;
  }
  if (fields.size() < 4 || fields[0] != kMagic) {
    return FailedPreconditionError("'" + interpreter +
                                   "' did not print its sys.path");
  }
  PythonSysPath out;
  *user_site = fields[2];
  out.safe_path = fields[3] == "1";
  out.entries.assign(fields.begin() + 4, fields.end());
  return out;
}

}  // namespace

std::string DefaultCacheDir(const std::map<std::string, std::string>& env) {
  if (std::string d = Get(env, "DDPRUN_CACHE_DIR"); !d.empty()) return d;
  if (std::string x = Get(env, "XDG_CACHE_HOME"); !x.empty()) {
    return x + "/ddprun";
  }
  if (std::string h = Get(env, "HOME"); !h.empty()) {
    return h + "/.cache/ddprun";
  }
  return "";
}

StatusOr<PythonSysPath> GetPythonSysPath(
    const std::string& interpreter,
    const std::map<std::string, std::string>& env, const std::string& cache_dir,
    std::chrono::milliseconds timeout) {
  const std::string real = RealPath(interpreter);
  const bool cacheable = !cache_dir.empty() && !real.empty() && IsElfFile(real);
  std::string key_text = interpreter + '\0' + CurrentDir();
  for (const char* var : kKeyVars) key_text += '\0' + Get(env, var);
  const std::string key = Hex(key_text);
  char name[40];
  std::snprintf(name, sizeof(name), "/python-%016llx.txt",
                static_cast<unsigned long long>(Fnv1a(key_text)));
  const std::string file = cache_dir + name;

  if (cacheable) {
    CacheEntry cached;
    if (ReadCache(file, &cached) && cached.key == key &&
        cached.exe_identity == Identity(real)) {
      bool fresh = true;
      for (const auto& [state, path] : cached.stamps) {
        if (Stamp(path) != state) {
          fresh = false;
          break;
        }
      }
      if (fresh) {
        cached.paths.from_cache = true;
        return cached.paths;
      }
    }
  }
  std::string user_site;
  DDP_ASSIGN_OR_RETURN(PythonSysPath paths,
                       AskInterpreter(interpreter, env, timeout, &user_site));
  if (cacheable) {
    CacheEntry entry;
    entry.key = key;
    entry.exe_identity = Identity(real);
    entry.paths = paths;
    for (const auto& e : paths.entries) entry.stamps.emplace_back(Stamp(e), e);
    if (!user_site.empty()) {
      entry.stamps.emplace_back(Stamp(user_site), user_site);
    }
    if (!entry.exe_identity.empty()) WriteCache(cache_dir, file, entry);
  }
  return paths;
}

}  // namespace ddprun::agent
