#!/usr/bin/env python3
"""Parity of posenc's attention with PyTorch (Debian's python3-torch).

Usage:  torch_parity.py PATH/TO/attention_driver

Writes random inputs as .npy files, runs the C++ driver (tests/attention/attention_driver.cpp)
on them, and compares its outputs and per-head weights with

  1. torch.nn.MultiheadAttention (identity in/out projections, no bias), with a causal
     mask and a key padding mask, batch_first, float64 and float32;
  2. explicit torch ops (matmul, softmax, matmul) for grouped-query heads, a causal mask
     with a query offset (chunked prefill / KV cache), padding and ALiBi biases.

Exit status: 0 on agreement, 1 on a mismatch, 77 (skipped) when torch or numpy is missing.
"""
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print("skipped: %s" % e)
    sys.exit(77)

TOL = {"f64": 1e-12, "f32": 2e-5}
failures = []


def run_driver(driver, tmp, arrays, flags, dtype):
    paths = {}
    for name, arr in arrays.items():
        paths[name] = os.path.join(tmp, name + ".npy")
        np.save(paths[name], arr)
    out, wts = os.path.join(tmp, "out.npy"), os.path.join(tmp, "w.npy")
    cmd = [driver, "--q", paths["q"], "--k", paths["k"], "--v", paths["v"], "--dtype", dtype,
           "--out", out, "--weights", wts] + flags
    if "key_lengths" in paths:
        cmd += ["--key-lengths", paths["key_lengths"]]
    subprocess.run(cmd, check=True)
    return np.load(out), np.load(wts)


def compare(name, got, want, dtype):
    err = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) if got.size else 0.0
    ok = got.shape == want.shape and err <= TOL[dtype]
    print("%-48s %s max|diff| = %.3g %s" % (name, dtype, err, "ok" if ok else "MISMATCH"))
    if not ok:
        failures.append(name)


def alibi_slopes(n):
    def pow2(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start ** h for h in range(n)]
    if math.log2(n).is_integer():
        return pow2(n)
    c = 2 ** math.floor(math.log2(n))
    return pow2(c) + alibi_slopes(2 * c)[0::2][: n - c]


def case_multihead_attention(driver, tmp, dtype):
    """torch.nn.MultiheadAttention with identity projections, causal + key padding."""
    torch_dtype = torch.float64 if dtype == "f64" else torch.float32
    B, L, H, d = 3, 10, 4, 8
    E = H * d
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((B, L, E)) for _ in range(3))
    lengths = np.array([10, 7, 4], dtype=np.int64)
    npd = np.float64 if dtype == "f64" else np.float32
    q, k, v = q.astype(npd), k.astype(npd), v.astype(npd)

    mha = torch.nn.MultiheadAttention(E, H, bias=False, batch_first=True, dtype=torch_dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([torch.eye(E, dtype=torch_dtype)] * 3, dim=0))
        mha.out_proj.weight.copy_(torch.eye(E, dtype=torch_dtype))
    causal = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)  # True = not allowed
    padding = torch.arange(L)[None, :] >= torch.from_numpy(lengths)[:, None]  # True = pad
    with torch.no_grad():
        want, want_w = mha(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
                           attn_mask=causal, key_padding_mask=padding, need_weights=True,
                           average_attn_weights=False)
    got, got_w = run_driver(driver, tmp, {"q": q, "k": k, "v": v, "key_lengths": lengths},
                            ["--heads", str(H), "--kv-heads", str(H), "--causal"], dtype)
    compare("nn.MultiheadAttention causal+padding out", got, want.numpy(), dtype)
    compare("nn.MultiheadAttention causal+padding weights", got_w, want_w.numpy(), dtype)

    # No mask at all.
    with torch.no_grad():
        want, want_w = mha(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
                           need_weights=True, average_attn_weights=False)
    got, got_w = run_driver(driver, tmp, {"q": q, "k": k, "v": v},
                            ["--heads", str(H), "--kv-heads", str(H)], dtype)
    compare("nn.MultiheadAttention unmasked out", got, want.numpy(), dtype)
    compare("nn.MultiheadAttention unmasked weights", got_w, want_w.numpy(), dtype)


def case_explicit_ops(driver, tmp, dtype, alibi):
    """GQA + causal with a query offset + padding (+ ALiBi) via explicit torch ops."""
    torch_dtype = torch.float64 if dtype == "f64" else torch.float32
    npd = np.float64 if dtype == "f64" else np.float32
    B, Lq, Lk, H, G, d, dv, off = 2, 5, 12, 6, 2, 8, 4, 7
    rng = np.random.default_rng(11 + int(alibi))
    q = rng.standard_normal((B, Lq, H * d)).astype(npd)
    k = rng.standard_normal((B, Lk, G * d)).astype(npd)
    v = rng.standard_normal((B, Lk, G * dv)).astype(npd)
    lengths = np.array([12, 9], dtype=np.int64)

    tq = torch.from_numpy(q).view(B, Lq, H, d).transpose(1, 2)        # B H Lq d
    tk = torch.from_numpy(k).view(B, Lk, G, d).transpose(1, 2)        # B G Lk d
    tv = torch.from_numpy(v).view(B, Lk, G, dv).transpose(1, 2)
    tk = tk.repeat_interleave(H // G, dim=1)
    tv = tv.repeat_interleave(H // G, dim=1)
    scores = tq @ tk.transpose(-1, -2) / math.sqrt(d)
    pos = torch.arange(Lq)[:, None] + off
    key = torch.arange(Lk)[None, :]
    if alibi:
        slopes = torch.tensor(alibi_slopes(H), dtype=torch_dtype)[None, :, None, None]
        scores = scores - slopes * (pos - key).to(torch_dtype)[None, None]
    masked = (key > pos)[None, None] | (key[None] >= torch.from_numpy(lengths)[:, None, None])[:, None]
    scores = scores.masked_fill(masked, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    want = (w @ tv).transpose(1, 2).reshape(B, Lq, H * dv)
    flags = ["--heads", str(H), "--kv-heads", str(G), "--causal", "--q-offset", str(off)]
    if alibi:
        flags.append("--alibi")
    got, got_w = run_driver(driver, tmp, {"q": q, "k": k, "v": v, "key_lengths": lengths}, flags, dtype)
    label = "explicit ops GQA causal offset padding" + (" ALiBi" if alibi else "")
    compare(label + " out", got, want.numpy(), dtype)
    compare(label + " weights", got_w, w.numpy(), dtype)


def main():
    if len(sys.argv) != 2 or not os.path.exists(sys.argv[1]):
        print("usage: torch_parity.py PATH/TO/attention_driver")
        return 2
    driver = sys.argv[1]
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in ("f64", "f32"):
            case_multihead_attention(driver, tmp, dtype)
            case_explicit_ops(driver, tmp, dtype, alibi=False)
            case_explicit_ops(driver, tmp, dtype, alibi=True)
    print("torch %s: %d mismatches" % (torch.__version__, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
