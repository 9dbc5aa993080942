#!/usr/bin/env bash
# The CUDA build check, in a Debian trixie root (scripts/trixie_root.sh cuda)
# against trixie's CUDA LibTorch 2.6 (libtorch-cuda-dev, with NCCL):
#   1. build: ddprun, the worker runtime, the trainers and their tests, with
#      the same script and arguments as docker/Dockerfile.cuda's build stage,
#      and that image's runtime package list checked against what the
#      binaries load;
#   2. run: a CUDA LibTorch must still run CPU jobs on a machine without a
#      GPU, every library it loads found. The GPU check's own CPU dry run
#      (scripts/gpu_check.sh, DDPRUN_GPU_CHECK_DRY=cpu) runs the CUDA-built
#      ddp_demo and survival_trainer (bf16, a few epochs, Gloo on CPU:
#      the loss must fall and the log name gloo on cpu), under ddprun.
# Offline, trixie_build.sh installs a placeholder for cuDNN (trixie's
# nvidia-cudnn downloads it from NVIDIA), so the run loads a stand-in whose
# functions abort if called (scripts/cudnn_standin.sh): a CPU job calls
# none. The root holds ~7 GB of CUDA packages, so this is not part of CI's
# default run: run it before changing worker/, a trainer's device code or
# Dockerfile.cuda.
# Usage: scripts/libtorch2_cuda_check.sh [--quick] [HOST_BUILD_DIR]
#   --quick  only what the run needs: ddp_demo and survival_trainer built in
#            the root, with the host build's launcher carried in as a bundle
#            (HOST_BUILD_DIR, default build) instead of building it there.
# Results: the summary in /work/out/cuda-cpu-check of the root (printed).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [[ ${1:-} == --quick ]]; then quick=1; shift; fi
host_build=${1:-build}

root=$(bash scripts/trixie_root.sh cuda)
if ((quick)); then
  bash scripts/bundle_launcher.sh "$host_build" "$root/work/out/launcher"
  DDPRUN_LAUNCHER_DIR=/work/out/launcher DDPRUN_BUILD_TARGETS="ddp_demo survival_trainer" \
    bash scripts/trixie_root.sh cuda -- bash /work/src/scripts/trixie_build.sh cuda
  launcher=/work/out/launcher/bin/ddprun
else
  bash scripts/trixie_root.sh cuda -- bash /work/src/scripts/trixie_build.sh cuda --with-launcher
  launcher=/work/out/build-cuda/bin/ddprun
fi

# The run, inside the root: no GPU there, so the workers pick Gloo on CPU.
set +e
bash scripts/trixie_root.sh cuda -- bash -c '
  standin=$(bash /work/src/scripts/cudnn_standin.sh /work/out/cudnn-standin) || exit 1
  [[ -n $standin ]] && export LD_LIBRARY_PATH=$standin
  for b in ddp_demo survival_trainer; do
    if LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} ldd /work/out/build-cuda/bin/$b | grep "not found"; then
      echo "libtorch2_cuda_check: $b cannot load the libraries above" >&2
      exit 1
    fi
  done
  rm -rf /work/out/cuda-cpu-check
  OUT=/work/out/cuda-cpu-check DDPRUN_GPU_CHECK_DRY=cpu DDPRUN_GPU_BUILD_DIR=/work/out/build-cuda \
    DDPRUN_GPU_LAUNCHER=$1 bash /work/src/scripts/gpu_check.sh ddp_demo survival_bf16
' run "$launcher"
rc=$?
echo "libtorch2_cuda_check: the CUDA build's CPU run ($root/work/out/cuda-cpu-check):"
cat "$root/work/out/cuda-cpu-check/summary.txt" 2>/dev/null
exit $rc
