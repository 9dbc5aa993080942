#include "agent/log_dir.h"

#include <stdlib.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <vector>

namespace ddprun::agent {
namespace fs = std::filesystem;

namespace {

StatusOr<std::string> MakeTempDir(const std::string& parent,
                                  const std::string& prefix) {
  std::string templ = parent + "/" + prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return ErrnoStatus("cannot create a directory in " + parent, errno);
  }
  return std::string(buf.data());
}

}  // namespace

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) {
    return InternalError("cannot create directory " + path + ": " +
                         ec.message());
  }
  return Status::Ok();
}

StatusOr<std::string> MakeRunLogDir(const std::string& log_dir,
                                    const std::string& run_id) {
  if (log_dir == "/dev/null") return std::string();
  std::string base = log_dir;
  if (base.empty()) {
    const char* tmp = ::getenv("TMPDIR");
    DDP_ASSIGN_OR_RETURN(
        base,
        MakeTempDir(tmp != nullptr && *tmp ? tmp : "/tmp", "torchelastic_"));
  } else {
    DDP_RETURN_IF_ERROR(MakeDirs(base));
  }
  return MakeTempDir(base, run_id + "_");
}

Status RecreateDir(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return InternalError("cannot remove " + path + ": " + ec.message());
  return MakeDirs(path);
}

}  // namespace ddprun::agent
