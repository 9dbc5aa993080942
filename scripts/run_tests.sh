#!/usr/bin/env bash
# Installs, builds and runs every test:
#   1. the host build (Debian bookworm, LibTorch 1.13): ctest, which includes
#      the syntax check of worker/ and examples/ against the LibTorch 2.11 +
#      CUDA headers of ../shared/gpu-kit (skipped with a message without it);
#   2. the LibTorch 2.x leg (scripts/libtorch2_tests.sh): the worker, the
#      trainers and their tests built against Debian trixie's LibTorch 2.6 in
#      a cached trixie root, and run there with torchrun 2.6 as the Python
#      reference. DDPRUN_TORCH2_LEG=0 skips it.
# The trixie root is made in the background while the host builds (it is
# mostly downloading and unpacking). Exit status: 0 when both legs pass.
#
# DDPRUN_FRESH=1 runs as a first run on a new machine would, whatever this
# machine has cached: an empty ccache and a new trixie root, both in a
# temporary folder removed at the end (DDPRUN_FRESH=/some/empty/dir keeps
# them there instead). It needs a tree without build/, e.g. a clean clone:
#   git clone . ../fresh && DDPRUN_FRESH=1 bash ../fresh/.ci/run  (beside ../shared)
# (The Debian packages on the host are what they are: run it on a new
# machine to time their installation too.)
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
fresh=${DDPRUN_FRESH:-0}
if [[ $fresh != 0 ]]; then
  if [[ -e build ]]; then
    echo "run_tests: DDPRUN_FRESH needs a tree without build/ (a clean clone)" >&2
    exit 2
  fi
  if [[ $fresh == 1 ]]; then
    fresh_dir=$(mktemp -d /var/tmp/ddprun-fresh.XXXXXX)
    trap 'rm -rf "$fresh_dir"' EXIT
  else
    fresh_dir=$fresh
    mkdir -p "$fresh_dir"
    if [[ -n $(ls -A "$fresh_dir") ]]; then
      echo "run_tests: DDPRUN_FRESH=$fresh_dir is not empty" >&2
      exit 2
    fi
  fi
  export CCACHE_DIR=$fresh_dir/ccache DDPRUN_TRIXIE_CACHE=$fresh_dir/trixie
  echo "run_tests: fresh run: ccache and the trixie root under $fresh_dir"
fi
stamp() {
  printf '[run_tests %3d min] %s (%s free here)\n' $(((SECONDS - start) / 60)) "$*" \
    "$(df -h --output=avail . | tail -1 | tr -d ' ')"
}
# Measured peak: about NEED_GB here and under /var/cache/ddprun together (the
# host build, the trixie root with its LibTorch 2.6 build, both ccaches).
need_gb=${DDPRUN_DISK_NEED_GB:-9}
free_gb=$(($(df -k --output=avail . | tail -1) / 1024 / 1024))
if ((free_gb < need_gb)); then
  echo "run_tests: warning: ${free_gb} GB free on $(df --output=target . | tail -1);" \
    "a full run needs about ${need_gb} GB (DDPRUN_TORCH2_LEG=0 about half)" >&2
fi

bash scripts/setup.sh || exit 1
# ccache as scripts/build.sh sets it, also for what the tests build (the
# Clang fuzz build of fuzz/libfuzzer, the headers' checks): paths relative to
# the checkout, so a clone elsewhere hits the cache too.
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
leg=${DDPRUN_TORCH2_LEG:-1}
root_pid=
if [[ $leg != 0 ]]; then
  mkdir -p build
  stamp "preparing the trixie root in the background (build/trixie_root.log)"
  (bash scripts/trixie_root.sh cpu -- bash /work/src/scripts/trixie_build.sh cpu --deps-only \
     >build/trixie_root.log 2>&1) &
  root_pid=$!
fi

stamp "host build"
bash scripts/build.sh || exit 1
stamp "host tests"
(cd build && ctest --output-on-failure --timeout 600 -j "${DDPRUN_TEST_JOBS:-2}" \
   --output-junit ctest-results.xml)
host_rc=$?
# Every registered test ran (scripts/ctest_summary.py); the counts and the
# skips' reasons go into the last line.
rm -f build/ctest-summary.txt
python3 scripts/ctest_summary.py --build build --junit ctest-results.xml \
  --label "host" --line-file build/ctest-summary.txt || host_rc=1

leg_rc=0 leg_line="LibTorch 2.6 leg: not run (DDPRUN_TORCH2_LEG=0)"
if [[ $leg != 0 ]]; then
  if ! wait "$root_pid"; then
    cat build/trixie_root.log >&2
    stamp "the trixie root could not be prepared"
    exit 1
  fi
  stamp "LibTorch 2.6 leg"
  bash scripts/libtorch2_tests.sh build 2>&1 | tee build/libtorch2_tests.log
  leg_rc=${PIPESTATUS[0]}
  leg_line=$(grep -a '^LibTorch 2.6 leg: ' build/libtorch2_tests.log | tail -1)
fi
stamp "done: host tests exit $host_rc, LibTorch 2.6 leg exit $leg_rc." \
  "$(cat build/ctest-summary.txt 2>/dev/null || echo 'host: no summary')." \
  "${leg_line:-LibTorch 2.6 leg: no summary}"
((host_rc == 0 && leg_rc == 0))
