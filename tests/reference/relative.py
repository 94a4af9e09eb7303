#!/usr/bin/env python3
"""Independent float64 reference for posenc's relative position schemes inside attention.

Written from the papers, never calling posenc:

* Shaw, Uszkoreit, Vaswani (2018), "Self-Attention with Relative Position
  Representations", eqs. (3)-(4) and the clipping rule:
      e_ij  = x_i W^Q (x_j W^K + a^K_ij)^T / sqrt(d_z)            (4)
      z_i   = sum_j alpha_ij (x_j W^V + a^V_ij)                   (3)
      a^K_ij = w^K_clip(j - i, k),  a^V_ij = w^V_clip(j - i, k),
      clip(x, k) = max(-k, min(k, x)).
  posenc generalises k to an asymmetric window [-left, right]; the table row of a
  relative distance r is clip(r) + left.

* Dai et al. (2019), "Transformer-XL", the relative attention score
      A^rel_ij = q_i . k_j            (a)   content
               + q_i . W_R R_{i-j}    (b)   content-dependent position
               + u   . k_j            (c)   global content bias
               + v   . W_R R_{i-j}    (d)   global position bias
  with R_k = [sin(k inv_freq), cos(k inv_freq)], inv_freq_t = 10000^(-2t/d_R) (sin block,
  then cos block), softmax over (a)+(b)+(c)+(d) times 1/sqrt(d_head), keys over
  [memory; current segment], query i at absolute position mlen + i.

Everything here is the direct O(L^2) formulation with explicit loops over (i, j).
Gradients are written out by hand and checked against central finite differences in
this script before anything is written.

Usage:  relative.py            write tests/data/relative_*.npy
        relative.py --check    regenerate in memory, compare with the committed files
                               (exit 1 on any mismatch or missing file)
"""
import sys

import _golden  # exits 77 (skip) when numpy is missing
import numpy as np

PREFIX = "relative_"


# ----------------------------------------------------------------------------- common
def softmax_rows(s, allowed):
    """Softmax over allowed entries of each row; a row with nothing allowed is all zero."""
    out = np.zeros_like(s)
    for i in range(s.shape[0]):
        idx = np.nonzero(allowed[i])[0]
        if idx.size == 0:
            continue
        row = s[i, idx]
        e = np.exp(row - row.max())
        out[i, idx] = e / e.sum()
    return out


def allowed_mask(lq, lk, causal, q_offset):
    """allowed[i, j]: key j visible to query i (absolute position q_offset + i)."""
    a = np.ones((lq, lk), dtype=bool)
    if causal:
        for i in range(lq):
            for j in range(lk):
                a[i, j] = j <= q_offset + i
    return a


def softmax_backward(alpha, dalpha):
    """dS from dAlpha for a row softmax (rows of zeros stay zero)."""
    return alpha * (dalpha - (alpha * dalpha).sum(axis=1, keepdims=True))


# ----------------------------------------------------------------------------- Shaw
def shaw_row(i, j, q_offset, left, right):
    """Table row of key j for query i: clip(j - (q_offset + i), -left, right) + left."""
    rel = j - (q_offset + i)
    return max(-left, min(right, rel)) + left


def shaw_forward(q, k, v, ak, av, left, right, scale, causal, q_offset):
    lq, lk = q.shape[0], k.shape[0]
    s = np.zeros((lq, lk))
    for i in range(lq):
        for j in range(lk):
            r = shaw_row(i, j, q_offset, left, right)
            s[i, j] = scale * np.dot(q[i], k[j] + ak[r])  # eq. (4)
    alpha = softmax_rows(s, allowed_mask(lq, lk, causal, q_offset))
    out = np.zeros((lq, v.shape[1]))
    for i in range(lq):
        for j in range(lk):
            r = shaw_row(i, j, q_offset, left, right)
            out[i] += alpha[i, j] * (v[j] + av[r])  # eq. (3)
    return out, alpha


def shaw_backward(q, k, v, ak, av, left, right, scale, causal, q_offset, dout):
    """Gradients of sum(dout * out) w.r.t. q, k, v, ak, av."""
    _, alpha = shaw_forward(q, k, v, ak, av, left, right, scale, causal, q_offset)
    lq, lk = q.shape[0], k.shape[0]
    dalpha = np.zeros((lq, lk))
    dv = np.zeros_like(v)
    dav = np.zeros_like(av)
    for i in range(lq):
        for j in range(lk):
            r = shaw_row(i, j, q_offset, left, right)
            dalpha[i, j] = np.dot(dout[i], v[j] + av[r])
            dv[j] += alpha[i, j] * dout[i]
            dav[r] += alpha[i, j] * dout[i]
    ds = softmax_backward(alpha, dalpha)
    dq = np.zeros_like(q)
    dk = np.zeros_like(k)
    dak = np.zeros_like(ak)
    for i in range(lq):
        for j in range(lk):
            r = shaw_row(i, j, q_offset, left, right)
            dq[i] += scale * ds[i, j] * (k[j] + ak[r])
            dk[j] += scale * ds[i, j] * q[i]
            dak[r] += scale * ds[i, j] * q[i]
    return dq, dk, dv, dak, dav


