#!/usr/bin/python3
"""The release artifacts of a launcher bundle (scripts/bundle_launcher.sh):

  ddprun-<version>-py3-none-manylinux_2_<N>_x86_64.whl
  ddprun-<version>-linux-x86_64.tar.gz
  ddprun_<version>_amd64.deb

all three holding the same binaries. Python's standard library and Debian's
binutils/dpkg tools only; no network.

  make_dist.py --bundle DIR --out DIR [--build-dir BUILD] [--only wheel,...]

The version is what the bundle's `ddprun --version` prints (the project's
one version, CMake's project(VERSION)). The wheel's platform tag is computed
from what the bundle's ELF files need (elf_needs.py). Licence files: the
Debian copyright file of the package of every bundled library and, with
--build-dir, of every package whose headers the launcher was compiled with.
"""
import argparse
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import elf_needs  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "ddprun"
# The names the binary answers to (argv[0]); ddprun-rendezvous is its own.
ALIASES = ["ddprun-launch", "ddprun-accelerate", "ddprun-deepspeed"]
ENTRY_POINTS = {
    "ddprun": "ddprun",
    "ddprun-launch": "ddprun_launch",
    "ddprun-accelerate": "ddprun_accelerate",
    "ddprun-deepspeed": "ddprun_deepspeed",
    "ddprun-rendezvous": "ddprun_rendezvous",
}
SUMMARY = ("A drop-in C++ replacement for torchrun (with accelerate launch "
           "and deepspeed command lines): launcher, elastic agent and gRPC "
           "rendezvous")
# Zip entries and tar members get one fixed time: the same bundle gives the
# same archives (SOURCE_DATE_EPOCH overrides it, as reproducible builds do).
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))  # 1980-01-01

# A wheel cannot hold the symlinks a bundle's bin/ has; these stand in for
# them. ddprun-deepspeed starts its remote nodes as
# <dir of the running binary>/ddprun-deepspeed over ssh, so the name must be
# runnable there.
ALIAS_SCRIPT = """#!/bin/bash
# {name}: the ddprun binary beside this script, run under this name (the
# name picks its command line). Stands in for the symlink of the tarball.
exec -a "$0" "$(dirname -- "${{BASH_SOURCE[0]}}")/ddprun" "$@"
"""


# The commands the wheel puts on the environment's PATH: shell scripts in
# the wheel's .data/scripts/, which pip copies into the environment's bin/
# as they are. Not Python console scripts: those cost an interpreter start
# (~70-100 ms) before the launcher even begins, and ddprun's point is to
# start in milliseconds. Each finds the package next to the environment's
# bin/ (venv, conda, --user and Debian's /usr/local all put site- or
# dist-packages under ../lib/pythonX.Y) and execs its binary there, so the
# process is the binary's: pid, signals, exit code. PYTHON_EXEC: run as
# venv/bin/ddprun without activating the venv, the workers get the venv's
# interpreter, as the venv's torchrun would give them. A symlink to the
# script (~/bin/ddprun -> venv/bin/ddprun) is followed to the script itself
# first: the package lies beside the script, not beside the link.
PATH_SCRIPT = """#!/bin/sh
# {name}: the ddprun launcher of the ddprun package installed beside this
# script (pip install ddprun-*.whl); see `{name} --help`. No interpreter;
# no subshell unless started through a symlink (readlink, once per link):
# the only process left is the launcher itself.
case $0 in */*) self=$0 ;; *) self=./$0 ;; esac
while [ -L "$self" ]; do
  link=$(readlink -- "$self") || break
  case $link in /*) self=$link ;; *) self=${{self%/*}}/$link ;; esac
done
here=${{self%/*}}
for pkg in "$here"/../lib/python3*/site-packages/ddprun \\
           "$here"/../lib/python3*/dist-packages/ddprun \\
           "$here"/../lib64/python3*/site-packages/ddprun; do
  if [ -x "$pkg/bin/{name}" ]; then
    # Run from a venv that is not on PATH: its interpreter for the workers.
    if [ -z "${{PYTHON_EXEC:-}}" ] && [ -x "$here/python3" ]; then
      case ":$PATH:" in
        *":$here:"*) ;;
        *) PYTHON_EXEC=$here/python3 && export PYTHON_EXEC ;;
      esac
    fi
    exec "$pkg/bin/{name}" "$@"
  fi
done
echo "{name}: no ddprun package under $here/../lib (python -m ddprun works" \\
  "wherever the package is importable)" >&2
exit 127
"""


