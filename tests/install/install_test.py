"""Installation tests of the release artifacts (scripts/build_wheel.sh):
ddprun used the way users get it, not from the build tree.

  install_test.py CASE --dist DIR --source SRC [--python PY] [--build-dir B]

  contents   the wheel: RECORD hashes, tags, metadata (no torch), entry
             points; in every ELF file no RPATH/RUNPATH outside $ORIGIN and
             every library ldd resolves inside the package or in the base
             glibc/libstdc++ set; no build path in any script; the platform
             tag covers the GLIBC_ versions the files need; the wheel, the
             tarball and the .deb hold the same binaries
  venv       the wheel pip-installed into a fresh venv of PY
             (--system-site-packages: the interpreter's torch): the entry
             points and `python -m ddprun` from the venv's bin/; the process
             is the binary (same pid, signals reach the workers, its exit
             codes); workers get the venv's interpreter when the venv is not
             on PATH; a 2-rank Gloo DDP script (tests/compat/ddp_check.py)
             under `ddprun --standalone --nproc_per_node=2` and under
             `ddprun-accelerate --multi_gpu --num_processes=2`
  uninstall  pip install, use, pip uninstall: the venv's files are exactly
             those before
  tarball    the tarball unpacked into a path with a space, run from there
             (ldd, --version, the aliases, the DDP script under ddprun and
             ddprun-accelerate)
  deb        the .deb's control fields (Depends covers the GLIBC_ needs) and
             its tree, extracted, run through /usr/bin's symlinks

Exit 0 = pass, 1 = fail, 77 = skipped: PY has no torch (every other check
of the case ran and passed first) or a needed tool is missing.
"""
import argparse
import base64
import csv
import glob
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77
TIMEOUT_S = 180
ENTRY_POINTS = ["ddprun", "ddprun-launch", "ddprun-accelerate",
                "ddprun-deepspeed", "ddprun-rendezvous"]
HELP_FIRST_LINE = {
    "ddprun": "usage: ddprun [options]",
    "ddprun-launch": "usage: ddprun-launch [options]",
    "ddprun-accelerate": "usage: ddprun-accelerate [options]",
    "ddprun-deepspeed": "usage: ddprun-deepspeed [options]",
    "ddprun-rendezvous": "ddprun rendezvous server",
}
BASE_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2",
             "librt.so.1", "ld-linux-x86-64.so.2", "libstdc++.so.6",
             "libgcc_s.so.1", "linux-vdso.so.1"}
WHEEL_NAME = re.compile(
    r"ddprun-([0-9][0-9.]*)-py3-none-manylinux_2_([0-9]+)_x86_64\.whl$")


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def run(cmd, env=None, cwd=None, ok=True, timeout=TIMEOUT_S):
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    out = p.stdout.decode(errors="replace")
    if ok:
        check(p.returncode == 0, "%s exited %d:\n%s" %
              (" ".join(cmd), p.returncode, out[-3000:]))
    return p.returncode, out


def clean_env(extra=None, path="/usr/bin:/bin"):
    """No variable from the test's own environment that could point the
    launcher or its workers anywhere (PET_*, PYTHON_EXEC, LD_*...)."""
    env = {"PATH": path, "HOME": os.environ.get("HOME", "/tmp"),
           "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1",
           # Debian trixie's torch 2.6 has no libuv but asks for it: Python
           # workers' init_process_group fails without this (1.13 ignores
           # it).
           "USE_LIBUV": "0",
           # No accelerate config of the machine's (never created).
           "HF_HOME": os.path.join(tempfile.gettempdir(),
                                   "ddprun_install_no_hf_home")}
    env.update(extra or {})
    return env


def artifact(dist, pattern):
    found = sorted(glob.glob(os.path.join(dist, pattern)))
    check(len(found) == 1, "%s: expected one %s, found %r" %
          (dist, pattern, found))
    return found[0]


def wheel_version(dist):
    whl = artifact(dist, "ddprun-*.whl")
    m = WHEEL_NAME.search(os.path.basename(whl))
    check(m, "wheel name %s is not ddprun-V-py3-none-manylinux_2_N_x86_64"
          % os.path.basename(whl))
    return whl, m.group(1), int(m.group(2))


