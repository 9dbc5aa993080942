#include <cerrno>

#include "ddprun_catch.h"

#include "ddprun/common/status.h"
#include "ddprun/common/status_or.h"

namespace ddprun {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  DDP_ASSIGN_OR_RETURN(int h, Half(x));
  DDP_ASSIGN_OR_RETURN(*out, Half(h));
  return Status::Ok();
}

TEST_CASE("Status: ok and error carry code and message", "[common]") {
  Status ok;
  CHECK(ok.ok());
  CHECK(ok.ToString() == "OK");
  Status bad = NotFoundError("no such job 'x'");
  CHECK_FALSE(bad.ok());
  CHECK(bad.code() == StatusCode::kNotFound);
  CHECK(bad.ToString() == "NOT_FOUND: no such job 'x'");
  CHECK(bad.WithContext("status").message() == "status: no such job 'x'");
}

TEST_CASE("StatusOr: propagates the first error", "[common]") {
  int out = 0;
  CHECK(Quarter(12, &out).ok());
  CHECK(out == 3);
  Status s = Quarter(6, &out);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message() == "odd: 3");
}

TEST_CASE("ErrnoStatus: maps errno to a close code", "[common]") {
  CHECK(ErrnoStatus("open x", ENOENT).code() == StatusCode::kNotFound);
  CHECK(ErrnoStatus("bind", EADDRINUSE).code() == StatusCode::kUnavailable);
  CHECK(ErrnoStatus("open x", ENOENT).message().rfind("open x: ", 0) == 0);
}

}  // namespace
}  // namespace ddprun
