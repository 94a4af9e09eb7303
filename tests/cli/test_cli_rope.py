#!/usr/bin/env python3
"""Runs the built `posenc` CLI's `rope` subcommand and checks its output against the
independent references (tests/reference/rotary.py for the rotation,
tests/reference/rope_scaling.py for the scaled frequencies): every pairing and scaling,
partial rotary, offsets, float32 and float64 files, --inv-freq-out and
--print-attention-factor, --inv-freq-in against tests/reference/rope_float32_hf.py (HF's float32
sequence); and its errors (non-zero exit, one line on stderr, no file).

Usage:  test_cli_rope.py PATH/TO/posenc
"""
import os
import subprocess
import sys
import tempfile

from cli_testlib import (expect, expect_nothing_left, expect_one_line_error, np, remove, run,
                         run_measured)
import cli_testlib
import rotary as rot  # noqa: E402  (tests/reference, put on sys.path by cli_testlib)
import rope_scaling as sc  # noqa: E402
import rope_float32_hf as hf  # noqa: E402


def rope(cli, tmp, x, *argv):
    """Writes x, runs `posenc rope ... --in --out`, returns (y, inv_freq, stdout)."""
    xin, yout, fout = (os.path.join(tmp, n) for n in ("x.npy", "y.npy", "f.npy"))
    remove(yout, fout)
    np.save(xin, x)
    rc, so, se = run(cli, "rope", *argv, "--in", xin, "--out", yout, "--inv-freq-out", fout)
    expect(rc == 0, f"{argv}: rc {rc}, stderr {se!r}")
    expect(se == "", f"{argv}: stderr not empty: {se!r}")
    if rc != 0:
        return None, None, so
    return np.load(yout), np.load(fout), so


def attention_factor_of(stdout):
    for line in stdout.splitlines():
        if line.startswith("attention_factor "):
            return float(line.split()[1])
    return None


def check_all_or_nothing(cli, tmp, rng):
    """Issue 25: --out and --inv-freq-out are both written or neither. Each goes to a
    temporary beside its destination, renamed only when both are complete: an unwritable
    --inv-freq-out used to leave --out behind (exit 1 with a new file)."""
    xin, out, kept = (os.path.join(tmp, n) for n in ("a.npy", "new_out.npy", "kept.npy"))
    np.save(xin, rng.standard_normal((2048, 64)))  # 1 MiB of output
    old = b"an existing file that a failed command must not clobber"
    missing = os.path.join(tmp, "no_such_dir", "i.npy")
    for dest in (out, kept):
        remove(out)
        with open(kept, "wb") as f:
            f.write(old)
        what = f"rope --out {os.path.basename(dest)} --inv-freq-out in a missing folder"
        rc, so, se = run(cli, "rope", "--head-dim", 64, "--in", xin, "--out", dest,
                         "--inv-freq-out", missing)
        expect_one_line_error([what], rc, se, needle="--inv-freq-out")
        expect_nothing_left(what, tmp, new_files=[out], kept={kept: old})
        # the first output failing half-way (a 64 KiB file-size limit: EFBIG)
        what = f"rope --out {os.path.basename(dest)} past a file-size limit"
        rc, so, se, _ = run_measured(cli, "rope", "--head-dim", 64, "--in", xin, "--out", dest,
                                     "--inv-freq-out", os.path.join(tmp, "f_new.npy"),
                                     file_size_limit=1 << 16, ignore_sigxfsz=True)
        expect_one_line_error([what], rc, se, needle="--out")
        expect_nothing_left(what, tmp, new_files=[out, os.path.join(tmp, "f_new.npy")],
                            kept={kept: old})
    rc, so, se = run(cli, "rope", "--head-dim", 64, "--in", xin, "--out", kept,
                     "--inv-freq-out", "./" + os.path.relpath(kept))
    expect_one_line_error(["--out and --inv-freq-out the same file"], rc, se,
                          needle="--out and --inv-freq-out name the same file")
    expect_nothing_left("--out and --inv-freq-out the same file", tmp, kept={kept: old})
    # rotating a file in place works: it is read whole before the temporary replaces it
    x = rng.standard_normal((4, 16))
    np.save(kept, x)
    rc, so, se = run(cli, "rope", "--head-dim", 16, "--offset", 5, "--in", kept, "--out", kept)
    got = np.load(kept) if rc == 0 else None
    want = rot.rotate(x, np.arange(5, 9), rot.plain_inv_freq(16, 1e4), "half")
    expect(got is not None and np.max(np.abs(got - want)) < 1e-12, "rope --in F --out F in place")
    expect_nothing_left("rope in place", tmp)
    remove(xin, kept)


