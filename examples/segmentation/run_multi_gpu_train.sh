#!/bin/bash
# prs-med-segmentation.md's run_multi_gpu_train.sh (its option 1) with
# ddprun and segmentation_trainer: one process per GPU of this node, the
# guide script's settings (per-GPU batch 8, base learning rate 1e-4 scaled by
# the number of processes, 20 epochs, ./checkpoints, 4 loader threads, seed
# 42).
#   run_multi_gpu_train.sh <data_root> [num_procs] [more trainer flags...]
# data_root: the guide's layout (annotations/*.csv, images_and_masks/), e.g.
#   from `segmentation_trainer --make_synthetic data`. num_procs: default the
#   GPUs nvidia-smi lists; without nvidia-smi 1 process on the CPU (the
#   guide's script stops there). Flags after it go to the trainer (e.g.
#   --output_dir runs/x --amp bf16); to change the settings above, run the
#   ddprun line below yourself (a flag given twice is an error).
# Binaries: DDPRUN_BIN and TRAINER (environment), else this checkout's
# build/bin, else ddprun / segmentation_trainer on PATH. The rendezvous is
# --standalone (a free local port), so "Address already in use" cannot
# happen.
set -euo pipefail

DATA_ROOT=${1:-data}
bin_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build/bin"
find_bin() {  # name -> this checkout's build, else PATH
  if [[ -x "$bin_dir/$1" ]]; then echo "$bin_dir/$1"; else echo "$1"; fi
}
DDPRUN_BIN=${DDPRUN_BIN:-$(find_bin ddprun)}
TRAINER=${TRAINER:-$(find_bin segmentation_trainer)}

if [[ $# -ge 2 ]]; then
  NUM_PROCS=$2
elif command -v nvidia-smi >/dev/null 2>&1; then
  NUM_PROCS=$(nvidia-smi --list-gpus | wc -l)
else
  NUM_PROCS=1
  echo "note: no nvidia-smi: 1 process on the CPU (Gloo)"
fi
if ! [[ "$NUM_PROCS" =~ ^[1-9][0-9]*$ ]]; then
  echo "error: num_procs must be a positive number, got '$NUM_PROCS'" >&2
  exit 2
fi
shift $(($# < 2 ? $# : 2))

echo "Starting training with $NUM_PROCS processes"
echo "Data root: $DATA_ROOT"
"$DDPRUN_BIN" --standalone --nproc_per_node="$NUM_PROCS" --no_python \
  "$TRAINER" \
  --data_root "$DATA_ROOT" \
  --batch_size 8 \
  --learning_rate 1e-4 \
  --num_epochs 20 \
  --checkpoint_dir ./checkpoints \
  --num_workers 4 \
  --seed 42 \
  "$@"
echo "Training completed!"
