#pragma once

#include <string>
#include <vector>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// How a flag consumes the command line.
enum class FlagKind {
  kValue,    // --flag VALUE or --flag=VALUE
  kBool,     // --flag (PET_<DEST>=1 in the environment)
  kHelp,     // -h/--help
  kVersion,  // --version: print ddprun's version and exit (no PET_*)
};

// One torchrun flag (or a ddprun addition). The table drives both the parser
// and --help, so a flag cannot be parsed without being documented.
struct FlagSpec {
  const char* dest;  // "nproc_per_node": long name and PET_<DEST> suffix
  char short_name;   // 'm' for -m, or 0
  FlagKind kind;
  const char* metavar;       // shown in --help for kValue flags
  const char* default_text;  // shown in --help; nullptr = no default line
  const char* help;
  bool legacy_only;  // only in torch.distributed.launch mode (--use_env)
  bool no_effect;    // accepted and validated, but ddprun ignores it (warns)
};

// Every flag, in --help order. The table is static; pointers stay valid.
const std::vector<FlagSpec>& AllFlags();

// "nproc_per_node" -> "PET_NPROC_PER_NODE".
std::string PetEnvName(const FlagSpec& flag);

}  // namespace ddprun::agent
