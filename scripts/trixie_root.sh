#!/usr/bin/env bash
# A Debian trixie root for the LibTorch 2.x legs (trixie ships LibTorch 2.6:
# libtorch-dev for CPU, contrib's libtorch-cuda-dev for CUDA, python3-torch
# with torchrun 2.6). Bookworm's glibc is older than trixie's, so these are
# used in a root of their own, never installed on the host.
#
#   scripts/trixie_root.sh cpu|cuda          create the root if needed, print its path
#   scripts/trixie_root.sh cpu|cuda -- CMD   also run CMD inside it (as root)
#   scripts/trixie_root.sh cpu|cuda --check  exit 0 when the cached root is
#                                            complete, else 1 with the reason
#
# One root per variant, cached between runs (DDPRUN_TRIXIE_CACHE, default
# /var/cache/ddprun): made once with debootstrap; scripts/trixie_build.sh,
# run inside, installs what a build needs. Inside, /work/src is this checkout (read-only), /work/shared
# the ../shared folder beside it when present, /work/out a writable folder
# kept in the root (build trees, ccache). Mounts live in a private mount
# namespace, so nothing stays mounted when the command ends, however it ends.
# Needs root, debootstrap and a Debian mirror (DDPRUN_DEBIAN_MIRROR).
#
# A root is complete when its marker file holds ROOT_FORMAT and every path
# that in_root mounts onto exists. The marker is written last, so a creation
# that was interrupted or failed (debootstrap, the mount points) leaves a
# root that the next run rebuilds from scratch; bumping ROOT_FORMAT rebuilds
# roots made by an older version of this script.
set -euo pipefail

ROOT_FORMAT=2
# Everything in_root mounts onto or writes: a minbase trixie has no
# /etc/hosts, and a bind mount needs its target to exist.
MOUNT_FILES=(etc/hosts etc/resolv.conf)
MOUNT_DIRS=(proc dev sys work/src work/shared work/out)

variant=${1:-}
case $variant in
  cpu | cuda) shift ;;
  *)
    echo "usage: $0 cpu|cuda [--check | -- COMMAND...]" >&2
    exit 2
    ;;
esac
check_only=0
if [[ ${1:-} == --check ]]; then
  check_only=1
  shift
fi
if [[ ${1:-} == -- ]]; then shift; fi

src=$(cd "$(dirname "$0")/.." && pwd)
cache=${DDPRUN_TRIXIE_CACHE:-/var/cache/ddprun}
root=$cache/trixie-$variant
mirror=${DDPRUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# Prints why the root is not complete; prints nothing when it is.
incomplete_reason() {
  local f
  if [[ ! -f $root/.ddprun-bootstrapped ]]; then
    echo "no $root/.ddprun-bootstrapped (never made, or its creation was cut short)"
    return
  fi
  if [[ $(cat "$root/.ddprun-bootstrapped") != "format $ROOT_FORMAT" ]]; then
    echo "made by an older trixie_root.sh (marker '$(head -c 40 "$root/.ddprun-bootstrapped")', want 'format $ROOT_FORMAT')"
    return
  fi
  [[ -x $root/usr/bin/apt-get ]] || { echo "no usr/bin/apt-get in $root"; return; }
  for f in "${MOUNT_FILES[@]}"; do
    [[ -f $root/$f ]] || { echo "no mount point $root/$f"; return; }
  done
  for f in "${MOUNT_DIRS[@]}"; do
    [[ -d $root/$f ]] || { echo "no mount point $root/$f/"; return; }
  done
}

if [[ $check_only == 1 ]]; then
  reason=$(incomplete_reason)
  if [[ -n $reason ]]; then
    echo "trixie_root: $root is incomplete: $reason"
    exit 1
  fi
  echo "trixie_root: $root is complete"
  exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "trixie_root: must run as root" >&2; exit 2; }
command -v debootstrap >/dev/null ||
  { echo "trixie_root: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }

mkdir -p "$cache"
exec 9>"$cache/trixie-$variant.lock"
flock -w 3600 9 || { echo "trixie_root: $root is locked by another run" >&2; exit 1; }

# DDPRUN_* settings (jobs, test selection, the launcher's path inside the
# root) and CI (a missing test prerequisite fails under CI=true) reach the
# command; nothing else of the host's environment does.
passthrough=()
while IFS= read -r var; do passthrough+=("$var"); done < <(env | grep -E '^(DDPRUN_[A-Z_]*|CI)=' || true)

in_root() {
  # Private mount namespace: /proc, /dev and the checkout are mounted for
  # this command only.
  unshare --mount --propagation private -- bash -c '
    set -e
    root=$1 src=$2; shift 2
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    mount -t sysfs sysfs "$root/sys"
    mount --bind "$src" "$root/work/src"
    mount -o remount,bind,ro "$root/work/src"
    if [[ -d $src/../shared ]]; then mount --bind "$src/../shared" "$root/work/shared"; fi
    cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
    # The host'"'"'s name must resolve inside as outside: torchrun'"'"'s c10d
    # rendezvous hands workers the node'"'"'s hostname as MASTER_ADDR.
    if [[ -f /etc/hosts && -f $root/etc/hosts ]]; then mount --bind /etc/hosts "$root/etc/hosts"; fi
    exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
      PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
  ' in_root "$root" "$src" "${passthrough[@]}" "$@"
}

reason=$(incomplete_reason)
if [[ -n $reason ]]; then
  echo "trixie_root: debootstrap trixie into $root ($reason)"
  # A root of an earlier, interrupted run may still have a mount of its own
  # (in_root's are private to its namespace, but a killed debootstrap can
  # leave /proc mounted): never delete through a mount.
  if findmnt -rn -o TARGET | grep -qF "$root/"; then
    echo "trixie_root: something is still mounted under $root; unmount it first:" >&2
    findmnt -rn -o TARGET | grep -F "$root/" >&2
    exit 1
  fi
  rm -rf "$root"
  debootstrap --variant=minbase --components=main,contrib,non-free \
    trixie "$root" "$mirror" >"$cache/trixie-$variant.debootstrap.log" 2>&1 ||
    { tail -20 "$cache/trixie-$variant.debootstrap.log" >&2; exit 1; }
  echo "deb $mirror trixie main contrib non-free" >"$root/etc/apt/sources.list"
  # Keep the root small: no documentation, no recommends.
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    >"$root/etc/apt/apt.conf.d/90ddprun"
  for f in "${MOUNT_DIRS[@]}"; do mkdir -p "$root/$f"; done
  for f in "${MOUNT_FILES[@]}"; do
    mkdir -p "$(dirname "$root/$f")"
    [[ -f $root/$f ]] || : >"$root/$f"
  done
  # Last: only a root that got this far counts as made.
  echo "format $ROOT_FORMAT" >"$root/.ddprun-bootstrapped.tmp"
  mv "$root/.ddprun-bootstrapped.tmp" "$root/.ddprun-bootstrapped"
  reason=$(incomplete_reason)
  [[ -z $reason ]] || { echo "trixie_root: $root is still incomplete: $reason" >&2; exit 1; }
fi

if (($#)); then
  in_root "$@"
else
  echo "$root"
fi
