"""The Python side of tests/catch/ddprun_skip.h, for the Python tests that
ctest runs with SKIP_RETURN_CODE 77."""

import os

SKIP = 77


def skip_unless_ci(reason):
    """A missing prerequisite that CI provides: prints the skip marker that
    the run's summary reads and returns SKIP (77), or under CI=true (or
    CI=1) says so and returns 1 (a failure)."""
    if os.environ.get("CI") in ("true", "1"):
        print("missing prerequisite: %s (CI=true: CI must provide it, so "
              "this is a failure, not a skip)" % reason)
        return 1
    print("DDPRUN_SKIP: %s" % reason)
    return SKIP
