#!/usr/bin/env bash
# Installs dependencies (idempotent), configures and builds into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
# Relative paths in the cache key: a fresh clone elsewhere still hits.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
# Needed for ccache to cache TUs that use the Torch precompiled header.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${DDPRUN_BUILD_TYPE:-Release}" "$@"
# Two cores, and Torch TUs need ~2 GB each: keep the job count explicit.
# DDPRUN_BUILD_TARGETS (space-separated) builds only those targets, e.g. what
# the main job runs; unset builds everything.
targets=()
read -r -a targets <<<"${DDPRUN_BUILD_TARGETS:-}"
cmake --build build -j "${DDPRUN_BUILD_JOBS:-2}" ${targets[@]:+--target "${targets[@]}"}
