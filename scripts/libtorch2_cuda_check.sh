#!/usr/bin/env bash
# The CUDA build check: the worker runtime, the trainers and their tests
# compiled and linked against Debian trixie's CUDA LibTorch 2.6
# (libtorch-cuda-dev, with NCCL) in a trixie root. No GPU is needed; nothing
# is run. The root holds ~7 GB of CUDA packages, so this is not part of CI's
# default run: run it before changing worker/ or a trainer's device code.
# The same build steps make docker/Dockerfile.cuda's image.
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/trixie_root.sh cuda -- bash /work/src/scripts/trixie_build.sh cuda
