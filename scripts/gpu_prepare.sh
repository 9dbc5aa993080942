#!/usr/bin/env bash
# Prepares .gpu/ (git-ignored) for scripts/gpu_check.sh on a GPU machine
# that has LibTorch (a PyTorch wheel) but no Debian packages and no network:
#   .gpu/debs/      bookworm packages the trainers build against: the ones in
#                   ../shared/gpu-kit/debs, plus cairo's headers, library and
#                   the libraries it loads (downloaded here with apt-get)
#   .gpu/launcher/  ddprun built here, packed with its libraries
#                   (scripts/bundle_launcher.sh)
# Then, with the device tool: carry [".gpu"], command
#   bash scripts/gpu_check.sh
# Usage: scripts/gpu_prepare.sh [BUILD_DIR]   (default: build; it must hold a
# built launcher)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kit=../shared/gpu-kit
[[ -d $kit/debs ]] || { echo "gpu_prepare: $kit/debs not found" >&2; exit 2; }
rm -rf .gpu
mkdir -p .gpu/debs
cp "$kit"/debs/*.deb .gpu/debs/
# cairo and what libcairo.so.2 loads; an Ubuntu node may have some of them,
# the copies only have to be no newer than its glibc (bookworm's are older).
cairo_debs=(libcairo2-dev libcairo2 libpixman-1-0 libfontconfig1
            fontconfig-config libfreetype6 libpng16-16 libbrotli1 libexpat1
            libx11-6 libx11-data libxcb1 libxcb-render0 libxcb-shm0 libxext6
            libxrender1 libxau6 libxdmcp6 libbsd0 libmd0)
(cd .gpu/debs && apt-get download -q -o APT::Sandbox::User=root "${cairo_debs[@]}" >/dev/null) ||
  { echo "gpu_prepare: apt-get download of cairo's packages failed" >&2; exit 1; }
bash scripts/bundle_launcher.sh "$build" .gpu/launcher
echo "gpu_prepare: $(du -sh .gpu | cut -f1) in .gpu (carry it: [\".gpu\"])"