class DistError(Exception):
    pass


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       **kw)
    if p.returncode != 0:
        raise DistError("%s failed (exit %d): %s" %
                        (" ".join(cmd), p.returncode,
                         p.stderr.decode(errors="replace").strip()[-2000:]))
    return p.stdout.decode()


def bundle_version(bundle):
    """The version both binaries print; a mismatch is an error."""
    versions = {}
    for binary in ("ddprun", "ddprun-rendezvous"):
        out = run([os.path.join(bundle, "bin", binary), "--version"],
                  env={"PATH": "/usr/bin:/bin"}).strip()
        m = re.fullmatch(re.escape(binary) + r" ([0-9]+(\.[0-9]+)*)", out)
        if not m:
            raise DistError("%s --version printed %r, not '%s X.Y.Z'" %
                            (binary, out, binary))
        versions[binary] = m.group(1)
    if len(set(versions.values())) != 1:
        raise DistError("the binaries disagree on the version: %r" % versions)
    return versions["ddprun"]


# --- licences -------------------------------------------------------------

def _dpkg_owners(paths):
    """{path: the Debian package that installed it} for those of `paths`
    dpkg knows, looked up in one dpkg -S call (each path also as its
    /usr-merged twin)."""
    twins = {}
    for path in paths:
        twins[path] = path
        if path.startswith("/usr/lib/"):
            twins[path[len("/usr"):]] = path
        elif path.startswith("/lib/"):
            twins["/usr" + path] = path
    if not twins:
        return {}
    p = subprocess.run(["dpkg", "-S"] + sorted(twins),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    owners = {}
    for line in p.stdout.decode().splitlines():
        pkgs, _, found = line.partition(": ")
        if found in twins:
            owners.setdefault(twins[found],
                              pkgs.split(",")[0].split(":")[0].strip())
    return owners


def _library_origins(build_dir, bundle):
    """{library name in lib/: path it was copied from}, from ldd of the
    build's binaries (what bundle_launcher.sh copied)."""
    out = {}
    names = set(os.listdir(os.path.join(bundle, "lib")))
    for binary in ("ddprun", "ddprun-rendezvous"):
        for line in run(["ldd", os.path.join(build_dir, "bin", binary)]
                        ).splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] == "=>" and parts[0] in names:
                out[parts[0]] = parts[2]
    return out


def _header_packages(build_dir):
    """Packages whose headers the launcher's objects include (their code is
    compiled into the binaries: Boost, CLI11, nlohmann-json, ...)."""
    try:
        inputs = run(["ninja", "-C", build_dir, "-t", "inputs", "ddprun",
                      "ddprun-rendezvous"]).split()
    except DistError:
        return {}
    objects = [i for i in inputs if i.endswith(".o")]
    headers = set()
    for chunk in range(0, len(objects), 200):
        deps = run(["ninja", "-C", build_dir, "-t", "deps"] +
                   objects[chunk:chunk + 200])
        for line in deps.splitlines():
            h = line.strip()
            if h.startswith("/usr/include/") or h.startswith("/usr/lib/"):
                headers.add(os.path.realpath(h))
    owners = {}
    for header, pkg in sorted(_dpkg_owners(sorted(headers)).items()):
        owners.setdefault(pkg, header)
    return owners


def bundle_entries(bundle, sub):
    """The bundle's `sub` (bin or lib) as sorted (relative path, full path)
    pairs: files and symlinks, and the folders below `sub` (ddprun's own
    lib/ddprun/python, the workers' stack-dump hook), each before what it
    holds."""
    top = os.path.join(bundle, sub)
    entries = []
    for dirpath, dirs, names in os.walk(top):
        dirs.sort()
        rel_dir = os.path.relpath(dirpath, top)
        for n in sorted(dirs) + sorted(names):
            rel = n if rel_dir == "." else os.path.join(rel_dir, n)
            entries.append((rel, os.path.join(dirpath, n)))
    return sorted(entries)


def collect_licences(bundle, build_dir):
    """{package: path of /usr/share/doc/<package>/copyright} for what the
    bundle ships. Every bundled library must be traced to a package."""
    packages = {}
    origins = _library_origins(build_dir, bundle) if build_dir else {}
    # Folders in lib/ are ddprun's own files (lib/ddprun/python), not
    # libraries of a package.
    lib_dir = os.path.join(bundle, "lib")
    sources = {lib: origins.get(lib, "/usr/lib/x86_64-linux-gnu/" + lib)
               for lib in sorted(os.listdir(lib_dir))
               if not os.path.isdir(os.path.join(lib_dir, lib))}
    owners = _dpkg_owners(list(sources.values()))
    for lib, source in sources.items():
        pkg = owners.get(source)
        if not pkg:
            raise DistError("no Debian package owns %s (bundled as lib/%s): "
                            "its licence is unknown" % (source, lib))
        packages[pkg] = "lib/" + lib
    if build_dir:
        for pkg, header in _header_packages(build_dir).items():
            packages.setdefault(pkg, header)
    out = {}
    for pkg in sorted(packages):
        path = "/usr/share/doc/%s/copyright" % pkg
        if not os.path.exists(path):
            raise DistError("%s (for %s) has no %s" %
                            (pkg, packages[pkg], path))
        out[pkg] = path
    return out


