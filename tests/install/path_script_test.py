"""Unit tests of the wheel's PATH scripts (packaging/make_dist.py's
PATH_SCRIPT): the script pip puts in the environment's bin/ finds the
package beside itself when run directly, through a symlink (absolute,
relative, a chain of them, a symlinked folder) and as a bare name, and
gives the workers the environment's interpreter. On a fake environment: a
shell script stands in for the launcher binary and prints what it got."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "packaging"))
import make_dist  # noqa: E402

# What the stand-in launcher prints: its arguments and PYTHON_EXEC.
FAKE_LAUNCHER = """#!/bin/sh
echo "launcher $* python=${PYTHON_EXEC:-unset}"
"""


class PathScriptTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ddprun_path_script_")
        self.env_dir = os.path.join(self.tmp, "venv")
        self.bin = os.path.join(self.env_dir, "bin")
        pkg_bin = os.path.join(self.env_dir, "lib", "python3.11",
                               "site-packages", "ddprun", "bin")
        os.makedirs(self.bin)
        os.makedirs(pkg_bin)
        self.write(os.path.join(pkg_bin, "ddprun"), FAKE_LAUNCHER)
        self.script = os.path.join(self.bin, "ddprun")
        self.write(self.script, make_dist.PATH_SCRIPT.format(name="ddprun"))
        self.write(os.path.join(self.bin, "python3"), "#!/bin/sh\n")
        self.elsewhere = os.path.join(self.tmp, "home", "bin")
        os.makedirs(self.elsewhere)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    @staticmethod
    def write(path, text):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)

    def run_ok(self, argv0, cwd=None, path="/usr/bin:/bin"):
        p = subprocess.run([argv0, "--version"], cwd=cwd,
                           env={"PATH": path}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=30)
        out = p.stdout.decode()
        self.assertEqual(p.returncode, 0, "%s: %s" % (argv0, out))
        return out

    def expect(self, out):
        head, _, python = out.strip().partition(" python=")
        self.assertEqual(head, "launcher --version")
        self.assertEqual(os.path.realpath(python),
                         os.path.realpath(os.path.join(self.bin, "python3")))

    def test_direct(self):
        self.expect(self.run_ok(self.script))

    def test_absolute_symlink(self):
        link = os.path.join(self.elsewhere, "ddprun")
        os.symlink(self.script, link)
        self.expect(self.run_ok(link))

    def test_relative_symlink_chain(self):
        # ~/bin/ddprun -> ../opt/ddprun -> ../../venv/bin/ddprun
        opt = os.path.join(self.tmp, "home", "opt")
        os.makedirs(opt)
        os.symlink(os.path.join("..", "..", "venv", "bin", "ddprun"),
                   os.path.join(opt, "ddprun"))
        link = os.path.join(self.elsewhere, "ddprun")
        os.symlink(os.path.join("..", "opt", "ddprun"), link)
        self.expect(self.run_ok(link))

    def test_found_on_path_through_symlink(self):
        os.symlink(self.script, os.path.join(self.elsewhere, "ddprun"))
        # The link's folder on PATH, the environment's bin not: its
        # interpreter still goes to the workers.
        self.expect(self.run_ok("ddprun", path=self.elsewhere + ":/usr/bin"))

    def test_symlinked_folder(self):
        link_dir = os.path.join(self.tmp, "envlink")
        os.symlink(self.env_dir, link_dir)
        out = self.run_ok(os.path.join(link_dir, "bin", "ddprun"))
        self.assertTrue(out.startswith("launcher --version python="), out)

    def test_bare_name_in_its_folder(self):
        p = subprocess.run(["sh", "ddprun", "--version"], cwd=self.bin,
                           env={"PATH": "/usr/bin:/bin"},
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout.decode())
        self.assertTrue(p.stdout.decode().startswith("launcher --version"))

    def test_no_package_is_exit_127(self):
        lone = os.path.join(self.elsewhere, "ddprun")
        self.write(lone, make_dist.PATH_SCRIPT.format(name="ddprun"))
        p = subprocess.run([lone], env={"PATH": "/usr/bin:/bin"},
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=30)
        self.assertEqual(p.returncode, 127)
        self.assertIn(b"no ddprun package under", p.stderr)


if __name__ == "__main__":
    unittest.main()
