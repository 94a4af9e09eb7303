#!/usr/bin/env python3
"""Independent float64 reference for posenc's absolute encodings (sinusoidal, learned).

Written from the papers and the published formulas, never calling posenc:

  vaswani  (Vaswani et al. 2017, sec. 3.5)
      PE(p, 2i) = sin(p / base^(2i/d)),  PE(p, 2i+1) = cos(p / base^(2i/d))
  fairseq  (fairseq SinusoidalPositionalEmbedding.get_embedding)
      half = d // 2, step = ln(base) / (half - 1), w_i = exp(-i * step)
      row p = [sin(p w_0) .. sin(p w_{half-1}), cos(p w_0) .. cos(p w_{half-1}), (0 if d odd)]
      row padding_idx = 0
  t2t      (tensor2tensor get_timing_signal_1d)
      n = d // 2, step = ln(max_ts / min_ts) / max(n - 1, 1), w_i = min_ts * exp(-i * step)
      row p (p = start_index + r) = [sin(p w) | cos(p w) | zero column if d odd]

  random generator (posenc/core/random.hpp, re-implemented here from its description)
      splitmix64 seeding -> xoshiro256** -> Marsaglia polar method, whose logarithm is
      the atanh series evaluated with explicit fused multiply-adds (exact here through
      fractions.Fraction), so the C++ values must match bit for bit.
  learned table init: element (r, c) = 0.02 * z_{r*d + c}
  interpolation (align_corners): new row j samples x_j = j (L-1)/(N-1), linear in x
      (numpy.interp per column).
  a tiny GPT-2-style .safetensors file holding "transformer.wpe.weight" (F32) and a
      BERT-style "bert.embeddings.position_embeddings.weight" (F16), hand-written
      (u64 header length | JSON header | little-endian data).

Usage:  absolute.py            write tests/data/absolute_*
        absolute.py --check    regenerate in memory and compare with the committed files
                               (exit 1 on any mismatch or missing file)
"""
import json
import math
import struct
import sys
from fractions import Fraction

import _golden  # exits 77 (skip) when numpy is missing
import numpy as np

MASK = (1 << 64) - 1


