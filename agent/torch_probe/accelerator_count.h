#pragma once

#include <chrono>
#include <map>
#include <string>

#include "ddprun/common/status_or.h"

namespace ddprun::agent {

// --nproc_per_node=xpu or =<the privateuse1 backend's name> (torch >= 2.1:
// torch._C._get_privateuse1_backend_name(), e.g. "npu" once torch_npu is
// installed), counted as torchrun's determine_local_world_size counts
// them: the workers' interpreter ($PYTHON_EXEC, else python3 on the PATH
// of `env`) imports torch (which loads the device extensions registered
// as `torch.backends` entry points) and answers
// torch.xpu.device_count() when torch.xpu.is_available(), or the backend
// module's device_count() when its is_available() says so. Only called
// for such a name: ints, cpu, gpu and auto never start an interpreter.
// Blocks up to `timeout` (importing torch takes seconds).
// Errors (kInvalidArgument, one line naming `source`): the name is neither
// xpu nor the workers' torch's privateuse1 backend ("Unsupported
// nproc_per_node value", as torchrun), the device is not available or
// counts 0, the interpreter or torch cannot be run. Thread-safe.
StatusOr<int> CountAccelerators(const std::string& source,
                                const std::string& name,
                                const std::map<std::string, std::string>& env,
                                std::chrono::milliseconds timeout);

}  // namespace ddprun::agent