def check_zero_heads(cli, tmp):
    """Issue 25: an [L, 0, D] input (no heads: nothing to rotate) with a huge declared L
    finishes at once. It used to loop over all 10^12 positions for minutes (the rotary
    kernel's loop over positions ran even with zero heads)."""
    xin, out = os.path.join(tmp, "zero_heads.npy"), os.path.join(tmp, "zero_heads_out.npy")
    np.save(xin, np.empty((10 ** 12, 0, 8), np.float32))
    try:
        rc, so, se = run(cli, "rope", "--head-dim", 8, "--in", xin, "--out", out, timeout=20)
    except subprocess.TimeoutExpired:
        expect(False, "rope on a [10^12, 0, 8] input: still running after 20 s")
        return
    expect(rc == 0, f"rope [10^12, 0, 8]: rc {rc}, stderr {se!r}")
    got = np.load(out) if rc == 0 else None
    expect(got is not None and got.shape == (10 ** 12, 0, 8) and got.dtype == np.float32,
           "rope [10^12, 0, 8]: the empty array comes back")
    remove(xin, out)


def check_inv_freq_in(cli, tmp, rng):
    """Issue 26: --inv-freq-in F.npy rotates with a framework's own inverse frequencies. With
    HF's float32 inv_freq and --float32-reference the rows are HF's float32 computation
    (tests/reference/rope_float32_hf.py) within the bound of test_rope_inv_freq.cpp, at
    positions 1e5.., where posenc's own frequencies (--base) are far outside it."""
    fin = os.path.join(tmp, "inv_in.npy")
    d, offset = 128, 100000
    x = rng.standard_normal((8, d)).astype(np.float32)
    pos = np.arange(offset, offset + 8)
    for base in hf.BASES:
        inv = hf.hf_inv_freq(base, d)
        np.save(fin, inv)
        want = hf.hf_rotate(x, pos, inv).astype(np.float64)
        bound = hf.pair_bound(x)
        y, f, so = rope(cli, tmp, x, "--head-dim", d, "--inv-freq-in", fin, "--float32-reference",
                        "--offset", offset)
        if y is None:
            continue
        worst = np.max(np.abs(y.astype(np.float64) - want) / bound)
        expect(y.dtype == np.float32 and worst <= 1.0,
               f"--inv-freq-in HF base {base}: {worst:.3g} of the float32 bound")
        expect(f.dtype == np.float64 and np.array_equal(f, inv.astype(np.float64)),
               f"--inv-freq-in base {base}: --inv-freq-out is the file's values, bit for bit")
        expect("inv_freq from " + fin in so, f"--inv-freq-in base {base}: stdout {so!r}")
        own, _, _ = rope(cli, tmp, x, "--head-dim", d, "--base", base, "--float32-reference",
                         "--offset", offset)
        if own is not None:
            far = np.max(np.abs(own.astype(np.float64) - want) / bound)
            expect(far > 1000, f"own frequencies base {base}: only {far:.3g} of the bound")

    # float64 frequencies, partial rotary, interleaved, an attention factor: exact mode
    inv = rng.uniform(0.01, 1.0, 4)
    np.save(fin, inv)
    x = rng.standard_normal((5, 16))
    y, f, so = rope(cli, tmp, x, "--head-dim", 16, "--rotary-dim", 8, "--pairing", "interleaved",
                    "--inv-freq-in", fin, "--attention-factor", 1.5, "--offset", 7,
                    "--print-attention-factor")
    if y is not None:
        want = rot.rotate(x, np.arange(7, 12), inv, "interleaved", attention_factor=1.5)
        expect(np.max(np.abs(y - want)) < 1e-12, "--inv-freq-in float64, interleaved, partial")
        expect(np.array_equal(y[:, 8:], x[:, 8:]), "--inv-freq-in: tail untouched")
        expect(np.array_equal(f, inv), "--inv-freq-in float64: --inv-freq-out equal")
        expect(attention_factor_of(so) == 1.5, "--inv-freq-in with --attention-factor 1.5")

    # errors: non-zero exit, one line naming the flag, nothing written
    xin, out = os.path.join(tmp, "x_err.npy"), os.path.join(tmp, "never.npy")
    np.save(xin, rng.standard_normal((3, 16)))
    files = {
        "short": np.full(7, 0.5, np.float32),
        "rank2": np.full((2, 4), 0.5, np.float32),
        "ints": np.arange(8, dtype=np.int64),
        "f16": np.full(8, 0.5, np.float16),
        "nan": np.array([1.0, np.nan, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]),
        "ok": np.full(8, 0.5, np.float32),
    }
    for name, arr in files.items():
        np.save(os.path.join(tmp, name + ".npy"), arr)
    p = lambda name: os.path.join(tmp, name + ".npy")  # noqa: E731
    bad = [
        (["--inv-freq-in", p("short")], f"--inv-freq-in {p('short')}: expected a 1-D array of "
         "R/2 = 8 inverse frequencies (rotary dim R = 16), got shape [7]"),
        (["--rotary-dim", 8, "--inv-freq-in", p("ok")], "R/2 = 4 inverse frequencies (rotary dim "
         "R = 8), got shape [8]"),
        (["--inv-freq-in", p("rank2")], "got shape [2, 4]"),
        (["--inv-freq-in", p("ints")], f"--inv-freq-in {p('ints')}: dtype '<i8' (must be float32 "
         "or float64)"),
        (["--inv-freq-in", p("f16")], "dtype '<f2' (must be float32 or float64)"),
        (["--inv-freq-in", p("nan")], "inv_freq[1] = nan: must be finite"),
        (["--inv-freq-in", p("missing")], f"--inv-freq-in {p('missing')}:"),
        (["--inv-freq-in", p("ok"), "--attention-factor", -1],
         "invalid value for --attention-factor: -1 (must be finite and > 0)"),
    ]
    for flag, value in (("--base", 500000), ("--scaling", "linear"), ("--factor", 2),
                        ("--seq-len", 10), ("--original-max", 64), ("--xpos-scale-base", 256),
                        ("--short-factor", "1,1,1,1,1,1,1,1")):
        bad.append((["--inv-freq-in", p("ok"), flag, value],
                    f"{flag} is not used with --inv-freq-in (the file replaces the frequencies)"))
    for argv, needle in bad:
        rc, so, se = run(cli, "rope", "--head-dim", 16, *argv, "--in", xin, "--out", out)
        expect_one_line_error(argv, rc, se, out=out, needle=needle)
    remove(xin, fin, *(p(name) for name in files))


