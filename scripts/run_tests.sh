#!/usr/bin/env bash
# Installs, builds and runs every test (ctest). Exit status is ctest's.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 600 -j "${DDPRUN_TEST_JOBS:-2}"
