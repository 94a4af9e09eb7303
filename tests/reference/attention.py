#!/usr/bin/env python3
"""Independent float64 reference for posenc's attention kernel, ALiBi and T5 bias.

Written from the papers, never calling posenc, with explicit loops over (i, j):

* Scaled dot-product attention (Vaswani et al. 2017):
      out_i = sum_j softmax_j(scale * q_i . k_j + bias_ij + mask_ij) v_j
  query i at absolute position q_offset + i, key j at position j. A row with no
  visible key is defined as zeros (posenc's documented choice).
* ALiBi (Press, Smith, Lewis 2022): bias_ij = -m_h (pos_i - j) (causal form, linear for
  every j) or -m_h |pos_i - j| (symmetric). Slopes: for a power of two n,
  m_h = start * start**h with start = 2**(-2**-(log2(n) - 3)); otherwise the slopes of
  the largest power of two c < n followed by the even-indexed slopes of 2c, the first
  n - c of them (the paper's reference code, written out here as a recursion).
* T5 relative bias (Raffel et al. 2020): bucket(relative = key - query), bidirectional or
  unidirectional, num_buckets, max_distance, log-spaced buckets above num_buckets/2
  (halved again when bidirectional), capped at the last bucket; bias = table[bucket, h].
  No score scaling (scale = 1).

Usage:  attention.py            write tests/data/attention_*.npy
        attention.py --check    regenerate in memory, compare with the committed files
                                (exit 1 on any mismatch or missing file)
"""
import math
import sys

import _golden  # exits 77 (skip) when numpy is missing
import numpy as np

PREFIX = "attention_"


# ----------------------------------------------------------------------------- ALiBi
def alibi_slopes(n):
    def power_of_two(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start ** h for h in range(n)]

    if math.log2(n).is_integer():
        return power_of_two(n)
    c = 2 ** math.floor(math.log2(n))
    return power_of_two(c) + alibi_slopes(2 * c)[0::2][: n - c]


def alibi_bias(m, lq, lk, q_offset, symmetric):
    b = np.zeros((lq, lk))
    for i in range(lq):
        for j in range(lk):
            d = (q_offset + i) - j
            b[i, j] = -m * (abs(d) if symmetric else d)
    return b


# ----------------------------------------------------------------------------- T5
def t5_bucket(relative, num_buckets, max_distance, bidirectional):
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        if relative > 0:
            bucket += num_buckets
        n = abs(relative)
    else:
        n = -min(relative, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    large = exact + int(math.log(n / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return bucket + min(large, num_buckets - 1)


def t5_bias(table_col, lq, lk, q_offset, num_buckets, max_distance, bidirectional):
    b = np.zeros((lq, lk))
    for i in range(lq):
        for j in range(lk):
            b[i, j] = table_col[t5_bucket(j - (q_offset + i), num_buckets, max_distance, bidirectional)]
    return b


# ----------------------------------------------------------------------------- attention
def attention(q, k, v, scale, bias=None, causal=False, q_offset=0, key_length=None,
              allowed=None, additive=None):
    lq, lk = q.shape[0], k.shape[0]
    out = np.zeros((lq, v.shape[1]))
    w = np.zeros((lq, lk))
    for i in range(lq):
        logits, idx = [], []
        for j in range(lk):
            if causal and j > q_offset + i:
                continue
            if key_length is not None and j >= key_length:
                continue
            if allowed is not None and not allowed[i, j]:
                continue
            l = scale * float(np.dot(q[i], k[j]))
            if bias is not None:
                l += bias[i, j]
            if additive is not None:
                if additive[i, j] == -np.inf:
                    continue
                l += additive[i, j]
            logits.append(l)
            idx.append(j)
        if not idx:
            continue
        logits = np.array(logits)
        e = np.exp(logits - logits.max())
        p = e / e.sum()
        for jj, j in enumerate(idx):
            w[i, j] = p[jj]
            out[i] += p[jj] * v[j]
    return out, w


def generate():
    files = {}
    for n in (8, 12, 16, 20):
        files["alibi_slopes_%d" % n] = np.array(alibi_slopes(n), dtype=np.float64)
    rel = range(-300, 301)
    files["t5_buckets_bidir"] = np.array([t5_bucket(r, 32, 128, True) for r in rel], dtype=np.int64)
    files["t5_buckets_unidir"] = np.array([t5_bucket(r, 32, 128, False) for r in rel], dtype=np.int64)
    files["t5_buckets_b16_d40_bidir"] = np.array([t5_bucket(r, 16, 40, True) for r in rel], dtype=np.int64)

    rng = np.random.default_rng(20240404)
    q = rng.standard_normal((7, 4))
    k = rng.standard_normal((9, 4))
    v = rng.standard_normal((9, 3))
    table = rng.standard_normal((32, 1))
    files.update(q=q, k=k, v=v, t5_table=table)
    s = 1.0 / math.sqrt(4)
    off = 2

    cases = {
        "none": dict(scale=s),
        "causal": dict(scale=s, causal=True, q_offset=off),
        "alibi_causal": dict(scale=s, causal=True, q_offset=off,
                             bias=alibi_bias(alibi_slopes(4)[1], 7, 9, off, False)),
        "alibi_symmetric": dict(scale=s, bias=alibi_bias(alibi_slopes(6)[5], 7, 9, off, True)),
        "t5_bidir": dict(scale=1.0, bias=t5_bias(table[:, 0], 7, 9, off, 32, 128, True)),
        "t5_unidir": dict(scale=1.0, causal=True, q_offset=off,
                          bias=t5_bias(table[:, 0], 7, 9, off, 32, 128, False)),
    }
    allowed = np.ones((7, 9), dtype=bool)
    allowed[3, :] = False          # a fully masked row
    allowed[1, 0] = False
    additive = np.zeros((7, 9))
    additive[2, 1] = -np.inf
    additive[4, :] = 0.5 * np.arange(9)
    cases["masked"] = dict(scale=s, key_length=6, allowed=allowed, additive=additive)
    for name, kw in cases.items():
        out, w = attention(q, k, v, **kw)
        files["out_" + name] = out
        files["weights_" + name] = w
    files["masked_allowed"] = allowed.astype(np.uint8)
    files["masked_additive"] = additive

    # Grouped-query multi-head with ALiBi: 4 query heads of dim 3, 2 kv heads, dv 2.
    H, Hkv, d, dv, lq, lk, off = 4, 2, 3, 2, 5, 6, 1
    mq = rng.standard_normal((lq, H * d))
    mk = rng.standard_normal((lk, Hkv * d))
    mv = rng.standard_normal((lk, Hkv * dv))
    mo = np.zeros((lq, H * dv))
    slopes = alibi_slopes(H)
    for h in range(H):
        g = h // (H // Hkv)
        o, _ = attention(mq[:, h * d:(h + 1) * d], mk[:, g * d:(g + 1) * d], mv[:, g * dv:(g + 1) * dv],
                         1.0 / math.sqrt(d), bias=alibi_bias(slopes[h], lq, lk, off, False),
                         causal=True, q_offset=off)
        mo[:, h * dv:(h + 1) * dv] = o
    files.update(mh_q=mq, mh_k=mk, mh_v=mv, mh_out=mo)
    return files


def main():
    return _golden.main("attention.py", _golden.npy_files(PREFIX, generate()), rtol=1e-13, atol=1e-14)


if __name__ == "__main__":
    sys.exit(main())
