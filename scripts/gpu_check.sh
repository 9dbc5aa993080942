#!/usr/bin/env bash
# The GPU check: ONE run on a GPU machine (device tool: see README, "GPU
# check"), at most 8 minutes, results always written. Steps, in priority
# order (what matters most first, so a run cut short still says it):
#   build            configure against the machine's LibTorch (the PyTorch
#                    wheel of $PYTHON), Torch required, debs of .gpu/debs in
#                    /opt/deps, nccl.h of the wheel, CUDA_PATH; ninja -k 0
#   ddp_demo         the demo on NCCL, one rank on cuda:0
#   TRAINER_bf16     each trainer (survival segmentation vqa ddpm cascade)
#   TRAINER_fp16     a few steps with bf16 autocast and with fp16 + dynamic
#                    loss scaling: the training loss falls, and the
#                    trainer's log names the backend and device it used
#   two_ranks        survival on two ranks sharing the GPU (Gloo on CUDA)
#   kill9_resume     survival: ddprun killed with -9 after its first
#                    checkpoint; the re-run resumes there and ends at the
#                    step of an uninterrupted run, its loss within bf16's
#                    nondeterminism of it
#   model_step       bench/model_step cut down: two trainers, bf16, each
#                    model's --check reported without stopping the timing
# Usage: bash scripts/gpu_check.sh [STEP|GROUP...]  (default: every step;
# groups: train = ddp_demo + trainers + two_ranks, resume, bench). A step
# whose binaries are missing builds first, so any step runs on a fresh
# machine. Every step has a time limit, the run a deadline
# (DDPRUN_GPU_CHECK_BUDGET_S, default 450 s; 1200 on the dry run) after which the remaining
# steps are skipped; a failed step is recorded and the next one runs.
#
# Results: $OUT (default ./gpu-out) receives summary.txt (the device,
# driver, CUDA, NCCL and torch versions, then one line per step: PASS, FAIL
# or SKIP, seconds, the figure), logs.tar.gz (every step's log, rewritten
# after each step and on a signal) and model_step.json: 3 files. The work
# folder (builds' data, checkpoints) is DDPRUN_GPU_CHECK_WORK, default a new
# folder under /tmp, never inside $OUT.
#
# DDPRUN_GPU_CHECK_DRY=cpu: the same steps on this machine's CPU with the
# host build in build/ (not rebuilt: the build step reports whether ninja
# has work left), Gloo on CPU, fp16 skipped where the LibTorch has no CPU
# float16 autocast. ctest gpucheck/dry_run runs it.
# DDPRUN_GPU_CHECK_EPOCHS: epochs of each TRAINER_bf16/fp16 step (default
# 3, at least 2: the loss must fall from the first to the last).
# Exit status: 0 when no step failed, else 1 (2: bad usage).
set -uo pipefail
self=$(readlink -f "$0")
cd "$(dirname "$self")/.."
root=$PWD

DRY=${DDPRUN_GPU_CHECK_DRY:-}
case $DRY in
  "" | cpu) ;;
  *) echo "gpu_check: DDPRUN_GPU_CHECK_DRY must be empty or 'cpu' (got '$DRY')" >&2; exit 2 ;;
esac
TRAINERS=(survival segmentation vqa ddpm cascade)
# Per step: its time limit in seconds on the GPU machine (README's budget).
declare -A LIMIT=([build]=270 [ddp_demo]=45 [two_ranks]=60 [kill9_resume]=90
                  [model_step]=120)
for t in "${TRAINERS[@]}"; do LIMIT[${t}_bf16]=40 LIMIT[${t}_fp16]=40; done
STEPS=(build ddp_demo)
for t in "${TRAINERS[@]}"; do STEPS+=("${t}_bf16" "${t}_fp16"); done
STEPS+=(two_ranks kill9_resume model_step)

if [[ -n $DRY ]]; then
  B=${DDPRUN_GPU_BUILD_DIR:-build}
  DDPRUN=${DDPRUN_GPU_LAUNCHER:-$B/bin/ddprun}
  PYTHON=${PYTHON:-/usr/bin/python3}
  # A 2-core machine, maybe shared with other work: limits for the CPU.
  for s in "${STEPS[@]}"; do LIMIT[$s]=$((LIMIT[$s] * 4)); done
  LIMIT[build]=60
