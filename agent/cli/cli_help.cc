#include <string>

#include "agent/cli/cli_flags.h"
#include "agent/cli/cli_parser.h"

namespace ddprun::agent {
namespace {

// Appends `text` wrapped at ~78 columns, continuation lines indented by
// `indent` spaces.
void AppendWrapped(const std::string& text, std::size_t indent,
                   std::string* out) {
  const std::size_t width = 78;
  std::size_t column = indent;
  std::string::size_type pos = 0;
  while (pos < text.size()) {
    auto space = text.find(' ', pos);
    if (space == std::string::npos) space = text.size();
    const std::string word = text.substr(pos, space - pos);
    if (column > indent && column + 1 + word.size() > width) {
      *out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (column > indent) {
      *out += ' ';
      ++column;
    }
    *out += word;
    column += word.size();
    pos = space + 1;
  }
  *out += '\n';
}

}  // namespace

std::string HelpText(bool legacy) {
  const std::string prog = legacy ? "ddprun-launch" : "ddprun";
  std::string out = "usage: " + prog +
                    " [options] TRAINING_SCRIPT [SCRIPT_ARGS...]\n"
                    "       " +
                    prog +
                    " [options] -m MODULE [ARGS...]\n"
                    "       " +
                    prog + " [options] --no_python PROGRAM [ARGS...]\n\n";
  AppendWrapped(
      legacy ? "Drop-in replacement for torch.distributed.launch (deprecated "
               "in PyTorch): the torchrun launcher plus --use_env; without "
               "it each worker gets --local-rank=N appended (--local_rank=N "
               "when the workers' torch is 1.x, as its launcher passes; see "
               "--torch_version)."
             : "Drop-in replacement for torchrun (torch.distributed.run): "
               "starts NPROC_PER_NODE workers per node with torchrun's "
               "environment (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...), "
               "restarts them on failure and reports errors as torchrun does.",
      0, &out);
  out += '\n';
  AppendWrapped(
      "Every flag may be spelled --a_b or --a-b, given as --flag=VALUE or "
      "--flag VALUE, or set in the environment as PET_<FLAG> (booleans: "
      "PET_<FLAG>=1); the command line wins. Everything after "
      "TRAINING_SCRIPT is passed to the workers untouched.",
      0, &out);
  out += "\noptions:\n";
  for (const FlagSpec& flag : AllFlags()) {
    if (flag.legacy_only && !legacy) continue;
    std::string left = "  ";
    if (flag.short_name) left += std::string("-") + flag.short_name + ", ";
    left += std::string("--") + flag.dest;
    if (flag.kind == FlagKind::kValue) left += std::string(" ") + flag.metavar;
    const std::size_t indent = 26;
    out += left;
    if (left.size() + 2 > indent) {
      out += "\n" + std::string(indent, ' ');
    } else {
      out += std::string(indent - left.size(), ' ');
    }
    std::string help = flag.help;
    if (flag.default_text != nullptr) {
      help += std::string(" (default: ") +
              (*flag.default_text ? flag.default_text : "\"\"") + "; env " +
              PetEnvName(flag) + ")";
    }
    AppendWrapped(help, indent, &out);
  }
  out += '\n';
  AppendWrapped(
      "environment: PYTHON_EXEC (worker interpreter, default python3), "
      "TORCH_ELASTIC_SHUTDOWN_TIMEOUT, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE "
      "(worker line prefix with ${role_name}, ${rank}, ${local_rank}), "
      "LOGLEVEL or DDPRUN_LOG_LEVEL (DEBUG|INFO|WARNING|ERROR), "
      "DDPRUN_CACHE_DIR (where the interpreter's sys.path is cached for "
      "--torch_version detection; default $XDG_CACHE_HOME/ddprun or "
      "~/.cache/ddprun). The same binary run as ddprun-accelerate or "
      "ddprun-deepspeed takes `accelerate launch`'s or `deepspeed`'s "
      "command line (see their --help).",
      2, &out);
  return out;
}

}  // namespace ddprun::agent
