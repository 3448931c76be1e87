"""The ctypes structs of plume/_lib.py have the sizes and field offsets of include/plume.h:
a small C program built against the header prints them."""
import os
import shutil
import subprocess
import unittest

from plume import _lib
from common import ROOT, tmpdir


class TestAbi(unittest.TestCase):
    def test_structs_match_the_header(self):
        cc = os.environ.get("CC", "cc")
        if not shutil.which(cc):
            self.fail("no C compiler (%s) to check the header with" % cc)
        lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"plume.h\"",
                 "int main(void) {"]
        want = []
        for cname, st in sorted(_lib.STRUCTS.items()):
            lines.append('    printf("%%s %%zu\\n", "%s", sizeof(%s));' % (cname, cname))
            want.append("%s %d" % (cname, _lib.ctypes.sizeof(st)))
            for field, _ in st._fields_:
                lines.append('    printf("%%s.%%s %%zu\\n", "%s", "%s", offsetof(%s, %s));'
                             % (cname, field, cname, field))
                want.append("%s.%s %d" % (cname, field, getattr(st, field).offset))
        lines += ["    return 0;", "}"]
        src = os.path.join(tmpdir(), "abi.c")
        exe = os.path.join(tmpdir(), "abi")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        subprocess.check_call([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), src, "-o", exe])
        got = subprocess.check_output([exe]).decode().split("\n")[:-1]
        self.assertEqual(got, want)

    def test_every_function_resolves(self):
        for name in _lib._FUNCS:
            self.assertTrue(hasattr(_lib.lib, name), name)


if __name__ == "__main__":
    unittest.main()
