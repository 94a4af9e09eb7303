#!/usr/bin/env python3
"""Runs the built `posenc` CLI for `sinusoidal` and `learned` and checks its tables against
the float64 reference (tests/reference/absolute.py), its help, and its error handling:
unknown flags and bad values exit non-zero with exactly one line on stderr and no file.

Usage:  test_cli_absolute.py PATH/TO/posenc
"""
import io
import os
import stat
import sys
import tempfile

import signal

from cli_testlib import (expect, expect_nothing_left, expect_one_line_error, np, remove, run,
                         run_measured, temporaries)
import cli_testlib
import absolute as ref  # noqa: E402  (tests/reference, put on sys.path by cli_testlib)


def table(cli, tmp, *argv):
    out = os.path.join(tmp, "t.npy")
    remove(out)
    rc, so, se = run(cli, *argv, "--out", out)
    expect(rc == 0, f"{argv}: rc {rc}, stderr {se!r}")
    expect(se == "", f"{argv}: stderr not empty: {se!r}")
    expect(os.path.exists(out), f"{argv}: no file written")
    return np.load(out) if rc == 0 and os.path.exists(out) else None


def close(got, want, tol, what):
    ok = got is not None and got.shape == want.shape and np.max(np.abs(got - want)) <= tol
    expect(ok, f"{what}: values differ (shape {None if got is None else got.shape} vs {want.shape})")


def check_all_or_nothing(cli, tmp):
    """Issue 25: a table goes to a temporary beside its destination and is renamed into
    place only when complete. A write that fails half-way (a file-size limit stands in for
    a full disk: EFBIG, or SIGXFSZ when not ignored) leaves no partial table, no temporary,
    and an existing destination as it was; a successful one replaces it."""
    kept = os.path.join(tmp, "kept.npy")
    new = os.path.join(tmp, "new.npy")
    old = b"an existing file that a failed command must not clobber"
    for ignore in (True, False):
        how = "EFBIG" if ignore else "SIGXFSZ"
        for sub, extra in (("learned", ["--seed", "3"]), ("sinusoidal", [])):
            for dest in (kept, new):
                remove(new)
                with open(kept, "wb") as f:
                    f.write(old)
                argv = [sub, "--dim", 256, "--len", 1024, *extra, "--out", dest]
                rc, so, se, _ = run_measured(cli, *argv, file_size_limit=1 << 16,
                                             ignore_sigxfsz=ignore)
                what = f"{sub} into {os.path.basename(dest)} past a 64 KiB file-size limit ({how})"
                if ignore:
                    expect_one_line_error([what], rc, se, needle="--out")
                else:
                    expect(rc == -signal.SIGXFSZ, f"{what}: exit status {rc}")
                expect_nothing_left(what, tmp, new_files=[new], kept={kept: old})
    # success replaces the existing file, and leaves no temporary
    rc, so, se = run(cli, "learned", "--dim", 5, "--len", 3, "--seed", 9, "--dtype", "f64",
                     "--out", kept)
    got = np.load(kept) if rc == 0 else None
    expect(got is not None and np.array_equal(got, ref.learned_init(3, 5, 9)),
           "learned replaces an existing --out file")
    expect(not temporaries(tmp), f"temporaries left after success: {temporaries(tmp)}")
    remove(kept, new)
    # a destination that is no regular file (a named pipe here; /dev/null, /dev/stdout) is
    # written in place, never replaced by a renamed temporary
    fifo = os.path.join(tmp, "pipe.npy")
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # a reader, so that the CLI's open returns
    try:
        rc, so, se = run(cli, "sinusoidal", "--dim", 4, "--len", 2, "--out", fifo, timeout=20)
        data = b""
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
        except BlockingIOError:
            pass
    finally:
        os.close(fd)
    expect(rc == 0 and stat.S_ISFIFO(os.stat(fifo).st_mode), "--out a named pipe stays a pipe")
    got = np.load(io.BytesIO(data)) if data else None
    close(got, ref.vaswani(range(2), 4), 1e-7, "--out a named pipe: the table comes through")
    expect(not temporaries(tmp), "--out a named pipe: temporaries left")
    remove(fifo)


