#!/usr/bin/env python3
"""Independent float64 reference for posenc's rotary position embedding (RoPE) rotation.

Written from the papers, never calling posenc:

* Su et al. (2021), "RoFormer", eqs. (13)-(15): a token at position m is multiplied by the
  block-diagonal rotation R_m whose 2x2 block for pair i is
      [[cos m t_i, -sin m t_i], [sin m t_i, cos m t_i]],   t_i = base^(-2i/r), i < r/2.
  Here R_m is built as an explicit D x D matrix (identity past the rotary dim r) and
  applied as y = R_m x. The pair of block i is (2i, 2i+1) for the interleaved layout
  (RoFormer, GPT-J) and (i, i + r/2) for the half layout (GPT-NeoX / LLaMA rotate_half).
* Sun et al. (2022), "A Length-Extrapolatable Transformer" (xPos): block i of a query at
  position n is also scaled by zeta_i^(n / scale_base), of a key by zeta_i^(-n / scale_base),
  zeta_i = (2i/r + gamma) / (1 + gamma).
* Scaled frequencies (Hugging Face rope utilities' formulas): linear t_i / factor;
  NTK-aware base * alpha^(r/(r-2)); dynamic NTK base * (factor*L/L0 - (factor-1))^(r/(r-2))
  when the sequence length L exceeds the original L0.
* Qwen2-VL M-RoPE: the r/2 frequencies split into sections (temporal, height, width); the
  angle of pair i uses the position of its section's axis.
* 2D axial RoPE for image patches (Heo et al. 2024, "Rotary Position Embedding for Vision
  Transformer", RoPE-Axial): the first r/4 pairs rotate with the patch row, the last r/4 with
  the column, both with frequencies base^(-2j/(r/2)), j < r/4.
* A float32 model of PyTorch/HF float32 code (posenc's float32_reference precision): inv_freq
  rounded to float32, angle = float32(float32(n) * inv_freq), cos/sin of that angle rounded
  to float32, y = x*cos + rotate_half(x)*sin with float32 roundings.

Usage:  rotary.py            write tests/data/rotary_*.npy
        rotary.py --check    regenerate in memory, compare with the committed files
                             (exit 1 on any mismatch or missing file)
"""
import sys

import _golden  # exits 77 (skip) when numpy is missing
import numpy as np

PREFIX = "rotary_"


