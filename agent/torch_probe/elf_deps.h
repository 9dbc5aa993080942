#pragma once

#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// The shared-library dependencies recorded in a dynamically linked ELF
// program: what the dynamic loader would look for, read from the file
// without loading or running it.
struct ElfDeps {
  std::vector<std::string> needed;   // DT_NEEDED sonames, in order
  std::vector<std::string> runpath;  // DT_RUNPATH, else DT_RPATH, split on
                                     // ':', $ORIGIN / ${ORIGIN} replaced by
                                     // the program's directory
};

// True when `path` starts with the ELF magic.
bool IsElfFile(const std::string& path);

// Reads the dynamic section of a 64-bit little-endian ELF file (x86-64,
// aarch64). A static executable has no dependencies (empty lists).
// Errors: kNotFound (unreadable), kInvalidArgument (not a 64-bit LE ELF
// file, or its headers point outside the file). Reads a few KB with pread;
// thread-safe.
StatusOr<ElfDeps> ReadElfDeps(const std::string& path);

}  // namespace ddprun::agent
