#!/usr/bin/env python3
"""Runs the built `posenc` CLI for `bias alibi`, `bias t5` and `attention` and checks the
files against the float64 reference (tests/reference/attention.py, plus a numpy RoPE
written here), its help, and its error handling: bad input exits non-zero with exactly
one line on stderr and writes no file.

Usage:  test_cli_attention.py PATH/TO/posenc
"""
import math
import os
import sys
import tempfile

from cli_testlib import (expect, expect_nothing_left, expect_one_line_error, np, remove, run,
                         run_measured, temporaries)
import cli_testlib
import attention as ref  # noqa: E402  (tests/reference, put on sys.path by cli_testlib)


def produce(cli, tmp, *argv):
    out = os.path.join(tmp, "o.npy")
    remove(out)
    rc, so, se = run(cli, *argv, "--out", out)
    expect(rc == 0, f"{argv}: rc {rc}, stderr {se!r}")
    return np.load(out) if rc == 0 else None


def close(got, want, tol, what):
    ok = got is not None and got.shape == want.shape and (
        got.size == 0 or np.max(np.abs(got.astype(np.float64) - want)) <= tol)
    expect(ok, f"{what}: values differ (shape {None if got is None else got.shape} vs {want.shape})")


def rope_half(x, positions, base):
    """RoPE, half pairing (GPT-NeoX / Llama rotate_half): dim i turns with dim i + d/2."""
    d = x.shape[1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang), np.sin(ang)
    a, b = x[:, : d // 2], x[:, d // 2:]
    return np.concatenate([a * c - b * s, b * c + a * s], axis=1)


def check_all_or_nothing(cli, tmp, io, rng):
    """Issue 25: --out and --weights-out are both written or neither. Each goes to a
    temporary beside its destination, renamed only when both are complete: an unwritable
    --weights-out used to leave --out behind (exit 1 with a new file)."""
    out, kept = os.path.join(tmp, "new_out.npy"), os.path.join(tmp, "kept.npy")
    old = b"an existing file that a failed command must not clobber"
    # [200, 8] queries against [2000, 8] keys: --out is 12.8 KB, --weights-out 3.2 MB
    big = {n: os.path.join(tmp, n + "_big.npy") for n in ("q", "k", "v")}
    np.save(big["q"], rng.standard_normal((200, 8)))
    np.save(big["k"], rng.standard_normal((2000, 8)))
    np.save(big["v"], rng.standard_normal((2000, 8)))
    big_io = ["--q", big["q"], "--k", big["k"], "--v", big["v"]]
    weights = os.path.join(tmp, "w_new.npy")
    for dest in (out, kept):
        remove(out, weights)
        with open(kept, "wb") as f:
            f.write(old)
        name = os.path.basename(dest)
        what = f"attention --out {name} --weights-out in a missing folder"
        rc, so, se = run(cli, "attention", *io, "--out", dest, "--weights-out",
                         os.path.join(tmp, "no_such_dir", "w.npy"))
        expect_one_line_error([what], rc, se, needle="--weights-out")
        expect_nothing_left(what, tmp, new_files=[out], kept={kept: old})
        what = f"attention --out {name} --weights-out into a folder"
        rc, so, se = run(cli, "attention", *io, "--out", dest, "--weights-out", tmp)
        expect_one_line_error([what], rc, se, needle="--weights-out")
        expect_nothing_left(what, tmp, new_files=[out], kept={kept: old})
        # --out complete, --weights-out failing half-way (a 64 KiB file-size limit: EFBIG)
        what = f"attention --out {name} with --weights-out past a file-size limit"
        rc, so, se, _ = run_measured(cli, "attention", *big_io, "--out", dest, "--weights-out",
                                     weights, file_size_limit=1 << 16, ignore_sigxfsz=True)
        expect_one_line_error([what], rc, se, needle="--weights-out")
        expect_nothing_left(what, tmp, new_files=[out, weights], kept={kept: old})
    rc, so, se = run(cli, "attention", *io, "--out", kept, "--weights-out", kept)
    expect_one_line_error(["--out and --weights-out the same file"], rc, se,
                          needle="--out and --weights-out name the same file")
    expect_nothing_left("--out and --weights-out the same file", tmp, kept={kept: old})
    # the bias commands write through the same helper
    for argv in (["bias", "alibi", "--heads", "4", "--len-q", "64", "--len-k", "1024"],
                 ["bias", "t5", "--len-q", "64", "--len-k", "1024"]):
        what = f"{argv[:2]} past a file-size limit"
        rc, so, se, _ = run_measured(cli, *argv, "--out", kept, file_size_limit=1 << 16,
                                     ignore_sigxfsz=True)
        expect_one_line_error([what], rc, se, needle="--out")
        expect_nothing_left(what, tmp, kept={kept: old})
        rc, so, se = run(cli, *argv, "--out", kept)
        expect(rc == 0 and np.load(kept).shape[-2:] == (64, 1024), f"{argv[:2]} replaces a file")
        expect(not temporaries(tmp), f"{argv[:2]}: temporaries left after success")
        with open(kept, "wb") as f:
            f.write(old)
    remove(kept, *big.values())


def check_bounded_memory(cli, tmp):
    """Issue 25: the biases are computed and written 1 MiB at a time, so a 128 MiB output
    needs far less than 128 MiB (it used to need 2-3x the output)."""
    out = os.path.join(tmp, "big.npy")
    for argv in (["bias", "alibi", "--heads", "1", "--len-q", "4096", "--len-k", "4096"],
                 ["bias", "t5", "--len-q", "4096", "--len-k", "4096"]):
        rc, so, se, peak = run_measured(cli, *argv, "--out", out)
        print(f"{' '.join(argv)} (128 MiB): peak RSS {peak:.1f} MiB")
        expect(rc == 0, f"{argv}: rc {rc}, stderr {se!r}")
        expect(peak < 64, f"{argv[:2]} 128 MiB: peak RSS {peak:.0f} MiB (want < 64 MiB)")
        if rc == 0:
            b = np.load(out, mmap_mode="r")
            if argv[1] == "alibi":
                want = ref.alibi_bias(ref.alibi_slopes(1)[0], 2, 4096, 4094, False)
                close(np.asarray(b[0, 4094:]), want, 1e-12, "bias alibi 128 MiB: last rows")
            else:
                want = np.array([[ref.t5_bucket(j - i, 32, 128, True) for j in range(4096)]
                                 for i in (0, 4095)])
                expect(np.array_equal(b[[0, 4095]], want), "bias t5 128 MiB: first and last rows")
            del b
        remove(out)


def main():
    cli = cli_testlib.cli_path(__doc__)
    if cli is None:
        return 2
    rng = np.random.default_rng(3)
    with tempfile.TemporaryDirectory() as tmp:
        rc, so, se = run(cli, "--help")
        expect(rc == 0 and "bias alibi" in so and "bias t5" in so and "attention" in so,
               "posenc --help lists bias alibi, bias t5, attention")
        for sub, flags in [(["bias", "alibi"], ["--heads", "--len-q", "--len-k", "--q-offset", "--symmetric"]),
                           (["bias", "t5"], ["--buckets", "--max-distance", "--unidirectional", "--q-offset"]),
                           (["attention"], ["--q", "--causal", "--alibi-heads", "--rope-base", "--q-offset"])]:
            rc, so, se = run(cli, *sub, "--help")
            expect(rc == 0 and all(f in so for f in flags), f"{sub} --help")

        # ALiBi biases, causal and symmetric, a non-power-of-two head count, an offset.
        for sym in (False, True):
            got = produce(cli, tmp, "bias", "alibi", "--heads", "12", "--len-q", "5", "--len-k", "9",
                          "--q-offset", "3", *(["--symmetric"] if sym else []))
            slopes = ref.alibi_slopes(12)
            want = np.stack([ref.alibi_bias(m, 5, 9, 3, sym) for m in slopes])
            close(got, want, 1e-14, f"bias alibi symmetric={sym}")
            expect(got is None or got.dtype == np.float64, "bias alibi writes float64")

        # T5 buckets.
        got = produce(cli, tmp, "bias", "t5", "--len-q", "7", "--len-k", "300")
        want = np.array([[ref.t5_bucket(j - i, 32, 128, True) for j in range(300)] for i in range(7)])
        expect(got is not None and got.dtype == np.int64 and np.array_equal(got, want), "bias t5 default")
        got = produce(cli, tmp, "bias", "t5", "--len-q", "6", "--len-k", "200", "--buckets", "16",
                      "--max-distance", "40", "--unidirectional", "--q-offset", "150")
        want = np.array([[ref.t5_bucket(j - (150 + i), 16, 40, False) for j in range(200)] for i in range(6)])
        expect(got is not None and np.array_equal(got, want), "bias t5 unidirectional offset")

        # Attention with each scheme.
        q, k, v = rng.standard_normal((5, 8)), rng.standard_normal((11, 8)), rng.standard_normal((11, 3))
        paths = {}
        for name, arr in (("q", q), ("k", k), ("v", v)):
            paths[name] = os.path.join(tmp, name + ".npy")
            np.save(paths[name], arr)
        io = ["--q", paths["q"], "--k", paths["k"], "--v", paths["v"]]
        s = 1 / math.sqrt(8)
        got = produce(cli, tmp, "attention", *io)
        close(got, ref.attention(q, k, v, s)[0], 1e-13, "attention plain")
        got = produce(cli, tmp, "attention", *io, "--causal", "--q-offset", "6")
        close(got, ref.attention(q, k, v, s, causal=True, q_offset=6)[0], 1e-13, "attention causal offset")
        got = produce(cli, tmp, "attention", *io, "--causal", "--q-offset", "6", "--alibi-heads", "6",
                      "--alibi-head", "5")
        bias = ref.alibi_bias(ref.alibi_slopes(6)[5], 5, 11, 6, False)
        close(got, ref.attention(q, k, v, s, bias=bias, causal=True, q_offset=6)[0], 1e-13, "attention alibi")
        got = produce(cli, tmp, "attention", *io, "--causal", "--q-offset", "6", "--rope-base", "10000")
        qr, kr = rope_half(q, range(6, 11), 10000.0), rope_half(k, range(11), 10000.0)
        close(got, ref.attention(qr, kr, v, s, causal=True, q_offset=6)[0], 1e-13, "attention rope")
        got = produce(cli, tmp, "attention", *io, "--rope-base", "10000", "--dtype", "f32")
        expect(got is None or got.dtype == np.float32, "attention --dtype f32 writes float32")
        close(got, ref.attention(rope_half(q, range(5), 1e4), kr, v, s)[0], 2e-6, "attention rope f32")
        wpath = os.path.join(tmp, "w.npy")
        got = produce(cli, tmp, "attention", *io, "--causal", "--weights-out", wpath)
        close(np.load(wpath) if os.path.exists(wpath) else None,
              ref.attention(q, k, v, s, causal=True)[1], 1e-13, "attention weights")

        # Non-finite inputs propagate (documented in docs/attention.md): a query row with a
        # NaN gives a NaN output row, never zeros; the other rows are exact.
        qn = q.copy()
        qn[2, 0] = np.nan
        np.save(os.path.join(tmp, "qn.npy"), qn)
        got = produce(cli, tmp, "attention", "--q", os.path.join(tmp, "qn.npy"), "--k", paths["k"],
                      "--v", paths["v"])
        expect(got is not None and np.isnan(got[2]).all(), "attention: a NaN query row gives a NaN row")
        want = ref.attention(q, k, v, s)[0]
        close(None if got is None else np.delete(got, 2, axis=0), np.delete(want, 2, axis=0), 1e-13,
              "attention: rows without NaN are unaffected")
        # Long sequences without --weights-out never form [Lq, Lk] (30000^2 doubles = 7 GB).
        long_path = os.path.join(tmp, "long.npy")
        np.save(long_path, np.zeros((30000, 1)))
        got = produce(cli, tmp, "attention", "--q", long_path, "--k", long_path, "--v", long_path)
        expect(got is not None and got.shape == (30000, 1) and not got.any(), "attention L=30000, no weights")

        # Errors: non-zero exit, one line on stderr, no output file.
        out = os.path.join(tmp, "bad.npy")
        big = str(2 ** 63 - 1)
        for argv in (["bias", "alibi", "--heads", "0", "--len-q", "2", "--len-k", "2"],
                     ["bias", "alibi", "--heads", "2", "--len-q", "2"],
                     ["bias", "alibi", "--heads", "2", "--len-q", "2", "--len-k", "2", "--bogus"],
                     ["bias", "t5", "--len-q", "2", "--len-k", "2", "--buckets", "3"],
                     ["bias", "t5", "--len-q", "2", "--len-k", "x"],
                     ["bias", "t5", "--len-q", "2", "--len-k", "3", "--len-k=4"],
                     ["attention", *io, "--alibi-heads", "4", "--rope-base", "10000"],
                     ["attention", *io, "--alibi-heads", "4", "--alibi-head", "4"],
                     ["attention", *io, "--rope-base", "0.5"],
                     ["attention", "--q", os.path.join(tmp, "missing.npy"), "--k", paths["k"], "--v", paths["v"]],
                     ["attention", "--q", paths["q"], "--k", paths["v"], "--v", paths["v"]],
                     # Huge sizes: a clear error before any allocation, not bad_alloc.
                     ["bias", "alibi", "--heads", "1000000000000", "--len-q", "0", "--len-k", "5"],
                     ["bias", "alibi", "--heads", "4", "--len-q", "100000", "--len-k", "100000"],
                     ["bias", "t5", "--len-q", "100000", "--len-k", "100000"],
                     ["attention", *io, "--alibi-heads", "1000000000000"],
                     ["attention", "--q", long_path, "--k", long_path, "--v", long_path,
                      "--weights-out", os.path.join(tmp, "w_long.npy")],
                     # Query positions past the largest int64 (q_offset + i would wrap).
                     ["bias", "alibi", "--heads", "2", "--len-q", "3", "--len-k", "5", "--q-offset", big],
                     ["bias", "t5", "--len-q", "3", "--len-k", "5", "--q-offset", big],
                     ["attention", *io, "--causal", "--alibi-heads", "1", "--q-offset", big]):
            rc, so, se = run(cli, *argv, "--out", out)
            expect_one_line_error(argv, rc, se, out)
            expect("bad_alloc" not in se, f"{argv}: a clear error, not an allocation failure: {se!r}")

        # Issue 25: each error names the flag at fault (a huge --buckets used to blame
        # max_distance), and absurd sizes are refused by a documented limit (docs/cli.md).
        t5 = ["bias", "t5", "--len-q", "2", "--len-k", "2"]
        alibi = ["bias", "alibi", "--len-q", "2", "--len-k", "2"]
        for argv, needle in (
                (t5 + ["--buckets", "2000000000"], "invalid value for --buckets: 2000000000 (must be 4 .. 2^20"),
                (t5 + ["--buckets", "1048577", "--max-distance", big], "--buckets: 1048577"),
                (t5 + ["--buckets", "1000"], "--buckets: 1000 (its 250 exact buckets need --max-distance > 250"),
                (t5 + ["--buckets", "3"], "--buckets: 3 (must be 4 .. 2^20"),
                (t5 + ["--buckets", "1", "--unidirectional"], "--buckets: 1 (must be 2 .. 2^20)"),
                (t5 + ["--buckets", "-5"], "--buckets: -5"),
                (t5 + ["--buckets", "64", "--max-distance", "16"],
                 "--max-distance: 16 (must exceed the 16 exact buckets of --buckets 64)"),
                (t5 + ["--buckets", "99999999999999999999"], "--buckets: '99999999999999999999' is out of range"),
                (t5 + ["--q-offset", big], "--q-offset"),
                (alibi + ["--heads", "65537"], "--heads: 65537 (must be <= 2^16"),
                (alibi + ["--heads", "4", "--q-offset", big], "--q-offset"),
                (alibi + ["--heads", "4", "--max-bias", "1e999"], "--max-bias: '1e999' is out of the range"),
                (["attention", *io, "--alibi-heads", "65537"], "--alibi-heads: 65537"),
                (["attention", *io, "--alibi-heads", "4", "--alibi-head", "4"], "--alibi-head: 4 (must be < --alibi-heads 4)"),
                (["attention", *io, "--rope-base", "10000", "--rotary-dim", "10"], "--rotary-dim: 10 (must be even and <= 8"),
                (["attention", *io, "--rope-base", "10000", "--rotary-dim", big], "--rotary-dim"),
                (["attention", *io, "--rope-base", "0.5"], "--rope-base"),
                (["attention", *io, "--q-offset", big], "--q-offset"),
                (["attention", "--q", paths["q"], "--k", paths["v"], "--v", paths["v"]], "--k"),
                (["attention", "--q", paths["q"], "--k", paths["k"], "--v", paths["q"]], "--v"),
        ):
            rc, so, se = run(cli, *argv, "--out", out)
            expect_one_line_error(argv, rc, se, out, needle=needle)
        # --buckets up to 2^20 is fine with a --max-distance beyond its exact buckets
        got = produce(cli, tmp, *t5, "--buckets", str(2 ** 20), "--max-distance", big)
        expect(got is not None and got.shape == (2, 2), "bias t5 --buckets 2^20")

        check_all_or_nothing(cli, tmp, io, rng)
        check_bounded_memory(cli, tmp)
    return cli_testlib.finish("test_cli_attention")


if __name__ == "__main__":
    sys.exit(main())
