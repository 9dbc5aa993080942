#!/usr/bin/env python3
"""Compiles every worker/, examples/ and bench/model_step/ source of a
build against other LibTorch headers (syntax only: no libraries needed),
e.g. the headers of the PyTorch 2.11.0+cu130 wheel in ../shared/gpu-kit,
with the CUDA/NCCL paths on when CUDA headers are present.

Each translation unit is compiled with the exact flags of the build's
compile_commands.json, with the build's Torch include directories swapped for
the kit's. The build's precompiled header (made from the other LibTorch) is
left out; instead one precompiled header of <torch/torch.h> and c10d's
ProcessGroup.hpp is made from the kit per set of compile definitions and
forced into every unit (parsing torch.h dominates: ~10x faster). A unit
whose inputs are unchanged since it passed is not compiled again (PassCache:
the kit, the compiler, the flags and every file the compile opened; kept
beside ccache's folder, DDPRUN_HEADER_CHECK_CACHE=DIR or =off). Exit 0 when
all pass, 1 when one fails (its errors are printed), 77 (skip) when the kit
is absent (a failure under CI=true: CI has ../shared beside the checkout).

  check_libtorch_headers.py --build BUILD --source SRC --kit KIT.tar.xz
      [--cuda-include /usr/local/cuda/include] [--jobs 2] [--only DIR...]
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import shlex
import subprocess
import sys
import tarfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests"))
from ddprun_skip import SKIP, skip_unless_ci  # noqa: E402

# LibTorch headers found outside the kit (the system's, another version).
FOREIGN = re.compile(r"^/usr/(local/)?include/(ATen|c10|caffe2|torch)/")


def unpack(kit, dest):
    """Unpacks the kit once per kit content (a stamp holds its digest)."""
    digest = hashlib.sha256()
    with open(kit, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    stamp = os.path.join(dest, ".stamp")
    if os.path.exists(stamp) and open(stamp).read() == digest.hexdigest():
        return digest.hexdigest()
    os.makedirs(dest, exist_ok=True)
    with tarfile.open(kit) as tar:
        tar.extractall(dest)
    with open(stamp, "w") as f:
        f.write(digest.hexdigest())
    return digest.hexdigest()


def is_torch_include(path):
    """The build's own LibTorch include directories (replaced by the kit's)."""
    return path.endswith("/torch/csrc/api/include") or (
        os.path.isdir(os.path.join(path, "ATen")) and
        os.path.isdir(os.path.join(path, "c10")))


def rewrite(command, kit_include, cuda_include):
    """The build's compile command, made a syntax-only compile against the
    kit. Returns the argument list."""
    # worker/src/shim stands in for a header Debian's LibTorch 1.13 lacks;
    # with a kit that has the header it must not shadow it.
    has_context = os.path.isfile(os.path.join(
        kit_include, "torch/csrc/distributed/autograd/context/context.h"))
    args = shlex.split(command)
    if os.path.basename(args[0]) == "ccache":
        args = args[1:]
    # -H lists every header opened, so a fall-back to another LibTorch on
    # the default include path (Debian's in /usr/include) is caught.
    out = [args[0], "-fsyntax-only", "-H",
           "-isystem", kit_include,
           "-isystem", os.path.join(kit_include, "torch/csrc/api/include")]
    if cuda_include:
        out += ["-isystem", cuda_include, "-DUSE_C10D_NCCL"]
    i = 1
    while i < len(args):
        a = args[i]
        if a in ("-o", "-MF", "-MT"):
            i += 2
            continue
        if a in ("-c", "-MD", "-MMD", "-Winvalid-pch"):
            i += 1
            continue
        # The precompiled header was built from the other LibTorch.
        if a == "-include" and "cmake_pch" in args[i + 1]:
            i += 2
            continue
        if a in ("-I", "-isystem") and is_torch_include(args[i + 1]):
            i += 2
            continue
        if a.startswith("-I") and len(a) > 2 and is_torch_include(a[2:]):
            i += 1
            continue
        if has_context and a.startswith("-I") and a.endswith("/src/shim"):
            i += 1
            continue
        if a.startswith("-DDDPRUN_WORKER_WITH_CUDA="):
            a = "-DDDPRUN_WORKER_WITH_CUDA=%d" % (1 if cuda_include else 0)
        out.append(a)
        i += 1
    return out


PCH_HEADERS = ("torch/torch.h", "torch/csrc/distributed/c10d/ProcessGroup.hpp")


def pch_key(args):
    """Flags a precompiled header must share with the units that use it."""
    return tuple(a for a in args[1:]
                 if a.startswith(("-D", "-U", "-std", "-f", "-O", "-m"))
                 or a == "-g")


def make_pch(args, directory, out_dir, index):
    """Builds the kit's precompiled header with one unit's flags (minus the
    unit). Returns (header path, error text or None)."""
    header = os.path.join(out_dir, "kit_pch_%d.h" % index)
    with open(header, "w") as f:
        f.write("".join("#include <%s>\n" % h for h in PCH_HEADERS))
    cmd = [a for a in args[:-1] if a != "-fsyntax-only"]
    cmd += ["-x", "c++-header", header, "-o", header + ".gch"]
    r = subprocess.run(cmd, cwd=directory, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return header, check_output(r.returncode, r.stdout)


def opened_headers(text):
    """The headers -H listed in a compile's output, as it printed them
    (relative to the compile's directory or absolute)."""
    return [l.lstrip(".").strip() for l in text.splitlines()
            if l.startswith(".")]


def check_output(returncode, text, foreign_headers=FOREIGN):
    """None when a compile passed and used no header from outside the kit
    (none that `foreign_headers` matches; None: any header may come from
    anywhere), else what to print."""
    headers = opened_headers(text)
    foreign = [h for h in headers if foreign_headers
               and foreign_headers.match(os.path.normpath(h))]
    # Without -H's listing: header lines ("." depth dots, "!" for a used
    # precompiled header) and its bare-path "Multiple include guards" list.
    errors = "\n".join(l for l in text.splitlines()
                       if not l.startswith((".", "!", "Multiple include guards"))
                       and not re.fullmatch(r"/\S+", l))
    if returncode != 0:
        return errors or "failed (exit %d)" % returncode
    if foreign:
        return ("included a header of the build's own LibTorch instead of "
                "the kit's: " + foreign[0])
    return None


class PassCache:
    """Units that passed, keyed by what decides the outcome, as ccache's
    direct mode does: the kit's digest, the compiler's --version, the unit's
    exact arguments, and the content of every file the compile opened (the
    unit and each header -H listed; the precompiled kit headers, "!" in
    -H's listing, are the kit's and not listed). A unit whose key and files are all
    unchanged since it passed is not compiled again; any change in one of
    those files, in the flags, the kit or the compiler compiles it again.
    Only passes are stored: a failing unit is compiled every run."""

    def __init__(self, root, kit_digest, compiler, ignore):
        self.root = root
        # The precompiled kit headers are remade each run from the kit
        # (its digest is in the key), so they are not a file to compare.
        self.ignore = os.path.join(ignore, "") if ignore else None
        version = subprocess.run([compiler, "--version"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, text=True).stdout
        self.salt = kit_digest + "\0" + version
        self.digests = {}
        if root:
            os.makedirs(root, exist_ok=True)

    def _file_digest(self, path):
        if path not in self.digests:
            try:
                with open(path, "rb") as f:
                    self.digests[path] = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                self.digests[path] = None
        return self.digests[path]

    def _entry(self, args, directory):
        key = hashlib.sha256(
            (self.salt + "\0" + directory + "\0" + "\0".join(args))
            .encode()).hexdigest()
        return os.path.join(self.root, key[:2], key + ".json")

    def passed_before(self, args, directory):
        if not self.root:
            return False
        try:
            with open(self._entry(args, directory)) as f:
                files = json.load(f)
        except (OSError, ValueError):
            return False
        return bool(files) and all(self._file_digest(path) == digest
                                   for path, digest in files.items())

    def record_pass(self, args, directory, source, output):
        if not self.root:
            return
        opened = [os.path.normpath(os.path.join(directory, h))
                  for h in opened_headers(output)]
        files = {}
        for path in [os.path.join(directory, source)] + opened:
            if self.ignore and path.startswith(self.ignore):
                continue
            digest = self._file_digest(path)
            if digest is None:
                return  # a file we cannot read again: do not cache
            files[path] = digest
        entry = self._entry(args, directory)
        os.makedirs(os.path.dirname(entry), exist_ok=True)
        tmp = "%s.%d.tmp" % (entry, os.getpid())
        with open(tmp, "w") as f:
            json.dump(files, f)
        os.replace(tmp, entry)


def default_cache_dir():
    """Beside ccache's folder (CI keeps it; DDPRUN_FRESH puts it in its
    temporary folder), unless DDPRUN_HEADER_CHECK_CACHE names one ("" or
    "off": no cache)."""
    explicit = os.environ.get("DDPRUN_HEADER_CHECK_CACHE")
    if explicit is not None:
        return None if explicit in ("", "off") else explicit
    ccache = os.environ.get("CCACHE_DIR")
    base = (os.path.dirname(os.path.abspath(ccache)) if ccache
            else os.path.join(os.path.expanduser("~"), ".cache"))
    return os.path.join(base, "ddprun-header-check")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("--kit", required=True)
    p.add_argument("--cuda-include", default="/usr/local/cuda/include")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only", action="append", default=[], metavar="DIR",
                   help="check only the sources under DIR (relative to "
                        "--source; repeatable), e.g. bench/model_step")
    a = p.parse_args()
    a.build, a.source, a.kit = (os.path.abspath(x)
                                for x in (a.build, a.source, a.kit))

    if not os.path.isfile(a.kit):
        return skip_unless_ci("no LibTorch header kit at %s" % a.kit)
    cuda = a.cuda_include if os.path.isfile(
        os.path.join(a.cuda_include, "cuda_runtime_api.h")) else None
    dest = os.path.join(a.build, "_deps", "libtorch-kit-headers")
    kit_digest = unpack(a.kit, dest)
    kit_include = os.path.join(dest, "include")
    if not os.path.isdir(os.path.join(kit_include, "torch")):
        print("error: %s has no include/torch" % a.kit)
        return 1

    with open(os.path.join(a.build, "compile_commands.json")) as f:
        entries = json.load(f)
    roots = [os.path.join(os.path.realpath(a.source), d.strip("/")) + os.sep
             for d in (a.only or ("worker", "examples", "bench/model_step"))]
    units = sorted({(e["file"], e["directory"], e["command"])
                    for e in entries
                    if any(os.path.realpath(e["file"]).startswith(r)
                           for r in roots)})
    if not units:
        print("error: no worker/, examples/ or bench/model_step/ sources in %s"
              % a.build)
        return 1
    # Torch-free units (a library without Torch's compile definitions, e.g.
    # examples/outputs) never see LibTorch's include directories, which in a
    # wheel also hold an old protobuf; they are not LibTorch code to check.
    torch_units = [u for u in units if "-DUSE_DISTRIBUTED" in u[2]]
    for path, _, _ in units:
        if all(path != u[0] for u in torch_units):
            print("--   not Torch code: %s" % os.path.relpath(path, a.source))
    units = torch_units
    print("checking %d sources against %s (%s)" %
          (len(units), os.path.basename(a.kit),
           "CUDA and NCCL paths on, CUDA headers " + cuda if cuda
           else "CPU paths only: no CUDA headers at " + a.cuda_include))

    commands = [(path, directory, rewrite(command, kit_include, cuda))
                for path, directory, command in units]
    pch_dir = os.path.join(dest, "pch")
    cuda_id = ""
    if cuda:
        st = os.stat(os.path.join(cuda, "cuda_runtime_api.h"))
        cuda_id = "%s %d %d" % (os.path.realpath(cuda), st.st_size,
                                st.st_mtime_ns)
    cache = PassCache(default_cache_dir(), kit_digest + "\0" + cuda_id,
                      commands[0][2][0], ignore=pch_dir)
    todo = []
    for unit in commands:
        if cache.passed_before(unit[2], unit[1]):
            print("ok   cached   %s" % os.path.relpath(unit[0], a.source))
        else:
            todo.append(unit)
    os.makedirs(pch_dir, exist_ok=True)
    pch = {}
    for path, directory, args in todo:
        key = pch_key(args)
        if key in pch:
            continue
        t0 = time.monotonic()
        header, error = make_pch(args, directory, pch_dir, len(pch))
        print("%-4s %5.1f s  precompiled %s" %
              ("ok" if error is None else "FAIL", time.monotonic() - t0,
               " + ".join(PCH_HEADERS)))
        if error is not None:
            print(error)
            return 1
        pch[key] = header

    def check(unit):
        path, directory, args = unit
        full = args[:-1] + ["-Winvalid-pch", "-include", pch[pch_key(args)],
                            args[-1]]
        t0 = time.monotonic()
        r = subprocess.run(full, cwd=directory, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        error = check_output(r.returncode, r.stdout)
        if error is None:
            cache.record_pass(args, directory, path, r.stdout)
        return path, 0 if error is None else 1, error, time.monotonic() - t0

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
        for path, rc, output, secs in pool.map(check, todo):
            rel = os.path.relpath(path, a.source)
            print("%-4s %5.1f s  %s" % ("ok" if rc == 0 else "FAIL", secs, rel))
            if rc != 0:
                failed += 1
                print(output)
    print("%d of %d sources compile against %s (%d compiled, %d unchanged "
          "since they passed%s)" %
          (len(units) - failed, len(units), os.path.basename(a.kit),
           len(todo), len(units) - len(todo),
           ": " + cache.root if cache.root else ", no cache"))
    # Each run precompiles afresh, and the headers are ~0.9 GB apiece (more
    # with -g): they are not worth the disk between runs.
    shutil.rmtree(pch_dir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
