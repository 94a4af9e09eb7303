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

from cli_testlib import expect, expect_one_line_error, np, remove, run
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
    return cli_testlib.finish("test_cli_attention")


if __name__ == "__main__":
    sys.exit(main())