else
  B=${DDPRUN_GPU_BUILD_DIR:-build-gpu}
  DDPRUN=${DDPRUN_GPU_LAUNCHER:-.gpu/launcher/bin/ddprun}
  if [[ -z ${PYTHON:-} ]]; then
    PYTHON=python3
    [[ -x /opt/torch/.venv/bin/python3 ]] && PYTHON=/opt/torch/.venv/bin/python3
  fi
fi
# DDPRUN_GPU_CHECK_LIMITS="STEP=SECONDS,...": other limits, e.g. after a
# first run showed where the time goes.
IFS=, read -r -a overrides <<<"${DDPRUN_GPU_CHECK_LIMITS:-}"
for o in "${overrides[@]}"; do
  [[ $o =~ ^([a-z0-9_]+)=([0-9]+)$ && -n ${LIMIT[${BASH_REMATCH[1]}]:-} ]] ||
    { echo "gpu_check: DDPRUN_GPU_CHECK_LIMITS: '$o' is not STEP=SECONDS of a step" >&2; exit 2; }
  LIMIT[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done
EPOCHS=${DDPRUN_GPU_CHECK_EPOCHS:-3}
[[ $EPOCHS =~ ^[0-9]+$ ]] && ((EPOCHS >= 2)) ||
  { echo "gpu_check: DDPRUN_GPU_CHECK_EPOCHS must be a whole number of at least 2 (got '$EPOCHS')" >&2; exit 2; }
B=$(readlink -m "$B")
DDPRUN=$(readlink -m "$DDPRUN")
DEPS=${DDPRUN_GPU_DEPS:-/opt/deps}
libdir=$DEPS/usr/lib/x86_64-linux-gnu
[[ -n $DRY ]] && libdir=""  # the host's own packages
export CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
# Short store and collective timeouts (worker/src/world.cc reads them): a
# hung rank costs a minute, not the run. PyTorch's NCCL watchdog likewise.
export DDPRUN_STORE_TIMEOUT_S=${DDPRUN_STORE_TIMEOUT_S:-30}
export DDPRUN_COLLECTIVE_TIMEOUT_S=${DDPRUN_COLLECTIVE_TIMEOUT_S:-60}
export TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=${TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC:-60}
export TORCH_NCCL_DUMP_ON_TIMEOUT=0
export PYTHONUNBUFFERED=1

# --- one step, in a child process: `gpu_check.sh __step NAME` ---------------
# Writes its figure (one line) to $FIG; exit 0 pass, 77 skip, else fail.
# Extra summary lines ("STATUS NAME FIGURE") go to $SUB.

bins_of() {  # the binaries a step needs
  case $1 in
    build) ;;
    ddp_demo) echo ddp_demo ;;
    two_ranks | kill9_resume) echo survival_trainer ;;
    model_step) echo model_step_bench ;;
    *) echo "${1%_*}_trainer" ;;
  esac
}

figure() { echo "$*" >"$FIG"; }
skip() { figure "$*"; exit 77; }
fail() { figure "$*"; echo "FAILED: $*"; exit 1; }

# The debs' libraries for ddprun's workers (the launcher bundle carries its
# own through its RPATH); nothing on the dry run.
with_libs() {
  if [[ -n $libdir ]]; then
    LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"
  else
    "$@"
  fi
}
launch() {  # launch NPROC PROGRAM ARGS...: ddprun, standalone, no restarts
  local n=$1; shift
  with_libs "$DDPRUN" --standalone --nproc_per_node="$n" --max_restarts=0 --no_python "$@"
}

nccl_include() {  # the NCCL headers' folder: the wheel's first, then CUDA's
  local d
  d=$("$PYTHON" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "include"))' 2>/dev/null)
  for d in "$d" $(compgen -G "$(dirname "$(command -v "$PYTHON")")/../lib/python3*/site-packages/nvidia/nccl/include") \
           "$CUDA_PATH/include" /usr/include; do
    [[ -n $d && -f $d/nccl.h ]] && { readlink -f "$d"; return 0; }
  done
  return 1
}

