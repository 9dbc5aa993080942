#pragma once

#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// The PyTorch (or LibTorch) version the workers run, as far as it changes
// what torch's own launchers give them. An unknown version (no torch found,
// e.g. a script worker whose interpreter has no torch) behaves as the newest
// torch: that is the documented default, `--torch_version` overrides it.
struct TorchVersion {
  int major = 0;
  int minor = 0;
  std::string text;    // as found, e.g. "2.6.0+debian"; "" = unknown
  std::string source;  // where it was found, for logs ("--torch_version",
                       // ".../torch/version.py", "libc10.so.1.13", ...)

  bool known() const { return !text.empty(); }
  // True when the version is at least major.minor, or unknown.
  bool AtLeast(int want_major, int want_minor) const {
    return !known() || major > want_major ||
           (major == want_major && minor >= want_minor);
  }
};

// Parses a torch version string: "2", "2.6", "2.6.0", "1.13.0a0+gitabc",
// "2.11.0+cu130", "2.6.0.dev20240101" (PEP 440 as torch prints it; only
// major.minor matter). Errors: kInvalidArgument, one line naming `source`.
StatusOr<TorchVersion> ParseTorchVersion(const std::string& source,
                                         const std::string& text);

// What torchrun of version `v` gives each worker, where versions differ
// (torch/distributed/elastic/agent/server/local_elastic_agent.py and
// torch/distributed/run.py of each release):
//  - the NCCL async error handling variable it sets to "1" unless inherited:
//    TORCH_NCCL_ASYNC_ERROR_HANDLING from 2.2 (torch then warns that the old
//    name is deprecated whenever NCCL_ASYNC_ERROR_HANDLING is set),
//    NCCL_ASYNC_ERROR_HANDLING before;
const char* NcclAsyncErrorHandlingVar(const TorchVersion& v);
//  - TORCHELASTIC_SIGNALS_TO_HANDLE (the --signals_to_handle list), exported
//    from 2.9;
bool ExportsSignalsToHandle(const TorchVersion& v);
//  - torch.distributed.launch without --use_env appends `--local-rank=N`
//    from 2.0, `--local_rank=N` before.
const char* LegacyLocalRankFlag(const TorchVersion& v);

}  // namespace ddprun::agent
