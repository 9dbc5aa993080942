#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/cli/launch_options.h"
#include "agent/cli/nproc_resolver.h"
#include "ddprun/common/status_or.h"

namespace ddprun::agent {

struct CommandLine {
  bool show_help = false;     // --help/-h seen before the entrypoint: print
                              // HelpText(), exit 0
  bool show_version = false;  // --version before the entrypoint (and no
                              // --help): print the version, exit 0
  LaunchOptions options;
  // One line each, to print (as warnings) only now that the whole command
  // line parsed: bad input never gets a warning before its error line.
  std::vector<std::string> warnings;
  // Front ends (ddprun-accelerate, ddprun-deepspeed): variables the original
  // launcher puts into the environment its workers inherit; main() applies
  // them to the agent's environment before anything starts, so they count
  // as inherited (e.g. OMP_NUM_THREADS set here means no torchrun banner).
  // `env_removed` names are deleted first.
  std::map<std::string, std::string> env_overrides;
  std::vector<std::string> env_removed;
  // A node started over ssh (ddprun-deepspeed): stop the workers when stdin
  // reaches EOF, as on SIGHUP.
  bool stop_on_stdin_eof = false;
};

// Parses torchrun's command line into LaunchOptions.
//
// args = argv[1..]; env = the process environment (PET_* defaults, PATH for
// entrypoint lookup, CUDA_VISIBLE_DEVICES, TORCH_ELASTIC_SHUTDOWN_TIMEOUT);
// legacy = torch.distributed.launch mode (the `ddprun-launch` alias; also
// turned on by --legacy_launch).
//
// Syntax, as torchrun's argparse: every flag as --a_b or --a-b, an
// unambiguous prefix of a long name (--nproc), --flag=value or --flag value,
// short -m, -r, -t, -h (-r3 and -r=3 too). A flag's value comes from the
// command line, else a non-empty PET_<DEST> variable (booleans: PET_X=1),
// else a scheduler default (srun with one task per node: --nnodes from
// SLURM_NNODES, --node_rank from SLURM_NODEID or SLURM_PROCID, --rdzv_id from
// SLURM_JOB_ID, --rdzv_endpoint from the first host of SLURM_JOB_NODELIST
// with port 20000 + SLURM_JOB_ID % 10000; Kubernetes Indexed Job:
// JOB_COMPLETION_INDEX as node rank; never under --standalone), else the
// default. The first argument
// that is not a flag (or the one after
// "--") is the entrypoint; everything after it is passed through untouched.
//
// Choices where torchrun gives no single answer:
//  - --master_port: default is "pick a verified-free port" (nullopt) on one
//    static node, 29500 with several static nodes or in legacy mode (all
//    nodes must agree). 0 means "pick a free port" and is an error with
//    several static nodes; otherwise 1..65535.
//  - static backend with --rdzv_endpoint host:port and no explicit
//    --master_addr/--master_port: the endpoint is the master (torchrun's
//    get_rdzv_endpoint rule, read the other way round).
//  - --standalone with --nnodes MIN > 1 is an error: no other node can reach
//    an embedded rendezvous on a random local port.
//  - the entrypoint is checked before anything starts: a script (and
//    --run_path) must exist; --no_python needs an executable file, looked up
//    on env PATH when the name has no '/'.
//
// --rdzv_conf is read once, here, into LaunchOptions::rendezvous
// (rendezvous/options/rendezvous_options.h): every key is checked against
// the key table on every backend (unknown key, bad value, unreadable file),
// the files it names are read, and where a rendezvous server is used an
// empty DDPRUN_RDZV_TOKEN (or token file) is an error. The environment's
// TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE is checked
// (agent/cli/log_line_prefix.h).
//
// Warnings (explicit --rdzv_* ignored under --standalone, flags and rdzv_conf
// keys that have no effect in ddprun) are returned in CommandLine::warnings,
// never printed: a failed parse yields only its error.
// Errors: kInvalidArgument with one line naming the flag or env var and the
// bad value. Not thread-safe only in that it reads the filesystem.
// `count_accelerators` answers --nproc_per_node=xpu or a privateuse1
// backend's name (agent/cli/nproc_resolver.h); null = such names are
// errors.
StatusOr<CommandLine> ParseCommandLine(
    const std::vector<std::string>& args,
    const std::map<std::string, std::string>& env, bool legacy,
    const AcceleratorCounter& count_accelerators = nullptr);

// --help text: usage, then every flag (both spellings accepted, shown with
// underscores) with its default and PET_* variable. Legacy mode adds
// --use_env and names ddprun-launch.
std::string HelpText(bool legacy);

}  // namespace ddprun::agent
