#!/usr/bin/env bash
# Installs, builds and runs the main job: a short 2-process training run of the
# survival trainer (3D ResNet, Cox loss, C-index) on synthetic NIfTI data under
# `ddprun --standalone` (Gloo on CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the main job needs: no test-only packages (SLURM, sshd, clang,
# python3-torch...), no test programs. scripts/run_tests.sh adds the rest.
DDPRUN_SETUP_TESTS=0 DDPRUN_BUILD_TARGETS="ddprun survival_trainer" bash scripts/build.sh
export PYTHON_EXEC="${PYTHON_EXEC:-/usr/bin/python3}"
run_dir="${DDPRUN_MAIN_DIR:-$PWD/build/main_job}"
mkdir -p "$run_dir"
if [[ ! -f "$run_dir/data/survival.csv" ]]; then
  build/bin/survival_trainer --make_synthetic "$run_dir/data" --n 160
fi
rm -rf "$run_dir/output"
exec build/bin/ddprun --standalone --nproc_per_node=2 \
  build/bin/survival_trainer --csv_path "$run_dir/data/survival.csv" \
  --output_dir "$run_dir/output"
