#!/usr/bin/env python3
"""Independent float64 reference for posenc's embedding layer (encoding/embedding.hpp).

Written from the layer's definition, never calling posenc:

  forward   x[r]   = s * T[id_r] + P[pos_r]            s = 1 or sqrt(d), pos_r = offset + t
            out[k] = 0 if u_k < p else x[k] * (1 / (1 - p))   (training mode, p > 0)
            u_k = (next_u64() >> 11) * 2^-53, the k-th draw of the seeded generator, k running
            over the output row-major ([B * L, d], row b * L + t)
  backward  dT[id]  += sum over rows with that id (not the padding id) of s * m * g
            dW[pos] += sum over rows at that position of m * g       (learned positions)

The token and position tables come from the generator of posenc/core/random.hpp, as
re-implemented in absolute.py (learned_init: element k = stddev * z_k); a seeded table's
padding row is zero. The sinusoidal rows are absolute.py's vaswani / fairseq formulas.

Each case writes embedding_<case>_{ids,grad_out,out,dtokens[,dpositions]}.npy.

Usage:  embedding.py            write tests/data/embedding_*
        embedding.py --check    regenerate in memory and compare with the committed files
"""
import math
import sys

import _golden  # exits 77 (skip) when numpy is missing
import absolute  # the generator, the learned init and the sinusoidal formulas
import numpy as np


def dropout_factors(shape, p, seed):
    """m: 0 where dropped, 1 / (1 - p) where kept, drawn in row-major order."""
    g = absolute.Generator(seed)
    u = np.array([(g.next_u64() >> 11) * 2.0 ** -53 for _ in range(int(np.prod(shape)))])
    return np.where(u < p, 0.0, 1.0 / (1.0 - p)).reshape(shape)


def embed(tokens, pe_rows, ids, scale, p=0.0, seed=0, padding_idx=-1, grad_out=None):
    """ids [B, L]; pe_rows [L, d] or None. Returns out [B*L, d], dT, dW (per position row)."""
    batch, length = ids.shape
    flat = ids.reshape(-1)
    x = scale * tokens[flat]
    if pe_rows is not None:
        x = x + np.tile(pe_rows, (batch, 1))
    m = dropout_factors(x.shape, p, seed) if p > 0 else np.ones_like(x)
    out = m * x
    dtokens = np.zeros_like(tokens)
    dpos = np.zeros((length, tokens.shape[1]))
    if grad_out is not None:
        gm = m * grad_out
        for r, tok in enumerate(flat):
            if tok != padding_idx:
                dtokens[tok] += scale * gm[r]
            dpos[r % length] += gm[r]
    return out, dtokens, dpos


def grad_values(rows, d, phase):
    return _golden.sin(np.arange(rows * d, dtype=np.float64) * 0.37 + phase).reshape(rows, d)


def case_vaswani():
    """[2, 5] ids, vocab 11, d 6, padding id 0, sqrt(d) scale, vaswani PE at offset 3,
    dropout p = 0.25 seed 9 (the eval output is written too)."""
    vocab, d, offset = 11, 6, 3
    tokens = absolute.learned_init(vocab, d, 5)
    tokens[0] = 0.0
    ids = np.array([[1, 0, 7, 7, 10], [3, 9, 0, 2, 7]], dtype=np.int64)
    pe = absolute.vaswani(range(offset, offset + ids.shape[1]), d)
    g = grad_values(ids.size, d, 0.1)
    out, dt, _ = embed(tokens, pe, ids, math.sqrt(d), p=0.25, seed=9, padding_idx=0, grad_out=g)
    out_eval, _, _ = embed(tokens, pe, ids, math.sqrt(d))
    return {"ids": ids, "grad_out": g, "out": out, "out_eval": out_eval, "dtokens": dt}


def case_learned():
    """[7] ids (one sequence), vocab 13, d 4, learned positions (max_len 10, seed 8) at
    offset 2, no scale, dropout p = 0.5 seed 4."""
    vocab, d, offset = 13, 4, 2
    tokens = absolute.learned_init(vocab, d, 3)
    positions = absolute.learned_init(10, d, 8)
    ids = np.array([[12, 4, 4, 0, 5, 12, 4]], dtype=np.int64)
    g = grad_values(ids.size, d, 0.7)
    out, dt, dp = embed(tokens, positions[offset:offset + ids.shape[1]], ids, 1.0, p=0.5, seed=4,
                        grad_out=g)
    dpositions = np.zeros_like(positions)
    dpositions[offset:offset + ids.shape[1]] = dp
    return {"ids": ids[0], "grad_out": g, "out": out, "dtokens": dt, "dpositions": dpositions}


def case_fairseq():
    """[3, 4] ids, vocab 9, d 8, fairseq PE (its padding_idx 1, so positions start at 2),
    no scale, no dropout, no positions learned."""
    vocab, d = 9, 8
    tokens = absolute.learned_init(vocab, d, 6)
    ids = np.array([[8, 1, 2, 3], [0, 0, 5, 8], [4, 6, 7, 1]], dtype=np.int64)
    pe = absolute.fairseq(2 + ids.shape[1], d, padding_idx=1)[2:]
    g = grad_values(ids.size, d, 1.3)
    out, dt, _ = embed(tokens, pe, ids, 1.0, grad_out=g)
    return {"ids": ids, "grad_out": g, "out": out, "dtokens": dt}


def goldens():
    out = {}
    for name, case in (("vaswani", case_vaswani), ("learned", case_learned),
                       ("fairseq", case_fairseq)):
        out.update(_golden.npy_files("embedding_" + name + "_", case()))
    return out


def self_checks():
    """Facts the reference must satisfy before anything is written."""
    m = dropout_factors((400, 50), 0.3, 1)
    kept = np.count_nonzero(m) / m.size
    assert abs(kept - 0.7) < 0.01, kept
    assert abs(m.mean() - 1.0) < 0.015, m.mean()
    assert np.array_equal(m, dropout_factors((400, 50), 0.3, 1))
    # eval = s * T + PE; dropout only zeroes or scales by 1 / (1 - p)
    c = case_vaswani()
    kept = c["out"] != 0
    assert np.allclose(c["out"][kept], c["out_eval"][kept] / 0.75, rtol=1e-15, atol=0)
    assert not c["dtokens"][0].any()  # the padding row gets no gradient


def main():
    self_checks()
    return _golden.main("embedding.py", goldens(), rtol=1e-13, atol=1e-15)


if __name__ == "__main__":
    sys.exit(main())
