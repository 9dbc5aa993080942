#pragma once

// A private directory for fuzz targets whose code under test reads files:
// made once per process (under /dev/shm when it exists: no disk writes per
// input), removed at exit.
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace ddprun::fuzz {

// The bytes of `path` ("" when it cannot be read).
inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FuzzTempDir {
 public:
  FuzzTempDir() {
    std::string tmpl = (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    tmpl += "/ddprun_fuzz_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path_ = tmpl;
  }
  ~FuzzTempDir() { (void)!std::system(("rm -rf '" + path_ + "'").c_str()); }

  const std::string& path() const { return path_; }

  // Writes `bytes` to <dir>/<name> (replacing it) and returns the path.
  std::string Write(const std::string& name, const void* bytes,
                    size_t size) const {
    const std::string p = path_ + "/" + name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(bytes),
              static_cast<std::streamsize>(size));
    if (!out) {
      std::perror(p.c_str());
      std::abort();
    }
    return p;
  }

 private:
  std::string path_;
};

}  // namespace ddprun::fuzz
