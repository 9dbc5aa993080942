#!/usr/bin/env python3
"""Checks that a Dockerfile's runtime stage installs the Debian package of
every shared library the given binaries load, on the Debian system the
binaries were built on (ldd, dpkg -S, dpkg-query): the listed packages, what
they depend on, and the base image's required packages count as installed.
docker/Dockerfile's list is checked the same way by tests/deploy; this is
for docker/Dockerfile.cuda, run by scripts/trixie_build.sh in the trixie root.

  check_image_packages.py DOCKERFILE [--absent LIB=PACKAGE ...] BINARY...

--absent names a library that is not on this system on purpose and the
package that ships it (cuDNN behind a placeholder package offline).
Exit 0 when every library is covered, 1 otherwise (each gap printed).
"""

import argparse
import os
import re
import subprocess
import sys


def runtime_packages(dockerfile):
    """Package names of the apt-get install commands of the last stage."""
    text = open(dockerfile).read().replace("\\\n", " ")
    stages = re.split(r"^FROM\s", text, flags=re.M)
    packages = []
    for command in re.findall(r"apt-get install ([^&\n]*)", stages[-1]):
        packages += [w for w in command.split() if not w.startswith("-")]
    return packages


def run(argv):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True).stdout


def libraries(binaries):
    """{soname: path or None when ldd does not find it}."""
    libs = {}
    for b in binaries:
        for line in run(["ldd", b]).splitlines():
            m = re.match(r"\s*(\S+) => (not found|\S+)", line)
            if m:
                libs[m.group(1)] = None if m.group(2) == "not found" else m.group(2)
    return libs


def owner(path):
    """The package that ships `path` (trixie merges /lib into /usr/lib, and
    dpkg knows each file under the name its package used)."""
    # An alternatives link (libblas.so.3, liblapack.so.3) belongs to no
    # package; the library it points at does.
    candidates = set()
    for p in (path, os.path.realpath(path)):
        candidates |= {p, p.replace("/usr/lib/", "/lib/", 1),
                       p.replace("/lib/", "/usr/lib/", 1)}
    for c in sorted(candidates):
        out = run(["dpkg", "-S", c]).strip()
        if out and ":" in out:
            return out.split(":")[0].split(",")[0].strip()
    return None


def closure(listed):
    """Installed packages the runtime stage ends up with."""
    status = {}
    providers = {}  # virtual package (libre2-11-absl20240722) -> real ones
    for line in run(["dpkg-query", "-W", "-f=${Package}\t${Priority}\t"
                     "${Essential}\t${Pre-Depends}, ${Depends}\t${Provides}\n"]
                    ).splitlines():
        name, priority, essential, deps, provides = (line.split("\t") +
                                                     [""] * 5)[:5]
        names = [re.sub(r"[:\s(].*", "", alt.strip())
                 for group in deps.split(",") for alt in group.split("|")]
        status[name] = (priority == "required" or essential == "yes",
                        [n for n in names if n])
        for virtual in provides.split(","):
            virtual = re.sub(r"[:\s(].*", "", virtual.strip())
            if virtual:
                providers.setdefault(virtual, []).append(name)
    todo = [p for p, (base, _) in status.items() if base] + list(listed)
    seen = set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for d in status.get(p, (False, []))[1]:
            todo += [d] if d in status else providers.get(d, [])
    return seen


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dockerfile")
    p.add_argument("binaries", nargs="+")
    p.add_argument("--absent", action="append", default=[],
                   metavar="LIB=PACKAGE")
    a = p.parse_args()
    absent = dict(x.split("=", 1) for x in a.absent)
    listed = runtime_packages(a.dockerfile)
    if not listed:
        print("error: no apt-get install in the last stage of " + a.dockerfile)
        return 1
    installed = closure(listed)
    gaps = 0
    for soname, path in sorted(libraries(a.binaries).items()):
        package = absent.get(soname) if path is None else owner(path)
        if package is None:
            print("error: %s (%s): no package ships it" % (soname, path))
            gaps += 1
        elif package not in installed and package not in listed:
            print("error: %s comes from %s, which the runtime stage does not "
                  "install" % (soname, package))
            gaps += 1
    print("%s: %d packages listed, %s" % (
        a.dockerfile, len(listed),
        "every library covered" if not gaps else "%d libraries missing" % gaps))
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