def main():
    cli = cli_testlib.cli_path(__doc__)
    if cli is None:
        return 2
    rng = np.random.default_rng(7)
    with tempfile.TemporaryDirectory() as tmp:
        rc, so, se = run(cli, "--help")
        expect(rc == 0 and "rope" in so, "posenc --help lists rope")
        rc, so, se = run(cli, "rope", "--help")
        for flag in ["--head-dim", "--rotary-dim", "--base", "--pairing", "--scaling", "--factor",
                     "--original-max", "--seq-len", "--beta-fast", "--beta-slow", "--mscale",
                     "--mscale-all-dim", "--attention-factor", "--low-freq-factor",
                     "--high-freq-factor", "--short-factor", "--long-factor", "--offset", "--in",
                     "--out", "--inv-freq-in", "--inv-freq-out", "--print-attention-factor"]:
            expect(rc == 0 and flag in so, f"rope --help mentions {flag}")
        # the synopsis (between "Usage:" and "Flags:") names every flag, not only the table
        synopsis = so.split("Flags:")[0]
        for flag in ["--xpos-scale-base", "--key", "--float32-reference", "--offset",
                     "--inv-freq-in", "--inv-freq-out", "--print-attention-factor", "--in", "--out"]:
            expect(rc == 0 and flag in synopsis, f"rope usage synopsis mentions {flag}")

        # unscaled models: Llama-2 (half), GPT-J (interleaved, partial), Pythia (partial)
        for d, r, pairing, offset in [(128, 128, "half", 0), (256, 64, "interleaved", 2040),
                                      (128, 32, "half", 100000)]:
            x = rng.standard_normal((9, d))
            y, f, so = rope(cli, tmp, x, "--head-dim", d, "--rotary-dim", r, "--pairing", pairing,
                            "--offset", offset, "--print-attention-factor")
            if y is None:
                continue
            pos = np.arange(offset, offset + 9)
            want = rot.rotate(x, pos, rot.plain_inv_freq(r, 1e4), pairing)
            expect(y.dtype == np.float64 and y.shape == x.shape, f"d {d}: float64 [9, {d}] kept")
            expect(np.max(np.abs(y - want)) < 1e-10, f"d {d} r {r} {pairing}: values")
            expect(np.array_equal(y[:, r:], x[:, r:]), f"d {d} r {r}: tail untouched")
            expect(np.allclose(f, rot.plain_inv_freq(r, 1e4), rtol=1e-15, atol=0), f"d {d}: inv_freq")
            expect(attention_factor_of(so) == 1.0, f"d {d}: attention factor printed as 1")

        # float32 in, float32 out, within 2e-6 relative per row even at a large offset
        x = rng.standard_normal((4, 64)).astype(np.float32)
        y, f, so = rope(cli, tmp, x, "--head-dim", 64, "--offset", 1048573)
        if y is not None:
            want = rot.rotate(x.astype(np.float64), np.arange(1048573, 1048577),
                              rot.plain_inv_freq(64, 1e4), "half")
            err = np.max(np.linalg.norm(y - want, axis=1) / np.linalg.norm(want, axis=1))
            expect(y.dtype == np.float32, "float32 kept")
            expect(err < 2e-6, f"float32 at 1e6: relative error {err}")

        # every scaling, end to end: inv_freq and attention factor from the scaling reference,
        # the rotation from the rotary reference
        r = 64
        short = [1.0 + 0.02 * i for i in range(r // 2)]
        long_ = [1.0 + 0.9 * i for i in range(r // 2)]
        lists = lambda v: ",".join(repr(a) for a in v)  # noqa: E731
        scaled = [
            (["--scaling", "linear", "--factor", 4], sc.linear(r, 1e4, 4.0), 1.0, 1e4),
            (["--scaling", "ntk", "--factor", 8], sc.ntk(r, 1e4, 8.0), 1.0, 1e4),
            (["--scaling", "dynamic", "--factor", 2, "--original-max", 2048, "--seq-len", 8192],
             sc.dynamic(r, 1e4, 2.0, 2048, 8192), 1.0, 1e4),
            (["--base", 1e6, "--scaling", "yarn", "--factor", 4, "--original-max", 32768],
             *sc.yarn(r, 1e6, 4.0, 32768), 1e6),
            (["--base", 1e6, "--scaling", "yarn", "--factor", 4, "--original-max", 32768,
              "--beta-fast", 16, "--beta-slow", 2, "--mscale", 1.0, "--mscale-all-dim", 0.5],
             *sc.yarn(r, 1e6, 4.0, 32768, beta_fast=16.0, beta_slow=2.0, mscale=1.0,
                      mscale_all_dim=0.5), 1e6),
            (["--base", 1e6, "--scaling", "yarn", "--factor", 4, "--original-max", 32768,
              "--attention-factor", 1.5], *sc.yarn(r, 1e6, 4.0, 32768, attention_factor=1.5), 1e6),
            (["--base", 5e5, "--scaling", "llama3", "--factor", 8, "--original-max", 8192,
              "--low-freq-factor", 1, "--high-freq-factor", 4],
             sc.llama3(r, 5e5, 8.0, 8192, 1.0, 4.0), 1.0, 5e5),
            (["--scaling", "longrope", "--factor", 32, "--original-max", 4096, "--seq-len", 8192,
              "--short-factor", lists(short), "--long-factor", lists(long_)],
             *sc.longrope(r, 1e4, 4096, 131072, short, long_, 8192), 1e4),
            (["--scaling", "longrope", "--factor", 32, "--original-max", 4096, "--seq-len", 100,
              "--short-factor", lists(short), "--long-factor", lists(long_)],
             *sc.longrope(r, 1e4, 4096, 131072, short, long_, 100), 1e4),
        ]
        for argv, ws, af, _ in scaled:
            x = rng.standard_normal((5, r))
            y, f, so = rope(cli, tmp, x, "--head-dim", r, "--offset", 30, *argv,
                            "--print-attention-factor")
            if y is None:
                continue
            ws = np.array(ws)
            expect(np.allclose(f, ws, rtol=1e-13, atol=0), f"{argv}: inv_freq")
            got_af = attention_factor_of(so)
            expect(got_af is not None and abs(got_af - af) < 1e-14, f"{argv}: attention factor {got_af} vs {af}")
            want = rot.rotate(x, np.arange(30, 35), ws, "half", attention_factor=af)
            expect(np.max(np.abs(y - want)) < 1e-11, f"{argv}: rotated values")
        # xPos: queries and keys differ, as the reference says
        x = rng.standard_normal((6, r))
        yq, _, _ = rope(cli, tmp, x, "--head-dim", r, "--scaling", "xpos", "--offset", 3)
        yk, _, _ = rope(cli, tmp, x, "--head-dim", r, "--scaling", "xpos", "--offset", 3, "--key")
        if yq is not None and yk is not None:
            pos = np.arange(3, 9)
            inv = rot.plain_inv_freq(r, 1e4)
            expect(np.max(np.abs(yq - rot.rotate(x, pos, inv, "half", xpos=(512.0, 0.4)))) < 1e-12, "xpos q")
            expect(np.max(np.abs(yk - rot.rotate(x, pos, inv, "half", xpos=(512.0, 0.4), key=True))) < 1e-12,
                   "xpos k")

        # errors: non-zero exit, exactly one line on stderr, nothing written
        xin = os.path.join(tmp, "e.npy")
        np.save(xin, rng.standard_normal((3, 16)))
        bad = [
            (["--head-dim", 16, "--rotary-dim", 7], "--rotary-dim: 7 (must be even"),
            (["--head-dim", 16, "--rotary-dim", 32], "--rotary-dim: 32 (must be even and <= --head-dim 16)"),
            (["--head-dim", 32], "--head-dim"),
            (["--head-dim", 16, "--pairing", "diagonal"], "--pairing"),
            (["--head-dim", 16, "--scaling", "magic"], "--scaling"),
            (["--head-dim", 16, "--scaling", "linear", "--factor", 0], "factor = 0"),
            (["--head-dim", 16, "--scaling", "yarn", "--factor", 4],
             "missing --original-max: required by --scaling yarn"),
            (["--head-dim", 16, "--scaling", "longrope", "--factor", 4, "--original-max", 10,
              "--short-factor", "1,1", "--long-factor", "1,1,1,1,1,1,1,1"], "short_factor.size() = 2"),
            (["--head-dim", 16, "--offset", -1], "--offset"),
            (["--head-dim", 16, "--factor", "abc"], "--factor"),
            (["--head-dim", 16, "--bogus", 1], "--bogus"),
            # scaling flags that the chosen --scaling ignores
            (["--head-dim", 16, "--scaling", "none", "--factor", 3],
             "--factor is not used by --scaling none"),
            (["--head-dim", 16, "--factor", 3], "--factor is not used by --scaling none"),
            (["--head-dim", 16, "--scaling", "xpos", "--factor", 2],
             "--factor is not used by --scaling xpos"),
            (["--head-dim", 16, "--scaling", "linear", "--factor", 2, "--original-max", 64],
             "--original-max is not used by --scaling linear"),
            (["--head-dim", 16, "--scaling", "ntk", "--factor", 2, "--beta-fast", 8],
             "--beta-fast is not used by --scaling ntk"),
            (["--head-dim", 16, "--scaling", "llama3", "--factor", 2, "--original-max", 64,
              "--mscale", 1], "--mscale is not used by --scaling llama3"),
            (["--head-dim", 16, "--scaling", "dynamic", "--factor", 2, "--original-max", 64,
              "--beta-slow", 2], "--beta-slow is not used by --scaling dynamic"),
            (["--head-dim", 16, "--scaling", "longrope", "--factor", 2, "--original-max", 64,
              "--short-factor", "1,1,1,1,1,1,1,1", "--long-factor", "1,1,1,1,1,1,1,1",
              "--mscale-all-dim", 1], "--mscale-all-dim is not used by --scaling longrope"),
            (["--head-dim", 16, "--scaling", "yarn", "--factor", 2, "--original-max", 64,
              "--low-freq-factor", 1], "--low-freq-factor is not used by --scaling yarn"),
            (["--head-dim", 16, "--high-freq-factor", 4],
             "--high-freq-factor is not used by --scaling none"),
            (["--head-dim", 16, "--scaling", "llama3", "--factor", 2, "--original-max", 64,
              "--short-factor", "1,1"], "--short-factor is not used by --scaling llama3"),
            (["--head-dim", 16, "--long-factor", "1,1"], "--long-factor is not used by --scaling none"),
            (["--head-dim", 16, "--xpos-scale-base", 256],
             "--xpos-scale-base is not used by --scaling none"),
        ]
        # Issue 25: a scaling that needs --factor refuses to run without it (it used to
        # rotate as factor 1, i.e. unscaled), as rope_config_from_hf refuses a missing factor;
        # likewise the other flags a scaling cannot do without, each named.
        for scaling, more in (("linear", []), ("ntk", []), ("dynamic", ["--original-max", 64]),
                              ("yarn", ["--original-max", 64]),
                              ("llama3", ["--original-max", 64])):
            bad.append((["--head-dim", 16, "--scaling", scaling, *more],
                        f"missing --factor: required by --scaling {scaling}"))
        for scaling in ("dynamic", "llama3", "longrope"):
            bad.append((["--head-dim", 16, "--scaling", scaling, "--factor", 2],
                        f"missing --original-max: required by --scaling {scaling}"))
        eights = "1,1,1,1,1,1,1,1"
        bad += [
            (["--head-dim", 16, "--scaling", "longrope", "--original-max", 64, "--long-factor", eights],
             "missing --short-factor: required by --scaling longrope"),
            (["--head-dim", 16, "--scaling", "longrope", "--original-max", 64, "--short-factor", eights],
             "missing --long-factor: required by --scaling longrope"),
            (["--head-dim", 16, "--scaling", "yarn", "--factor", 2, "--original-max", 0],
             "--original-max: 0 (must be >= 1)"),
            (["--head-dim", 16, "--base", "1e999"], "--base: '1e999' is out of the range of a double"),
            (["--head-dim", 16, "--offset", "99999999999999999999"], "--offset: '99999999999999999999' is out of range"),
        ]
        for argv, needle in bad:
            out = os.path.join(tmp, "never.npy")
            rc, so, se = run(cli, "rope", *argv, "--in", xin, "--out", out)
            expect_one_line_error(argv, rc, se, out=out, needle=needle)
        argv = ["rope", "--head-dim", 16, "--in", os.path.join(tmp, "missing.npy"),
                "--out", os.path.join(tmp, "o.npy")]
        rc, so, se = run(cli, *argv)
        expect_one_line_error(["missing input", *argv], rc, se)

        # LongRoPE's --factor stays optional: it only sets the default attention factor (1).
        x = rng.standard_normal((3, 16))
        y, f, so = rope(cli, tmp, x, "--head-dim", 16, "--scaling", "longrope", "--original-max", 64,
                        "--short-factor", eights, "--long-factor", eights, "--print-attention-factor")
        expect(y is not None and attention_factor_of(so) == 1.0, "longrope without --factor")

        check_all_or_nothing(cli, tmp, rng)
        check_zero_heads(cli, tmp)
        check_inv_freq_in(cli, tmp, rng)

    return cli_testlib.finish("test_cli_rope")


if __name__ == "__main__":
    sys.exit(main())