step_build() {
  local targets=(ddp_demo model_step_bench) t
  for t in "${TRAINERS[@]}"; do targets+=("${t}_trainer"); done
  if [[ -n $DRY ]]; then
    [[ -f $B/build.ninja ]] || fail "$B has no build.ninja: configure the host build first"
    local t missing=() stale
    for t in "${targets[@]}"; do [[ -x $B/bin/$t ]] || missing+=("$t"); done
    ((${#missing[@]} == 0)) || fail "not built in $B: ${missing[*]}"
    # ninja -n runs nothing (nor CMake's re-run): safe beside another build.
    stale=$(ninja -C "$B" -n "${targets[@]}" 2>&1 | grep -c '^\[')
    figure "${#targets[@]}/${#targets[@]} targets in $B (dry run: not rebuilt; ninja -n: $([[ $stale == 0 ]] && echo 'up to date' || echo 'out of date'))"
    return 0
  fi
  [[ -d .gpu/debs ]] || fail "no .gpu/debs: run scripts/gpu_prepare.sh where the checkout is, carry .gpu"
  [[ -x $DDPRUN ]] || fail "no launcher at $DDPRUN: run scripts/gpu_prepare.sh, carry .gpu"
  local d
  mkdir -p "$DEPS"
  for d in .gpu/debs/*.deb; do dpkg-deb -x "$d" "$DEPS" || fail "dpkg-deb -x $d failed"; done
  export PATH=$CUDA_PATH/bin:$PATH CUDACXX=$CUDA_PATH/bin/nvcc
  local torch_prefix nccl
  torch_prefix=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)') ||
    fail "$PYTHON cannot import torch"
  nccl=$(nccl_include) || fail "no nccl.h in the wheel's nvidia/nccl/include nor $CUDA_PATH/include"
  echo "torch cmake prefix: $torch_prefix; nccl.h: $nccl; nvcc: $(command -v nvcc)"
  # -I (not -isystem): searched before the -isystem folders Torch's targets
  # add, so the wheel's nccl.h wins over one in CUDA's include folder.
  # DT_RPATH (not RUNPATH) on the programs also finds what the debs'
  # libraries load (cairo's), with no LD_LIBRARY_PATH for Python to inherit.
  # The debs' pkgconf (and the libpkgconf it loads) unless the machine has one.
  local pkgconfig
  pkgconfig=$(command -v pkg-config || echo "$DEPS/usr/bin/pkgconf")
  LD_LIBRARY_PATH=$libdir PKG_CONFIG_PATH=$libdir/pkgconfig:$DEPS/usr/share/pkgconfig \
    PKG_CONFIG_SYSROOT_DIR=$DEPS \
    cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPKG_CONFIG_EXECUTABLE="$pkgconfig" \
    -DDDPRUN_WITH_TORCH=ON -DDDPRUN_BUILD_TESTS=OFF \
    -DDDPRUN_BUILD_LAUNCHER=OFF -DDDPRUN_LAUNCHER_DIR="$root/.gpu/launcher" \
    -DDDPRUN_FETCH_GLOO=OFF -DDDPRUN_GLOO_INCLUDE_DIR="$DEPS/usr/include" \
    -DCUDAToolkit_ROOT="$CUDA_PATH" \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$DEPS/usr" \
    -DCMAKE_LIBRARY_PATH="$libdir" \
    -DCMAKE_INCLUDE_PATH="$DEPS/usr/include;$DEPS/usr/include/nifti" \
    -DCMAKE_CXX_FLAGS="-I$nccl" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$libdir -Wl,--disable-new-dtags -Wl,-rpath,$libdir" ||
    { cp "$B/CMakeFiles/CMakeConfigureLog.yaml" "$WORK/logs/build.configure.yaml" 2>/dev/null
      fail "cmake configure failed: $(grep -m1 -A2 'CMake Error' "$LOG" | tr '\n' ' ')"; }
  local rc=0
  ninja -C "$B" -k 0 "${targets[@]}" || rc=$?
  local built=() missing=() unresolved=""
  for t in "${targets[@]}"; do
    if [[ -x $B/bin/$t ]]; then built+=("$t"); else missing+=("$t"); fi
  done
  # Every library found through the programs' RPATH alone; the steps also
  # set LD_LIBRARY_PATH to the debs' libraries, so say which way it works.
  local note=""
  for t in "${built[@]}"; do
    d=$(LD_LIBRARY_PATH=$libdir ldd "$B/bin/$t" | grep 'not found' | awk '{print $1}' | tr '\n' ' ')
    [[ -n $d ]] && unresolved+="$t: $d"
    d=$(env -u LD_LIBRARY_PATH ldd "$B/bin/$t" | grep -c 'not found')
    ((d == 0)) || note="; needs LD_LIBRARY_PATH=$libdir"
  done
  [[ -z $unresolved ]] || fail "libraries not found: $unresolved"
  if ((rc != 0 || ${#missing[@]} > 0)); then
    fail "${#built[@]}/${#targets[@]} built; missing ${missing[*]}; first error: $(grep -m1 -E 'error:|FAILED:' "$LOG")"
  fi
  figure "${#built[@]}/${#targets[@]} targets built; nccl.h from $nccl$note"
}

# check_log LOG BACKEND DEVICE: rank 0's "backend B, device D" line names
# the expected backend and device (no silent CPU fallback). Prints them.
check_log() {
  local line b d
  line=$(grep -m1 -iE 'backend[ :=]+[a-z]+.*device[ :=]+[a-z]+' "$1")
  [[ -n $line ]] || { echo "the log names no backend and device"; return 1; }
  b=$(sed -E 's/.*backend[ :=]+([a-z]+).*/\1/I' <<<"$line")
  d=$(sed -E 's/.*device[ :=]+([a-z]+(:[0-9]+)?).*/\1/I' <<<"$line")
  [[ ${b,,} == "$2" && ${d%%:*} == "$3" ]] ||
    { echo "expected $2 on $3, the log says $b on $d: $line"; return 1; }
  echo "$b on $d"
}

step_ddp_demo() {
  local backend=nccl device=cuda
  [[ -n $DRY ]] && backend=gloo device=cpu
  NCCL_DEBUG=${NCCL_DEBUG:-INFO} launch 1 "$B/bin/ddp_demo" --steps 50 >"$WORK/ddp_demo.log" 2>&1
  local rc=$?
  cat "$WORK/ddp_demo.log"
  ((rc == 0)) || fail "exit $rc: $(grep -m1 -iE 'error|what\(\)' "$WORK/ddp_demo.log")"
  local seen
  if grep -q 'backend [a-z]* device' "$WORK/ddp_demo.log"; then
    seen=$(check_log "$WORK/ddp_demo.log" "$backend" "$device") || fail "$seen"
  else  # a ddp_demo that names its backend only
    grep -q "backend $backend" "$WORK/ddp_demo.log" ||
      fail "not on $backend: $(grep -m1 'backend' "$WORK/ddp_demo.log")"
    seen="backend $backend"
  fi
  local loss nccl_v
  loss=$(grep -o 'step 50 loss [0-9.e+-]*' "$WORK/ddp_demo.log" | awk '{print $4}')
  nccl_v=$(grep -m1 -o 'NCCL version [^ ]*' "$WORK/ddp_demo.log")
  figure "$seen, step 50 loss ${loss:-?}${nccl_v:+; $nccl_v}"
}

synthetic() {  # TRAINER: its synthetic data folder, made once
  local t=$1 dir=$WORK/data-$1
  # On the GPU the sizes of bench/trainer_throughput's small runs; on the
  # dry run's CPU a third of them or less (the logic is what it checks).
  declare -A synth=([survival]="--n 96" [segmentation]="--n 128" [vqa]="--n 320"
                    [ddpm]="--n 24 --synthetic_size 16" [cascade]="--n 16 --stages 8")
  [[ -n $DRY ]] && synth=([survival]="--n 32" [segmentation]="--n 16" [vqa]="--n 96"
                          [ddpm]="--n 16 --synthetic_size 16" [cascade]="--n 12 --stages 8")
  if [[ ! -f $dir/.done ]]; then
    rm -rf "$dir"
    with_libs "$B/bin/${t}_trainer" --make_synthetic "$dir" ${synth[$t]} >/dev/null ||
      return 1
    touch "$dir/.done"
  fi
  echo "$dir"
}

train_flags() {  # TRAINER DATA_DIR
  case $1 in
    survival) echo "--csv_path $2/survival.csv" ;;
    segmentation) echo "--data_path $2/prompts.jsonl" ;;
    vqa) echo "--data_path $2/vqa.jsonl" ;;
    ddpm) echo "--csv_path $2/cases.csv --stages 16" ;;
    cascade) echo "--dataset_path $2 --stages 8 --voxel_dim 16 --batch_size 2" ;;
  esac
}

