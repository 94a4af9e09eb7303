#!/usr/bin/env python3
"""Runs the built `posenc` CLI for `sinusoidal` and `learned` and checks its tables against
the float64 reference (tests/reference/absolute.py), its help, and its error handling:
unknown flags and bad values exit non-zero with exactly one line on stderr and no file.

Usage:  test_cli_absolute.py PATH/TO/posenc
"""
import os
import sys
import tempfile

from cli_testlib import expect, expect_one_line_error, np, remove, run
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

    return cli_testlib.finish("test_cli_absolute")


if __name__ == "__main__":
    sys.exit(main())
