#!/usr/bin/env bash
# scripts/cudnn_standin.sh on a miniature of a CUDA LibTorch: a library
# "libtorch_cuda.so" that needs a cuDNN (here libcudnn_ddprun_test.so.9, a
# soname no machine has) for one function, linked with -z now like
# Debian's. Without cuDNN the program cannot start; with the stand-in its
# CPU path runs, and its cuDNN path aborts naming the cuDNN function. Also
# checked: versioned imports get their version node.
set -uo pipefail
script=$1/scripts/cudnn_standin.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
failures=()
so=libcudnn_ddprun_test.so.9
mkdir lib
cat >real.c <<'EOF'
int cudnnCreate(void** h) { *h = 0; return 0; }
int cudnnGetVersion(void) { return 90000; }
EOF
echo 'CUDNN_9 { global: cudnnCreate; cudnnGetVersion; };' >real.map
gcc -shared -fPIC -o "$so" real.c -Wl,-soname,"$so" -Wl,--version-script=real.map || exit 1
cat >user.c <<'EOF'
extern int cudnnCreate(void**);
extern int cudnnGetVersion(void);
int on_cpu(void) { return 7; }
int on_gpu(void) { void* h; return cudnnCreate(&h) + cudnnGetVersion(); }
EOF
gcc -shared -fPIC -o lib/libtorch_cuda.so user.c -L. -l:"$so" -Wl,-z,now || exit 1
cat >main.c <<'EOF'
#include <stdio.h>
#include <string.h>
extern int on_cpu(void);
extern int on_gpu(void);
int main(int argc, char** argv) {
  if (argc > 1 && strcmp(argv[1], "gpu") == 0) return on_gpu();
  printf("cpu %d\n", on_cpu());
  return 0;
}
EOF
# Beside LibTorch, as in Debian's /usr/lib/<triplet>: a linker script named
# like a library (libc.so is one), which readelf cannot read.
printf '/* GNU ld script */\nGROUP ( libc.so.6 )\n' >lib/libc.so
gcc -o main main.c -Llib -ltorch_cuda -Wl,-rpath,"$tmp/lib" -Wl,-z,now -Wl,-rpath-link,"$tmp" || exit 1
rm "$so"

out=$(env -u LD_LIBRARY_PATH ./main 2>&1) &&
  failures+=("the program started without its cuDNN: $out")
dir=$(bash "$script" "$tmp/standin" "$tmp/lib" 2>"$tmp/err")
rc=$?
[[ $rc == 0 && $dir == "$tmp/standin" && -f $tmp/standin/$so ]] ||
  failures+=("no stand-in written (exit $rc, printed '$dir'): $(cat "$tmp/err")")
grep -q 'CUDNN_9' "$tmp/standin/cudnn_standin.map" 2>/dev/null ||
  failures+=("the versioned imports got no version node")
out=$(LD_LIBRARY_PATH=$tmp/standin ./main 2>&1)
[[ $? == 0 && $out == "cpu 7" ]] || failures+=("the CPU path with the stand-in: $out")
out=$(LD_LIBRARY_PATH=$tmp/standin ./main gpu 2>&1)
rc=$?
[[ $rc != 0 && $out == *"cudnnCreate called"* ]] ||
  failures+=("the cuDNN path did not abort naming cudnnCreate (exit $rc): $out")
for f in "${failures[@]}"; do echo "FAILED: $f"; done
((${#failures[@]} == 0)) && echo "cudnn_standin: all checks passed"