# loss_falls METRICS: prints "first -> last over N epochs", exit 1 unless
# the last epoch's training loss is below the first's.
loss_falls() {
  "$PYTHON" - "$1" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
first, last = rows[0]["train_loss"], rows[-1]["train_loss"]
print("loss %.4g -> %.4g over %d epochs" % (first, last, len(rows)))
sys.exit(0 if len(rows) >= 2 and math.isfinite(last) and last < first else 1)
PY
}

# train TRAINER AMP NPROC BACKEND DEVICE: a few epochs, loss falls, log
# names BACKEND on DEVICE.
train() {
  local t=$1 amp=$2 n=$3 backend=$4 device=$5 data out log
  data=$(synthetic "$t") || fail "--make_synthetic failed"
  out=$WORK/$STEP log=$WORK/$STEP.log
  rm -rf "$out"
  launch "$n" "$B/bin/${t}_trainer" $(train_flags "$t" "$data") --epochs "$EPOCHS" --seed 5 \
    --amp "$amp" --output_dir "$out" >"$log" 2>&1
  local rc=$?
  cat "$log"
  cp "$out/metrics.jsonl" "$WORK/logs/$STEP.metrics.jsonl" 2>/dev/null
  ((rc == 0)) || fail "exit $rc: $(grep -m1 -iE 'error|what\(\)' "$log")"
  local seen loss
  seen=$(check_log "$log" "$backend" "$device") || fail "$seen"
  loss=$(loss_falls "$out/metrics.jsonl") || fail "loss did not fall: $loss"
  local rate
  rate=$(tail -1 "$out/metrics.jsonl" | grep -o '"samples_per_s":[0-9.]*' | grep -o '[0-9.]*$')
  figure "$loss; $seen${rate:+; last epoch $(printf '%.1f' "$rate") samples/s}"
}

