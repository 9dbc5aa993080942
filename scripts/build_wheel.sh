#!/usr/bin/env bash
# The launcher's release artifacts, from a build (with or without LibTorch:
# only ddprun and ddprun-rendezvous are packed), into OUT_DIR:
#   ddprun-<version>-py3-none-manylinux_2_<N>_x86_64.whl   pip install it
#   ddprun-<version>-linux-x86_64.tar.gz                     unpack anywhere
#   ddprun_<version>_amd64.deb                               dpkg -i it
# One bundle (scripts/bundle_launcher.sh: bin/ + lib/, $ORIGIN RPATH) in all
# three. <version> is what the bundle's `ddprun --version` prints, i.e.
# project(VERSION) in CMakeLists.txt; <N> is computed from the glibc and
# libstdc++ symbol versions its ELF files need (packaging/elf_needs.py).
# Debian's tools only (patchelf, binutils, dpkg-dev, python3); no network.
# Usage: scripts/build_wheel.sh [BUILD_DIR] [OUT_DIR]
#        (default: build build/dist; DDPRUN_DIST_ONLY=wheel,tarball,deb picks)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
out=${2:-$build/dist}
if [[ $# -gt 2 ]]; then
  echo "usage: $0 [BUILD_DIR] [OUT_DIR]" >&2
  exit 2
fi
stage=$(mktemp -d "${TMPDIR:-/tmp}/ddprun_dist.XXXXXX")
trap 'rm -rf "$stage"' EXIT
bash "$src/scripts/bundle_launcher.sh" "$build" "$stage/launcher"
mkdir -p "$out"
rm -f "$out"/ddprun-*.whl "$out"/ddprun-*-linux-x86_64.tar.gz "$out"/ddprun_*_amd64.deb
/usr/bin/python3 "$src/packaging/make_dist.py" --bundle "$stage/launcher" \
  --out "$out" --build-dir "$build" ${DDPRUN_DIST_ONLY:+--only "$DDPRUN_DIST_ONLY"}
