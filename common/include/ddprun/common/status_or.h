#pragma once

#include <cassert>
#include <optional>
#include <utility>

#include "ddprun/common/status.h"

namespace ddprun {

// Either a value or a non-ok Status. Accessing value() on an error is a
// programming error (asserted in debug builds).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "StatusOr built from an ok Status needs a value");
    if (status_.ok()) status_ = InternalError("StatusOr: ok status, no value");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  // The value, or `fallback` on an error.
  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace ddprun

#define DDP_STATUS_CONCAT_INNER(a, b) a##b
#define DDP_STATUS_CONCAT(a, b) DDP_STATUS_CONCAT_INNER(a, b)

// Assigns the value of a StatusOr expression to lhs or returns its error.
#define DDP_ASSIGN_OR_RETURN(lhs, expr) \
  DDP_ASSIGN_OR_RETURN_IMPL(DDP_STATUS_CONCAT(ddp_so_, __LINE__), lhs, expr)
#define DDP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
