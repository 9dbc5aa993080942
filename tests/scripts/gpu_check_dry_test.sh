#!/usr/bin/env bash
# scripts/gpu_check.sh's logic on this machine's CPU (DDPRUN_GPU_CHECK_DRY=cpu:
# the host build, Gloo on CPU, the same steps and $OUT contract as on a GPU).
#   gpu_check_dry_test.sh SRC BUILD full
#     every step: summary.txt starts with the device, driver, CUDA, NCCL and
#     torch lines, then one line per step in order, all PASS (fp16 may be
#     SKIP on LibTorch 1.x, model_step without a Python torch), then the
#     result line; $OUT holds summary.txt, logs.tar.gz (every step's log)
#     and model_step.json only, at most 8 files. Prints the summary, with
#     each step's time.
#   gpu_check_dry_test.sh SRC BUILD cut_short
#     the limit, deadline and signal paths: a step over its limit is killed
#     and recorded, and the next one runs; a spent budget skips what is
#     left; a SIGTERM in the middle of a step records that step as cut
#     short, skips the rest, still writes the summary and logs.tar.gz; and
#     none of a killed step's processes is left running.
set -uo pipefail
src=$1 build=$2 mode=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=()
check() {  # check CONDITION-EXIT-STATUS WHAT
  (($1 == 0)) || failures+=("$2")
}
run() {  # run NAME [ARGS...]: the dry run into $tmp/NAME/{out,work}
  local name=$1; shift
  mkdir -p "$tmp/$name"
  OUT=$tmp/$name/out DDPRUN_GPU_CHECK_WORK=$tmp/$name/work DDPRUN_GPU_CHECK_DRY=cpu \
    DDPRUN_GPU_BUILD_DIR=$build bash "$src/scripts/gpu_check.sh" "$@"
}
line_of() {  # line_of SUMMARY STEP: the step's line
  grep -E "^(PASS|FAIL|SKIP) +$2 +[0-9]+ s" "$1"
}
leftovers() {  # leftovers NAME: processes still running of run NAME
  local p found=""
  for p in /proc/[0-9]*; do
    grep -qsazxF "DDPRUN_GPU_CHECK_WORK=$tmp/$1/work" "$p/environ" && found+=" ${p#/proc/}"
  done
  echo "$found"
}

