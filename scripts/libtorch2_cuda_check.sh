#!/usr/bin/env bash
# The CUDA build check: ddprun, the worker runtime, the trainers and their
# tests compiled and linked against Debian trixie's CUDA LibTorch 2.6
# (libtorch-cuda-dev, with NCCL) in a trixie root, with the same script and
# arguments as docker/Dockerfile.cuda's build stage, and that image's
# runtime package list checked against what the binaries load. No GPU is
# needed; nothing is run. The root holds ~7 GB of CUDA packages, so this is
# not part of CI's default run: run it before changing worker/, a trainer's
# device code or Dockerfile.cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/trixie_root.sh cuda -- bash /work/src/scripts/trixie_build.sh cuda --with-launcher
