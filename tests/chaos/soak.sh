#!/usr/bin/env bash
# Soak of the chaos suite: every scenario of chaos_test, ROUNDS times each
# (default 5), one at a time, each run bounded by PER_RUN_TIMEOUT seconds
# (default 150). Prints one line per run and a table of flakes per scenario;
# exits 1 if any run failed. Not part of the default ctest run (about
# ROUNDS x 2.5 min on 2 busy cores); `cmake -DDDPRUN_SOAK=ON` registers it
# as the ctest `chaos/soak` (label soak).
#
#   tests/chaos/soak.sh [BUILD_DIR] [ROUNDS] [FILTER]
#
# FILTER (optional) is a Catch2 test spec limiting the scenarios, e.g.
# '*failover*' or '*SIGKILL*'.
set -uo pipefail
build="${1:-build}"
rounds="${2:-5}"
filter="${3:-[chaos]}"
timeout_s="${PER_RUN_TIMEOUT:-150}"
bin="$build/bin/chaos_test"
if [ ! -x "$bin" ]; then
  echo "soak: $bin not built (needs LibTorch: -DDDPRUN_WITH_TORCH=ON)" >&2
  exit 2
fi
mapfile -t scenarios < <("$bin" --list-test-names-only "$filter" |
  grep -v '^$' | grep -v 'test cases')
if [ "${#scenarios[@]}" -eq 0 ]; then
  echo "soak: no scenario matches $filter" >&2
  exit 2
fi
logdir="$(mktemp -d "${TMPDIR:-/tmp}/ddprun_soak_XXXXXX")"
declare -A passed failed
total_fail=0
start=$(date +%s)
for ((round = 1; round <= rounds; round++)); do
  for name in "${scenarios[@]}"; do
    log="$logdir/r${round}_$(echo "$name" | tr -c 'A-Za-z0-9' '_').log"
    t0=$(date +%s.%N)
    # A test name is a Catch2 test spec: escape its special characters
    # (',' separates alternatives, '[' starts a tag).
    spec=$(printf '%s' "$name" | sed -e 's/\\/\\\\/g' -e 's/,/\\,/g' \
      -e 's/\[/\\[/g')
    timeout -k 10 "$timeout_s" "$bin" "$spec" >"$log" 2>&1
    code=$?
    # A spec that matched nothing "passes" with no test run.
    if [ "$code" -eq 0 ] && ! grep -q '^All tests passed' "$log"; then
      code=99
    fi
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
    recovered=$(grep -o 'recovered in [0-9.]* s\|cleanly in [0-9.]* s' "$log" |
      head -1)
    if [ "$code" -eq 0 ]; then
      passed[$name]=$((${passed[$name]:-0} + 1))
      printf 'soak: round %d PASS %6.1f s  %s  %s\n' "$round" "$secs" "$name" \
        "$recovered"
    else
      failed[$name]=$((${failed[$name]:-0} + 1))
      total_fail=$((total_fail + 1))
      printf 'soak: round %d FAIL %6.1f s  %s  (exit %d, log %s)\n' \
        "$round" "$secs" "$name" "$code" "$log"
    fi
  done
done
echo
echo "soak: $rounds rounds of ${#scenarios[@]} scenarios in $(($(date +%s) - start)) s"
printf '%-80s %6s %6s\n' "scenario" "passed" "failed"
for name in "${scenarios[@]}"; do
  printf '%-80s %6d %6d\n' "${name:0:80}" "${passed[$name]:-0}" \
    "${failed[$name]:-0}"
done
echo "soak: $total_fail flaky run(s); logs in $logdir"
[ "$total_fail" -eq 0 ]