# ----------------------------------------------------------------------------- Transformer-XL
def txl_sinusoid(distances, d_r):
    """R_k = [sin(k * inv_freq), cos(k * inv_freq)], inv_freq_t = 10000^(-2t/d_r)."""
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, d_r, 2, dtype=np.float64) / d_r))
    ang = np.outer(np.asarray(distances, dtype=np.float64), inv_freq)
    return np.concatenate([_golden.sin(ang), _golden.cos(ang)], axis=1)


def txl_forward(q, k, v, u, vb, w_r, d_r, scale, causal, q_offset):
    """One head. q [Lq, d], k [Lk, d], v [Lk, dv], u, vb [d], w_r [d_r, d] (or None: R used
    directly, d_r = d). Terms (a)-(d) are summed one by one, as in the paper."""
    lq, lk = q.shape[0], k.shape[0]
    s = np.zeros((lq, lk))
    for i in range(lq):
        for j in range(lk):
            dist = (q_offset + i) - j
            r = txl_sinusoid([dist], d_r)[0]
            p = r @ w_r if w_r is not None else r
            term_a = np.dot(q[i], k[j])
            term_b = np.dot(q[i], p)
            term_c = np.dot(u, k[j])
            term_d = np.dot(vb, p)
            s[i, j] = scale * (term_a + term_b + term_c + term_d)
    alpha = softmax_rows(s, allowed_mask(lq, lk, causal, q_offset))
    return alpha @ v, alpha


def txl_backward(q, k, v, u, vb, w_r, d_r, scale, causal, q_offset, dout):
    """Gradients of sum(dout * out) w.r.t. q, k, v, u, v-bias, w_r."""
    _, alpha = txl_forward(q, k, v, u, vb, w_r, d_r, scale, causal, q_offset)
    lq, lk = q.shape[0], k.shape[0]
    dalpha = dout @ v.T
    dv = alpha.T @ dout
    ds = softmax_backward(alpha, dalpha)
    dq = np.zeros_like(q)
    dk = np.zeros_like(k)
    du = np.zeros_like(u)
    dvb = np.zeros_like(vb)
    dw = np.zeros_like(w_r) if w_r is not None else None
    for i in range(lq):
        for j in range(lk):
            dist = (q_offset + i) - j
            r = txl_sinusoid([dist], d_r)[0]
            p = r @ w_r if w_r is not None else r
            g = scale * ds[i, j]
            dq[i] += g * (k[j] + p)
            dk[j] += g * (q[i] + u)
            du += g * k[j]
            dvb += g * p
            if w_r is not None:
                dw += g * np.outer(r, q[i] + vb)
    return dq, dk, dv, du, dvb, dw


# ----------------------------------------------------------------------------- FD check
def fd_check(fun, args, grads, names, eps=1e-6, tol=1e-7):
    """Central differences of sum(dout * fun(args)) against the hand-written gradients."""
    for name, idx, g in zip(names, range(len(args)), grads):
        if g is None:
            continue
        x = args[idx]
        num = np.zeros_like(x)
        it = np.nditer(x, flags=["multi_index"])
        for _ in it:
            m = it.multi_index
            old = x[m]
            x[m] = old + eps
            fp = fun(*args)
            x[m] = old - eps
            fm = fun(*args)
            x[m] = old
            num[m] = (fp - fm) / (2 * eps)
        err = np.max(np.abs(num - g)) if g.size else 0.0
        if err > tol:
            raise AssertionError("gradient %s disagrees with finite differences: %g" % (name, err))


