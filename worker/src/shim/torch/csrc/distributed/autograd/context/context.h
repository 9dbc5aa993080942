// Debian's libtorch-dev 1.13 ships c10d/reducer.hpp but not the distributed
// autograd header it includes. reducer.hpp only names two things from it:
// the GradCallback type (in a static_assert) and ContextPtr, a shared_ptr
// member of Reducer::RpcContext. Declaring exactly those keeps Reducer's
// layout identical to the library's (a shared_ptr is two pointers whatever
// it points to); the worker never touches the context itself.
#pragma once

#include <functional>
#include <memory>

#include <ATen/core/Tensor.h>

namespace torch::distributed::autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace torch::distributed::autograd