# --- the wheel ------------------------------------------------------------

def _record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class WheelWriter:
    """A wheel written entry by entry, RECORD last."""

    def __init__(self, path, dist_info):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.dist_info = dist_info
        self.records = []

    def add(self, arcname, data, executable=False):
        info = zipfile.ZipInfo(arcname, time.gmtime(EPOCH)[:6])
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = (0o100755 if executable else 0o100644) << 16
        self.zip.writestr(info, data)
        self.records.append((arcname, _record_hash(data), str(len(data))))

    def close(self):
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        for row in self.records:
            w.writerow(row)
        w.writerow((self.dist_info + "/RECORD", "", ""))
        self.add_raw(self.dist_info + "/RECORD", buf.getvalue().encode())
        self.zip.close()

    def add_raw(self, arcname, data):
        info = zipfile.ZipInfo(arcname, time.gmtime(EPOCH)[:6])
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o100644 << 16
        self.zip.writestr(info, data)


def metadata(version):
    readme = (
        "ddprun is a drop-in C++ replacement for torchrun. Installing this "
        "wheel puts `ddprun` (torchrun's command line), `ddprun-launch` "
        "(torch.distributed.launch), `ddprun-accelerate` (`accelerate "
        "launch`), `ddprun-deepspeed` (`deepspeed`) and `ddprun-rendezvous` "
        "on the environment's PATH; `python -m ddprun` works too.\n\n"
        "It does not depend on torch: the workers use the torch of the "
        "environment's interpreter.\n\n"
        "    pip install ddprun-%s-*.whl\n"
        "    ddprun --standalone --nproc_per_node=2 train.py\n" % version)
    return ("Metadata-Version: 2.1\n"
            "Name: %s\n"
            "Version: %s\n"
            "Summary: %s\n"
            "Requires-Python: >=3.7\n"
            "Classifier: Operating System :: POSIX :: Linux\n"
            "Classifier: Programming Language :: C++\n"
            "Classifier: Topic :: Scientific/Engineering :: "
            "Artificial Intelligence\n"
            "Description-Content-Type: text/markdown\n"
            "\n%s" % (NAME, version, SUMMARY, readme))


def build_wheel(bundle, version, tag, licences, out_dir):
    dist_info = "%s-%s.dist-info" % (NAME, version)
    path = os.path.join(out_dir, "%s-%s-py3-none-%s.whl" %
                        (NAME, version, tag))
    w = WheelWriter(path, dist_info)
    for name in ("__init__.py", "__main__.py", "_launcher.py"):
        with open(os.path.join(HERE, "ddprun", name), "rb") as f:
            w.add("ddprun/" + name, f.read())
    w.add("ddprun/_version.py",
          ('"""Written by packaging/make_dist.py from `ddprun --version`."""'
           '\n__version__ = "%s"\n' % version).encode())
    for sub in ("bin", "lib"):
        for name, src in bundle_entries(bundle, sub):
            if os.path.isdir(src) and not os.path.islink(src):
                continue  # a zip needs no folder entries
            if os.path.islink(src):
                if sub != "bin" or os.readlink(src) != "ddprun":
                    raise DistError("unexpected symlink %s" % src)
                w.add("ddprun/bin/" + name,
                      ALIAS_SCRIPT.format(name=name).encode(), executable=True)
                continue
            with open(src, "rb") as f:
                w.add("ddprun/%s/%s" % (sub, name), f.read(),
                      executable=os.access(src, os.X_OK))
    missing = [a for a in ALIASES
               if not os.path.lexists(os.path.join(bundle, "bin", a))]
    if missing:
        raise DistError("the bundle's bin/ lacks %s" % ", ".join(missing))
    for pkg, copyright_path in licences.items():
        with open(copyright_path, "rb") as f:
            w.add("%s/licenses/%s.copyright" % (dist_info, pkg), f.read())
    w.add(dist_info + "/METADATA", metadata(version).encode())
    w.add(dist_info + "/WHEEL",
          ("Wheel-Version: 1.0\nGenerator: ddprun packaging/make_dist.py\n"
           "Root-Is-Purelib: false\nTag: py3-none-%s\n" % tag).encode())
    data_scripts = "%s-%s.data/scripts/" % (NAME, version)
    for name in ENTRY_POINTS:
        w.add(data_scripts + name, PATH_SCRIPT.format(name=name).encode(),
              executable=True)
    w.add(dist_info + "/top_level.txt", b"ddprun\n")
    w.close()
    return path


