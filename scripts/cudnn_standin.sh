#!/usr/bin/env bash
# A stand-in for cuDNN, so a CUDA LibTorch runs CPU jobs on a machine where
# cuDNN cannot be installed (trixie's nvidia-cudnn downloads it from NVIDIA;
# offline, scripts/trixie_build.sh installs a placeholder package instead).
# For each cuDNN library that LibTorch's libraries need (DT_NEEDED
# libcudnn*.so.N), OUT_DIR/<that soname> defines every cuDNN symbol they
# import; each of them, if ever called, prints its name and aborts. A CPU
# job calls none, so it runs; a job that reaches cuDNN stops loudly, never
# with a made-up result. Nothing is written when cuDNN is installed.
# Usage: cudnn_standin.sh OUT_DIR [LIB_DIR]   (default LIB_DIR: the
# folder of libtorch_cuda.so). Prints OUT_DIR when it wrote a stand-in.
set -euo pipefail
trap 'echo "cudnn_standin: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
out=$1
libdir=${2:-}
if [[ -z $libdir ]]; then
  cuda=$(ldconfig -p | awk '$1 == "libtorch_cuda.so" {print $NF}' | head -1)
  [[ -n $cuda ]] || { echo "cudnn_standin: no libtorch_cuda.so (a CPU LibTorch?)" >&2; exit 2; }
  libdir=$(dirname "$(readlink -f "$cuda")")
fi
users=()
declare -A sonames=()
for lib in "$libdir"/lib*.so*; do
  [[ -f $lib && ! -L $lib ]] || continue
  # Only ELF files: the folder also holds linker scripts named like
  # libraries (Debian's libc.so), which readelf fails on.
  [[ $(head -c 4 "$lib" | od -An -c | tr -d ' ') == '177ELF' ]] || continue
  needed=$(readelf -d "$lib" 2>/dev/null |
    sed -n 's/.*(NEEDED).*\[\(libcudnn[^]]*\)\]/\1/p') || needed=
  [[ -n $needed ]] || continue
  users+=("$lib")
  for s in $needed; do sonames[$s]=1; done
done
((${#users[@]})) || { echo "cudnn_standin: nothing in $libdir needs cuDNN" >&2; exit 0; }
missing=()
cache=$(ldconfig -p)
for s in "${!sonames[@]}"; do
  grep -q "^[[:space:]]*$s " <<<"$cache" || missing+=("$s")
done
((${#missing[@]})) || exit 0  # the real cuDNN is installed
# Every cuDNN function the users import (name, and version node if any).
mapfile -t syms < <(for u in "${users[@]}"; do
  nm -D --undefined-only --with-symbol-versions "$u" | awk '{print $2}'
done | grep -E '^cudnn' | sort -u)
((${#syms[@]})) || { echo "cudnn_standin: no cudnn symbols imported" >&2; exit 1; }
mkdir -p "$out"
src=$out/cudnn_standin.c map=$out/cudnn_standin.map
{
  echo '#include <stdio.h>'
  echo '#include <stdlib.h>'
  echo 'static void called(const char* name) {'
  echo '  fprintf(stderr, "cudnn_standin: %s called, but this machine has no cuDNN\n", name);'
  echo '  abort();'
  echo '}'
  for s in "${syms[@]}"; do
    name=${s%%@*}
    echo "int $name(void) { called(\"$name\"); return 1; }"
  done
} >"$src"
# Version nodes, when the importers ask for versioned symbols.
declare -A nodes=()
for s in "${syms[@]}"; do
  [[ $s == *@* ]] && nodes[${s##*@}]+="${s%%@*}; "
done
map_flag=()
if ((${#nodes[@]})); then
  : >"$map"
  for n in "${!nodes[@]}"; do echo "$n { global: ${nodes[$n]}};" >>"$map"; done
  map_flag=(-Wl,--version-script="$map")
fi
for s in "${missing[@]}"; do
  gcc -shared -fPIC -O1 -o "$out/$s" "$src" -Wl,-soname,"$s" "${map_flag[@]}"
done
echo "cudnn_standin: ${#syms[@]} functions in ${missing[*]} for ${#users[@]} libraries" >&2
echo "$out"