# ----------------------------------------------------------------------------- cases
def make_all():
    out = {}
    rng = np.random.default_rng(20180306)

    # Shaw, symmetric clip k = 2, bidirectional, Lq = Lk = 7, d = 4, dv = 3.
    # Shaw, asymmetric left = 3, right = 1, causal, q_offset = 2, Lq = 5, Lk = 7.
    shaw_cases = [
        ("shaw_sym", 7, 7, 4, 3, 2, 2, False, 0),
        ("shaw_asym", 5, 7, 4, 3, 3, 1, True, 2),
    ]
    for name, lq, lk, d, dv, left, right, causal, q_offset in shaw_cases:
        q = rng.standard_normal((lq, d))
        k = rng.standard_normal((lk, d))
        v = rng.standard_normal((lk, dv))
        ak = rng.standard_normal((left + right + 1, d))
        av = rng.standard_normal((left + right + 1, dv))
        dout = rng.standard_normal((lq, dv))
        scale = 1.0 / np.sqrt(d)
        o, alpha = shaw_forward(q, k, v, ak, av, left, right, scale, causal, q_offset)
        grads = shaw_backward(q, k, v, ak, av, left, right, scale, causal, q_offset, dout)

        def loss(q_, k_, v_, ak_, av_):
            return float(np.sum(dout * shaw_forward(q_, k_, v_, ak_, av_, left, right, scale,
                                                     causal, q_offset)[0]))

        fd_check(loss, [q, k, v, ak, av], grads, ["dq", "dk", "dv", "dak", "dav"])
        for key, val in dict(q=q, k=k, v=v, ak=ak, av=av, dout=dout, out=o, weights=alpha,
                             dq=grads[0], dk=grads[1], dv=grads[2], dak=grads[3],
                             dav=grads[4]).items():
            out["%s_%s" % (name, key)] = val

    # Shaw clip distance table rows for relative distances -6..6 (k = 2 and left 3 / right 1).
    out["shaw_rows"] = np.array(
        [[r, max(-2, min(2, r)) + 2, max(-3, min(1, r)) + 3] for r in range(-6, 7)],
        dtype=np.int64)

    # Transformer-XL sinusoid R for distances -5..12, d_R = 8.
    out["txl_r"] = txl_sinusoid(np.arange(-5, 13), 8)

    # Transformer-XL, 2 heads, d_head = 4, d_model (= d_R) = 6, memory 3 + segment 4, causal,
    # with W_R [d_R, H * d_head]; and a bidirectional single head without W_R (d_R = d).
    h, dh, d_r, mlen, lq = 2, 4, 6, 3, 4
    lk = mlen + lq
    q = rng.standard_normal((lq, h * dh))
    k = rng.standard_normal((lk, h * dh))
    v = rng.standard_normal((lk, h * dh))
    u = rng.standard_normal((h, dh))
    vb = rng.standard_normal((h, dh))
    w_r = rng.standard_normal((d_r, h * dh)) * 0.5
    dout = rng.standard_normal((lq, h * dh))
    scale = 1.0 / np.sqrt(dh)
    o = np.zeros((lq, h * dh))
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    du, dvb, dw = np.zeros_like(u), np.zeros_like(vb), np.zeros_like(w_r)
    for hh in range(h):
        c = slice(hh * dh, (hh + 1) * dh)
        args = [q[:, c].copy(), k[:, c].copy(), v[:, c].copy(), u[hh].copy(), vb[hh].copy(),
                w_r[:, c].copy()]
        oh, _ = txl_forward(*args, d_r, scale, True, mlen)
        o[:, c] = oh
        g = txl_backward(*args, d_r, scale, True, mlen, dout[:, c])

        def loss(q_, k_, v_, u_, vb_, w_, c=c):
            return float(np.sum(dout[:, c] * txl_forward(q_, k_, v_, u_, vb_, w_, d_r, scale,
                                                          True, mlen)[0]))

        fd_check(loss, args, g, ["dq", "dk", "dv", "du", "dv_bias", "dw_r"])
        dq[:, c], dk[:, c], dv[:, c] = g[0], g[1], g[2]
        du[hh], dvb[hh], dw[:, c] = g[3], g[4], g[5]
    for key, val in dict(q=q, k=k, v=v, u=u, vbias=vb, w_r=w_r, dout=dout, out=o, dq=dq,
                         dk=dk, dv=dv, du=du, dvbias=dvb, dw_r=dw).items():
        out["txl_mem_%s" % key] = val

    lq = lk = 5
    d = 4
    q = rng.standard_normal((lq, d))
    k = rng.standard_normal((lk, d))
    v = rng.standard_normal((lk, 3))
    u = rng.standard_normal(d)
    vb = rng.standard_normal(d)
    dout = rng.standard_normal((lq, 3))
    scale = 1.0 / np.sqrt(d)
    o, alpha = txl_forward(q, k, v, u, vb, None, d, scale, False, 0)
    g = txl_backward(q, k, v, u, vb, None, d, scale, False, 0, dout)

    def loss_bi(q_, k_, v_, u_, vb_):
        return float(np.sum(dout * txl_forward(q_, k_, v_, u_, vb_, None, d, scale, False,
                                                0)[0]))

    fd_check(loss_bi, [q, k, v, u, vb], g[:5], ["dq", "dk", "dv", "du", "dv_bias"])
    for key, val in dict(q=q, k=k, v=v, u=u[None, :], vbias=vb[None, :], dout=dout, out=o,
                         weights=alpha, dq=g[0], dk=g[1], dv=g[2], du=g[3][None, :],
                         dvbias=g[4][None, :]).items():
        out["txl_bi_%s" % key] = val
    return out


def main():
    return _golden.main("relative.py", _golden.npy_files(PREFIX, make_all()), rtol=1e-12, atol=1e-12)


if __name__ == "__main__":
    sys.exit(main())
