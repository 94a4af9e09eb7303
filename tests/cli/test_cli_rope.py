#!/usr/bin/env python3
"""Runs the built `posenc` CLI's `rope` subcommand and checks its output against the
independent references (tests/reference/rotary.py for the rotation,
tests/reference/rope_scaling.py for the scaled frequencies): every pairing and scaling,
partial rotary, offsets, float32 and float64 files, --inv-freq-out and
--print-attention-factor; and its errors (non-zero exit, one line on stderr, no file).

Usage:  test_cli_rope.py PATH/TO/posenc
"""
import os
import sys
import tempfile

from cli_testlib import expect, expect_one_line_error, np, remove, run
import cli_testlib
import rotary as rot  # noqa: E402  (tests/reference, put on sys.path by cli_testlib)
import rope_scaling as sc  # noqa: E402


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
                     "--out", "--inv-freq-out", "--print-attention-factor"]:
            expect(rc == 0 and flag in so, f"rope --help mentions {flag}")
        # the synopsis (between "Usage:" and "Flags:") names every flag, not only the table
        synopsis = so.split("Flags:")[0]
        for flag in ["--xpos-scale-base", "--key", "--float32-reference", "--offset",
                     "--inv-freq-out", "--print-attention-factor", "--in", "--out"]:
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
            (["--head-dim", 16, "--rotary-dim", 7], "rotary_dim = 7"),
            (["--head-dim", 16, "--rotary-dim", 32], "rotary_dim = 32"),
            (["--head-dim", 32], "--head-dim"),
            (["--head-dim", 16, "--pairing", "diagonal"], "--pairing"),
            (["--head-dim", 16, "--scaling", "magic"], "--scaling"),
            (["--head-dim", 16, "--scaling", "linear", "--factor", 0], "factor = 0"),
            (["--head-dim", 16, "--scaling", "yarn", "--factor", 4], "original_max_positions = 0"),
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
        for argv, needle in bad:
            out = os.path.join(tmp, "never.npy")
            rc, so, se = run(cli, "rope", *argv, "--in", xin, "--out", out)
            expect_one_line_error(argv, rc, se, out=out, needle=needle)
        argv = ["rope", "--head-dim", 16, "--in", os.path.join(tmp, "missing.npy"),
                "--out", os.path.join(tmp, "o.npy")]
        rc, so, se = run(cli, *argv)
        expect_one_line_error(["missing input", *argv], rc, se)

    return cli_testlib.finish("test_cli_rope")


if __name__ == "__main__":
    sys.exit(main())
