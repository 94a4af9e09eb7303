#!/usr/bin/env python3
"""NumPy float32 emulation of Hugging Face's float32 RoPE (LlamaRotaryEmbedding +
apply_rotary_pos_emb), for posenc's float32_reference mode fed with a framework's own
inv_freq (issue 26, item 6). Never calls posenc.

The sequence, every step in float32 as torch does it on the CPU:

    inv_freq = 1 / base ** (arange(0, d, 2) / d)     torch's float32 pow, then a float32 divide
    angle    = inv_freq * float32(position)           (HF: inv_freq @ position_ids, K = 1)
    cos, sin = cos(cat(angle, angle)), sin(...)       float32, attention scaling 1
    y        = x * cos + rotate_half(x) * sin         rotate_half(x) = cat(-x2, x1)

inv_freq's pow is the correctly rounded float32 power (the C library's double pow of the
float32 exponents, rounded once: numpy's own float32 power is not correctly rounded on CPUs
with AVX-512), which is torch's float32 pow result bit for bit for these cases (`--torch`
checks it). Rounded twice
(pow, then 1/pow) it differs by one ulp from the correctly rounded 1 / base^(2i/d) that posenc
computes in double in 19 of 64 frequencies for base 1e4 and 18 of 64 for base 5e5 (d = 128):
at position 1e5 one ulp of inv_freq turns the angle by up to 1e-2 rad, which is why posenc is
fed the framework's inv_freq rather than its own.

Files (d = 128, one head, positions 0..63 and 100000..100063):

    rope_f32_x.npy                 float32 [128, 128]   random rows, one per position
    rope_f32_pos.npy               int64   [128]        their positions
    rope_f32_base<B>_inv_freq.npy  float32 [64]         HF's float32 inv_freq, B = 10000, 500000
    rope_f32_base<B>_y.npy         float32 [128, 128]   the rows rotated as above

Usage:  rope_float32_hf.py            write the files to tests/data/
        rope_float32_hf.py --check    regenerate in memory, compare with the committed files
        rope_float32_hf.py --torch    compare the emulation with torch itself (exit 77 without
                                      torch): inv_freq bit for bit, y within the bound of
                                      tests/encoding/test_rope_inv_freq.cpp
"""
import sys

import _golden  # exits 77 (skip) when numpy is missing
import numpy as np

PREFIX = "rope_f32_"
D = 128
BASES = (10000, 500000)
POSITIONS = np.concatenate([np.arange(0, 64), np.arange(100000, 100064)]).astype(np.int64)
# |y - y_ref| <= BOUND * (|x_a| + |x_b|) per element of pair (a, b): see test_rope_inv_freq.cpp
BOUND = 4 * float(np.finfo(np.float32).eps)


def hf_inv_freq(base, d):
    exponent = np.arange(0, d, 2, dtype=np.float32) / np.float32(d)  # exact: i / 64
    # float32 pow correctly rounded: the C library's pow in double, rounded once (numpy's
    # own float32 power is another, less accurate, code path on CPUs with AVX-512)
    power = _golden.pow(float(base), exponent.astype(np.float64)).astype(np.float32)
    return np.float32(1.0) / power


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def hf_rotate(x, positions, inv_freq):
    """float32 everywhere: numpy keeps float32 * float32 in float32, and rounds each product
    and the sum separately, as torch's elementwise ops do."""
    angle = positions.astype(np.float32)[:, None] * inv_freq[None, :]
    emb = np.concatenate([angle, angle], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    assert cos.dtype == np.float32 and emb.dtype == np.float32
    return x * cos + rotate_half(x) * sin


def make_all():
    rng = np.random.default_rng(26)
    x = rng.standard_normal((len(POSITIONS), D)).astype(np.float32)
    g = {"x": x, "pos": POSITIONS}
    for base in BASES:
        inv = hf_inv_freq(base, D)
        correct = (1.0 / _golden.pow(float(base), np.arange(0, D, 2) / D)).astype(np.float32)
        # the premise of the test: HF's float32 inv_freq is not the correctly rounded one
        assert np.count_nonzero(inv != correct) > 0
        y = hf_rotate(x, POSITIONS, inv)
        assert y.dtype == np.float32
        g["base%d_inv_freq" % base] = inv
        g["base%d_y" % base] = y
    return g


def pair_bound(x):
    """BOUND * (|x_a| + |x_b|) for every element, pair (i, i + d/2)."""
    s = np.abs(x) + np.abs(rotate_half(x))
    return BOUND * s.astype(np.float64)


def check_torch(g):
    try:
        import torch
    except ImportError as e:  # pragma: no cover
        print("skipped: %s" % e)
        return 77
    bad = 0
    for base in BASES:
        # transformers' LlamaRotaryEmbedding (default rope type) and apply_rotary_pos_emb
        inv_t = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.int64).to(dtype=torch.float) / D))
        pos_t = torch.from_numpy(g["pos"])[None, :]
        freqs = (inv_t[None, :, None].float() @ pos_t[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[0], emb.sin()[0]
        x = torch.from_numpy(g["x"])
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        y_t = (x * cos + torch.cat((-x2, x1), dim=-1) * sin).numpy()
        inv_np = g["base%d_inv_freq" % base]
        same = np.array_equal(inv_t.numpy(), inv_np)
        err = np.abs(y_t.astype(np.float64) - g["base%d_y" % base].astype(np.float64))
        worst = float(np.max(err / pair_bound(g["x"])))
        ok = same and worst <= 1.0
        print("base %d: torch %s inv_freq %s numpy's; y within %.2f of the bound %s"
              % (base, torch.__version__, "equals" if same else "DIFFERS FROM", worst,
                 "ok" if ok else "MISMATCH"))
        bad += not ok
    return 1 if bad else 0


def main():
    g = make_all()
    if "--torch" in sys.argv[1:]:
        return check_torch(g)
    # float32 cos/sin of numpy are vectorised and may differ by an ulp between CPUs
    return _golden.main("rope_float32_hf.py", _golden.npy_files(PREFIX, g), rtol=1e-6,
                        atol=1e-6)


if __name__ == "__main__":
    sys.exit(main())
