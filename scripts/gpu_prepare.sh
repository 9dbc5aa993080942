#!/usr/bin/env bash
# Prepares .gpu/ (git-ignored) for scripts/gpu_check.sh on a GPU machine
# that has LibTorch (a PyTorch wheel) but no Debian packages and no network:
#   .gpu/debs/      the bookworm packages the trainers build against: those
#                   of ../shared/gpu-kit/debs, plus cairo's headers, library
#                   and every library libcairo.so.2 loads (apt-get download)
#   .gpu/launcher/  ddprun of BUILD_DIR packed with its libraries
#                   (scripts/bundle_launcher.sh; needs patchelf)
# Run it in the checkout the device tool sends (the session's own), then
# ONE device call (README, "GPU check"):
#   command "bash scripts/gpu_check.sh", carry [".gpu"], timeout_s 540
# The tool sends the tracked tree plus what carry names, 64 MiB at most:
# this script fails when the two together would not fit.
# Usage: scripts/gpu_prepare.sh [BUILD_DIR]   (default: build, with ddprun
# built)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
kit=${DDPRUN_GPU_KIT:-../shared/gpu-kit}
die() { echo "gpu_prepare: $*" >&2; exit 1; }
[[ -d $kit/debs ]] || die "$kit/debs not found"
[[ -x $build/bin/ddprun ]] || die "$build/bin/ddprun is not built (ninja -C $build ddprun)"
command -v patchelf >/dev/null || die "needs patchelf (apt-get install patchelf)"
git check-ignore -q .gpu/debs/x.deb || die ".gpu is not git-ignored here: it would travel twice"
rm -rf .gpu
mkdir -p .gpu/debs
cp "$kit"/debs/*.deb .gpu/debs/
# cairo, and the package of every library libcairo.so.2 loads, except the
# C and C++ runtimes, zlib and expat: every machine with Python has them,
# newer, and the older copies must not shadow them for the programs that
# run with LD_LIBRARY_PATH=/opt/deps/... there. Bookworm's builds are older
# than Ubuntu 24.04's glibc, so they load there.
cairo=$(ldconfig -p | awk '$1 == "libcairo.so.2" && /x86-64/ {print $NF; exit}')
[[ -n $cairo ]] || die "libcairo.so.2 not installed here (apt-get install libcairo2-dev)"
pkgs=(libcairo2-dev libcairo2)
while read -r lib; do
  base=$(basename "$lib")
  pkg=$(dpkg -S "/usr/lib/x86_64-linux-gnu/$base" "/lib/x86_64-linux-gnu/$base" 2>/dev/null |
        head -1 | cut -d: -f1) || true
  [[ -n $pkg ]] || die "no package owns $lib (needed by $cairo)"
  case $pkg in libc6 | libgcc-s1 | libstdc++6 | zlib1g | libexpat1) continue ;; esac
  pkgs+=("$pkg")
done < <(ldd "$cairo" | awk '$3 ~ /^\// {print $3}')
mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
(cd .gpu/debs && apt-get download -q -o APT::Sandbox::User=root "${pkgs[@]}" >/dev/null) ||
  die "apt-get download of ${pkgs[*]} failed"
bash scripts/bundle_launcher.sh "$build" .gpu/launcher
# What the device call sends: tracked and untracked-not-ignored files, and .gpu.
tree=$( { git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null || true; } |
        awk '{s += $1} END {print s + 0}')
gpu=$(du -sb .gpu | cut -f1)
total=$(( (tree + gpu) / 1048576 ))
echo "gpu_prepare: .gpu has $(ls .gpu/debs | wc -l) debs and the launcher ($((gpu / 1048576)) MiB);" \
     "with the tree ($((tree / 1048576)) MiB) $total MiB travel (limit 64)"
((total < 64)) || die "$total MiB would not travel: the device tool takes 64 MiB"
echo "gpu_prepare: now one device call: command 'bash scripts/gpu_check.sh', carry [\".gpu\"], timeout_s 540"
