"""Shared helpers of the CLI tests (tests/cli/test_cli_*.py): the numpy import (exit 77,
ctest's skip code, when it is missing), the reference scripts on sys.path, running the
built `posenc`, collecting failures, and the check every bad command line must pass
(non-zero exit, exactly one line on stderr, no output file).
"""
import os
import subprocess
import sys

try:
    import numpy as np  # noqa: F401  (re-exported: the tests use cli_testlib.np)
except ImportError:  # pragma: no cover
    print("numpy missing: skipped")
    sys.exit(77)

# tests/reference: the independent float64 references the CLI output is checked against.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))

FAILURES = []


def expect(cond, what):
    """Records (and prints) a failure when cond is false; the test goes on."""
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def run(cli, *argv, timeout=120):
    """Runs `cli argv...` (arguments converted with str); returns (rc, stdout, stderr)."""
    p = subprocess.run([cli, *map(str, argv)], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def remove(*paths):
    """Deletes the files that exist, so a later existence check means this run wrote them."""
    for p in paths:
        if os.path.exists(p):
            os.remove(p)


def expect_one_line_error(argv, rc, stderr, out=None, needle=None):
    """A rejected command line: non-zero exit, one non-blank stderr line (containing needle
    when given), and no file at out (when given)."""
    lines = stderr.splitlines()
    expect(rc != 0, f"{argv}: exit status {rc}")
    ok = len(lines) == 1 and lines[0].strip() != "" and (needle is None or needle in lines[0])
    want = "" if needle is None else f" (want one line with {needle!r})"
    expect(ok, f"{argv}: stderr {stderr!r} is not one line{want}")
    if out is not None:
        expect(not os.path.exists(out), f"{argv}: wrote a file")


def cli_path(doc):
    """The CLI path from sys.argv, or None (after printing doc) when the call is wrong."""
    if len(sys.argv) != 2:
        print(doc)
        return None
    return sys.argv[1]


def finish(name):
    """Prints the summary line; returns the exit status."""
    print(f"{name}: {'FAILED' if FAILURES else 'ok'} ({len(FAILURES)} failures)")
    return 1 if FAILURES else 0
