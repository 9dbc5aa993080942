#!/usr/bin/env bash
# Installs, builds and runs the main job: a short 2-process training run under
# `ddprun --standalone`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export PYTHON_EXEC="${PYTHON_EXEC:-/usr/bin/python3}"
exec build/bin/ddprun --standalone --nproc_per_node=2 build/bin/ddp_demo