# --- the tarball ------------------------------------------------------------

def readme_text(version, prefix_hint):
    return """ddprun {v}: a drop-in C++ replacement for torchrun

bin/ddprun             torchrun's command line
bin/ddprun-launch      torch.distributed.launch's (a symlink: the name picks it)
bin/ddprun-accelerate  `accelerate launch`'s
bin/ddprun-deepspeed   `deepspeed`'s
bin/ddprun-rendezvous  the rendezvous server for multi-node jobs
lib/                   the libraries they load (gRPC, protobuf, absl, Boost,
                       ...); found through the binaries' $ORIGIN RPATH, so
                       the folder can be anywhere and nothing is installed
licenses/              the Debian copyright file of each library shipped

Needs Linux x86-64 with glibc and libstdc++ as in the wheel's tag (see
`readelf -V bin/ddprun`). Workers run under PYTHON_EXEC (default: python3 on
PATH), whose torch they use; ddprun itself needs no Python.

    {hint}/bin/ddprun --standalone --nproc_per_node=2 train.py
    {hint}/bin/ddprun --version
""".format(v=version, hint=prefix_hint)


def _tar_add(tar, name, data=None, mode=0o644, linkname=None, isdir=False):
    info = tarfile.TarInfo(name)
    info.mtime = EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if isdir:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif linkname is not None:
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, linkname, 0o777
        tar.addfile(info)
    else:
        info.size, info.mode = len(data), mode
        tar.addfile(info, io.BytesIO(data))


def build_tarball(bundle, version, licences, out_dir):
    top = "%s-%s-linux-x86_64" % (NAME, version)
    path = os.path.join(out_dir, top + ".tar.gz")
    with tarfile.open(path, "w:gz", compresslevel=6,
                      format=tarfile.PAX_FORMAT) as tar:
        _tar_add(tar, top, isdir=True)
        for sub in ("bin", "lib"):
            _tar_add(tar, "%s/%s" % (top, sub), isdir=True)
            for name, src in bundle_entries(bundle, sub):
                arc = "%s/%s/%s" % (top, sub, name)
                if os.path.islink(src):
                    _tar_add(tar, arc, linkname=os.readlink(src))
                    continue
                if os.path.isdir(src):
                    _tar_add(tar, arc, isdir=True)
                    continue
                with open(src, "rb") as f:
                    _tar_add(tar, arc, f.read(),
                             0o755 if os.access(src, os.X_OK) else 0o644)
        _tar_add(tar, top + "/README",
                 readme_text(version, top).encode())
        _tar_add(tar, top + "/licenses", isdir=True)
        for pkg, copyright_path in licences.items():
            with open(copyright_path, "rb") as f:
                _tar_add(tar, "%s/licenses/%s.copyright" % (top, pkg),
                         f.read())
    return path


# --- the .deb ---------------------------------------------------------------

