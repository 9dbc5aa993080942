#pragma once

#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// What the placeholders of one worker's prefix stand for.
struct PrefixValues {
  std::string role = "default";  // ${role_name}: --role
  int rank = 0;                  // ${rank}: the global rank
  int local_rank = 0;            // ${local_rank}
  // ddprun extensions (pytorch#75087 asks for the host in the prefix):
  std::string hostname;      // ${hostname}: gethostname(), as Python's
                             // socket.gethostname()
  int node_rank = 0;         // ${node_rank}: GROUP_RANK of this node
  int local_world_size = 1;  // ${local_world_size}: LOCAL_WORLD_SIZE
};

// The prefix of a worker's console lines. With an empty `templ` it is
// torchrun's `[<role><local_rank>]:`. Otherwise `templ` is
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (torchrun >= 2.2), a Python
// string.Template: `${role_name}` / `$role_name`, `${rank}` (the global
// rank) and `${local_rank}` are replaced as torchrun replaces them, and
// ddprun adds `${hostname}`, `${node_rank}` and `${local_world_size}`;
// `$$` is a `$`, a `$` not followed by a name or `{` stays as it is;
// nothing is added around the result ("[rank${rank}]: " gives
// "[rank3]: hello").
// Errors (kInvalidArgument, one line naming the variable): an unknown
// placeholder name, an unterminated or empty `${`. Torchrun leaves unknown
// placeholders in the text; ddprun refuses them so a typo is seen at once.
// Pure; thread-safe.
StatusOr<std::string> LogLinePrefix(const std::string& templ,
                                    const PrefixValues& values);

}  // namespace ddprun::agent
