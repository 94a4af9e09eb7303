#!/usr/bin/env python3
"""Runs the built `posenc embed` on token ids through the tables of
tests/data/absolute_gpt2_tiny.safetensors (GPT-2 style `transformer.wte.weight` [10, 6] and
`transformer.wpe.weight` [16, 6], float32) and checks the rows against the float64
reference (tests/reference/embedding.py, its tables rebuilt by absolute.py), its help, and
its error handling: bad ids, files and flags exit non-zero with one line on stderr and no file.

Usage:  test_cli_embed.py PATH/TO/posenc
"""
import math
import os
import sys
import tempfile

from cli_testlib import expect, expect_one_line_error, np, remove, run
import cli_testlib
import absolute  # noqa: E402  (tests/reference, put on sys.path by cli_testlib)
import embedding as ref  # noqa: E402

CHECKPOINT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                          "absolute_gpt2_tiny.safetensors")
WTE = absolute.learned_init(10, 6, 2025).astype(np.float32).astype(np.float64)
WPE = absolute.learned_init(16, 6, 2024).astype(np.float32).astype(np.float64)


def embed(cli, tmp, ids, *argv):
    """Writes ids, runs `posenc embed` on them, returns the output array (or None)."""
    ids_path, out = os.path.join(tmp, "ids.npy"), os.path.join(tmp, "out.npy")
    remove(out)
    np.save(ids_path, ids)
    args = ["embed", "--checkpoint", CHECKPOINT, "--token-table", "transformer.wte.weight",
            "--ids", ids_path, *argv, "--out", out]
    rc, so, se = run(cli, *args)
    expect(rc == 0, f"{argv}: rc {rc}, stderr {se!r}")
    expect(se == "" and so.startswith("wrote "), f"{argv}: stdout {so!r}, stderr {se!r}")
    return np.load(out) if rc == 0 and os.path.exists(out) else None


def want(ids, pe_rows, scale):
    """The reference's eval-mode output, shaped like the ids plus the width."""
    ids2 = ids.reshape(1, -1) if ids.ndim == 1 else ids
    out, _, _ = ref.embed(WTE, pe_rows, ids2.astype(np.int64), scale)
    return out.reshape(*ids.shape, WTE.shape[1])


def close(got, expected, tol, what):
    ok = got is not None and got.shape == expected.shape and np.max(np.abs(got - expected)) <= tol
    err = None if got is None or got.shape != expected.shape else np.max(np.abs(got - expected))
    expect(ok, f"{what}: shape {None if got is None else got.shape} vs {expected.shape}, "
               f"max error {err}")


def check_values(cli, tmp):
    seq = np.array([9, 0, 4, 4, 7], dtype=np.int64)
    got = embed(cli, tmp, seq, "--position-table", "transformer.wpe.weight")
    expect(got is not None and got.dtype == np.float32, "default dtype is float32")
    close(got, want(seq, WPE[:5], 1.0), 1e-7, "[L] int64 ids + wpe")
    # float64 output: the float32 tables' exact sums
    got = embed(cli, tmp, seq, "--position-table", "transformer.wpe.weight", "--offset", "11",
                "--dtype", "f64")
    expect(got is not None and got.dtype == np.float64, "--dtype f64")
    close(got, want(seq, WPE[11:16], 1.0), 0.0, "[L] ids + wpe at offset 11 (the last rows), f64")

    batch = np.array([[1, 2, 3], [3, 2, 1], [0, 9, 0]], dtype=np.int32)
    d = WTE.shape[1]
    got = embed(cli, tmp, batch, "--sinusoidal", "vaswani", "--scale-sqrt-d", "--offset", "3",
                "--dtype", "f64")
    close(got, want(batch, absolute.vaswani(range(3, 6), d), math.sqrt(d)), 1e-14,
          "[B, L] int32 ids, sqrt(d) * wte + vaswani at offset 3")
    got = embed(cli, tmp, batch, "--sinusoidal", "t2t", "--base", "500")
    close(got, want(batch, absolute.t2t(3, d, max_ts=500.0), 1.0), 2e-7, "t2t, base 500")
    got = embed(cli, tmp, batch, "--sinusoidal", "fairseq", "--offset", "2")
    close(got, want(batch, absolute.fairseq(5, d)[2:], 1.0), 2e-7, "fairseq from position 2")
    got = embed(cli, tmp, batch, "--scale-sqrt-d")
    close(got, want(batch, None, math.sqrt(d)), 2e-7, "no positions, sqrt(d)")


def check_errors(cli, tmp):
    out = os.path.join(tmp, "bad.npy")
    ids = os.path.join(tmp, "bad_ids.npy")
    base = ["embed", "--checkpoint", CHECKPOINT, "--token-table", "transformer.wte.weight",
            "--ids", ids]
    cases = [
        (np.array([1, 2, 10], dtype=np.int64), [], "token_ids[2] = 10"),
        (np.array([[1, 2], [-1, 0]], dtype=np.int32), [], "token_ids[1, 0] = -1"),
        (np.array([1.0, 2.0]), [], "int32 or int64"),
        (np.zeros((1, 2, 2), dtype=np.int64), [], "rank 3"),
        (np.array([1, 2, 3, 4]), ["--position-table", "transformer.wpe.weight", "--offset", "13"],
         "offset + len = 17"),
        (np.array([1]), ["--position-table", "transformer.wpe.weight", "--sinusoidal", "t2t"],
         "exclude each other"),
        (np.array([1]), ["--base", "100"], "--base needs --sinusoidal"),
        (np.array([1]), ["--sinusoidal", "rope"], "--sinusoidal"),
        (np.array([1]), ["--position-table", "nope.weight"], "nope.weight"),
        (np.array([1]), ["--dtype", "f16"], "--dtype"),
        (np.array([1]), ["--offset", "x"], "--offset"),
    ]
    for arr, extra, needle in cases:
        np.save(ids, arr)
        remove(out)
        argv = [*base, *extra, "--out", out]
        rc, so, se = run(cli, *argv)
        expect_one_line_error([needle, *extra], rc, se, out=out, needle=needle)
    for argv in (["embed", "--checkpoint", CHECKPOINT, "--token-table", "transformer.wte.weight",
                  "--out", out],
                 ["embed", "--checkpoint", os.path.join(tmp, "missing.safetensors"),
                  "--token-table", "w", "--ids", ids, "--out", out],
                 [*base, "--token-table", "bert.embeddings.position_embeddings.weight",
                  "--position-table", "transformer.wpe.weight", "--out", out]):
        np.save(ids, np.array([1]))
        rc, so, se = run(cli, *argv)
        expect_one_line_error(argv, rc, se, out=out)


def main():
    cli = cli_testlib.cli_path(__doc__)
    if cli is None:
        return 2
    rc, so, se = run(cli, "--help")
    expect(rc == 0 and "embed" in so, "posenc --help lists embed")
    rc, so, se = run(cli, "embed", "--help")
    flags = ["--checkpoint", "--token-table", "--ids", "--position-table", "--sinusoidal",
             "--base", "--scale-sqrt-d", "--offset", "--dtype", "--out"]
    expect(rc == 0 and all(f in so for f in flags), "posenc embed --help names every flag")
    with tempfile.TemporaryDirectory() as tmp:
        check_values(cli, tmp)
        check_errors(cli, tmp)
    return cli_testlib.finish("test_cli_embed")


if __name__ == "__main__":
    sys.exit(main())
