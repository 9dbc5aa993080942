#!/usr/bin/env bash
# Clang's thread-safety analysis over the launcher side, for ctest
# (lint/thread_safety):
#   thread_safety.sh CMAKE SOURCE_DIR BUILD_DIR
# configures BUILD_DIR with clang++ and -Wthread-safety
# -Werror=thread-safety (no LibTorch, tests, examples or benchmarks; -O0
# without debug info, through ccache when installed) and builds ddprun and
# ddprun-rendezvous, that is every library of common/, proto/, diagnosis/,
# rendezvous/ and agent/. Later runs rebuild incrementally. Exit 0: no
# violation of a GUARDED_BY/REQUIRES contract (common/thread_annotations.h);
# 77: skipped (no clang++; a failure under CI=true); anything else: the
# compiler's errors.
set -euo pipefail
source "$(dirname "$0")/../skip.sh"

cmake=$1 src=$2 build=$3
cxx=$(command -v clang++ || command -v clang++-14 || true)
if [[ -z $cxx ]]; then
  skip_unless_ci "clang++ not found; install clang (scripts/setup.sh does)"
fi
cc=${cxx%++*}${cxx##*++}  # clang++-14 -> clang-14
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$src}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
start=$SECONDS
"$cmake" -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_C_FLAGS_DEBUG=-O0 -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
  "-DCMAKE_CXX_FLAGS=-Wthread-safety -Werror=thread-safety" \
  -DDDPRUN_WITH_TORCH=OFF -DDDPRUN_BUILD_TESTS=OFF \
  -DDDPRUN_BUILD_EXAMPLES=OFF -DDDPRUN_BUILD_BENCH=OFF \
  >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
"$cmake" --build "$build" -j "${DDPRUN_BUILD_JOBS:-2}" \
  --target ddprun ddprun-rendezvous
echo "clang thread-safety build of the launcher: $((SECONDS - start)) s"
