#!/usr/bin/env bash
# A Debian trixie root for the LibTorch 2.x legs (trixie ships LibTorch 2.6:
# libtorch-dev for CPU, contrib's libtorch-cuda-dev for CUDA, python3-torch
# with torchrun 2.6). Bookworm's glibc is older than trixie's, so these are
# used in a root of their own, never installed on the host.
#
#   scripts/trixie_root.sh cpu|cuda          create the root if needed, print its path
#   scripts/trixie_root.sh cpu|cuda -- CMD   also run CMD inside it (as root)
#
# One root per variant, cached between runs (DDPRUN_TRIXIE_CACHE, default
# /var/cache/ddprun): made once with debootstrap; scripts/trixie_build.sh,
# run inside, installs what a build needs. Inside, /work/src is this checkout (read-only), /work/shared
# the ../shared folder beside it when present, /work/out a writable folder
# kept in the root (build trees, ccache). Mounts live in a private mount
# namespace, so nothing stays mounted when the command ends, however it ends.
# Needs root, debootstrap and a Debian mirror (DDPRUN_DEBIAN_MIRROR).
set -euo pipefail

variant=${1:-}
case $variant in
  cpu | cuda) shift ;;
  *)
    echo "usage: $0 cpu|cuda [-- COMMAND...]" >&2
    exit 2
    ;;
esac
if [[ ${1:-} == -- ]]; then shift; fi

src=$(cd "$(dirname "$0")/.." && pwd)
cache=${DDPRUN_TRIXIE_CACHE:-/var/cache/ddprun}
root=$cache/trixie-$variant
mirror=${DDPRUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}

[[ $(id -u) -eq 0 ]] || { echo "trixie_root: must run as root" >&2; exit 2; }
command -v debootstrap >/dev/null ||
  { echo "trixie_root: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }

mkdir -p "$cache"
exec 9>"$cache/trixie-$variant.lock"
flock -w 3600 9 || { echo "trixie_root: $root is locked by another run" >&2; exit 1; }

# DDPRUN_* settings (jobs, test selection, the launcher's path inside the
# root) reach the command; nothing else of the host's environment does.
passthrough=()
while IFS= read -r var; do passthrough+=("$var"); done < <(env | grep -E '^DDPRUN_[A-Z_]*=' || true)

in_root() {
  # Private mount namespace: /proc, /dev and the checkout are mounted for
  # this command only.
  unshare --mount --propagation private -- bash -c '
    set -e
    root=$1 src=$2; shift 2
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount -t sysfs sysfs "$root/sys"
    mkdir -p "$root/work/src" "$root/work/shared" "$root/work/out"
    mount --bind "$src" "$root/work/src"
    mount -o remount,bind,ro "$root/work/src"
    if [[ -d $src/../shared ]]; then mount --bind "$src/../shared" "$root/work/shared"; fi
    cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    # The host'"'"'s name must resolve inside as outside: torchrun'"'"'s c10d
    # rendezvous hands workers the node'"'"'s hostname as MASTER_ADDR.
    if [[ -f /etc/hosts ]]; then mount --bind /etc/hosts "$root/etc/hosts"; fi
    exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
  ' in_root "$root" "$src" "${passthrough[@]}" "$@"
}

if [[ ! -x $root/usr/bin/apt-get || ! -f $root/.ddprun-bootstrapped ]]; then
  echo "trixie_root: debootstrap trixie into $root"
  rm -rf "$root"
  debootstrap --variant=minbase --components=main,contrib,non-free \
    trixie "$root" "$mirror" >"$cache/trixie-$variant.debootstrap.log" 2>&1 ||
    { tail -20 "$cache/trixie-$variant.debootstrap.log" >&2; exit 1; }
  echo "deb $mirror trixie main contrib non-free" >"$root/etc/apt/sources.list"
  # Keep the root small: no documentation, no recommends.
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    >"$root/etc/apt/apt.conf.d/90ddprun"
  touch "$root/.ddprun-bootstrapped"
fi

if (($#)); then
  in_root "$@"
else
  echo "$root"
fi