libtorch_major() {  # of the build (dry run): TorchConfigVersion.cmake
  local dir
  dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$B/CMakeCache.txt")
  sed -n 's/^set(PACKAGE_VERSION "\([0-9]*\)\..*/\1/p' "$dir/TorchConfigVersion.cmake" 2>/dev/null
}

step_trainer() {  # STEP = TRAINER_AMP
  local t=${STEP%_*} amp=${STEP##*_}
  if [[ -n $DRY ]]; then
    if [[ $amp == fp16 && $(libtorch_major) == 1 ]]; then
      skip "LibTorch 1.x has no CPU float16 autocast (the trainer would run bf16)"
    fi
    train "$t" "$amp" 1 gloo cpu
  else
    train "$t" "$amp" 1 nccl cuda
  fi
}

step_two_ranks() {
  # NCCL refuses two ranks on one GPU; Gloo reduces CUDA tensors instead.
  local device=cuda
  [[ -n $DRY ]] && device=cpu
  DDPRUN_BACKEND=gloo DDPRUN_DEVICE=$device train survival bf16 2 gloo "$device"
}

step_kill9_resume() {
  local data flags
  data=$(synthetic survival) || fail "--make_synthetic failed"
  # GPU steps take milliseconds: enough of them that the kill, a poll after
  # the first checkpoint, lands before the end (checked below).
  local schedule="--epochs 6 --checkpoint_every 10"
  [[ -n $DRY ]] && schedule="--epochs 3 --checkpoint_every 4"
  flags="$(train_flags survival "$data") $schedule --amp bf16 --seed 7"
  rm -rf "$WORK/full" "$WORK/killed"
  launch 1 "$B/bin/survival_trainer" $flags --output_dir "$WORK/full" >"$WORK/full.log" 2>&1 ||
    fail "the uninterrupted run failed: $(tail -2 "$WORK/full.log" | tr '\n' ' ')"
  # Its own process group, so kill -9 takes ddprun and its workers at once.
  setsid bash -c '[[ -n $0 ]] && export LD_LIBRARY_PATH=$0; exec "$@"' "$libdir" "$DDPRUN" \
    --standalone --nproc_per_node=1 --max_restarts=0 --no_python "$B/bin/survival_trainer" \
    $flags --output_dir "$WORK/killed" >"$WORK/killed.1.log" 2>&1 &
  local pid=$! polls=0
  # A finished checkpoint only: the temporary ckpt-*.pt.tmp.PID is not one.
  until compgen -G "$WORK/killed/checkpoints/ckpt-????????????.pt" >/dev/null; do
    kill -0 "$pid" 2>/dev/null || fail "the run ended before its first checkpoint: $(tail -2 "$WORK/killed.1.log" | tr '\n' ' ')"
    sleep 0.1; polls=$((polls + 1))
    ((polls < 1200)) || { kill -9 -- -"$pid"; fail "no checkpoint within 120 s"; }
  done
  kill -9 -- -"$pid"; wait "$pid" 2>/dev/null
  local at
  at=$(ls "$WORK/killed/checkpoints" | tr '\n' ' ')
  echo "killed after: $at"
  launch 1 "$B/bin/survival_trainer" $flags --output_dir "$WORK/killed" >"$WORK/killed.2.log" 2>&1 ||
    fail "the re-run failed: $(tail -2 "$WORK/killed.2.log" | tr '\n' ' ')"
  cat "$WORK/killed.2.log"
  cp "$WORK/full/metrics.jsonl" "$WORK/logs/kill9_resume.full.metrics.jsonl"
  cp "$WORK/killed/metrics.jsonl" "$WORK/logs/kill9_resume.resumed.metrics.jsonl"
  local resumed
  resumed=$(grep -m1 -o 'resumed from checkpoint at step [0-9]*' "$WORK/killed.2.log") ||
    fail "the re-run did not resume (checkpoints then: $at)"
  local tol=0.0001
  [[ -z $DRY ]] && tol=0.05  # cuDNN's bf16 3D convolutions are not deterministic
  local verdict
  verdict=$("$PYTHON" - "$WORK/full/metrics.jsonl" "$WORK/killed/metrics.jsonl" "$tol" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if l.strip()][-1] for p in sys.argv[1:3])
tol = float(sys.argv[3])
rel = abs(a["train_loss"] - b["train_loss"]) / max(abs(a["train_loss"]), 1e-12)
print("final step %d vs %d, loss %.5g vs %.5g (rel diff %.1e, tolerance %g)" %
      (b["step"], a["step"], b["train_loss"], a["train_loss"], rel, tol))
sys.exit(0 if a["step"] == b["step"] and rel <= tol else 1)
PY
  ) || fail "${resumed/resumed from checkpoint at/resumed at}; $verdict"
  local at_step=${resumed##* } final
  final=$(sed -n 's/^final step \([0-9]*\).*/\1/p' <<<"$verdict")
  ((at_step > 0 && at_step < final)) ||
    fail "resumed at step $at_step of $final: the kill came after the end; $verdict"
  figure "${resumed/resumed from checkpoint at/resumed at}; $verdict"
}

