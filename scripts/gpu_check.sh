#!/usr/bin/env bash
# The GPU checks of the LibTorch 2.x issue, run ON a GPU machine (through the
# device tool) after scripts/gpu_prepare.sh made .gpu/ here:
#   build   configure and build the worker, ddp_demo, the trainers and the
#           model-step bench against the machine's own LibTorch (the PyTorch
#           wheel of $PYTHON), with the Debian packages of .gpu/debs
#   train   ddp_demo on NCCL; each trainer on NCCL, cuda:LOCAL_RANK, with
#           bf16 autocast and with fp16 + dynamic loss scaling: the training
#           loss must fall; two ranks sharing the GPU (Gloo on CUDA tensors)
#   resume  survival: kill -9 of ddprun after its first checkpoint, the re-run
#           resumes there and ends with the loss of an uninterrupted run
#   bench   bench/model_step on cuda: each trainer's C++ step against its
#           Python eager twin, fp32/bf16/fp16, ratios
#   all     all four (more than one device call's 10 minutes: use stages)
# Logs and a summary go to $OUT (logs.tar.gz, summary.txt, model_step.json).
# The build stays in build-gpu/ between calls while the machine is warm.
# Exit status: the number of failed checks (capped at 100).
set -uo pipefail
cd "$(dirname "$0")/.."
stage=${1:-all}
OUT=${OUT:-$PWD/gpu-out}
PYTHON=${PYTHON:-python3}
deps=${DDPRUN_GPU_DEPS:-/opt/deps}
# Overrides for trying the stages' logic on CPU with a normal build:
# DDPRUN_GPU_BUILD_DIR=build DDPRUN_GPU_LAUNCHER=build/bin/ddprun.
B=${DDPRUN_GPU_BUILD_DIR:-build-gpu}
DDPRUN=${DDPRUN_GPU_LAUNCHER:-.gpu/launcher/bin/ddprun}
mkdir -p "$OUT/logs"
summary=$OUT/summary.txt
failures=0
note() { echo "$*" | tee -a "$summary"; }
finish() {
  tar -czf "$OUT/logs.tar.gz" -C "$OUT" logs 2>/dev/null
  note "gpu_check $stage: $failures failed"
  exit $((failures > 100 ? 100 : failures))
}
# check NAME CMD...: runs CMD with its output in logs/NAME.log, notes the result.
check() {
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$OUT/logs/$name.log" 2>&1; then
    note "PASS $name ($((SECONDS - t0)) s)"
  else
    local rc=$?
    note "FAIL $name ($((SECONDS - t0)) s): $(tail -3 "$OUT/logs/$name.log" | tr '\n' ' ')"
    failures=$((failures + 1))
    return $rc
  fi
}

[[ -x $DDPRUN && ( $stage != build && $stage != all || -d .gpu/debs ) ]] ||
  { echo "gpu_check: run scripts/gpu_prepare.sh here first and carry .gpu" >&2; exit 2; }
libdir=$deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHON_EXEC=$PYTHON