def has_torch(python):
    p = subprocess.run([python, "-c", "import torch"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p.returncode == 0


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# --- ELF checks (readelf and ldd, nothing from packaging/) ------------------

def is_elf(path):
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def elf_files(root):
    return sorted(os.path.join(d, n) for d, _, ns in os.walk(root)
                  for n in ns if is_elf(os.path.join(d, n)))


def newest_glibc(paths):
    best = (2, 0)
    for path in paths:
        _, out = run(["readelf", "-V", "--wide", path])
        for v in re.findall(r"Name: GLIBC_2\.([0-9]+)", out):
            best = max(best, (2, int(v)))
    return best


def check_elf_tree(root, forbidden):
    """RPATH/RUNPATH only $ORIGIN-relative; ldd resolves every library
    inside `root` or to a base system library; no `forbidden` path in the
    search paths."""
    files = elf_files(root)
    check(files, "no ELF file under %s" % root)
    real_root = os.path.realpath(root)
    for path in files:
        _, dyn = run(["readelf", "-d", "--wide", path])
        for tag, value in re.findall(r"\((RPATH|RUNPATH)\)[^\[]*\[(.*)\]",
                                     dyn):
            for entry in value.split(":"):
                check(entry.startswith("$ORIGIN"),
                      "%s: %s %s is not $ORIGIN-relative" %
                      (path, tag, entry))
                for f in forbidden:
                    check(f not in entry, "%s: %s names %s" % (path, tag, f))
        _, out = run(["ldd", path], env=clean_env())
        for line in out.splitlines():
            line = line.strip()
            check("not found" not in line, "%s: %s" % (path, line))
            m = re.match(r"(\S+) => (.+) \(0x[0-9a-f]+\)$", line)
            if not m:
                continue
            name, where = m.group(1), os.path.realpath(m.group(2))
            check(where.startswith(real_root + os.sep) or name in BASE_LIBS,
                  "%s loads %s from %s: neither inside the package nor a "
                  "base system library" % (path, name, where))
    return files


def check_no_paths_in_text(root, forbidden):
    for d, _, names in os.walk(root):
        for n in names:
            path = os.path.join(d, n)
            if os.path.islink(path) or is_elf(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            for bad in forbidden:
                check(bad.encode() not in data,
                      "%s contains the build path %s" % (path, bad))


# --- contents ---------------------------------------------------------------

def case_contents(args):
    whl, version, tag_minor = wheel_version(args.dist)
    forbidden = [os.path.realpath(p) for p in (args.build_dir, args.source)
                 if p]
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        dist_info = "ddprun-%s.dist-info" % version
        record = list(csv.reader(
            io.StringIO(z.read(dist_info + "/RECORD").decode())))
        recorded = {}
        for row in record:
            check(len(row) == 3, "RECORD row %r" % row)
            recorded[row[0]] = row
        check(set(recorded) == set(names),
              "RECORD and the zip differ: %r" %
              sorted(set(recorded) ^ set(names)))
        for name, (_, digest, size) in recorded.items():
            if name == dist_info + "/RECORD":
                check(digest == "" and size == "", "RECORD hashes itself")
                continue
            data = z.read(name)
            want = "sha256=" + base64.urlsafe_b64encode(
                hashlib.sha256(data).digest()).rstrip(b"=").decode()
            check(digest == want and size == str(len(data)),
                  "RECORD entry of %s does not match its content" % name)
        meta = z.read(dist_info + "/METADATA").decode()
        check(re.search(r"^Name: ddprun$", meta, re.M), "METADATA Name")
        check(re.search(r"^Version: %s$" % re.escape(version), meta, re.M),
              "METADATA Version is not %s" % version)
        headers = meta.split("\n\n")[0]
        check(not re.search(r"^(Requires-Dist|Requires-External|"
                            r"Provides-Extra):", headers, re.M),
              "METADATA declares dependencies (the user's torch is "
              "theirs):\n%s" % headers)
        wheel = z.read(dist_info + "/WHEEL").decode()
        check("Tag: py3-none-manylinux_2_%d_x86_64" % tag_minor in wheel,
              "WHEEL's Tag does not match the file name:\n" + wheel)
        check("Root-Is-Purelib: false" in wheel, "a platform wheel is "
              "installed to platlib")
        # The commands on PATH are shell scripts that exec the package's
        # binaries (no interpreter start), not Python console scripts.
        check(dist_info + "/entry_points.txt" not in names,
              "the wheel declares Python console scripts")
        data_scripts = "ddprun-%s.data/scripts/" % version
        for ep in ENTRY_POINTS:
            script = data_scripts + ep
            check(script in names, "%s missing from the wheel" % script)
            if script not in names:
                continue
            text = z.read(script).decode()
            check(text.startswith("#!/bin/sh\n"),
                  "%s is not a POSIX shell script" % script)
            check('exec "$pkg/bin/%s" "$@"' % ep in text,
                  "%s does not exec ddprun/bin/%s" % (script, ep))
            check(z.getinfo(script).external_attr >> 16 & 0o111,
                  "%s is not executable in the wheel" % script)
        check(any(n.startswith(dist_info + "/licenses/") for n in names),
              "no licence files in the wheel")
        for exe in ["ddprun/bin/ddprun", "ddprun/bin/ddprun-rendezvous",
                    "ddprun/bin/ddprun-deepspeed"]:
            mode = z.getinfo(exe).external_attr >> 16
            check(mode & 0o111, "%s is not executable in the wheel" % exe)
        tmp = tempfile.mkdtemp(prefix="ddprun_install_contents_")
        try:
            z.extractall(tmp)
            for name in names:  # zipfile drops the modes
                mode = z.getinfo(name).external_attr >> 16
                if mode:
                    os.chmod(os.path.join(tmp, name), mode & 0o777)
            pkg = os.path.join(tmp, "ddprun")
            files = check_elf_tree(pkg, forbidden)
            check_no_paths_in_text(tmp, forbidden)
            need = newest_glibc(files)
            check(tag_minor >= need[1],
                  "tag manylinux_2_%d, but a file needs GLIBC_2.%d" %
                  (tag_minor, need[1]))
            check(args.max_manylinux is None or
                  tag_minor <= args.max_manylinux,
                  "the wheel is manylinux_2_%d: it no longer runs where "
                  "manylinux_2_%d does (e.g. RHEL 9 for 34); make_dist.py "
                  "prints which symbol version of which file raised it" %
                  (tag_minor, args.max_manylinux))
            # Every tag check the wheel passed is only worth something if
            # the files are the ones the other artifacts carry.
            wheel_bins = {os.path.relpath(f, pkg): sha256(f) for f in files}
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix="ddprun_install_same_")
    try:
        with tarfile.open(artifact(args.dist, "ddprun-*-linux-x86_64.tar.gz")
                          ) as t:
            t.extractall(tmp)
        top = os.path.join(tmp, "ddprun-%s-linux-x86_64" % version)
        tar_bins = {os.path.relpath(f, top): sha256(f)
                    for f in elf_files(top)}
        check(tar_bins == wheel_bins,
              "the tarball's binaries differ from the wheel's: %r" %
              sorted(set(tar_bins.items()) ^ set(wheel_bins.items())))
        deb_root = os.path.join(tmp, "deb")
        run(["dpkg-deb", "-x", artifact(args.dist, "ddprun_*_amd64.deb"),
             deb_root])
        lib = os.path.join(deb_root, "usr", "lib", "ddprun")
        deb_bins = {os.path.relpath(f, lib): sha256(f)
                    for f in elf_files(lib)}
        check(deb_bins == wheel_bins, "the .deb's binaries differ from the "
              "wheel's")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("OK: %s: RECORD, metadata (no dependencies), 5 entry points; %d "
          "ELF files: $ORIGIN RPATHs, every library inside or base, newest "
          "GLIBC_2.%d <= tag 2_%d; same binaries in the tarball and the .deb"
          % (os.path.basename(whl), len(wheel_bins), need[1], tag_minor))


# --- runs -------------------------------------------------------------------

def check_ddp(launcher, flags, env, what):
    """tests/compat/ddp_check.py on 2 ranks: all-reduce, DDP step equal on
    both ranks and to the single-process reference."""
    out_dir = tempfile.mkdtemp(prefix="ddprun_install_ddp_")
    try:
        script = os.path.join(os.path.dirname(HERE), "compat", "ddp_check.py")
        _, out = run([launcher] + flags + [script, out_dir], env=env)
        res = {}
        for rank in (0, 1):
            path = os.path.join(out_dir, "ddp_%d.json" % rank)
            check(os.path.exists(path), "%s: rank %d wrote no result:\n%s" %
                  (what, rank, out[-3000:]))
            with open(path) as f:
                res[rank] = json.load(f)
        for rank, r in res.items():
            check(r["world"] == 2 and r["rank"] == rank == r["env_rank"],
                  "%s: rank %d reported %r" % (what, rank, r))
            check(r["allreduce"] == 3.0, "%s: all_reduce gave %r" %
                  (what, r["allreduce"]))
            check(r["params_equal_across_ranks"] and
                  r["matches_single_process_reference"],
                  "%s: the DDP step is wrong on rank %d" % (what, rank))
        print("OK: %s: 2-rank Gloo DDP step correct" % what)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def ddp_under_both(bin_dir, python, env, what):
    """The DDP script under bin_dir's ddprun --standalone and
    ddprun-accelerate; SKIP when `python` (the workers') has no torch."""
    if not has_torch(python):
        print("SKIP: %s has no torch: the DDP runs did not run" % python)
        return SKIP
    check_ddp(os.path.join(bin_dir, "ddprun"),
              ["--standalone", "--nproc_per_node=2"], env,
              what + " ddprun --standalone --nproc_per_node=2")
    check_ddp(os.path.join(bin_dir, "ddprun-accelerate"),
              ["--multi_gpu", "--num_processes=2"], env,
              what + " ddprun-accelerate --multi_gpu --num_processes=2")
    return 0


def check_dispatch(bin_dir, env, version):
    """Each name starts the front end it names; --version is the build's."""
    for name in ENTRY_POINTS:
        _, out = run([os.path.join(bin_dir, name), "--help"], env=env)
        check(out.startswith(HELP_FIRST_LINE[name]),
              "%s --help starts %r" % (name, out[:80]))
    for name in ("ddprun", "ddprun-rendezvous"):
        _, out = run([os.path.join(bin_dir, name), "--version"], env=env)
        check(out.strip() == "%s %s" % (name, version),
              "%s --version printed %r" % (name, out))


def check_is_the_binary(ddprun, env, binary):
    """The entry point's process is the binary (execv: same pid), with its
    exit codes, and SIGTERM to it reaches every worker (143, as the
    binary). `binary` is the file the agent must be running."""
    tmp = tempfile.mkdtemp(prefix="ddprun_install_proc_")
    try:
        code, out = run([ddprun, "--bogus"], env=env, ok=False)
        check(code == 2 and "ddprun: error" in out,
              "bad flag: exit %d, %r" % (code, out))
        code, _ = run([ddprun, "--standalone", "--nproc_per_node=1",
                       "--no_python", "false"], env=env, ok=False)
        check(code == 1, "a failing worker gave exit %d, not 1" % code)
        sig_env = dict(env, COMPAT_OUT=tmp)
        p = subprocess.Popen(
            [ddprun, "--standalone", "--nproc_per_node=2",
             os.path.join(os.path.dirname(HERE), "compat",
                          "signal_worker.py")],
            env=sig_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while not all(os.path.exists(os.path.join(tmp, "up_%d" % r))
                          for r in (0, 1)):
                check(p.poll() is None and time.monotonic() < deadline,
                      "signal workers did not start: %r" %
                      (p.stdout.read().decode()[-2000:]
                       if p.poll() is not None else "timeout"))
                time.sleep(0.05)
            exe = os.path.realpath("/proc/%d/exe" % p.pid)
            check(exe == os.path.realpath(binary),
                  "pid %d runs %s, not %s: the entry point did not exec" %
                  (p.pid, exe, binary))
            p.send_signal(signal.SIGTERM)
            out = p.communicate(timeout=TIMEOUT_S)[0].decode()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        check(p.returncode == 128 + signal.SIGTERM,
              "SIGTERM: exit %d, not 143:\n%s" % (p.returncode, out[-2000:]))
        for r in (0, 1):
            path = os.path.join(tmp, "sig_%d" % r)
            check(os.path.exists(path), "worker %d got no SIGTERM" % r)
        print("OK: %s is the binary (pid, exit 2 and 1, SIGTERM -> 143 with "
              "both workers signalled)" % os.path.basename(ddprun))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def make_venv(python, where):
    run([python, "-m", "venv", "--system-site-packages", where])
    vpy = os.path.join(where, "bin", "python")
    return vpy


def pip_install(vpy, whl):
    run([vpy, "-m", "pip", "install", "--no-index", "--no-deps",
         "--disable-pip-version-check", "--no-cache-dir", whl],
        env=clean_env())


def tree(root):
    out = set()
    for d, dirs, names in os.walk(root):
        for n in dirs + names:
            out.add(os.path.relpath(os.path.join(d, n), root))
    return out


def case_venv(args):
    whl, version, _ = wheel_version(args.dist)
    tmp = tempfile.mkdtemp(prefix="ddprun_install_venv_")
    try:
        venv = os.path.join(tmp, "venv")
        vpy = make_venv(args.python, venv)
        pip_install(vpy, whl)
        vbin = os.path.join(venv, "bin")
        # The venv not on PATH: as `/path/venv/bin/ddprun ...` runs.
        env = clean_env()
        check_dispatch(vbin, env, version)
        # Through a symlink elsewhere (~/bin/ddprun -> venv/bin/ddprun).
        linked = os.path.join(tmp, "linked")
        os.makedirs(linked)
        os.symlink(os.path.join(vbin, "ddprun"),
                   os.path.join(linked, "ddprun"))
        _, out = run([os.path.join(linked, "ddprun"), "--version"], env=env)
        check(out.strip() == "ddprun " + version,
              "a symlink to bin/ddprun printed %r" % out)
        _, out = run([vpy, "-m", "ddprun", "--version"], env=env)
        check(out.strip() == "ddprun " + version,
              "python -m ddprun --version printed %r" % out)
        _, out = run([vpy, "-c", "import ddprun; print(ddprun.__version__)"],
                     env=env)
        check(out.strip() == version, "ddprun.__version__ is %r" % out)
        _, site = run([vpy, "-c", "import ddprun, os; "
                       "print(os.path.dirname(ddprun.__file__))"], env=env)
        binary = os.path.join(site.strip(), "bin", "ddprun")
        check_is_the_binary(os.path.join(vbin, "ddprun"), env, binary)
        # The package's own bin/ names (ddprun-deepspeed's ssh fan-out runs
        # <dir of the binary>/ddprun-deepspeed on the other nodes).
        for alias in ("ddprun-launch", "ddprun-accelerate",
                      "ddprun-deepspeed"):
            _, out = run([os.path.join(site.strip(), "bin", alias), "--help"],
                         env=env)
            check(out.startswith(HELP_FIRST_LINE[alias]),
                  "the package's bin/%s --help starts %r" % (alias, out[:80]))
        # Workers run the venv's interpreter, as torchrun of the venv would.
        probe = os.path.join(tmp, "prefix.py")
        with open(probe, "w") as f:
            f.write("import os, sys\nopen(os.path.join(sys.argv[1], "
                    "'prefix_' + os.environ['RANK']), 'w').write(sys.prefix)\n")
        run([os.path.join(vbin, "ddprun"), "--standalone",
             "--nproc_per_node=2", probe, tmp], env=env)
        for r in (0, 1):
            with open(os.path.join(tmp, "prefix_%d" % r)) as f:
                got = f.read()
            check(os.path.realpath(got) == os.path.realpath(venv),
                  "worker %d ran in %s, not the venv" % (r, got))
        print("OK: venv of %s: entry points, python -m ddprun, ddprun %s; "
              "workers use the venv's interpreter" % (args.python, version))
        return ddp_under_both(vbin, vpy, env, "venv")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def case_uninstall(args):
    whl, version, _ = wheel_version(args.dist)
    tmp = tempfile.mkdtemp(prefix="ddprun_install_uninstall_")
    try:
        venv = os.path.join(tmp, "venv")
        vpy = make_venv(args.python, venv)
        # pip's own first run may compile or cache something of its own:
        # the snapshot is taken after one.
        run([vpy, "-m", "pip", "list", "--disable-pip-version-check"],
            env=clean_env())
        before = tree(venv)
        pip_install(vpy, whl)
        added = tree(venv) - before
        check(any(p.endswith(os.path.join("bin", "ddprun")) for p in added),
              "pip install added no bin/ddprun")
        env = clean_env()
        for cmd in ([os.path.join(venv, "bin", "ddprun"), "--version"],
                    [vpy, "-m", "ddprun", "--version"],
                    [os.path.join(venv, "bin", "ddprun-deepspeed"),
                     "--help"]):
            run(cmd, env=env)
        run([vpy, "-m", "pip", "uninstall", "-y",
             "--disable-pip-version-check", "ddprun"], env=clean_env())
        after = tree(venv)
        check(after == before, "after pip uninstall: left %r, removed %r" %
              (sorted(after - before)[:20], sorted(before - after)[:20]))
        print("OK: pip install added %d files and dirs; pip uninstall left "
              "the venv as it was" % len(added))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def case_tarball(args):
    _, version, _ = wheel_version(args.dist)
    tgz = artifact(args.dist, "ddprun-*-linux-x86_64.tar.gz")
    tmp = tempfile.mkdtemp(prefix="ddprun_install_tar_")
    try:
        where = os.path.join(tmp, "opt with space", "ddprun tools")
        os.makedirs(where)
        run(["tar", "-xzf", tgz, "-C", where])
        top = os.path.join(where, "ddprun-%s-linux-x86_64" % version)
        for part in ("bin/ddprun", "bin/ddprun-rendezvous", "README"):
            check(os.path.exists(os.path.join(top, part)), "no %s" % part)
        licences = os.listdir(os.path.join(top, "licenses"))
        check(licences, "no licence files")
        check_elf_tree(top, [])
        for alias in ("ddprun-launch", "ddprun-accelerate",
                      "ddprun-deepspeed"):
            check(os.readlink(os.path.join(top, "bin", alias)) == "ddprun",
                  "bin/%s is not a symlink to ddprun" % alias)
        env = clean_env()
        check_dispatch(os.path.join(top, "bin"), env, version)
        print("OK: tarball in %r: ELF files resolve inside it, %d licence "
              "files, every name dispatches" % (where, len(licences)))
        return ddp_under_both(os.path.join(top, "bin"), args.python,
                              clean_env({"PYTHON_EXEC": args.python}),
                              "tarball")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def case_deb(args):
    _, version, _ = wheel_version(args.dist)
    deb = artifact(args.dist, "ddprun_*_amd64.deb")
    _, info = run(["dpkg-deb", "-f", deb, "Package", "Version",
                   "Architecture", "Depends"])
    fields = dict(l.split(": ", 1) for l in info.splitlines() if ": " in l)
    check(fields.get("Package") == "ddprun" and
          fields.get("Version") == version and
          fields.get("Architecture") == "amd64", "control: %r" % fields)
    tmp = tempfile.mkdtemp(prefix="ddprun_install_deb_")
    try:
        root = os.path.join(tmp, "root dir")
        run(["dpkg-deb", "-x", deb, root])
        files = check_elf_tree(os.path.join(root, "usr", "lib", "ddprun"), [])
        need = newest_glibc(files)
        m = re.search(r"libc6 \(>= 2\.([0-9]+)\)", fields.get("Depends", ""))
        check(m and int(m.group(1)) >= need[1],
              "Depends %r does not cover GLIBC_2.%d" %
              (fields.get("Depends"), need[1]))
        depends = {d.split()[0] for d in fields["Depends"].split(",")}
        check("libstdc++6" in depends, "Depends lacks libstdc++6")
        check(depends <= {"libc6", "libstdc++6", "libgcc-s1"},
              "Depends names %s, which the package carries itself" %
              ", ".join(sorted(depends - {"libc6", "libstdc++6",
                                          "libgcc-s1"})))
        check(os.path.exists(os.path.join(root, "usr", "share", "doc",
                                          "ddprun", "copyright")),
              "no /usr/share/doc/ddprun/copyright")
        usr_bin = os.path.join(root, "usr", "bin")
        for name in ENTRY_POINTS:
            check(os.path.islink(os.path.join(usr_bin, name)),
                  "/usr/bin/%s is not a symlink" % name)
        check_dispatch(usr_bin, clean_env(), version)
        print("OK: %s: Depends %s; /usr/bin's names run the binaries" %
              (os.path.basename(deb), fields["Depends"]))
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", choices=["contents", "venv", "uninstall",
                                         "tarball", "deb"])
    parser.add_argument("--dist", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--build-dir")
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--max-manylinux", type=int,
                        help="contents: fail when the tag is above "
                             "manylinux_2_<this>")
    args = parser.parse_args()
    if not glob.glob(os.path.join(args.dist, "ddprun-*.whl")):
        print("FAIL: no wheel in %s (scripts/build_wheel.sh, or the "
              "install/dist test, makes it)" % args.dist)
        return 1
    for tool in ("readelf", "ldd", "dpkg-deb"):
        if not shutil.which(tool):
            print("SKIP: needs %s" % tool)
            return SKIP
    try:
        code = {"contents": case_contents, "venv": case_venv,
                "uninstall": case_uninstall, "tarball": case_tarball,
                "deb": case_deb}[args.case](args)
    except Failure as e:
        print("FAIL: %s" % e)
        return 1
    return code or 0


if __name__ == "__main__":
    sys.exit(main())
