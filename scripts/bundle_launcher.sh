#!/usr/bin/env bash
# Packs the launcher (ddprun, ddprun-launch, ddprun-rendezvous) of a build
# with the shared libraries it loads into OUT_DIR/{bin,lib}, RPATH
# $ORIGIN/../lib, so it runs on another Linux x86-64 system without gRPC,
# protobuf, absl or Boost installed (a Debian trixie root, an Ubuntu GPU
# machine). The C and C++ runtimes are left out: the target has them, newer.
# No LD_LIBRARY_PATH is needed, so none leaks into the workers.
# Usage: scripts/bundle_launcher.sh BUILD_DIR OUT_DIR   (needs patchelf)
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build=$1 out=$2
command -v patchelf >/dev/null ||
  { echo "bundle_launcher: needs patchelf (apt-get install patchelf)" >&2; exit 2; }
bins=(ddprun ddprun-rendezvous)
for b in "${bins[@]}"; do
  [[ -x $build/bin/$b ]] || { echo "bundle_launcher: $build/bin/$b is not built" >&2; exit 2; }
done
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in "${bins[@]}"; do
  cp "$build/bin/$b" "$out/bin/"
  strip "$out/bin/$b"
done
# Every alias of ddprun is the same binary, dispatched on argv[0].
for alias in "$build"/bin/ddprun-*; do
  name=$(basename "$alias")
  [[ -L $alias ]] && ln -sf ddprun "$out/bin/$name"
done
ldd "${bins[@]/#/$build/bin/}" | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libpthread|libdl|librt)\.so' |
  while read -r lib; do cp -L "$lib" "$out/lib/"; done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
# ddprun's Python modules for the workers (the stack-dump hook, the step
# counter), where ddprun looks for them: every one the build put there.
mkdir -p "$out/lib/ddprun/python"
cp "$build"/lib/ddprun/python/*.py "$out/lib/ddprun/python/"
for b in "${bins[@]}"; do patchelf --force-rpath --set-rpath '$ORIGIN/../lib' "$out/bin/$b"; done
for l in "$out"/lib/*.so*; do patchelf --force-rpath --set-rpath '$ORIGIN' "$l"; done
echo "bundle_launcher: $(du -sh "$out" | cut -f1) in $out"
