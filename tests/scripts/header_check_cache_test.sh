#!/usr/bin/env bash
# scripts/check_libtorch_headers.py's pass cache on a miniature: a "kit"
# whose torch headers are empty, a build whose compile_commands.json holds
# one worker/ unit, the real compiler. A second run compiles nothing; a
# changed project header, a changed flag or a new kit compiles the unit
# again; a failing unit is never cached.
set -uo pipefail
script=$1/scripts/check_libtorch_headers.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
failures=()
mkdir -p kit/include/torch/csrc/api/include kit/include/torch/csrc/distributed/c10d \
  kit/include/ATen kit/include/c10 src/worker build
: >kit/include/torch/torch.h
: >kit/include/torch/csrc/distributed/c10d/ProcessGroup.hpp
make_kit() { tar -cJf "$tmp/kit.tar.xz" -C "$tmp/kit" include; }
make_kit
echo 'inline int Answer() { return 42; }' >src/worker/answer.h
printf '#include "worker/answer.h"\nint Twice() { return 2 * Answer(); }\n' >src/worker/unit.cc
commands() {
  cat >build/compile_commands.json <<JSON
[{"directory": "$tmp/build", "file": "$tmp/src/worker/unit.cc",
  "command": "g++ -DUSE_DISTRIBUTED $1 -std=c++17 -I$tmp/src -c $tmp/src/worker/unit.cc -o unit.o"}]
JSON
}
commands -DFLAG=1
run() {
  DDPRUN_HEADER_CHECK_CACHE=$tmp/cache python3 "$script" --build build \
    --source src --kit kit.tar.xz --cuda-include "$tmp/none" >out.log 2>&1
  rc=$?
  summary=$(tail -1 out.log)
}
expect() {  # expect NAME RC "TEXT IN THE SUMMARY"
  if [[ $rc != "$2" || $summary != *"$3"* ]]; then
    failures+=("$1: exit $rc (expected $2), summary '$summary' (expected '$3')")
    cat out.log >&2
  fi
}
run; expect first 0 "(1 compiled, 0 unchanged"
run; expect again 0 "(0 compiled, 1 unchanged"
echo '// a comment' >>src/worker/answer.h
run; expect "changed header" 0 "(1 compiled, 0 unchanged"
run; expect "after the change" 0 "(0 compiled, 1 unchanged"
commands -DFLAG=2
run; expect "changed flag" 0 "(1 compiled, 0 unchanged"
echo '// 2.12' >kit/include/torch/torch.h && make_kit
run; expect "new kit" 0 "(1 compiled, 0 unchanged"
echo 'int broken = ;' >>src/worker/answer.h
run; expect "a failure" 1 "0 of 1 sources compile"
run; expect "the failure again" 1 "(1 compiled, 0 unchanged"
DDPRUN_HEADER_CHECK_CACHE=off python3 "$script" --build build --source src \
  --kit kit.tar.xz --cuda-include "$tmp/none" >out.log 2>&1
rc=$?; summary=$(tail -1 out.log)
expect "no cache" 1 ", no cache)"
if ((${#failures[@]})); then
  printf 'FAIL %s\n' "${failures[@]}"
  exit 1
fi
echo "header check cache: all cases passed"
