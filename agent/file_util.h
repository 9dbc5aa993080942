#pragma once

#include <string>

// Small path helpers of the launcher side. Pure functions of the filesystem;
// thread-safe.
namespace ddprun::agent {

// "a/b/c" -> "a/b"; "c" -> "."; "/c" -> "/".
std::string Dirname(const std::string& path);
// "a/b/c" -> "c".
std::string Basename(const std::string& path);
// The canonical absolute path (symlinks resolved), "" when it does not exist.
std::string RealPath(const std::string& path);
// The current directory, "." when it cannot be read.
std::string CurrentDir();
// A regular file this process may execute.
bool IsExecutableFile(const std::string& path);
// The executable `name` would run as: `name` itself when it contains '/',
// else the first executable regular file `dir/name` for dir in `path`
// (colon-separated, empty entries = "."). "" when none.
std::string FindOnPath(const std::string& name, const std::string& path);

}  // namespace ddprun::agent