if [[ $mode == full ]]; then
  t0=$SECONDS
  run full >"$tmp/full.log" 2>&1
  rc=$?
  out=$tmp/full/out summary=$tmp/full/out/summary.txt
  echo "--- summary.txt ($((SECONDS - t0)) s in all)"
  cat "$summary" 2>/dev/null
  check "$rc" "gpu_check.sh exited $rc"
  mapfile -t lines <"$summary"
  for i in 0 1 2 3 4; do
    want=(device: driver: cuda: nccl: torch:)
    [[ ${lines[$i]:-} == "${want[$i]}"* ]] || failures+=("line $((i + 1)) is not '${want[$i]} ...': ${lines[$i]:-}")
  done
  steps=$(sed -n 's/^steps: //p' "$summary")
  [[ -n $steps ]] || failures+=("no 'steps:' line")
  n=0
  torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$build/CMakeCache.txt")
  libtorch1=$(grep -qs 'PACKAGE_VERSION "1\.' "$torch_dir/TorchConfigVersion.cmake" && echo 1)
  for s in $steps; do
    n=$((n + 1))
    l=$(line_of "$summary" "$s")
    [[ -n $l ]] || { failures+=("no summary line for $s"); continue; }
    case $l in
      PASS*) ;;
      SKIP*fp16*"no CPU float16 autocast"*) [[ $libtorch1 == 1 ]] || failures+=("$s skipped on LibTorch 2: $l") ;;
      SKIP*model_step*"has no torch"*) ;;
      *) failures+=("$l") ;;
    esac
  done
  ((n == 15)) || failures+=("$n steps, expected 15")
  order=$(grep -oE '^(PASS|FAIL|SKIP) +[a-z0-9_]+ ' "$summary" | awk '{print $2}' | tr '\n' ' ')
  [[ $order == "$steps " ]] || failures+=("step lines in the order '$order', expected '$steps'")
  [[ ${lines[-1]} == "result: "*" 0 failed"* ]] || failures+=("last line: ${lines[-1]}")
  files=$(find "$out" -type f | sed "s|$out/||" | sort | tr '\n' ' ')
  count=$(find "$out" -type f | wc -l)
  ((count <= 8)) || failures+=("$count files in \$OUT")
  [[ $files == "logs.tar.gz model_step.json summary.txt " || $files == "logs.tar.gz summary.txt " ]] ||
    failures+=("files in \$OUT: $files")
  logs=$(tar -tzf "$out/logs.tar.gz" 2>/dev/null | tr '\n' ' ')
  for s in $steps; do
    [[ $logs == *"logs/$s.log "* ]] || failures+=("logs.tar.gz has no logs/$s.log")
  done
  ((${#failures[@]} == 0)) || sed 's/^/  | /' "$tmp/full.log" | tail -40
elif [[ $mode == cut_short ]]; then
  # 1. A step over its limit (2 s) is killed with its workers and recorded
  # as timed out; the next step still runs. 200 epochs keep its workers
  # training well past the limit: with the usual 3 the whole step (data,
  # launch, training) took 2 s on a quiet machine and once finished in time.
  t0=$SECONDS
  DDPRUN_GPU_CHECK_EPOCHS=200 DDPRUN_GPU_CHECK_LIMITS=survival_bf16=2 \
    run limit survival_bf16 ddp_demo >"$tmp/limit.log" 2>&1
  summary=$tmp/limit/out/summary.txt
  echo "--- limit: summary.txt ($((SECONDS - t0)) s)"; cat "$summary"
  [[ $(line_of "$summary" survival_bf16) == FAIL*"timed out after 2 s"* ]] ||
    failures+=("survival_bf16 not recorded as timed out")
  secs=$(line_of "$summary" survival_bf16 | awk '{print $3}')
  ((secs <= 2 + 10 + 3)) || failures+=("the 2 s step took $secs s")
  [[ $(line_of "$summary" ddp_demo) == PASS* ]] || failures+=("ddp_demo did not run after the timeout")
  left=$(leftovers limit)
  [[ -z $left ]] || failures+=("processes of the timed-out step still running:$left")
  # 2. The deadline: a 1 s budget skips every step, and still reports.
  DDPRUN_GPU_CHECK_BUDGET_S=1 run deadline ddp_demo >"$tmp/deadline.log" 2>&1
  summary=$tmp/deadline/out/summary.txt
  [[ $(line_of "$summary" ddp_demo) == SKIP*"no time left"* ]] || failures+=("ddp_demo not skipped for time")
  [[ $(tail -1 "$summary") == "result: 0 passed, 0 failed, 1 skipped"* && -f $tmp/deadline/out/logs.tar.gz ]] ||
    failures+=("deadline: no result line or no logs.tar.gz")
  # 3. SIGTERM while survival_bf16 trains.
  mkdir -p "$tmp/signal"
  (exec env OUT="$tmp/signal/out" DDPRUN_GPU_CHECK_WORK="$tmp/signal/work" DDPRUN_GPU_CHECK_DRY=cpu \
     DDPRUN_GPU_BUILD_DIR="$build" bash "$src/scripts/gpu_check.sh" ddp_demo survival_bf16 kill9_resume \
     >"$tmp/signal.log" 2>&1) &
  pid=$!  # gpu_check.sh itself
  summary=$tmp/signal/out/summary.txt
  # Until survival_bf16 trains: its first epoch is in metrics.jsonl (two
  # more to go). A fixed pause after ddp_demo's line raced with the logs'
  # tarball in between on a loaded machine and could land before the step.
  for _ in $(seq 1200); do
    [[ -s $tmp/signal/work/survival_bf16/metrics.jsonl ]] && break
    sleep 0.1
  done
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  echo "--- signal: summary.txt (exit $rc)"; cat "$summary"
  ((rc == 1)) || failures+=("exit $rc after SIGTERM, expected 1")
  [[ $(line_of "$summary" survival_bf16) == FAIL*"cut short by SIGTERM"* ]] ||
    failures+=("survival_bf16 not recorded as cut short")
  [[ $(line_of "$summary" kill9_resume) == SKIP*"stopped by SIGTERM"* ]] ||
    failures+=("kill9_resume not recorded as skipped")
  [[ $(tail -1 "$summary") == "result: "*"stopped by SIGTERM" ]] || failures+=("no result line after SIGTERM")
  tar -tzf "$tmp/signal/out/logs.tar.gz" 2>/dev/null | grep -q 'logs/survival_bf16.log' ||
    failures+=("logs.tar.gz lacks the cut step's log")
  sleep 1
  left=$(leftovers signal)
  [[ -z $left ]] || failures+=("processes of the cut step still running:$left")

  # 4. SIGTERM before any step started (while the versions are read): every
  # step is recorded as not run, and the exit is 1, not 0.
  mkdir -p "$tmp/early"
  (exec env OUT="$tmp/early/out" DDPRUN_GPU_CHECK_WORK="$tmp/early/work" DDPRUN_GPU_CHECK_DRY=cpu \
     DDPRUN_GPU_BUILD_DIR="$build" bash "$src/scripts/gpu_check.sh" ddp_demo survival_bf16 \
     >"$tmp/early.log" 2>&1) &
  pid=$!
  summary=$tmp/early/out/summary.txt
  for _ in $(seq 600); do
    [[ -e $summary ]] && break
    sleep 0.05
  done
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  echo "--- early signal: summary.txt (exit $rc)"; cat "$summary"
  ((rc == 1)) || failures+=("exit $rc after an early SIGTERM, expected 1")
  for s in ddp_demo survival_bf16; do
    [[ $(line_of "$summary" $s) == SKIP*"stopped by SIGTERM"* ]] ||
      failures+=("$s not recorded as not run after an early SIGTERM")
  done
else
  echo "usage: $0 SRC BUILD full|cut_short" >&2
  exit 2
fi

for f in "${failures[@]}"; do echo "FAILED: $f"; done
((${#failures[@]} == 0))