# ----------------------------------------------------------------------------- sinusoidal
def vaswani(positions, d, base=10000.0):
    assert d % 2 == 0
    pe = np.zeros((len(positions), d))
    for r, p in enumerate(positions):
        for i in range(d // 2):
            angle = float(p) / base ** (2.0 * i / d)
            pe[r, 2 * i] = math.sin(angle)
            pe[r, 2 * i + 1] = math.cos(angle)
    return pe


def fairseq(num_embeddings, d, padding_idx=None, base=10000.0):
    half = d // 2
    step = math.log(base) / (half - 1)
    w = np.exp(np.arange(half, dtype=np.float64) * -step)
    ang = np.arange(num_embeddings, dtype=np.float64)[:, None] * w[None, :]
    pe = np.concatenate([_golden.sin(ang), _golden.cos(ang)], axis=1)
    if d % 2 == 1:
        pe = np.concatenate([pe, np.zeros((num_embeddings, 1))], axis=1)
    if padding_idx is not None:
        pe[padding_idx, :] = 0
    return pe


def t2t(length, channels, min_ts=1.0, max_ts=1.0e4, start_index=0):
    position = np.arange(length, dtype=np.float64) + start_index
    n = channels // 2
    step = math.log(float(max_ts) / float(min_ts)) / max(n - 1, 1)
    inv = min_ts * np.exp(np.arange(n, dtype=np.float64) * -step)
    scaled = position[:, None] * inv[None, :]
    sig = np.concatenate([_golden.sin(scaled), _golden.cos(scaled)], axis=1)
    return np.pad(sig, [[0, 0], [0, channels % 2]])


# ----------------------------------------------------------------------- random generator
def fma(a, b, c):
    """Correctly rounded a*b + c (exact rational arithmetic, one rounding)."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


def portable_log(x):
    m, e = math.frexp(x)
    if m < 0.70710678118654752440:
        m *= 2.0
        e -= 1
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    p = 1.0 / 25.0
    for k in range(11, 0, -1):  # 1/23 .. 1/3
        p = fma(p, z, 1.0 / (2 * k + 1))
    p = fma(p, z, 1.0)
    log_m = (2.0 * s) * p
    ln2_hi = 0.693147180369123816490
    ln2_lo = 1.90821492927058770002e-10
    return fma(float(e), ln2_hi, fma(float(e), ln2_lo, log_m))


class Generator:
    def __init__(self, seed):
        sm = seed & MASK
        self.s = []
        for _ in range(4):
            sm, v = splitmix64(sm)
            self.s.append(v)
        self.spare = None

    def next_u64(self):
        s = self.s
        result = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def symmetric_uniform(self):
        k = (self.next_u64() >> 11) - (1 << 52)
        return float(k) * 2.0 ** -52

    def normal(self):
        if self.spare is not None:
            v, self.spare = self.spare, None
            return v
        while True:
            v1 = self.symmetric_uniform()
            v2 = self.symmetric_uniform()
            s = fma(v2, v2, v1 * v1)
            if s >= 1.0 or s == 0.0:
                continue
            f = math.sqrt((-2.0 * portable_log(s)) / s)
            self.spare = v2 * f
            return v1 * f


def learned_init(max_len, d, seed, stddev=0.02):
    g = Generator(seed)
    return np.array([stddev * g.normal() for _ in range(max_len * d)]).reshape(max_len, d)


def interpolate(table, new_len):
    old = table.shape[0]
    if new_len == 1 or old == 1:
        return np.repeat(table[:1], new_len, axis=0)
    x = np.linspace(0.0, old - 1.0, new_len)
    grid = np.arange(old, dtype=np.float64)
    return np.stack([np.interp(x, grid, table[:, c]) for c in range(table.shape[1])], axis=1)


# ---------------------------------------------------------------------------- safetensors
def safetensors_bytes(tensors):
    header, blobs, offset = {}, [], 0
    for name, dtype, arr in tensors:
        raw = np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


# ------------------------------------------------------------------------------- goldens
LARGE_POSITIONS = np.array([0, 1, 7, 999, 4096, 12345, 65537, 99999, 262143, 500000,
                            777777, 999998, 999999, 1000000], dtype=np.int64)


def goldens():
    out = {}
    out["absolute_vaswani_10x6.npy"] = vaswani(range(10), 6)
    out["absolute_vaswani_d32.npy"] = vaswani(range(48), 32)
    out["absolute_vaswani_d10_base500_off37.npy"] = vaswani(range(37, 37 + 9), 10, base=500.0)
    out["absolute_vaswani_large_positions.npy"] = LARGE_POSITIONS
    out["absolute_vaswani_large_d64.npy"] = vaswani(LARGE_POSITIONS, 64)
    out["absolute_fairseq_d10_pad1.npy"] = fairseq(20, 10, padding_idx=1)
    out["absolute_fairseq_d7.npy"] = fairseq(12, 7)
    out["absolute_t2t_d9_start5.npy"] = t2t(12, 9, start_index=5)
    out["absolute_t2t_d3.npy"] = t2t(6, 3)
    out["absolute_t2t_d8_min2_max500.npy"] = t2t(10, 8, min_ts=2.0, max_ts=500.0)

    g = Generator(42)
    u = [g.next_u64() for _ in range(8)]
    out["absolute_rng_seed42_u64.npy"] = np.array(u, dtype=np.uint64).view(np.int64)
    g = Generator(42)
    out["absolute_rng_seed42_normal.npy"] = np.array([g.normal() for _ in range(64)])
    w7 = learned_init(8, 6, 7)
    out["absolute_learned_seed7_8x6.npy"] = w7
    out["absolute_learned_seed7_interp13.npy"] = interpolate(w7, 13)
    out["absolute_learned_seed7_interp5.npy"] = interpolate(w7, 5)

    wpe = learned_init(16, 6, 2024).astype(np.float32)
    wte = learned_init(10, 6, 2025).astype(np.float32)
    bert = learned_init(12, 4, 2026).astype(np.float16)
    out["absolute_gpt2_tiny.safetensors"] = safetensors_bytes([
        ("transformer.wte.weight", "F32", wte),
        ("transformer.wpe.weight", "F32", wpe),
        ("bert.embeddings.position_embeddings.weight", "F16", bert),
    ])
    out["absolute_gpt2_tiny_wpe.npy"] = wpe.astype(np.float64)
    out["absolute_gpt2_tiny_bert_pos.npy"] = bert.astype(np.float64)
    return out


def self_checks():
    """Facts the reference must satisfy before anything is written."""
    row1 = vaswani([1], 6)[0]
    assert np.allclose(np.round(row1, 4), [0.8415, 0.5403, 0.0464, 0.9989, 0.0022, 1.0000])
    # fairseq and t2t share the frequency rule for base 10000, min_ts 1
    assert np.allclose(fairseq(12, 8), t2t(12, 8), rtol=0, atol=1e-15)
    for x in [1e-300, 2.0 ** -60, 0.1, 0.5, 0.70710678, 0.9999999, 1.0]:
        assert abs(portable_log(x) - math.log(x)) <= 4e-16 * max(1.0, abs(math.log(x))), x
    g = Generator(1)
    z = np.array([g.normal() for _ in range(20000)])
    assert abs(z.mean()) < 0.03 and abs(z.std() - 1.0) < 0.03, (z.mean(), z.std())
    # splitmix64 published test vector: seed 1234567 -> first output 6457827717110365317
    assert splitmix64(1234567)[1] == 6457827717110365317


def main():
    self_checks()
    return _golden.main("absolute.py", goldens(), rtol=1e-13, atol=1e-15)


if __name__ == "__main__":
    sys.exit(main())
