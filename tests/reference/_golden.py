"""Shared machinery of the golden-file reference scripts (absolute.py, rotary.py,
rope_scaling.py, attention.py, relative.py, io_fixtures.py): the numpy import (exit 77, ctest's skip code, when it is missing), the
tests/data folder, and the write / `--check` driver. The maths stays in each script.

A script builds {file name: value} (a numpy array, saved as .npy, or raw bytes, written as
they are) and hands it to main():

    script.py            write every file to tests/data/
    script.py --check    regenerate in memory and compare with the committed files:
                         same dtype and shape, floats within rtol/atol, everything else
                         (integers, bytes) exactly; exit 1 on any mismatch or missing file
"""
import math
import os
import sys

try:
    import numpy as np
except ImportError:  # pragma: no cover
    print("numpy missing: skipped")
    sys.exit(77)

# sin and cos element by element through the C library (math.sin, math.cos), not numpy's
# vectorised ones: those depend on the CPU (numpy 1.24's AVX-512 float64 sin is off by
# 3e-11 at angles near 1e6, where glibc's is correctly rounded), so goldens written on one
# machine failed --check on another. These give the same values on every machine.
sin = np.vectorize(math.sin, otypes=[np.float64])
cos = np.vectorize(math.cos, otypes=[np.float64])
# the C library's pow, element by element: numpy's vectorised float64 and float32 power use
# other code on CPUs with AVX-512 (not correctly rounded: a 1-ulp different frequency turns
# an angle at position 1e5-1e6 by 1e-11 to 1e-2 rad), so a golden would depend on the CPU
pow = np.vectorize(math.pow, otypes=[np.float64])

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data")


def npy_files(prefix, arrays):
    """{key: array} -> {prefix + key + ".npy": array}."""
    return {prefix + key + ".npy": value for key, value in arrays.items()}


def save(name, value):
    path = os.path.join(DATA, name)
    if isinstance(value, bytes):
        with open(path, "wb") as f:
            f.write(value)
    else:
        np.save(path, value)
    return os.path.getsize(path)


def problem(name, value, rtol, atol):
    """None when tests/data/<name> holds `value`, else what is wrong with it."""
    path = os.path.join(DATA, name)
    if not os.path.exists(path):
        return "missing"
    if isinstance(value, bytes):
        with open(path, "rb") as f:
            return None if f.read() == value else "bytes differ"
    got = np.load(path)
    if got.dtype != value.dtype or got.shape != value.shape:
        return "dtype/shape %s %s, expected %s %s" % (got.dtype, got.shape, value.dtype, value.shape)
    if value.dtype.kind == "f":
        if not np.allclose(got, value, rtol=rtol, atol=atol):
            return "values differ (max abs diff %g)" % np.max(np.abs(got - value))
    elif not np.array_equal(got, value):
        return "values differ"
    return None


def main(script, files, rtol, atol, argv=None):
    """Writes `files` or, with --check in argv (default sys.argv[1:]), compares them with
    the committed ones. Returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if "--check" in argv:
        bad = 0
        for name, value in sorted(files.items()):
            what = problem(name, value, rtol, atol)
            if what is not None:
                print("MISMATCH %s: %s" % (name, what))
                bad += 1
        print("%s --check: %d files, %d bad" % (script, len(files), bad))
        return 1 if bad else 0
    os.makedirs(DATA, exist_ok=True)
    total = sum(save(name, value) for name, value in sorted(files.items()))
    print("%s: wrote %d files, %d bytes, to %s" % (script, len(files), total, os.path.normpath(DATA)))
    return 0
