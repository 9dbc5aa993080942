#!/usr/bin/env bash
# Installs every Debian package ddprun needs. Idempotent: re-running installs nothing new.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libboost-dev libboost-filesystem-dev
  nlohmann-json3-dev catch2 libcli11-dev libspdlog-dev
  libtorch-dev libgloo-dev
  libnifti2-dev libstb-dev libyaml-cpp-dev libcairo2-dev zlib1g-dev
  procps openssl
)
# Only the tests need these (torch.distributed compatibility, network
# namespaces, a real SLURM cluster, a real sshd for ddprun-deepspeed's
# multi-node launch, the libFuzzer run with clang): DDPRUN_SETUP_TESTS=0
# skips them (the Docker build stage does). Installing openssh-server starts
# no daemon where policy-rc.d forbids it (containers); the tests run their
# own sshd inside network namespaces they create. debootstrap and patchelf
# make the trixie root and carry the launcher into it (the LibTorch 2.6 leg);
# patchelf and python3-venv also make and pip-install the wheel (tests/install).
# chromium, chromium-driver and python3-selenium open the live view in a
# real browser; prometheus brings promtool and a server that scrapes
# /metrics (tests/rendezvous/live_view_*_test.py).
if [[ "${DDPRUN_SETUP_TESTS:-1}" != 0 ]]; then
  PACKAGES+=(python3-torch iproute2 slurmctld slurmd slurm-client munge
             clang libclang-rt-14-dev openssh-client openssh-server
             debootstrap patchelf python3-venv
             chromium chromium-driver python3-selenium prometheus)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi
