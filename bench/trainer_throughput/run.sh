#!/usr/bin/env bash
# Samples/s of each built trainer at 1 and 2 ranks on CPU, as a table.
# Usage: bench/trainer_throughput/run.sh [BUILD_DIR] [EPOCHS]
# 1 rank runs the trainer alone; 2 ranks run it under
# `ddprun --standalone --nproc_per_node=2`. The number is the trainer's own
# samples_per_s (global samples over all ranks per second of training,
# validation excluded) from the last line of its metrics.jsonl.
# Not part of ctest: it takes a few minutes.
set -euo pipefail
BUILD=${1:-build}
EPOCHS=${2:-2}
BIN="$BUILD/bin"
WORK=$(mktemp -d /tmp/trainer_throughput.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# name | synthetic flags | training flags (data path appended by data_flag).
# ddpm+syncbn is ddpm with --norm batch --sync_batchnorm (two all-reduces per
# norm layer per forward/backward): the price of synchronised statistics.
# cascade reports its last stage (16^3 volumes; the last metrics line).
declare -A EXE=(
  [survival]=survival [segmentation]=segmentation [vqa]=vqa [ddpm]=ddpm
  [ddpm+syncbn]=ddpm [cascade]=cascade
)
declare -A SYNTH=(
  [survival]="--n 96"
  [segmentation]="--n 128"
  [vqa]="--n 320"
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

samples_per_s() {
  python3 -c 'import json,sys; print("%.1f" % json.loads(open(sys.argv[1]).read().splitlines()[-1])["samples_per_s"])' "$1/metrics.jsonl"
}

printf '%-14s %14s %14s %8s\n' trainer "1 rank (s/s)" "2 ranks (s/s)" speedup
for name in survival segmentation vqa ddpm ddpm+syncbn cascade; do
  exe="$BIN/${EXE[$name]}_trainer"
  [[ -x "$exe" ]] || { printf '%-14s %14s\n' "$name" "not built"; continue; }
  data="$WORK/$name-data"
  "$exe" --make_synthetic "$data" ${SYNTH[$name]} >/dev/null
  flags="${DATA[$name]//DATA/$data} --epochs $EPOCHS --checkpoint_every 0"
  # One intra-op thread per process, as ddprun gives each of its workers.
  OMP_NUM_THREADS=1 "$exe" $flags --output_dir "$WORK/$name-1" >"$WORK/$name-1.log" 2>&1
  one=$(samples_per_s "$WORK/$name-1")
  two="n/a"
  if [[ -x "$BIN/ddprun" ]]; then
    "$BIN/ddprun" --standalone --nproc_per_node=2 --no_python "$exe" $flags \
      --output_dir "$WORK/$name-2" >"$WORK/$name-2.log" 2>&1
    two=$(samples_per_s "$WORK/$name-2")
  fi
  speedup=$(python3 -c "import sys; a,b=sys.argv[1:]; print('%.2f' % (float(b)/float(a)) if b!='n/a' else 'n/a')" "$one" "$two")
  printf '%-14s %14s %14s %8s\n' "$name" "$one" "$two" "$speedup"
done