def check_bounded_memory(cli, tmp):
    """Issue 25: tables are generated and written a chunk of rows at a time, so the peak
    memory of a 128 MiB table stays far below the table. It used to be 3x the table (the
    table, learned_table's gradient buffer, and the file's bytes: 3.1 GB for `learned --dim
    16384 --len 16384`)."""
    out = os.path.join(tmp, "big.npy")
    for sub, extra in (("learned", ["--seed", "11"]), ("sinusoidal", [])):
        rc, so, se, peak = run_measured(cli, sub, "--dim", 8192, "--len", 4096, *extra,
                                        "--out", out)
        print(f"{sub} --dim 8192 --len 4096 (128 MiB float32): peak RSS {peak:.1f} MiB")
        expect(rc == 0, f"{sub} 128 MiB: rc {rc}, stderr {se!r}")
        expect(peak < 64, f"{sub} 128 MiB table: peak RSS {peak:.0f} MiB (want < 64 MiB)")
        if rc != 0:
            continue
        t = np.load(out, mmap_mode="r")
        expect(t.shape == (4096, 8192) and t.dtype == np.float32, f"{sub} 128 MiB: shape {t.shape}")
        if sub == "learned":  # the first two rows, bit for bit (the generator's sequence)
            expect(np.array_equal(t[:2], ref.learned_init(2, 8192, 11).astype(np.float32)),
                   "learned 128 MiB: first rows")
        else:  # rows from the first and the last chunk
            for r in (0, 1, 4094, 4095):
                close(np.asarray(t[r:r + 1]), ref.vaswani([r], 8192).astype(np.float32), 2e-6,
                      f"sinusoidal 128 MiB: row {r}")
        del t
        remove(out)


