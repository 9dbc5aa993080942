#!/usr/bin/env python3
"""Compiles each header we install alone (tests/headers/CMakeLists.txt
makes one translation unit per header, which includes only that header,
with a ddprun::worker consumer's flags and no precompiled header), syntax
only: against the build's own LibTorch, or with --kit against other LibTorch
headers (e.g. the 2.11 wheel's in ../shared/gpu-kit; the build's Torch
include directories swapped for the kit's as
scripts/check_libtorch_headers.py does, CUDA and NCCL paths on when CUDA
headers are present). A header fails when it does not compile alone, and
when it opens a file of the source tree that is not installed (a user's
include path has only the installed tree). Passes are cached as the
LibTorch header check caches them (its PassCache, same folder). Exit 0 when
all pass, 1 when one fails, 77 (skip) when --kit names no file (a failure
under CI=true).

  check_installed_headers.py --build BUILD --source SRC --units DIR
      --include-root DIR... [--kit KIT.tar.xz]
      [--cuda-include /usr/local/cuda/include] [--jobs 2]
"""

import argparse
import concurrent.futures
import json
import os
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "scripts"))
import check_libtorch_headers as lt  # noqa: E402


def syntax_only(command):
    """The build's compile command as a syntax-only compile that lists the
    headers it opens (-H)."""
    args = shlex.split(command)
    if os.path.basename(args[0]) == "ccache":
        args = args[1:]
    out = [args[0], "-fsyntax-only", "-H"]
    i = 1
    while i < len(args):
        if args[i] in ("-o", "-MF", "-MT"):
            i += 2
            continue
        if args[i] not in ("-c", "-MD", "-MMD"):
            out.append(args[i])
        i += 1
    return out


def not_installed(text, directory, source, build, include_roots):
    """The first file of the source tree (not of the build folder, which
    may lie inside it) the compile opened that is not under an installed
    include root, or None."""
    for header in lt.opened_headers(text):
        path = os.path.realpath(os.path.join(directory, header))
        if (path.startswith(source) and not path.startswith(build) and
                not any(path.startswith(r) for r in include_roots)):
            return path
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--units", required=True,
                   help="folder of the generated one-header units")
    p.add_argument("--include-root", action="append", required=True,
                   metavar="DIR", help="an installed include folder")
    p.add_argument("--kit")
    p.add_argument("--cuda-include", default="/usr/local/cuda/include")
    p.add_argument("--jobs", type=int, default=2)
    a = p.parse_args()
    build, units_dir = (os.path.realpath(x) for x in (a.build, a.units))
    source = os.path.join(os.path.realpath(a.source), "")
    roots = [os.path.join(os.path.realpath(r), "") for r in a.include_root]

    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    units = sorted({(os.path.realpath(e["file"]), e["directory"], e["command"])
                    for e in entries
                    if os.path.realpath(e["file"]).startswith(
                        os.path.join(units_dir, ""))})
    if not units:
        print("error: no unit under %s in %s/compile_commands.json "
              "(configure the build again)" % (units_dir, build))
        return 1

    if a.kit:
        if not os.path.isfile(a.kit):
            return lt.skip_unless_ci("no LibTorch header kit at %s" % a.kit)
        cuda = a.cuda_include if os.path.isfile(
            os.path.join(a.cuda_include, "cuda_runtime_api.h")) else None
        dest = os.path.join(build, "_deps", "libtorch-kit-headers")
        digest = lt.unpack(a.kit, dest)
        kit_include = os.path.join(dest, "include")
        commands = [(path, directory, lt.rewrite(command, kit_include, cuda))
                    for path, directory, command in units]
        against, foreign = os.path.basename(a.kit), lt.FOREIGN
        salt = digest + "\0" + (cuda or "")
    else:
        commands = [(path, directory, syntax_only(command))
                    for path, directory, command in units]
        against, foreign, salt = "the build's LibTorch", None, "build"
    cache = lt.PassCache(lt.default_cache_dir(), "alone\0" + salt,
                         commands[0][2][0], ignore=None)
    print("compiling %d installed headers alone against %s" %
          (len(commands), against))

    def name(path):
        return os.path.relpath(path, units_dir)[:-len(".cc")]

    def check(unit):
        path, directory, args = unit
        if cache.passed_before(args, directory):
            return path, None, None
        t0 = time.monotonic()
        r = subprocess.run(args, cwd=directory, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        error = lt.check_output(r.returncode, r.stdout, foreign)
        if error is None:
            outside = not_installed(r.stdout, directory, source,
                                    os.path.join(build, ""), roots)
            if outside:
                error = ("opens %s, which is not installed (a user's "
                         "include path has only the installed headers)" %
                         os.path.relpath(outside, source))
        if error is None:
            cache.record_pass(args, directory, path, r.stdout)
        return path, error, time.monotonic() - t0

    failed = compiled = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for path, error, secs in pool.map(check, commands):
            if secs is None:
                print("ok   cached   %s" % name(path))
                continue
            compiled += 1
            print("%-4s %5.1f s  %s" % ("ok" if error is None else "FAIL",
                                         secs, name(path)))
            if error is not None:
                failed += 1
                print(error)
    print("%d of %d installed headers compile alone against %s (%d compiled, "
          "%d unchanged since they passed%s)" %
          (len(commands) - failed, len(commands), against, compiled,
           len(commands) - compiled,
           ": " + cache.root if cache.root else ", no cache"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
