"""What the ELF files of a launcher bundle need from the system they run on,
read with binutils' readelf, and the manylinux platform tag (PEP 600) that
follows from it.

A bundle (scripts/bundle_launcher.sh) carries every library of the launcher
except the C and C++ runtimes: those must come from the target, so the
target's glibc must define every GLIBC_ symbol version the files ask for,
and its libstdc++/libgcc_s every GLIBCXX_, CXXABI_ and GCC_ version. Which
libstdc++ a manylinux_2_X system is guaranteed to have is the policy of
pypa/auditwheel (the libstdc++ of the reference distribution of each glibc:
e.g. manylinux_2_34 = AlmaLinux 9, gcc 11, GLIBCXX_3.4.29; manylinux_2_35 =
Ubuntu 22.04, gcc 12, GLIBCXX_3.4.30). The table below holds its x86_64
maxima; a C++ need above a level's maximum raises the tag to the first level
that has it.
"""
import os
import re
import subprocess

# Libraries the target system provides (glibc and the GCC runtimes): the
# only ones a bundle may need from outside itself.
BASE_LIBS = frozenset({
    "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
    "ld-linux-x86-64.so.2", "libstdc++.so.6", "libgcc_s.so.1",
})

# manylinux_2_<minor> on x86_64: the newest GLIBCXX_, CXXABI_ and GCC_
# versions its policy allows (pypa/auditwheel manylinux-policy.json).
MANYLINUX_X86_64 = [
    (17, "3.4.19", "1.3.7", "4.8.0"),
    (24, "3.4.22", "1.3.10", "4.8.0"),
    (27, "3.4.24", "1.3.11", "7.0.0"),
    (28, "3.4.24", "1.3.11", "7.0.0"),
    (31, "3.4.28", "1.3.12", "7.0.0"),
    (34, "3.4.29", "1.3.13", "7.0.0"),
    (35, "3.4.30", "1.3.13", "12.0.0"),
    (36, "3.4.30", "1.3.13", "12.0.0"),
    (38, "3.4.30", "1.3.13", "12.0.0"),
    (39, "3.4.33", "1.3.15", "14.0.0"),
    (40, "3.4.33", "1.3.15", "14.0.0"),
    (41, "3.4.33", "1.3.15", "14.0.0"),
]

_VERSION_NAME = re.compile(r"Name: (GLIBC|GLIBCXX|CXXABI|GCC)_([0-9][0-9.]*)\b")
_DYNAMIC = re.compile(r"\((NEEDED|RPATH|RUNPATH)\)\s+[^\[]*\[(.*)\]")


class BundleError(Exception):
    """The bundle cannot be shipped as it is (one line, names the file)."""


def version_key(text):
    return tuple(int(x) for x in text.split("."))


def is_elf(path):
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def _readelf(args, path):
    p = subprocess.run(["readelf", "--wide"] + args + [path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env=dict(os.environ, LC_ALL="C"))
    if p.returncode != 0:
        raise BundleError("readelf %s %s failed: %s" %
                          (" ".join(args), path, p.stderr.decode().strip()))
    return p.stdout.decode()


class ElfFile:
    """One ELF file: the symbol versions it requires (from .gnu.version_r),
    its DT_NEEDED libraries and its RPATH/RUNPATH entries."""

    def __init__(self, path):
        self.path = path
        self.versions = {}  # "GLIBC" -> set of "2.34", ...
        for kind, ver in _VERSION_NAME.findall(_readelf(["-V"], path)):
            self.versions.setdefault(kind, set()).add(ver)
        self.needed, self.rpath, self.runpath = [], [], []
        for tag, value in _DYNAMIC.findall(_readelf(["-d"], path)):
            if tag == "NEEDED":
                self.needed.append(value)
            elif tag == "RPATH":
                self.rpath.extend(value.split(":"))
            else:
                self.runpath.extend(value.split(":"))

    def newest(self, kind):
        vs = self.versions.get(kind)
        return max(vs, key=version_key) if vs else None


class BundleNeeds:
    """The union of what every ELF file under `root` needs from outside."""

    def __init__(self, root):
        self.root = root
        self.files = []
        for dirpath, _, names in os.walk(root):
            for name in sorted(names):
                path = os.path.join(dirpath, name)
                if is_elf(path):
                    self.files.append(ElfFile(path))
        if not self.files:
            raise BundleError("no ELF file under %s" % root)
        self.bundled = {os.path.basename(f.path) for f in self.files}

    def newest(self, kind):
        """(version, file) of the newest `kind` version any file needs."""
        best = None
        for f in self.files:
            v = f.newest(kind)
            if v and (best is None or version_key(v) > version_key(best[0])):
                best = (v, os.path.relpath(f.path, self.root))
        return best

    def external(self):
        """{library: [files needing it]} of what the bundle does not hold."""
        out = {}
        for f in self.files:
            for lib in f.needed:
                if lib not in self.bundled:
                    out.setdefault(lib, []).append(
                        os.path.relpath(f.path, self.root))
        return out

    def check(self):
        """Raises BundleError when a file needs a library that is neither in
        the bundle nor in BASE_LIBS, or searches a path not relative to
        itself ($ORIGIN)."""
        for lib, users in sorted(self.external().items()):
            if lib not in BASE_LIBS:
                raise BundleError(
                    "%s needs %s, which is neither in the bundle nor a base "
                    "system library (%s)" %
                    (users[0], lib, ", ".join(sorted(BASE_LIBS))))
        for f in self.files:
            for entry in f.rpath + f.runpath:
                if not entry.startswith("$ORIGIN"):
                    raise BundleError("%s searches %s (RPATH/RUNPATH must "
                                      "be $ORIGIN-relative)" %
                                      (os.path.relpath(f.path, self.root),
                                       entry))

    def manylinux_tag(self):
        """('manylinux_2_<N>_x86_64', [reasons]) for the oldest level whose
        glibc and C++ runtime cover every need."""
        self.check()
        reasons = []
        glibc = self.newest("GLIBC")
        minor = version_key(glibc[0])[1] if glibc else 17
        if glibc:
            reasons.append("GLIBC_%s (%s)" % glibc)
        for kind, column in (("GLIBCXX", 1), ("CXXABI", 2), ("GCC", 3)):
            need = self.newest(kind)
            if not need:
                continue
            levels = [row[0] for row in MANYLINUX_X86_64
                      if version_key(row[column]) >= version_key(need[0])]
            if not levels:
                raise BundleError("%s needs %s_%s, newer than any manylinux "
                                  "policy this script knows" %
                                  (need[1], kind, need[0]))
            reasons.append("%s_%s (%s) -> manylinux_2_%d" %
                           (kind, need[0], need[1], min(levels)))
            minor = max(minor, min(levels))
        return "manylinux_2_%d_x86_64" % minor, reasons