def main():
    cli = cli_testlib.cli_path(__doc__)
    if cli is None:
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        # help
        rc, so, se = run(cli, "--help")
        expect(rc == 0 and "sinusoidal" in so and "learned" in so, "posenc --help lists both")
        for sub, flags in [("sinusoidal", ["--dim", "--len", "--offset", "--base", "--preset",
                                           "--dtype", "--out", "vaswani|fairseq|t2t"]),
                           ("learned", ["--dim", "--len", "--seed", "--dtype", "--out"])]:
            rc, so, se = run(cli, sub, "--help")
            expect(rc == 0 and all(f in so for f in flags), f"posenc {sub} --help names every flag")

        # sinusoidal tables against the reference
        t = table(cli, tmp, "sinusoidal", "--dim", "6", "--len", "10")
        expect(t is not None and t.dtype == np.float32, "default dtype is float32")
        close(t, ref.vaswani(range(10), 6), 1e-7, "classic 10x6")
        t = table(cli, tmp, "sinusoidal", "--dim", "64", "--len", "5", "--offset", "999996",
                  "--dtype", "f32")
        close(t, ref.vaswani(range(999996, 1000001), 64), 1e-6, "float32 near 10^6")
        t = table(cli, tmp, "sinusoidal", "--dim", "10", "--len", "9", "--offset", "37",
                  "--base", "500", "--dtype", "f64")
        expect(t is not None and t.dtype == np.float64, "--dtype f64")
        close(t, ref.vaswani(range(37, 46), 10, base=500.0), 1e-13, "base 500, offset 37")
        t = table(cli, tmp, "sinusoidal", "--dim", "10", "--len", "20", "--preset", "fairseq",
                  "--padding-idx", "1", "--dtype", "f64")
        close(t, ref.fairseq(20, 10, padding_idx=1), 1e-13, "fairseq padding_idx 1")
        t = table(cli, tmp, "sinusoidal", "--dim=7", "--len=12", "--preset=fairseq", "--dtype=f64")
        close(t, ref.fairseq(12, 7), 1e-13, "fairseq odd d, --flag=value syntax")
        t = table(cli, tmp, "sinusoidal", "--dim", "9", "--len", "12", "--offset", "5",
                  "--preset", "t2t", "--dtype", "f64")
        close(t, ref.t2t(12, 9, start_index=5), 1e-13, "t2t odd d, offset")
        t = table(cli, tmp, "sinusoidal", "--dim", "8", "--len", "10", "--preset", "t2t",
                  "--base", "500", "--dtype", "f64")
        close(t, ref.t2t(10, 8, max_ts=500.0), 1e-13, "t2t --base is max_timescale")

        # learned tables: the reference generator, bit for bit
        t = table(cli, tmp, "learned", "--dim", "6", "--len", "8", "--seed", "7", "--dtype", "f64")
        expect(t is not None and np.array_equal(t, ref.learned_init(8, 6, 7)), "learned f64 seed 7")
        t = table(cli, tmp, "learned", "--dim", "5", "--len", "4", "--seed", "123")
        expect(t is not None and t.dtype == np.float32 and
               np.array_equal(t, ref.learned_init(4, 5, 123).astype(np.float32)), "learned f32 seed 123")

        # errors: non-zero exit, exactly one line on stderr, nothing written
        out = os.path.join(tmp, "bad.npy")
        bad = [
            ["sinusoidal", "--dim", "6", "--len", "4", "--bogus", "1"],
            ["sinusoidal", "--dim", "abc", "--len", "4"],
            ["sinusoidal", "--dim", "7", "--len", "4"],
            ["sinusoidal", "--dim", "0", "--len", "4"],
            ["sinusoidal", "--dim", "6", "--len", "0"],
            ["sinusoidal", "--dim", "6", "--len", "4", "--preset", "bert"],
            ["sinusoidal", "--dim", "6", "--len", "4", "--dtype", "f16"],
            ["sinusoidal", "--dim", "6", "--len", "4", "--base", "nan"],
            ["sinusoidal", "--dim", "6", "--len", "4", "--base", "1"],
            ["sinusoidal", "--dim", "6", "--len", "4", "--offset", "1.5"],
            ["sinusoidal", "--dim", "6", "--len", "4", "--offset", "-99999999999999999999"],
            ["sinusoidal", "--dim", "6", "--len", "4", "--offset", "9007199254740992"],
            ["sinusoidal", "--dim", "2", "--len", "4", "--preset", "fairseq"],
            ["sinusoidal", "--dim", "8", "--len", "4", "--padding-idx", "1"],
            ["sinusoidal", "--dim", "8", "--len", "4", "--preset", "fairseq", "--padding-idx", "-3"],
            ["sinusoidal", "--dim", "65536", "--len", "65537"],
            ["sinusoidal", "--dim", "6", "--len", "4", "extra"],
            ["learned", "--dim", "6", "--len", "4"],
            ["learned", "--dim", "6", "--len", "4", "--seed", "-1"],
            ["learned", "--dim", "6", "--len", "4", "--seed", "x"],
            ["learned", "--dim", "-6", "--len", "4", "--seed", "1"],
            ["learned", "--dim", "6", "--len", "4", "--seed", "1", "--dtype", "int8"],
            ["learned", "--dim", "6", "--len", "4", "--seed", "1", "--preset", "vaswani"],
        ]
        for argv in bad:
            rc, so, se = run(cli, *argv, "--out", out)
            expect_one_line_error(argv, rc, se, out=out)
        # tables over 2^28 elements are refused up front (2^32 once reached the allocator
        # and printed std::bad_alloc after trying 16 GiB)
        for argv in (["sinusoidal", "--dim", "65536", "--len", "65536"],
                     ["sinusoidal", "--dim", "16384", "--len", "16385"],
                     ["sinusoidal", "--dim", "1", "--len", "9223372036854775807"],
                     ["learned", "--dim", "65536", "--len", "65536", "--seed", "1"],
                     ["learned", "--dim", "16385", "--len", "16384", "--seed", "1"]):
            rc, so, se = run(cli, *argv, "--out", out)
            expect_one_line_error(argv, rc, se, out=out, needle="exceeds 2^28 elements")
        for argv in (["sinusoidal", "--dim", "6", "--len", "4"], ["nonsense"],
                     ["learned", "--dim", "6", "--len", "4", "--seed", "1", "--out"]):
            rc, so, se = run(cli, *argv)
            expect_one_line_error(argv, rc, se)
        argv = ["sinusoidal", "--dim", "6", "--len", "4", "--out",
                os.path.join(tmp, "no_such_dir", "x.npy")]
        rc, so, se = run(cli, *argv)
        expect_one_line_error(["unwritable --out", *argv], rc, se)
        argv = ["sinusoidal", "--dim", "6", "--len", "4", "--out", tmp]
        rc, so, se = run(cli, *argv)
        expect_one_line_error(["--out is a folder", *argv], rc, se, needle="--out")

        check_all_or_nothing(cli, tmp)
        check_bounded_memory(cli, tmp)

    return cli_testlib.finish("test_cli_absolute")


if __name__ == "__main__":
    sys.exit(main())
