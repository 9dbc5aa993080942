#!/usr/bin/env bash
# libFuzzer over the Torch-free fuzz targets, for ctest (fuzz/libfuzzer,
# fuzz/soak).
#   run_libfuzzer.sh --bin-dir DIR --seconds S --corpus-root ROOT NAME...
#       runs DIR/<NAME>_fuzzer, already built (a Clang build of the tree);
#   run_libfuzzer.sh --build CMAKE SOURCE_DIR BUILD_DIR --seconds S
#                    --corpus-root ROOT NAME...
#       first configures BUILD_DIR with clang++ (-fsanitize=fuzzer-no-link,
#       address on everything, so the code under test is coverage-guided; no
#       LibTorch) and builds only the <NAME>_fuzzer targets there. Later runs
#       rebuild incrementally.
# Each target fuzzes for S seconds from ROOT/<NAME> (read only; new inputs
# go to a temp dir). Exit 0: no crash, leak, timeout or invariant violation
# in any; 77: skipped (no clang++ or no libFuzzer runtime; a failure under
# CI=true); 1: a target failed, with the failing input's bytes in hex.
set -euo pipefail
source "$(dirname "$0")/../skip.sh"

usage() { echo "usage: see the header of $0" >&2; exit 2; }
mode=${1:-}
shift || usage
bin_dir= cmake= src= build=
case $mode in
  --bin-dir) bin_dir=$1; shift ;;
  --build) cmake=$1 src=$2 build=$3; shift 3 ;;
  *) usage ;;
esac
[[ ${1:-} == --seconds ]] || usage
seconds=$2
[[ ${3:-} == --corpus-root ]] || usage
corpus_root=$4
shift 4
names=("$@")
(( ${#names[@]} > 0 )) || usage

if [[ -n $build ]]; then
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
  targets=()
  for n in "${names[@]}"; do targets+=("${n}_fuzzer"); done
  "$cmake" --build "$build" --target "${targets[@]}"
  echo "clang fuzzer build: $((SECONDS - start)) s"
  bin_dir=$build/bin
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
for n in "${names[@]}"; do
  fuzzer=$bin_dir/${n}_fuzzer
  mkdir -p "$work/$n/corpus"
  echo "=== $n: ${seconds} s of libFuzzer from $corpus_root/$n"
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: a leak or
  # an allocation the target lets an input make.
  if "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$work/$n/" \
       "$work/$n/corpus" "$corpus_root/$n" >"$work/$n/log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^stat::new_units_added' \
      "$work/$n/log" | tr '\n' ' '
    echo
    continue
  fi
  tail -40 "$work/$n/log"
  echo "FAILED: $n: libFuzzer found a failing input:"
  for f in "$work/$n"/crash-* "$work/$n"/leak-* "$work/$n"/timeout-* \
           "$work/$n"/oom-*; do
    [[ -e $f ]] && { echo "$f"; od -An -tx1 "$f" | head -20; }
  done
  failed+=("$n")
done
if (( ${#failed[@]} > 0 )); then
  echo "libFuzzer failed: ${failed[*]}"
  exit 1
fi
echo "libFuzzer: ${#names[@]} targets, ${seconds} s each, no failure"
