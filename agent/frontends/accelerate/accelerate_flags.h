#pragma once

#include <string>
#include <vector>

#include "agent/frontends/py_value.h"
#include "ddprun/common/status_or.h"

// The flags of `accelerate launch` (accelerate/commands/launch.py
// launch_command_parser) that ddprun-accelerate implements, with
// accelerate's defaults and argparse types.
namespace ddprun::agent {

// How argparse converts a flag's text (the `type=` / `action=`).
enum class AccelFlagType {
  kStr,
  kInt,
  kFloat,
  kFlag,       // store_true
  kStrToBool,  // type=str_to_bool: y/yes/t/true/on/1 -> 1, n/... -> 0
  kPyBool,     // type=bool: any non-empty text is True
  kBoolList,   // fp8_override_linear_precision: "a,b,c" of str_to_bool
};

struct AccelFlag {
  const char* dest;
  std::vector<std::string> names;
  AccelFlagType type;
  PyValue def;
  std::vector<std::string> choices;  // empty = any
};

// launch_command_parser's flags for the multi-GPU and single-process
// paths, in its order. The table is static; references stay valid.
const std::vector<AccelFlag>& AccelerateFlags();

// The value argparse stores for `text` given to flag `f` (spelled `name`):
// the type conversion and the choices. Errors: kInvalidArgument, one line.
StatusOr<PyValue> ConvertAccelerateFlag(const AccelFlag& f,
                                        const std::string& name,
                                        const std::string& text);

// The tokenizer's "unknown flag --x" error, or, for a flag of accelerate's
// TPU, DeepSpeed, Megatron-LM, SageMaker or mpirun paths, an error saying
// ddprun-accelerate does not run that path.
Status UnsupportedFlagError(const std::string& message);

}  // namespace ddprun::agent
