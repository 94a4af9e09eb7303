"""Shared helpers of the CLI tests (tests/cli/test_cli_*.py): the numpy import (exit 77,
ctest's skip code, when it is missing), the reference scripts on sys.path, running the
built `posenc` (also under a file-size limit, measuring its peak memory), collecting
failures, the check every bad command line must pass (non-zero exit, exactly one line on
stderr, no output file), and the checks that a failed command left nothing behind (no
temporary, no partial file, an existing destination untouched).
"""
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading

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


def run_measured(cli, *argv, timeout=120, file_size_limit=None, ignore_sigxfsz=False):
    """Runs `cli argv...` like run() and returns (rc, stdout, stderr, peak_rss_mib): the
    child's own peak resident set (os.wait4), in MiB. With file_size_limit (bytes) the child
    may not grow a file past it (RLIMIT_FSIZE, `ulimit -f`): the write that would gets
    SIGXFSZ, which kills it (rc -SIGXFSZ), or with ignore_sigxfsz fails with EFBIG (the path
    of a full disk). In an AddressSanitizer build the quarantine of freed blocks is capped
    at 16 MiB, so that the peak measures the CLI's memory rather than the sanitizer's."""
    def limits():
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))
        if ignore_sigxfsz:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "quarantine_size_mb=16"]))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen([cli, *map(str, argv)], stdout=out, stderr=err, preexec_fn=limits,
                             env=env)
        timer = threading.Timer(timeout, p.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        out.seek(0)
        err.seek(0)
        return (p.returncode, out.read().decode(), err.read().decode(),
                usage.ru_maxrss / 1024.0)  # Linux reports KiB


def temporaries(folder):
    """The CLI's temporaries left in folder (hidden `.NAME.posenc-XXXXXXXX.tmp` files)."""
    return sorted(n for n in os.listdir(folder) if ".posenc-" in n and n.endswith(".tmp"))


def expect_nothing_left(what, folder, new_files=(), kept=None):
    """After a failed command: no temporary in folder, none of new_files exists, and each
    path of kept (a dict path -> bytes) still holds exactly its old bytes."""
    left = temporaries(folder)
    expect(not left, f"{what}: temporaries left behind: {left}")
    for path in new_files:
        expect(not os.path.exists(path), f"{what}: wrote {os.path.basename(path)}")
    for path, old in (kept or {}).items():
        now = open(path, "rb").read() if os.path.exists(path) else None
        expect(now == old, f"{what}: changed the existing {os.path.basename(path)}")


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
