#!/usr/bin/env bash
# Installs the worker runtime from BUILD_DIR into a private prefix, builds
# tests/worker/install_consumer against it with find_package(ddprunWorker)
# alone, and runs the consumer by itself and as 2 ranks under ddprun.
# Usage: installed_package_test.sh BUILD_DIR SOURCE_DIR DDPRUN
set -euo pipefail
build=$1 src=$2 ddprun=$3
work="$build/installed_package_test"
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"

# The installed interface is include/ddprun/ alone: the worker's headers and
# the two of common/ they use, no generic top-level folder (a user's own
# common/ or worker/ must not be shadowed), and the exported include path
# is <prefix>/include, not a folder inside it.
unexpected=$(cd "$work/prefix/include" && find . -type f |
  grep -vE '^\./ddprun/worker/[a-z0-9_]+\.h$|^\./ddprun/common/status(_or)?\.h$' || true)
if [[ -n $unexpected ]]; then
  echo "FAIL: installed headers outside the ddprun/ interface:" >&2
  echo "$unexpected" >&2
  exit 1
fi
if grep -rn 'include/ddprun"' "$work/prefix"/lib*/cmake/ddprunWorker/*.cmake >&2; then
  echo "FAIL: the exported include path reaches inside include/ddprun" >&2
  exit 1
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/tests/worker/install_consumer" -B "$work/consumer" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/prefix" \
  "${launcher[@]}" >"$work/configure.log"
cmake --build "$work/consumer" >"$work/build.log"

expect() {  # expect OUTPUT_FILE LINE
  if ! grep -qxF "$2" "$1"; then
    echo "FAIL: expected the line '$2' in:" >&2
    cat "$1" >&2
    exit 1
  fi
}

env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT \
  "$work/consumer/consumer" "$work/ckpt-alone" >"$work/alone.out" 2>&1
expect "$work/alone.out" "consumer rank 0/1 sum 1 resumed_step 7"

"$ddprun" --standalone --nproc_per_node=2 --no_python \
  "$work/consumer/consumer" "$work/ckpt-two" >"$work/two.out" 2>&1
expect "$work/two.out" "[default0]:consumer rank 0/2 sum 3 resumed_step 7"
expect "$work/two.out" "[default1]:consumer rank 1/2 sum 3 resumed_step 7"
echo "installed package: consumer built and ran alone and as 2 ranks"
