# Sourced by the shell tests that ctest runs with SKIP_RETURN_CODE 77: the
# shell side of tests/catch/ddprun_skip.h.
#   skip_unless_ci REASON...  a prerequisite CI provides is missing: prints
#                             "DDPRUN_SKIP: REASON" and exits 77 (skipped),
#                             or under CI=true (or CI=1) says so and exits 1.
skip_unless_ci() {
  if [[ ${CI:-} == true || ${CI:-} == 1 ]]; then
    echo "missing prerequisite: $* (CI=true: CI must provide it, so this is a failure, not a skip)"
    exit 1
  fi
  echo "DDPRUN_SKIP: $*"
  exit 77
}
