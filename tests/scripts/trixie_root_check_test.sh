#!/usr/bin/env bash
# scripts/trixie_root.sh --check: a cached root counts only when its creation
# finished (marker of the current format, every mount point present), so a
# creation that was cut short, or a root of an older script, is rebuilt.
# Fake roots in a temporary cache: no debootstrap, no root rights needed.
set -uo pipefail
script=$1/scripts/trixie_root.sh
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
failed=0 passed=0
root=$cache/trixie-cpu

expect() {  # expect 0|1 WHAT-IN-OUTPUT NAME
  local out rc
  out=$(DDPRUN_TRIXIE_CACHE=$cache bash "$script" cpu --check 2>&1)
  rc=$?
  if [[ $rc == "$1" && $out == *"$2"* ]]; then
    passed=$((passed + 1))
  else
    echo "FAIL $3: exit $rc (want $1), output: $out (want '$2')"
    failed=$((failed + 1))
  fi
}

complete_root() {
  rm -rf "$root"
  mkdir -p "$root"/{usr/bin,etc,proc,dev,sys,work/src,work/shared,work/out}
  printf '#!/bin/sh\n' >"$root/usr/bin/apt-get"
  chmod +x "$root/usr/bin/apt-get"
  : >"$root/etc/hosts"
  : >"$root/etc/resolv.conf"
  echo "format 2" >"$root/.ddprun-bootstrapped"
}

expect 1 "never made" "no root at all"
mkdir -p "$root/usr/bin"
expect 1 "cut short" "debootstrap interrupted (no marker)"
complete_root
expect 0 "is complete" "a complete root"
: >"$root/.ddprun-bootstrapped"
expect 1 "older trixie_root.sh" "an empty marker of the first format"
complete_root
rm "$root/etc/hosts"
expect 1 "etc/hosts" "a minbase root without /etc/hosts (issue 25)"
complete_root
rmdir "$root/work/out"
expect 1 "work/out" "a missing work folder"
complete_root
rm "$root/usr/bin/apt-get"
expect 1 "apt-get" "no apt-get"

echo "$passed passed, $failed failed"
((failed == 0))
