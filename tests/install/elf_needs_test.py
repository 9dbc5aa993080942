"""Unit tests of packaging/elf_needs.py: which libraries a bundle may need
from outside, $ORIGIN-only search paths, and the manylinux level that
follows from the symbol versions (on copies of system files, and on made-up
needs for the level table)."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "packaging"))
import elf_needs  # noqa: E402

LIBDIR = "/usr/lib/x86_64-linux-gnu"


class FakeElf:
    def __init__(self, path, **versions):
        self.path = path
        self.versions = {k: {v} for k, v in versions.items()}
        self.needed, self.rpath, self.runpath = ["libc.so.6"], [], []

    newest = elf_needs.ElfFile.newest


def fake_bundle(*files):
    needs = elf_needs.BundleNeeds.__new__(elf_needs.BundleNeeds)
    needs.root = "/b"
    needs.files = list(files)
    needs.bundled = {os.path.basename(f.path) for f in files}
    return needs


class LevelTest(unittest.TestCase):
    def tag(self, **versions):
        return fake_bundle(FakeElf("/b/bin/x", **versions)).manylinux_tag()[0]

    def test_glibc_alone_sets_the_level(self):
        self.assertEqual(self.tag(GLIBC="2.34"), "manylinux_2_34_x86_64")
        self.assertEqual(self.tag(GLIBC="2.17"), "manylinux_2_17_x86_64")

    def test_libstdcxx_raises_the_level_to_the_first_that_has_it(self):
        # gcc 12's libstdc++ (GLIBCXX_3.4.30): Ubuntu 22.04, not RHEL 9.
        self.assertEqual(self.tag(GLIBC="2.34", GLIBCXX="3.4.30"),
                         "manylinux_2_35_x86_64")
        self.assertEqual(self.tag(GLIBC="2.34", GLIBCXX="3.4.29"),
                         "manylinux_2_34_x86_64")
        self.assertEqual(self.tag(GLIBC="2.17", GLIBCXX="3.4.25"),
                         "manylinux_2_31_x86_64")
        self.assertEqual(self.tag(GLIBC="2.17", CXXABI="1.3.13"),
                         "manylinux_2_34_x86_64")

    def test_a_need_newer_than_every_level_is_an_error(self):
        with self.assertRaisesRegex(elf_needs.BundleError,
                                    "GLIBCXX_3.4.99, newer than any"):
            self.tag(GLIBC="2.17", GLIBCXX="3.4.99")

    def test_the_newest_need_over_all_files_counts(self):
        needs = fake_bundle(FakeElf("/b/bin/a", GLIBC="2.28"),
                            FakeElf("/b/lib/b.so", GLIBC="2.33"))
        tag, reasons = needs.manylinux_tag()
        self.assertEqual(tag, "manylinux_2_33_x86_64")
        self.assertIn("GLIBC_2.33 (lib/b.so)", reasons[0])


class RealFilesTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="elf_needs_test_")
        os.makedirs(os.path.join(self.dir, "bin"))
        os.makedirs(os.path.join(self.dir, "lib"))

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def add(self, src, sub):
        dst = os.path.join(self.dir, sub, os.path.basename(src))
        shutil.copy(os.path.realpath(src), dst)
        return dst

    def test_a_libc_only_program_passes(self):
        self.add("/bin/true", "bin")
        needs = elf_needs.BundleNeeds(self.dir)
        tag, _ = needs.manylinux_tag()
        self.assertRegex(tag, r"^manylinux_2_[0-9]+_x86_64$")
        self.assertEqual(set(needs.external()), {"libc.so.6"})

    def test_a_library_neither_bundled_nor_base_is_an_error(self):
        self.add(os.path.join(LIBDIR, "libssl.so.3"), "lib")
        with self.assertRaisesRegex(elf_needs.BundleError,
                                    "lib/libssl.so.3 needs libcrypto.so.3"):
            elf_needs.BundleNeeds(self.dir).check()
        self.add(os.path.join(LIBDIR, "libcrypto.so.3"), "lib")
        elf_needs.BundleNeeds(self.dir).check()

    @unittest.skipUnless(shutil.which("patchelf"), "needs patchelf")
    def test_a_search_path_outside_the_bundle_is_an_error(self):
        exe = self.add("/bin/true", "bin")
        subprocess.run(["patchelf", "--set-rpath", "/work/build/lib", exe],
                       check=True)
        with self.assertRaisesRegex(elf_needs.BundleError,
                                    "bin/true searches /work/build/lib"):
            elf_needs.BundleNeeds(self.dir).check()
        subprocess.run(["patchelf", "--set-rpath", "$ORIGIN/../lib", exe],
                       check=True)
        elf_needs.BundleNeeds(self.dir).check()

    def test_no_elf_file_is_an_error(self):
        with self.assertRaisesRegex(elf_needs.BundleError, "no ELF file"):
            elf_needs.BundleNeeds(self.dir)


if __name__ == "__main__":
    unittest.main()