def plain_inv_freq(r, base):
    return np.array([base ** (-(2.0 * i) / r) for i in range(r // 2)], dtype=np.float64)


def pair_dims(i, r, pairing):
    if pairing == "half":
        return i, i + r // 2
    return 2 * i, 2 * i + 1


def rotation_matrix(d, angles, pairing, scales=None):
    """The D x D matrix R: identity, with the 2x2 block of pair i set from angles[i]
    (and multiplied by scales[i], attention factor / xPos, when given)."""
    r = 2 * len(angles)
    rot = np.eye(d)
    for i, th in enumerate(angles):
        a, b = pair_dims(i, r, pairing)
        s = 1.0 if scales is None else scales[i]
        rot[a, a] = s * _golden.cos(th)
        rot[a, b] = -s * _golden.sin(th)
        rot[b, a] = s * _golden.sin(th)
        rot[b, b] = s * _golden.cos(th)
    return rot


def rotate(x, positions, inv_freq, pairing, attention_factor=1.0, xpos=None, key=False):
    """Rows of x [L, D] rotated at positions [L]; xpos = (scale_base, gamma) or None."""
    out = np.empty_like(x)
    r = 2 * len(inv_freq)
    for row, n in enumerate(positions):
        angles = [float(n) * w for w in inv_freq]
        scales = [attention_factor] * len(inv_freq)
        if xpos is not None:
            sb, gamma = xpos
            for i in range(len(inv_freq)):
                zeta = (2.0 * i / r + gamma) / (1.0 + gamma)
                e = float(n) / sb
                scales[i] *= zeta ** (-e if key else e)
        out[row] = rotation_matrix(x.shape[1], angles, pairing, scales) @ x[row]
    return out


def rotate_multi_axis(x, axis_positions, inv_freq, axis_of_pair, pairing):
    """axis_positions [A, L]; pair i turns by axis_positions[axis_of_pair[i], l] * inv_freq[i]."""
    out = np.empty_like(x)
    for row in range(x.shape[0]):
        angles = [float(axis_positions[axis_of_pair[i], row]) * inv_freq[i]
                  for i in range(len(inv_freq))]
        out[row] = rotation_matrix(x.shape[1], angles, pairing) @ x[row]
    return out


def rotate_float32_reference(x, positions, inv_freq, pairing):
    """Half/interleaved rotation the way float32 PyTorch code computes it."""
    f32 = np.float32
    x = x.astype(f32)
    r = 2 * len(inv_freq)
    w = inv_freq.astype(f32)
    pos = np.asarray(positions).astype(f32)
    ang = (pos[:, None] * w[None, :]).astype(f32)          # float32 product
    c = _golden.cos(ang.astype(np.float64)).astype(f32)
    s = _golden.sin(ang.astype(np.float64)).astype(f32)
    if pairing == "half":
        x1, x2 = x[:, : r // 2], x[:, r // 2: r]
    else:
        x1, x2 = x[:, 0:r:2], x[:, 1:r:2]
    y1 = (x1 * c - x2 * s).astype(f32)
    y2 = (x2 * c + x1 * s).astype(f32)
    y = x.copy()
    if pairing == "half":
        y[:, : r // 2], y[:, r // 2: r] = y1, y2
    else:
        y[:, 0:r:2], y[:, 1:r:2] = y1, y2
    return y


def make_goldens():
    rng = np.random.default_rng(20240603)
    g = {}

    def case(name, d, positions, inv_freq, pairing, **kw):
        # inputs exactly representable in float32, so the float tests see the same x
        x = rng.standard_normal((len(positions), d)).astype(np.float32).astype(np.float64)
        pos = np.array(positions, dtype=np.int64)
        g[name + "_x"] = x
        g[name + "_pos"] = pos
        g[name + "_y"] = rotate(x, pos, inv_freq, pairing, **kw)
        return x, pos

    long_positions = [0, 1, 2, 3, 17, 100, 1000, 4095, 4096, 65535, 100000, 524287,
                      999999, 1048575, 1048576]
    # Llama-2 7B: head dim 128, rope_theta 1e4, half pairing
    x, pos = case("llama2_7b", 128, long_positions, plain_inv_freq(128, 1e4), "half")
    g["llama2_7b_y_f32ref"] = rotate_float32_reference(x, pos, plain_inv_freq(128, 1e4), "half")
    # GPT-J 6B: head dim 256, rotary_dim 64, interleaved (rotate_every_two)
    case("gptj", 256, [0, 1, 5, 127, 2047, 2048], plain_inv_freq(64, 1e4), "interleaved")
    # Pythia / GPT-NeoX: head dim 128, rotary_pct 0.25 -> 32, half
    case("neox", 128, [0, 1, 9, 511, 2048, 40000], plain_inv_freq(32, 1e4), "half")
    # xPos (torchscale defaults: scale_base 512, gamma 0.4), interleaved, d 64
    xp = (512.0, 0.4)
    x, pos = case("xpos", 64, [0, 1, 7, 64, 300, 511], plain_inv_freq(64, 1e4), "interleaved",
                  xpos=xp)
    g["xpos_yk"] = rotate(x, pos, plain_inv_freq(64, 1e4), "interleaved", xpos=xp, key=True)
    # scalings whose end-to-end goldens live here: linear (factor 4), NTK-aware (alpha 8),
    # dynamic NTK (factor 2, original 2048, at sequence length 8192); d 64, base 1e4
    r = 64
    case("linear", 64, [0, 3, 4000, 16383], plain_inv_freq(r, 1e4) / 4.0, "half")
    case("ntk", 64, [0, 3, 4000, 16383], plain_inv_freq(r, 1e4 * 8.0 ** (r / (r - 2))), "half")
    dyn_base = 1e4 * ((2.0 * 8192 / 2048) - (2.0 - 1.0)) ** (r / (r - 2))
    case("dynamic", 64, [0, 3, 4000, 8191], plain_inv_freq(r, dyn_base), "half")
    # attention factor on its own: plain frequencies, A = 1.25
    case("attn_factor", 64, [0, 5, 999], plain_inv_freq(r, 1e4), "half", attention_factor=1.25)

    # Qwen2-VL M-RoPE: head dim 128, base 1e6, mrope_section [16, 24, 24] (pairs)
    sections = [16, 24, 24]
    axis_of_pair = np.concatenate([np.full(n, a) for a, n in enumerate(sections)])
    # 3 text tokens, a 2x3 image at t = 3 (h, w = grid + 3), then 2 text tokens at 6, 7
    tpos = [0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7]
    hpos = [0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7]
    wpos = [0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7]
    apos = np.array([tpos, hpos, wpos], dtype=np.int64)
    x = rng.standard_normal((len(tpos), 128)).astype(np.float32).astype(np.float64)
    g["mrope_x"] = x
    g["mrope_pos"] = apos
    g["mrope_y"] = rotate_multi_axis(x, apos, plain_inv_freq(128, 1e6), axis_of_pair, "half")

    # 2D axial RoPE: head dim 64 (r/4 = 16 pairs per axis), base 100, a 3 x 4 patch grid
    rows, cols = np.meshgrid(np.arange(3), np.arange(4), indexing="ij")
    apos = np.array([rows.ravel(), cols.ravel()], dtype=np.int64)
    per_axis = plain_inv_freq(32, 100.0)
    inv = np.concatenate([per_axis, per_axis])
    axis_of_pair = np.concatenate([np.zeros(16, dtype=int), np.ones(16, dtype=int)])
    x = rng.standard_normal((12, 64)).astype(np.float32).astype(np.float64)
    g["axial_x"] = x
    g["axial_pos"] = apos
    g["axial_y"] = rotate_multi_axis(x, apos, inv, axis_of_pair, "half")
    return g


def self_check(g):
    """Sanity of the reference itself: norms preserved, relative property, inverse."""
    inv = plain_inv_freq(16, 1e4)
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal(16), rng.standard_normal(16)
    for pairing in ("half", "interleaved"):
        for m, n in ((5, 2), (105, 102), (1003, 1000)):
            a = rotation_matrix(16, [m * w for w in inv], pairing) @ q
            b = rotation_matrix(16, [n * w for w in inv], pairing) @ k
            base = rotation_matrix(16, [3 * w for w in inv], pairing) @ q
            assert abs(a @ b - base @ k) < 1e-9, "relative property"
    y = g["llama2_7b_y"]
    x = g["llama2_7b_x"]
    assert np.allclose(np.linalg.norm(y, axis=1), np.linalg.norm(x, axis=1), rtol=1e-13)


def main():
    g = make_goldens()
    self_check(g)
    return _golden.main("rotary.py", _golden.npy_files(PREFIX, g), rtol=1e-12, atol=1e-12)


if __name__ == "__main__":
    sys.exit(main())
