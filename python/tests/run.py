"""Run the Python tests (unittest discovery in this folder) and end with the line
"N passed, N failed" the Makefile tallies ($TALLY, as tests/run.sh does for the C tests)."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import plume  # noqa: E402 -- after the path: the installed package, not this folder

print("plume %s from %s, libplume %s" % (plume.__version__, os.path.dirname(plume.__file__),
                                       plume._lib.LIBRARY_PATH))
suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py", top_level_dir=here)
result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
passed = result.testsRun - failed - len(result.skipped)
print("%d passed, %d failed" % (passed, failed))
if os.environ.get("TALLY"):
    with open(os.environ["TALLY"], "a") as f:
        f.write("%d %d\n" % (passed, failed))
sys.exit(1 if failed or not result.testsRun else 0)
