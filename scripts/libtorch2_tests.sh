#!/usr/bin/env bash
# The LibTorch 2.x leg of the tests: the worker runtime, the trainers and
# their tests built against Debian trixie's LibTorch 2.6 (CPU) in a trixie
# root, and run there, the Python compatibility cases and the peers'
# conformance suite (tests/conformance) against trixie's torchrun 2.6, and
# the installation tests of the host's release artifacts.
# The launcher is the host build's (it has no Torch in it), carried into the
# root as a bundle. Exit status is ctest's.
# Usage: scripts/libtorch2_tests.sh [HOST_BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
host_build=${1:-build}
root=$(bash scripts/trixie_root.sh cpu)
bash scripts/bundle_launcher.sh "$host_build" "$root/work/out/launcher"
# The host build's wheel, tarball and .deb, installed in the root as a
# trixie user installs them (tests/install: the wheel in a venv of Python
# 3.13 with torch 2.6 from --system-site-packages).
bash scripts/build_wheel.sh "$host_build" "$root/work/out/dist"
DDPRUN_LAUNCHER_DIR=/work/out/launcher DDPRUN_DIST_DIR=/work/out/dist \
  exec bash scripts/trixie_root.sh cpu -- bash /work/src/scripts/trixie_build.sh cpu --test