do_build() {
  mkdir -p "$deps"
  for d in .gpu/debs/*.deb; do dpkg-deb -x "$d" "$deps"; done
  local torch_prefix
  torch_prefix=$("$PYTHON" -c 'import torch;print(torch.utils.cmake_prefix_path)') || return 1
  note "device: $(nvidia-smi -L | head -1); torch $("$PYTHON" -c 'import torch;print(torch.__version__, torch.version.cuda)'); $(g++ --version | head -1)"
  PKG_CONFIG_PATH=$libdir/pkgconfig:$deps/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$deps \
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDDPRUN_BUILD_LAUNCHER=OFF -DDDPRUN_LAUNCHER_DIR="$PWD/.gpu/launcher" \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr" \
    -DCMAKE_LIBRARY_PATH="$libdir" \
    -DCMAKE_INCLUDE_PATH="$deps/usr/include;$deps/usr/include/nifti" \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$libdir" &&
  cmake --build "$B" --target ddp_demo survival_trainer segmentation_trainer \
    vqa_trainer ddpm_trainer model_step_bench
}

# Per trainer: synthetic-data flags and training flags (DATA = its data dir).
declare -A SYNTH=([survival]="--n 96" [segmentation]="--n 128" [vqa]="--n 320"
                  [ddpm]="--n 24 --synthetic_size 16")
declare -A DATA=([survival]="--csv_path DATA/survival.csv"
                 [segmentation]="--data_path DATA/prompts.jsonl"
                 [vqa]="--data_path DATA/vqa.jsonl"
                 [ddpm]="--csv_path DATA/cases.csv --stages 16")
work=$OUT/work
flags_of() { echo "${DATA[$1]//DATA/$work/data-$1}"; }

# loss_falls DIR: the last epoch's train_loss is below the first's.
loss_falls() {
  "$PYTHON" - "$1/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
first, last = rows[0]["train_loss"], rows[-1]["train_loss"]
print("train_loss %.5f -> %.5f over %d epochs" % (first, last, len(rows)))
sys.exit(0 if len(rows) >= 2 and last < first else 1)
PY
}

train_on_gpu() {  # NAME AMP [ddprun flags...]
  local t=$1 amp=$2; shift 2
  local out=$work/$t-$amp
  rm -rf "$out"
  "$DDPRUN" --standalone --no_python "$@" "$B/bin/${t}_trainer" $(flags_of "$t") \
    --epochs 4 --amp "$amp" --output_dir "$out"
  loss_falls "$out"
}

do_train() {
  mkdir -p "$work"
  check ddp_demo_nccl "$DDPRUN" --standalone --nproc_per_node=1 --no_python "$B/bin/ddp_demo" --steps 50
  for t in ${DDPRUN_GPU_TRAINERS:-survival segmentation vqa ddpm}; do
    "$B/bin/${t}_trainer" --make_synthetic "$work/data-$t" ${SYNTH[$t]} >/dev/null
    check "${t}_nccl_bf16" train_on_gpu "$t" bf16 --nproc_per_node=1
    check "${t}_nccl_fp16" train_on_gpu "$t" fp16 --nproc_per_node=1
  done
  # NCCL refuses two ranks on one GPU; Gloo reduces CUDA tensors instead.
  check survival_two_ranks_one_gpu two_ranks_one_gpu
}

two_ranks_one_gpu() {
  DDPRUN_BACKEND=gloo DDPRUN_DEVICE=cuda train_on_gpu survival bf16 --nproc_per_node=2
}

# resume_matches: an uninterrupted run against one killed with -9 after its
# first checkpoint and run again into the same output directory.
resume_matches() {
  local data=$work/data-survival flags
  [[ -d $data ]] || "$B/bin/survival_trainer" --make_synthetic "$data" --n 96 >/dev/null
  flags="$(flags_of survival) --epochs 4 --checkpoint_every 10 --amp bf16 --seed 7"
  rm -rf "$work/full" "$work/killed"
  "$DDPRUN" --standalone --nproc_per_node=1 --no_python "$B/bin/survival_trainer" \
    $flags --output_dir "$work/full" || return 1
  setsid "$DDPRUN" --standalone --nproc_per_node=1 --no_python "$B/bin/survival_trainer" \
    $flags --output_dir "$work/killed" > "$work/killed.1.log" 2>&1 &
  local pid=$! waited=0
  until compgen -G "$work/killed/checkpoints/ckpt-*" >/dev/null; do
    sleep 0.2; waited=$((waited + 1))
    ((waited < 600)) || { echo "no checkpoint within 120 s"; return 1; }
  done
  kill -9 -- -"$pid"; wait "$pid" 2>/dev/null
  echo "killed after: $(ls "$work/killed/checkpoints" | tr '\n' ' ')"
  "$DDPRUN" --standalone --nproc_per_node=1 --no_python "$B/bin/survival_trainer" \
    $flags --output_dir "$work/killed" 2>&1 | tee "$work/killed.2.log" || return 1
  grep -q "resumed" "$work/killed.2.log" || { echo "the re-run did not resume"; return 1; }
  "$PYTHON" - "$work/full/metrics.jsonl" "$work/killed/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p) if l.strip()][-1] for p in sys.argv[1:])
print("uninterrupted: step %d loss %.6f; resumed: step %d loss %.6f" %
      (a["step"], a["train_loss"], b["step"], b["train_loss"]))
# cuDNN's 3D convolutions are not bit-deterministic: equal within 1%.
sys.exit(0 if a["step"] == b["step"] and
         abs(a["train_loss"] - b["train_loss"]) <= 0.01 * abs(a["train_loss"]) else 1)
PY
}

do_resume() { mkdir -p "$work"; check survival_kill9_resume resume_matches; }

do_bench() {
  check model_step_cuda "$PYTHON" bench/model_step/run.py --bin-dir "$B/bin" \
    --device cuda --precision fp32,bf16,fp16 --rounds 3 --check --json "$OUT/model_step.json"
  tail -20 "$OUT/logs/model_step_cuda.log" >>"$summary"
}

case $stage in
  build) check build do_build ;;
  train) do_train ;;
  resume) do_resume ;;
  bench) do_bench ;;
  all) check build do_build && { do_train; do_resume; do_bench; } ;;
  *) echo "usage: $0 build|train|resume|bench|all" >&2; exit 2 ;;
esac
finish
