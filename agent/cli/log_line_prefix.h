#pragma once

#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// The prefix of a worker's console lines. With an empty `templ` it is
// torchrun's `[<role><local_rank>]:`. Otherwise `templ` is
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE (torchrun >= 2.2), a Python
// string.Template: `${role_name}` / `$role_name`, `${rank}` (the global
// rank) and `${local_rank}` are replaced, `$$` is a `$`, a `$` not followed
// by a name or `{` stays as it is; nothing is added around the result
// ("[rank${rank}]: " gives "[rank3]: hello").
// Errors (kInvalidArgument, one line naming the variable): an unknown
// placeholder name, an unterminated or empty `${`. Torchrun leaves unknown
// placeholders in the text; ddprun refuses them so a typo is seen at once.
// Pure; thread-safe.
StatusOr<std::string> LogLinePrefix(const std::string& templ,
                                    const std::string& role, int rank,
                                    int local_rank);

}  // namespace ddprun::agent