step_model_step() {
  local device=cuda steps=20 warmup=5
  [[ -n $DRY ]] && device=cpu steps=2 warmup=1
  "$PYTHON" -c 'import torch' 2>/dev/null || skip "$PYTHON has no torch for the Python twins"
  local json=$WORK/model_step.json rc=0
  rm -f "$json"
  with_libs "$PYTHON" bench/model_step/run.py --bin-dir "$B/bin" --device "$device" \
    --trainers "${DDPRUN_GPU_CHECK_BENCH_TRAINERS:-survival,segmentation}" --precision bf16 \
    --steps "$steps" --warmup "$warmup" --rounds 1 --check --timeout 100 --json "$json" || rc=$?
  [[ -f $json ]] || fail "run.py exit $rc, no results"
  cp "$json" "$OUT/model_step.json"
  # One summary line per model check and per timed configuration.
  "$PYTHON" - "$json" >"$SUB" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["checks"]:
    ok = c.get("ok")
    what = c.get("error") or ("loss rel diff %.1e, weights %.1e, buffers %.1e (tolerance %g)" % (
        c["max_loss_rel_diff"], c["max_param_abs_diff"], c["max_buffer_abs_diff"], c["tolerance"]))
    print("%s check_%s %s" % ("PASS" if ok else "FAIL", c["trainer"], what))
for row in r["rows"]:
    name = "%s_%s" % (row["trainer"], row["precision"])
    if "ratio" in row:
        print("PASS %s C++/Python %.3f (%.1f vs %.1f samples/s)" % (
            name, row["ratio"], row["cpp_samples_per_s"], row["python_samples_per_s"]))
    else:
        print("FAIL %s %s" % (name, row.get("failed") or row.get("error")))
PY
  local failed
  failed=$(grep -c '^FAIL' "$SUB")
  ((rc == 0 && failed == 0)) || fail "$failed of $(wc -l <"$SUB") parts failed (run.py exit $rc)"
  figure "$(grep -c '^PASS check' "$SUB") checks match, $(grep -vc '^PASS check' "$SUB") configurations timed"
}