def shlib_depends(stage):
    """Depends: for the ELF files under `stage`: dpkg-shlibdeps' versions
    of the packages of the base libraries (glibc, libstdc++, libgcc_s).
    Everything else they load is in the package (usr/lib/ddprun/lib), even
    where the build machine also has it installed."""
    elf = []
    for dirpath, _, names in os.walk(stage):
        elf += [os.path.join(dirpath, n) for n in names
                if elf_needs.is_elf(os.path.join(dirpath, n))]
    base_packages = set(_dpkg_owners(
        ["/usr/lib/x86_64-linux-gnu/" + lib for lib in elf_needs.BASE_LIBS] +
        ["/lib64/ld-linux-x86-64.so.2"]).values())
    if not {"libc6", "libstdc++6"} <= base_packages:
        raise DistError("dpkg -S does not know the base libraries' "
                        "packages (found %r)" % sorted(base_packages))
    work = tempfile.mkdtemp(prefix="ddprun_shlibdeps_")
    try:
        os.makedirs(os.path.join(work, "debian"))
        with open(os.path.join(work, "debian", "control"), "w") as f:
            f.write("Source: ddprun\n\nPackage: ddprun\nArchitecture: amd64\n")
        libdir = os.path.join(stage, "usr", "lib", NAME, "lib")
        out = run(["dpkg-shlibdeps", "-O", "-l" + libdir,
                   "--ignore-missing-info"] + elf, cwd=work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    m = re.search(r"^shlibs:Depends=(.*)$", out, re.M)
    if not m:
        raise DistError("dpkg-shlibdeps gave no Depends: %r" % out)
    kept = [d.strip() for d in m.group(1).split(",")
            if d.split()[0] in base_packages]
    if not any(d.startswith("libc6 ") for d in kept):
        raise DistError("dpkg-shlibdeps gave no libc6 version: %r" % out)
    return ", ".join(kept)


def build_deb(bundle, version, licences, out_dir):
    stage = tempfile.mkdtemp(prefix="ddprun_deb_")
    try:
        root = os.path.join(stage, "usr", "lib", NAME)
        shutil.copytree(bundle, root, symlinks=True)
        bin_dir = os.path.join(stage, "usr", "bin")
        os.makedirs(bin_dir)
        for name in sorted(os.listdir(os.path.join(root, "bin"))):
            os.symlink("../lib/%s/bin/%s" % (NAME, name),
                       os.path.join(bin_dir, name))
        doc = os.path.join(stage, "usr", "share", "doc", NAME)
        os.makedirs(doc)
        with open(os.path.join(doc, "README"), "w") as f:
            f.write(readme_text(version, "/usr/lib/ddprun").replace(
                "/usr/lib/ddprun/bin/", "/usr/bin/"))
        with open(os.path.join(doc, "copyright"), "w") as f:
            f.write("ddprun %s ships these libraries in /usr/lib/ddprun/lib "
                    "and code from these packages' headers in its binaries; "
                    "their Debian copyright files follow.\n" % version)
            for pkg, copyright_path in licences.items():
                with open(copyright_path, encoding="utf-8",
                          errors="replace") as c:
                    f.write("\n%s\n%s\n%s\n" % ("=" * 72, pkg, "=" * 72))
                    f.write(c.read())
        depends = shlib_depends(stage)
        size_kb = sum(os.lstat(os.path.join(d, n)).st_size
                      for d, _, ns in os.walk(stage) for n in ns) // 1024
        os.makedirs(os.path.join(stage, "DEBIAN"))
        with open(os.path.join(stage, "DEBIAN", "control"), "w") as f:
            f.write("Package: %s\nVersion: %s\nArchitecture: amd64\n"
                    "Maintainer: ddprun developers <ddprun@localhost>\n"
                    "Installed-Size: %d\nDepends: %s\nSection: utils\n"
                    "Priority: optional\nDescription: drop-in C++ "
                    "replacement for torchrun (launcher)\n"
                    " The launcher side of ddprun (no LibTorch): ddprun, "
                    "ddprun-launch,\n ddprun-accelerate, ddprun-deepspeed "
                    "and ddprun-rendezvous, with the\n libraries they load "
                    "in /usr/lib/ddprun/lib.\n" %
                    (NAME, version, size_kb, depends))
        for d, dirs, names in os.walk(stage):
            os.chmod(d, 0o755)
        path = os.path.join(out_dir, "%s_%s_amd64.deb" % (NAME, version))
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH))
        run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", stage,
             path], env=env)
        return path
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--build-dir",
                        help="the build the bundle came from (licences of "
                             "the headers compiled in, library origins)")
    parser.add_argument("--only", default="wheel,tarball,deb")
    args = parser.parse_args()
    formats = set(args.only.split(","))
    unknown = formats - {"wheel", "tarball", "deb"}
    if unknown:
        parser.error("--only: unknown format(s) %s" % ", ".join(unknown))
    try:
        os.makedirs(args.out, exist_ok=True)
        version = bundle_version(args.bundle)
        needs = elf_needs.BundleNeeds(args.bundle)
        tag, reasons = needs.manylinux_tag()
        print("make_dist: %s %s: %s" % (NAME, version, "; ".join(reasons)))
        licences = collect_licences(args.bundle, args.build_dir)
        print("make_dist: licences of %d packages" % len(licences))
        if "wheel" in formats:
            print(build_wheel(args.bundle, version, tag, licences, args.out))
        if "tarball" in formats:
            print(build_tarball(args.bundle, version, licences, args.out))
        if "deb" in formats:
            print(build_deb(args.bundle, version, licences, args.out))
    except (DistError, elf_needs.BundleError) as e:
        print("make_dist: error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
