"""What the Python tests share: paths, the bundles converted once per run with the CLI."""
import atexit
import os
import shutil
import subprocess
import tempfile

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "tiny-a")
HF = os.path.join(DATA, "hf")
# The CLI built from the same sources (the Makefile passes its own build's).
CLI = os.environ.get("PLUME_CLI", os.path.join(ROOT, "build", "plume"))

# Tolerances of tests/test_forward.c: float32 vs the float64 reference, same summation
# differences whatever the language calling the library.
LOGITS_REL_RMS = 1e-4
LOGITS_MAX_ABS = 2e-3

_tmp = None
_bundles = {}


def tmpdir():
    """A scratch directory for this run, removed at exit."""
    global _tmp
    if _tmp is None:
        _tmp = tempfile.mkdtemp(prefix="plume-py-")
        atexit.register(shutil.rmtree, _tmp, True)
    return _tmp


def cli(*args, check=True):
    """Run the plume CLI; (exit status, stdout bytes, stderr text)."""
    r = subprocess.run([CLI] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if check and r.returncode != 0:
        raise AssertionError("plume %s: %s" % (" ".join(map(str, args)), r.stderr.decode()))
    return r.returncode, r.stdout, r.stderr.decode()


def bundle(weights):
    """tiny-a converted by `plume convert` at a precision (once per run)."""
    if weights not in _bundles:
        out = os.path.join(tmpdir(), "tiny-" + weights)
        cli("convert", HF, out, "--weights", weights, "--quiet")
        _bundles[weights] = out
    return _bundles[weights]


def golden(name):
    return np.load(os.path.join(DATA, name))


def golden_ids():
    return golden("ids.npy").astype(np.int32).reshape(-1)


def rel_rms(a, b):
    """sqrt(mean((a-b)^2) / mean(b^2)), as tests/t.h computes it."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    den = np.sum(b * b)
    num = np.sum((a - b) ** 2)
    return float(np.sqrt(num / den) if den > 0 else np.sqrt(num))


def max_abs(a, b):
    d = np.abs(np.asarray(a, np.float64).ravel() - np.asarray(b, np.float64).ravel())
    return float("inf") if np.isnan(d).any() else float(d.max())


def rss_bytes():
    """Resident set size of this process (Linux), or None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None
