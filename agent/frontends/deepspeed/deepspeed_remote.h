#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/frontends/deepspeed/deepspeed_cli.h"
#include "ddprun/common/status_or.h"

// How ddprun-deepspeed starts the nodes of a multi-node job: the role of
// deepspeed's pdsh launcher (deepspeed/launcher/multinode_runner.py), with
// OpenSSH and ddprun-deepspeed on every node. Pure functions (the exports
// also read .deepspeed_env files).
namespace ddprun::agent {

// The variables every node gets, as runner.py exports them: the launcher's
// variables whose names start with MLFLOW, PYTHON, MV2, UCX or NCCL (the
// CUDA accelerator's), deepspeed's nebula list, PYTHONPATH with `cwd` put
// first, then the KEY=VALUE lines of .deepspeed_env (or $DS_ENV_FILE) in
// `home` and then in `cwd` (later wins; blank lines skipped).
// Errors: kInvalidArgument naming the file and line without '='.
StatusOr<std::map<std::string, std::string>> DeepSpeedExports(
    const std::map<std::string, std::string>& env, const std::string& cwd,
    const std::string& home);

// `word` quoted for a POSIX shell ('...' with embedded quotes escaped).
std::string ShellQuote(const std::string& word);

// Python's shlex.split (POSIX mode) of --launcher_args. Errors: an
// unterminated quote, a trailing backslash.
StatusOr<std::vector<std::string>> ShellSplit(const std::string& text);

// The arguments of the per-node launch of node `node_rank` (after the
// program): --world_info=, --node_rank=, --master_addr=, --master_port=,
// the flags that change the workers (--no_python, --module,
// --no_local_rank, --elastic_training with its node counts), --quiet and
// --log_level when given, then the user
// script and its arguments. `remote` adds --stop_on_stdin_eof.
std::vector<std::string> DeepSpeedNodeArgs(const DeepSpeedArgs& args,
                                           const std::string& world_info,
                                           int node_rank,
                                           const std::string& master_addr,
                                           bool remote);

// The shell command run on a remote node: source `venv_script` (when not
// empty: deepspeed's --venv_script, sourced first as its pdsh launch does;
// a script that fails stops the node), cd into `cwd`, export `exports`,
// exec `argv` (every word quoted).
std::string RemoteShellCommand(
    const std::string& cwd, const std::map<std::string, std::string>& exports,
    const std::vector<std::string>& argv, const std::string& venv_script = "");

// `ssh -o BatchMode=yes [--launcher_args...] [-p PORT] HOST COMMAND`.
// Errors: --launcher_args that do not split; a HOST that ssh would read
// as an option (empty, or starting with '-').
StatusOr<std::vector<std::string>> SshArgv(const DeepSpeedArgs& args,
                                           const std::string& host,
                                           const std::string& command);

}  // namespace ddprun::agent