if [[ ${1:-} == __step ]]; then
  STEP=$2
  for b in $(bins_of "$STEP"); do
    [[ -x $B/bin/$b ]] || skip "$b not built (see build)"
  done
  case $STEP in
    build | ddp_demo | two_ranks | kill9_resume | model_step) "step_$STEP" ;;
    *) step_trainer ;;
  esac
  exit 0
fi

# --- the run ------------------------------------------------------------------
selected=()
for a in "$@"; do
  case $a in
    train) selected+=(ddp_demo)
           for t in "${TRAINERS[@]}"; do selected+=("${t}_bf16" "${t}_fp16"); done
           selected+=(two_ranks) ;;
    resume) selected+=(kill9_resume) ;;
    bench) selected+=(model_step) ;;
    all) selected+=("${STEPS[@]}") ;;
    *) [[ -n ${LIMIT[$a]:-} ]] ||
         { echo "gpu_check: unknown step '$a' (steps: ${STEPS[*]}; groups: train resume bench all)" >&2; exit 2; }
       selected+=("$a") ;;
  esac
done
((${#selected[@]})) || selected=("${STEPS[@]}")
# A step whose binaries are missing needs the build first.
if [[ ${selected[0]} != build ]]; then
  for s in "${selected[@]}"; do
    for b in $(bins_of "$s"); do
      [[ -x $B/bin/$b ]] || { selected=(build "${selected[@]}"); break 2; }
    done
  done
fi

OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT" || exit 2
OUT=$(readlink -f "$OUT")
WORK=${DDPRUN_GPU_CHECK_WORK:-$(mktemp -d /tmp/ddprun-gpu-check.XXXXXX)}
mkdir -p "$WORK/logs" "$WORK/fig"
WORK=$(readlink -f "$WORK")
case $WORK/ in "$OUT"/*) echo "gpu_check: the work folder must be outside \$OUT" >&2; exit 2 ;; esac
rm -f "$OUT/summary.txt" "$OUT/logs.tar.gz" "$OUT/model_step.json"
export B DDPRUN PYTHON DEPS WORK OUT DRY
budget=${DDPRUN_GPU_CHECK_BUDGET_S:-$([[ -n $DRY ]] && echo 1200 || echo 450)}
deadline=$((SECONDS + budget))
summary=$OUT/summary.txt
tag=ddprun-gpu-check-$$-$RANDOM
passed=0 failed=0 skipped=0 child=

say() { echo "$*" | tee -a "$summary"; }
pack() {  # the logs, rewritten whole: a kill leaves the last complete one
  tar -czf "$OUT/.logs.tmp" -C "$WORK" logs 2>/dev/null && mv -f "$OUT/.logs.tmp" "$OUT/logs.tar.gz"
}
# Ends every process a step left behind: each carries the step's tag in its
# environment (inherited by ddprun's workers), whatever its process group.
reap() {
  local p
  for p in /proc/[0-9]*; do
    grep -qsxzF "DDPRUN_GPU_CHECK_TAG=$1" "$p/environ" 2>/dev/null && kill -KILL "${p#/proc/}" 2>/dev/null
  done
}
record() {  # STATUS NAME SECONDS FIGURE
  printf '%-4s %-22s %4d s  %s\n' "$1" "$2" "$3" "$4" | tee -a "$summary"
  case $1 in PASS) passed=$((passed + 1)) ;; FAIL) failed=$((failed + 1)) ;; *) skipped=$((skipped + 1)) ;; esac
}
finish() {  # SIGNAL-NAME or empty
  trap - EXIT TERM INT HUP
  if [[ -n $child ]]; then
    kill -TERM "$child" 2>/dev/null; sleep 1; kill -KILL "$child" 2>/dev/null
    reap "$tag-$current"
    record FAIL "$current" $((SECONDS - t0)) "cut short by SIG$1"
    recorded=$index
  fi
  # A signal between two steps (the step at `index` chosen, not yet
  # started) leaves that step unrecorded: it is skipped with the rest.
  local s
  for s in "${selected[@]:$((recorded + 1))}"; do
    [[ -n $1 ]] && record SKIP "$s" 0 "not run: the check was stopped by SIG$1"
  done
  say "result: $passed passed, $failed failed, $skipped skipped in $SECONDS s (budget $budget s)${1:+; stopped by SIG$1}"
  pack
  # A check stopped by a signal did not run what it was asked to: never 0.
  exit $((failed > 0 || ${#1} > 0 ? 1 : 0))
}
index=-1 recorded=-1 current= t0=$SECONDS
for sig in TERM INT HUP; do trap "finish $sig" $sig; done
trap 'finish ""' EXIT

versions() {
  local v
  v=$(timeout 60 "$PYTHON" - 2>&1 <<'PY' | tail -1
import torch
try:
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
except Exception as e:  # a CPU-only torch
    nccl = "none (%s)" % type(e).__name__
print(torch.__version__, torch.version.cuda, nccl)
PY
  )
  local torch_v="" cuda_v="" nccl_v=""
  [[ $v == [0-9]* ]] && read -r torch_v cuda_v nccl_v <<<"$v"
  if [[ -n $DRY ]]; then
    say "device: cpu (dry run): $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
    say "driver: none (dry run)"
    say "cuda: none (dry run)"
    say "nccl: none (dry run: Gloo on CPU)"
  else
    local smi
    smi=$(timeout 30 nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version \
      --format=csv,noheader 2>&1 | head -1)
    say "device: ${smi%,*}; $(nproc) CPU cores"
    say "driver: ${smi##*, }"
    say "cuda: torch built with $cuda_v; nvcc $("$CUDA_PATH/bin/nvcc" --version 2>&1 | grep -o 'release [^,]*' | head -1) at $CUDA_PATH"
    say "nccl: torch's $nccl_v; nccl.h in $(nccl_include || echo 'none found')"
  fi
  local libtorch=""
  [[ -f $B/CMakeCache.txt ]] && libtorch=$(sed -n 's/^Torch_DIR:PATH=//p' "$B/CMakeCache.txt")
  say "torch: ${torch_v:-none ($v)} ($PYTHON)${libtorch:+; LibTorch of the build: $libtorch}"
}

: >"$summary"
versions
say "steps: ${selected[*]}"
for index in "${!selected[@]}"; do
  current=${selected[$index]}
  left=$((deadline - SECONDS))
  if ((left < 15)); then
    record SKIP "$current" 0 "no time left before the deadline ($budget s)"
    recorded=$index
    continue
  fi
  limit=${LIMIT[$current]}
  ((limit > left)) && limit=$left
  log=$WORK/logs/$current.log fig=$WORK/fig/$current sub=$WORK/fig/$current.sub
  rm -f "$fig" "$sub"
  t0=$SECONDS
  echo "== $current (limit $limit s)" >&2
  # timeout's own process group: TERM, then KILL 10 s later, to the whole step.
  DDPRUN_GPU_CHECK_TAG=$tag-$current STEP=$current FIG=$fig SUB=$sub LOG=$log \
    timeout -k 10 "$limit" bash "$self" __step "$current" >"$log" 2>&1 &
  child=$!
  wait "$child"
  rc=$?
  child=
  reap "$tag-$current"
  secs=$((SECONDS - t0))
  what=$(cat "$fig" 2>/dev/null)
  case $rc in
    0) record PASS "$current" "$secs" "$what" ;;
    77) record SKIP "$current" "$secs" "$what" ;;
    124 | 137) record FAIL "$current" "$secs" "timed out after $limit s${what:+; $what}" ;;
    *) record FAIL "$current" "$secs" "${what:-exit $rc: $(tail -1 "$log")}" ;;
  esac
  recorded=$index
  if [[ -s $sub ]]; then
    while read -r st name rest; do
      printf '%-4s %-22s    - s  %s\n' "$st" "$current/$name" "$rest" | tee -a "$summary"
    done <"$sub"
  fi
  pack
done
index=${#selected[@]}
finish ""
