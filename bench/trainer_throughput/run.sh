#!/usr/bin/env bash
# Strong scaling of each built trainer on CPU: samples/s at 1 and 2 ranks with
# the SAME total batch, the 2-rank/1-rank ratio against the 1-rank run of this
# same bench run, and where each step's time goes (--profile) beside it.
# Usage: bench/trainer_throughput/run.sh [BUILD_DIR] [EPOCHS] [TRAINERS...]
# 1 rank runs the trainer alone with OMP_NUM_THREADS=1 (one intra-op thread,
# as ddprun gives each of its workers); 2 ranks run it under
# `ddprun --standalone --nproc_per_node=2`. Both use the trainer's default
# loader threads. The number is the trainer's own samples_per_s (global
# samples over all ranks per second since the first step, validation and
# epoch-end work included) from the last line of its metrics.jsonl.
# Batches are the guides' (../shared/seeds): at 2 ranks each rank gets the
# guide's per-GPU batch (segmentation 8, vqa 16, ddpm 1) or its share of the
# guide's total (survival 24); 1 rank runs the same total. BATCHES=small
# runs the smaller batches of the issue's first measurement instead
# (survival 8, segmentation 8, vqa 16, ddpm 2 in total). NUM_WORKERS=N
# passes --num_workers N to every run (0: batches load on the training
# thread; by default 1 rank gets a loader thread on the second core and
# each of 2 ranks none, see AutoNumWorkers).
# Beside the speedup: the ceiling, two processes that never communicate,
# each alone on the busier rank's share of the data with the per-rank batch,
# run at the same time (the 2-rank run's work without any of its exchange:
# no data-parallel scheme beats it on this machine), and how much of it the
# 2-rank run reaches. Each number is the median of REPEATS rounds (default
# 3; SHOW_ROUNDS=1 prints them), a round running 1 rank, 2 ranks and the
# ceiling pair back to back. KEEP_WORK=1 keeps data, logs and outputs.
# After the table: how evenly the two cores ran with both busy
# (core_probe.py: synchronous DDP steps at its slowest rank's pace, the
# ceiling adds up whatever each core gives); then the bare Gloo all-reduce
# of each trainer's gradient size between two ranks on this machine
# (allreduce_probe.py), the floor of grad_allreduce_wait without shared
# memory. Both need Debian's python3-torch and are skipped without it.
# The machine's load average is printed before and after: on a loaded
# machine the ratios are noise. Not part of ctest: it takes a few minutes
# (about 3 at REPEATS=3 and 3 epochs on 2 cores).
set -euo pipefail
BUILD=${1:-build}
EPOCHS=${2:-2}
shift $(($# < 2 ? $# : 2))
TRAINERS=("$@")
[[ ${#TRAINERS[@]} -gt 0 ]] ||
  TRAINERS=(survival segmentation vqa ddpm ddpm+syncbn cascade)
BIN="$BUILD/bin"
WORK=$(mktemp -d /tmp/trainer_throughput.XXXXXX)
if [[ -n ${KEEP_WORK:-} ]]; then echo "work dir: $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi

# name | synthetic flags | training flags (DATA replaced by the data dir) |
# batch flags at 1 rank | at 2 ranks (the same total batch: survival's
# --batch_size is the total, the others' is per rank).
# ddpm+syncbn is ddpm with --norm batch --sync_batchnorm (two all-reduces per
# norm layer per forward/backward): the price of synchronised statistics.
# cascade reports its last stage (16^3 volumes; the last metrics line).
declare -A EXE=(
  [survival]=survival [segmentation]=segmentation [vqa]=vqa [ddpm]=ddpm
  [ddpm+syncbn]=ddpm [cascade]=cascade
)
declare -A SYNTH=(
  [survival]="--n 384"
  [segmentation]="--n 256"
  [vqa]="--n 640"
  [ddpm]="--n 24 --synthetic_size 16"
  [ddpm+syncbn]="--n 24 --synthetic_size 16"
  [cascade]="--n 24"
)
declare -A DATA=(
  [survival]="--csv_path DATA/survival.csv"
  [segmentation]="--data_path DATA/prompts.jsonl"
  [vqa]="--data_path DATA/vqa.jsonl"
  [ddpm]="--csv_path DATA/cases.csv --stages 16"
  [ddpm+syncbn]="--csv_path DATA/cases.csv --stages 16 --norm batch --sync_batchnorm"
  [cascade]="--dataset_path DATA"
)
declare -A BATCH1=(
  [survival]="--batch_size 24" [segmentation]="--batch_size 16"
  [vqa]="--batch_size 32" [ddpm]="--batch_size 2" [ddpm+syncbn]="--batch_size 2"
  [cascade]="--batch_size 4"
)
declare -A BATCH2=(
  [survival]="--batch_size 24" [segmentation]="--batch_size 8"
  [vqa]="--batch_size 16" [ddpm]="--batch_size 1" [ddpm+syncbn]="--batch_size 1"
  [cascade]="--batch_size 2"
)
# A ceiling copy's data: half the bench's cases by default (the split of the
# half is each rank's share); where the validation cases do not split evenly
# (ddpm and cascade: 19 train / 5 val, 10 / 3 on rank 0) the copies get the
# busier rank's share instead: 13 cases, 3 of them validation.
declare -A SOLO_SPLIT=(
  [ddpm]="13 --val_fraction 0.23" [ddpm+syncbn]="13 --val_fraction 0.23"
  [cascade]="13 --val_fraction 0.23"
)
# The per-rank batch of a 2-rank run, as one process's --batch_size.
declare -A BATCH_SOLO=(
  [survival]="--batch_size 12" [segmentation]="--batch_size 8"
  [vqa]="--batch_size 16" [ddpm]="--batch_size 1" [ddpm+syncbn]="--batch_size 1"
  [cascade]="--batch_size 2"
)
if [[ ${BATCHES:-guides} == small ]]; then
  SYNTH[survival]="--n 96"; SYNTH[segmentation]="--n 128"; SYNTH[vqa]="--n 320"
  BATCH1[survival]="--batch_size 8"; BATCH2[survival]="--batch_size 8"
  BATCH_SOLO[survival]="--batch_size 4"; BATCH_SOLO[segmentation]="--batch_size 4"
  BATCH_SOLO[vqa]="--batch_size 8"
  BATCH1[segmentation]="--batch_size 8"; BATCH2[segmentation]="--batch_size 4"
  BATCH1[vqa]="--batch_size 16"; BATCH2[vqa]="--batch_size 8"
fi

# The last epoch's samples_per_s and profile of a run's metrics.jsonl.
last_record() {
  python3 - "$1/metrics.jsonl" <<'EOF'
import json, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
p = r.get("profile", {})
phases = ["data_wait", "forward", "backward", "grad_allreduce_wait",
          "optimizer", "metrics", "checkpoint", "validation", "other"]
short = {"data_wait": "data", "grad_allreduce_wait": "allreduce_wait",
         "checkpoint": "ckpt", "validation": "val"}
steps = p.get("steps", 0)
per_step = p.get("wall_s", 0) * 1e3 / steps if steps else 0
print("%.1f" % r["samples_per_s"])
print("%.1f ms/step: " % per_step + " ".join(
    "%s %.1f" % (short.get(k, k), p.get(k + "_ms", 0)) for k in phases) +
    (" (all-reduces %.2f MB per step in %d buckets)" %
     (p["allreduce_mb_per_step"], p["buckets"])
     if "allreduce_mb_per_step" in p else ""))
print("%.3f" % p.get("allreduce_mb_per_step", 0))
EOF
}

REPEATS=${REPEATS:-3}
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo "medians of $REPEATS rounds (each round: 1 rank, 2 ranks, ceiling pair)"
printf '%-14s %14s %14s %8s %9s %14s\n' trainer "1 rank (s/s)" "2 ranks (s/s)" \
  speedup ceiling "2 ranks/ceil"
profiles=""
sizes=()
median() { python3 -c 'import statistics,sys; print("%.1f" % statistics.median(map(float, sys.argv[1:])))' "$@"; }
for name in "${TRAINERS[@]}"; do
  exe="$BIN/${EXE[$name]}_trainer"
  [[ -x "$exe" ]] || { printf '%-14s %14s\n' "$name" "not built"; continue; }
  [[ -x "$BIN/ddprun" ]] || { printf '%-14s %14s\n' "$name" "no ddprun"; continue; }
  data="$WORK/$name-data"
  "$exe" --make_synthetic "$data" ${SYNTH[$name]} >/dev/null
  flags="${DATA[$name]//DATA/$data} --epochs $EPOCHS --checkpoint_every 0 --profile"
  if [[ -n ${NUM_WORKERS:-} ]]; then flags+=" --num_workers $NUM_WORKERS"; fi
  # The ceiling: two processes that never talk, each alone (OMP_NUM_THREADS=1,
  # the loader threads a rank gets at 2 ranks) on the busier rank's share of
  # the data with the per-rank batch, at the same time: the per-rank work of
  # the 2-rank run without any of its communication, which no data-parallel
  # scheme can beat on this machine. Their samples/s summed against 1 rank.
  half="$WORK/$name-half"
  n=$(sed -n 's/.*--n \([0-9]*\).*/\1/p' <<<"${SYNTH[$name]}")
  read -r solo_n solo_split <<<"${SOLO_SPLIT[$name]:-$((n / 2))}"
  "$exe" --make_synthetic "$half" ${SYNTH[$name]/--n $n/--n $solo_n} >/dev/null
  solo_flags="${DATA[$name]//DATA/$half} $solo_split --epochs $EPOCHS --checkpoint_every 0 --profile --num_workers ${NUM_WORKERS:-0}"
  ones=() twos=() ceils=()
  for ((round = 0; round < REPEATS; round++)); do
    rm -rf "$WORK/$name-1" "$WORK/$name-2" "$WORK/$name-solo-"{a,b}
    OMP_NUM_THREADS=1 "$exe" $flags ${BATCH1[$name]} \
      --output_dir "$WORK/$name-1" >"$WORK/$name-1.log" 2>&1
    mapfile -t one < <(last_record "$WORK/$name-1")
    "$BIN/ddprun" --standalone --nproc_per_node=2 --no_python "$exe" $flags \
      ${BATCH2[$name]} --output_dir "$WORK/$name-2" >"$WORK/$name-2.log" 2>&1
    mapfile -t two < <(last_record "$WORK/$name-2")
    for copy in a b; do
      OMP_NUM_THREADS=1 "$exe" $solo_flags ${BATCH_SOLO[$name]} \
        --output_dir "$WORK/$name-solo-$copy" >"$WORK/$name-solo-$copy.log" 2>&1 &
    done
    wait
    mapfile -t solo_a < <(last_record "$WORK/$name-solo-a")
    mapfile -t solo_b < <(last_record "$WORK/$name-solo-b")
    ones+=("${one[0]}") twos+=("${two[0]}")
    ceils+=("$(python3 -c 'import sys; print(float(sys.argv[1]) + float(sys.argv[2]))' "${solo_a[0]}" "${solo_b[0]}")")
  done
  [[ -z ${SHOW_ROUNDS:-} ]] || echo "  rounds: 1 rank ${ones[*]}; 2 ranks ${twos[*]}; ceiling ${ceils[*]}"
  read -r m1 m2 mc <<<"$(median "${ones[@]}") $(median "${twos[@]}") $(median "${ceils[@]}")"
  python3 -c 'import sys; n,a,b,c=sys.argv[1:]; a,b,c=map(float,(a,b,c)); print("%-14s %14.1f %14.1f %8.2f %9.2f %13.0f%%" % (n, a, b, b/a, c/a, 100*b/c))' "$name" "$m1" "$m2" "$mc"
  profiles+="$name, 1 rank      : ${one[1]}"$'\n'"$name, 2 ranks     : ${two[1]}"$'\n'
  profiles+="$name, ceiling copy: ${solo_a[1]}"$'\n'
  if [[ ${two[2]} != 0.000 && ${two[2]} != 0 ]]; then sizes+=("${two[2]}"); fi
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 "$(dirname "$0")/core_probe.py" 2 3
fi
echo
echo "where a step's time goes, last epoch of the last round, rank 0 (--profile, ms per step):"
printf '%s' "$profiles"
if ((${#sizes[@]})) && [[ -x "$BIN/ddprun" ]] &&
  /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  echo
  echo "bare Gloo all-reduce of those gradient sizes between 2 ranks here (fp32):"
  PYTHON_EXEC=/usr/bin/python3 "$BIN/ddprun" --standalone --nproc_per_node=2 \
    "$(dirname "$0")/allreduce_probe.py" "${sizes[@]}" 2>&1 |
    sed -n 's/^\[default0\]://p'
fi
