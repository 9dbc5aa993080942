#!/usr/bin/env bash
# The libFuzzer run of the rendezvous request handlers for ctest.
#   run_libfuzzer.sh --binary FUZZER SECONDS CORPUS
#       runs an already built rendezvous_fuzzer (a clang build of the tree);
#   run_libfuzzer.sh --build CMAKE SOURCE_DIR BUILD_DIR SECONDS CORPUS
#       first configures BUILD_DIR with clang++ (-fsanitize=fuzzer-no-link,
#       address on everything, so the handlers are coverage-instrumented; no
#       LibTorch, tests only for the fuzzer target) and builds only
#       rendezvous_fuzzer there. Later runs rebuild incrementally.
# Fuzzes for SECONDS starting from CORPUS (read only; new inputs go to a
# temp dir). Exit 0: no crash, leak, timeout or invariant violation; 77:
# skipped (no clang++ or no libFuzzer runtime; a failure under CI=true);
# anything else: a failure, with the crashing input's bytes printed in hex.
set -euo pipefail
source "$(dirname "$0")/../skip.sh"

mode=$1
shift
if [[ $mode == --build ]]; then
  cmake=$1 src=$2 build=$3
  shift 3
  cxx=$(command -v clang++ || command -v clang++-14 || true)
  if [[ -z $cxx ]]; then
    skip_unless_ci "clang++ not found; install clang and libclang-rt-14-dev" \
      "(scripts/setup.sh does) to run libFuzzer"
  fi
  cc=${cxx%++*}${cxx##*++}  # clang++-14 -> clang-14
  probe=$(mktemp -d)
  printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
    >"$probe/p.cc"
  if ! "$cxx" -fsanitize=fuzzer,address "$probe/p.cc" -o "$probe/p" \
       >"$probe/log" 2>&1; then
    cat "$probe/log"
    rm -rf "$probe"
    skip_unless_ci "$cxx cannot link -fsanitize=fuzzer,address (install" \
      "libclang-rt-14-dev; the linker's errors above)"
  fi
  rm -rf "$probe"
  flags="-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer"
  start=$SECONDS
  "$cmake" -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
    -DDDPRUN_WITH_TORCH=OFF -DDDPRUN_BUILD_BENCH=OFF \
    -DDDPRUN_BUILD_EXAMPLES=OFF -DDDPRUN_BUILD_FUZZ=ON >"$build.configure.log" 2>&1 \
    || { cat "$build.configure.log"; exit 1; }
  "$cmake" --build "$build" --target rendezvous_fuzzer
  echo "clang fuzzer build: $((SECONDS - start)) s"
  fuzzer=$build/bin/rendezvous_fuzzer
else
  fuzzer=$1
  shift
fi
seconds=$1 corpus=$2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus"
# -timeout: one input running 10 s is a hang; -rss_limit_mb: a leak.
if "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
     -print_final_stats=1 -artifact_prefix="$work/" \
     "$work/corpus" "$corpus"; then
  exit 0
fi
echo "FAILED: libFuzzer found a failing input:"
for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
  [[ -e $f ]] && { echo "$f"; od -An -tx1 "$f" | head -20; }
done
exit 1
