#!/usr/bin/env python3
"""Independent float64 reference for posenc's RoPE frequencies and long-context scalings.

Written from the papers and the published formulas, never calling posenc. Every case
is a real model configuration (or a plain textbook one) and each golden file holds

    rope_scaling_<case>.npy = [attention_factor, inv_freq_0, ..., inv_freq_{r/2-1}]   float64

plus end-to-end cases rope_scaling_apply_<model>_{q,k,pos,q_rot,k_rot}.npy: random q, k
rows [L, D] of one head, their int64 positions, and the rows rotated the Hugging Face way
(x cos + rotate_half(x) sin, cos/sin scaled by the attention factor).

Formulas (r = rotary dim, i < r/2, theta_i = base^(2i/r), L = original context):

* RoPE, Su et al. 2021 (RoFormer) eq. 15:     w_i = 1 / theta_i
* linear position interpolation, Chen et al. 2023:  w_i = 1 / (s theta_i)
* NTK-aware (bloc97, 2023):   base' = base * alpha^(r/(r-2)), w_i = 1 / base'^(2i/r)
* dynamic NTK (Hugging Face "dynamic"): for a sequence of n > L tokens
      base' = base * (s n / L - (s - 1))^(r/(r-2)); n <= L keeps the plain base
* YaRN, Peng et al. 2023, sec. 3.2-3.4: correction dims
      d(b) = r ln(L / (2 pi b)) / (2 ln base), lo = floor d(beta_fast), hi = ceil d(beta_slow)
      (no floor/ceil when truncate is false), lo = max(lo, 0), hi = min(hi, r - 1);
      gamma_i = clip((i - lo) / (hi - lo), 0, 1) (hi += 0.001 when equal),
      w_i = (1 - e_i) / (s theta_i) + e_i / theta_i, e_i = (1 - gamma_i) * ext
      attention factor: 0.1 ln s + 1 (s > 1, else 1), or mscale(s, m)/mscale(s, m_all)
      with mscale(s, m) = 0.1 m ln s + 1 when both are given, or the override.
* Llama 3.1 (Meta's reference code): wavelength lambda_i = 2 pi theta_i;
      lambda < L/high: w unchanged; lambda > L/low: w / s;
      else  t = (L / lambda - low) / (high - low), w' = (1 - t) w / s + t w
* LongRoPE / Phi-3, Ding et al. 2024: w_i = 1 / (lambda_i theta_i) with lambda = long
      factors when n > L, short factors otherwise; attention factor
      sqrt(1 + ln(s) / ln(L)), s = max positions / L (1 when s <= 1).
* xPos, Sun et al. 2022: plain w_i, zeta_i = (2i/r + gamma) / (1 + gamma).

The llama.cpp / GGUF cases are computed the way ggml does it (theta_base * freq_scale
blended by the ext_factor ramp over per-pair freq_factors, attention factor = attn_factor
times ggml's own 1 + 0.1 ln(1/freq_scale) when ext_factor != 0) and this script asserts that
they equal the Hugging Face formulation of the same model before writing anything.

Usage:  rope_scaling.py            write tests/data/rope_scaling_*.npy
        rope_scaling.py --check    regenerate in memory, compare with the committed files
                                   (exit 1 on any mismatch or missing file)
"""
import math
import sys

import _golden  # exits 77 (skip) when numpy is missing
import numpy as np

PREFIX = "rope_scaling_"

# Phi-3-mini-128k-instruct (April 2024 release, rope_scaling type "su"; the same lists are in
# Phi-3-vision-128k-instruct's config.json): head dim 3072/32 = 96, 48 factors each.
PHI3_LONG = [
    1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547,
    1.2299998998641968, 1.2299998998641968, 1.2999999523162842, 1.4499999284744263,
    1.5999999046325684, 1.6499998569488525, 1.8999998569488525, 2.859999895095825,
    3.68999981880188, 5.419999599456787, 5.489999771118164, 5.489999771118164,
    9.09000015258789, 11.579999923706055, 15.65999984741211, 15.769999504089355,
    15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055,
    30.009998321533203, 32.35000228881836, 32.590003967285156, 35.56000518798828,
    39.95000457763672, 53.840003967285156, 56.20000457763672, 57.95000457763672,
    59.29000473022461, 59.77000427246094, 59.920005798339844, 61.190006256103516,
    61.96000671386719, 62.50000762939453, 63.3700065612793, 63.48000717163086,
    63.48000717163086, 63.66000747680664, 63.850006103515625, 64.08000946044922,
    64.760009765625, 64.80001068115234, 64.81001281738281, 64.81001281738281,
]
PHI3_SHORT = [
    1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.2500000000000002, 1.2500000000000002,
    1.4000000000000004, 1.4500000000000004, 1.5500000000000005, 1.8500000000000008,
    1.9000000000000008, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,
    2.1000000000000005, 2.1000000000000005, 2.2, 2.3499999999999996,
    2.3499999999999996, 2.3499999999999996, 2.3499999999999996, 2.3999999999999995,
    2.3999999999999995, 2.6499999999999986, 2.6999999999999984, 2.8999999999999977,
    2.9499999999999975, 3.049999999999997, 3.049999999999997, 3.049999999999997,
]


# ----------------------------------------------------------------------------- HF-style formulas
def theta(r, base, i):
    """base^(2i/r): the wavelength / (2 pi) of pair i."""
    return base ** (2.0 * i / r)


def plain(r, base):
    return [1.0 / theta(r, base, i) for i in range(r // 2)]


def linear(r, base, s):
    return [w / s for w in plain(r, base)]


def ntk(r, base, alpha):
    return plain(r, base * alpha ** (r / (r - 2.0)))


def dynamic(r, base, s, L, n):
    if n <= L:  # a shorter sequence never changes the base
        return plain(r, base)
    return plain(r, base * (s * n / L - (s - 1.0)) ** (r / (r - 2.0)))


def mscale_of(s, m=1.0):
    return 1.0 if s <= 1.0 else 0.1 * m * math.log(s) + 1.0


def yarn_dim(r, base, L, rotations):
    return r * math.log(L / (rotations * 2.0 * math.pi)) / (2.0 * math.log(base))


def yarn(r, base, s, L, beta_fast=32.0, beta_slow=1.0, truncate=True, mscale=None,
         mscale_all_dim=None, attention_factor=None, ext=1.0, freq_factors=None):
    lo = yarn_dim(r, base, L, beta_fast)
    hi = yarn_dim(r, base, L, beta_slow)
    if truncate:
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0.0), min(hi, r - 1.0)
    if lo == hi:
        hi += 0.001
    ws = []
    for i in range(r // 2):
        t = theta(r, base, i) * (freq_factors[i] if freq_factors else 1.0)
        gamma = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        e = (1.0 - gamma) * ext
        ws.append((1.0 / (s * t)) * (1.0 - e) + (1.0 / t) * e)
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = mscale_of(s, mscale) / mscale_of(s, mscale_all_dim)
        else:
            attention_factor = mscale_of(s)
    return ws, attention_factor


def llama3(r, base, s, L, low, high):
    out = []
    for w in plain(r, base):
        lam = 2.0 * math.pi / w
        if lam < L / high:
            out.append(w)
        elif lam > L / low:
            out.append(w / s)
        else:
            t = (L / lam - low) / (high - low)
            out.append((1.0 - t) * w / s + t * w)
    return out


def longrope(r, base, L, max_pos, short, long_, n, attention_factor=None):
    lam = long_ if n > L else short
    ws = [1.0 / (lam[i] * theta(r, base, i)) for i in range(r // 2)]
    if attention_factor is None:
        s = max_pos / L
        attention_factor = 1.0 if s <= 1.0 else math.sqrt(1.0 + math.log(s) / math.log(L))
    return ws, attention_factor


def xpos_zeta(r, gamma):
    return [(2.0 * i / r + gamma) / (1.0 + gamma) for i in range(r // 2)]


# ----------------------------------------------------------------------------- ggml-style
def ggml(n_dims, freq_base, freq_scale=1.0, ext_factor=0.0, attn_factor=1.0, beta_fast=32.0,
         beta_slow=1.0, n_ctx_orig=0, freq_factors=None):
    """Effective per-pair frequency of ggml's rope: theta = p * w_eff_i, cos/sin * mscale."""
    lo = math.floor(yarn_dim(n_dims, freq_base, n_ctx_orig, beta_fast)) if ext_factor else 0.0
    hi = math.ceil(yarn_dim(n_dims, freq_base, n_ctx_orig, beta_slow)) if ext_factor else 0.0
    lo, hi = max(0.0, lo), min(n_dims - 1.0, hi)
    ws = []
    for i in range(n_dims // 2):
        extrap = (freq_base ** (-2.0 * i / n_dims)) / (freq_factors[i] if freq_factors else 1.0)
        interp = freq_scale * extrap
        w = interp
        if ext_factor != 0.0:
            y = (i - lo) / max(0.001, hi - lo)
            mix = (1.0 - min(1.0, max(0.0, y))) * ext_factor
            w = interp * (1.0 - mix) + extrap * mix
        ws.append(w)
    mscale = attn_factor
    if ext_factor != 0.0:
        mscale *= 1.0 + 0.1 * math.log(1.0 / freq_scale)
    return ws, mscale


def llama3_freq_factors(r, base, s, L, low, high):
    """The per-pair divisors llama.cpp's converter stores as rope_freqs for Llama 3.1."""
    out = []
    for w in plain(r, base):
        lam = 2.0 * math.pi / w
        if lam < L / high:
            out.append(1.0)
        elif lam > L / low:
            out.append(s)
        else:
            t = (L / lam - low) / (high - low)
            out.append(1.0 / ((1.0 - t) / s + t))
    return out


def rotate_half_apply(x, positions, inv_freq, attention_factor):
    """Hugging Face's apply_rotary_pos_emb on one head: x cos + rotate_half(x) sin, where
    cos/sin = cos/sin of [n w, n w] (the frequencies repeated for both halves) times the
    attention factor; dims past r untouched."""
    r = 2 * len(inv_freq)
    out = x.copy()
    for t, n in enumerate(positions):
        ang = np.array([float(n) * w for w in inv_freq] * 2)
        cos = _golden.cos(ang) * attention_factor
        sin = _golden.sin(ang) * attention_factor
        xr = x[t, :r]
        rh = np.concatenate([-xr[r // 2:], xr[:r // 2]])
        out[t, :r] = xr * cos + rh * sin
    return out


def apply_case(out, name, packed, d, positions, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((len(positions), d))
    k = rng.standard_normal((len(positions), d))
    a, ws = float(packed[0]), [float(w) for w in packed[1:]]
    out["apply_%s_q" % name] = q
    out["apply_%s_k" % name] = k
    out["apply_%s_pos" % name] = np.array(positions, dtype=np.int64)
    out["apply_%s_q_rot" % name] = rotate_half_apply(q, positions, ws, a)
    out["apply_%s_k_rot" % name] = rotate_half_apply(k, positions, ws, a)


def pack(ws, attention_factor=1.0):
    return np.array([attention_factor] + list(ws), dtype=np.float64)


def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or not np.allclose(a, b, rtol=1e-14, atol=0.0):
        raise SystemExit("internal cross-check failed: " + what)


def make_all():
    out = {}
    # Llama-2 7B: d 128, base 1e4, no scaling.
    out["llama2_7b"] = pack(plain(128, 1e4))
    # Llama-3.1 8B: base 500000, llama3 factor 8, low 1, high 4, original 8192.
    out["llama31_8b"] = pack(llama3(128, 5e5, 8.0, 8192.0, 1.0, 4.0))
    # Qwen2-style YaRN: head dim 128, base 1e6, factor 4, original 32768.
    ws, a = yarn(128, 1e6, 4.0, 32768.0)
    out["qwen2_yarn"] = pack(ws, a)
    # gpt-oss style YaRN without truncation: head dim 64, base 150000, factor 32, original 4096.
    ws, a = yarn(64, 150000.0, 32.0, 4096.0, truncate=False)
    out["yarn_notrunc"] = pack(ws, a)
    # DeepSeek-V2-Lite style YaRN: rope dim 64, base 1e4, factor 40, original 4096,
    # mscale = mscale_all_dim = 0.707 (their ratio: attention factor 1).
    ws, a = yarn(64, 1e4, 40.0, 4096.0, mscale=0.707, mscale_all_dim=0.707)
    out["yarn_deepseek"] = pack(ws, a)
    # Ratio of different mscales, and an explicit attention_factor override.
    ws, a = yarn(64, 1e4, 16.0, 4096.0, mscale=1.0, mscale_all_dim=0.5)
    out["yarn_mscale_ratio"] = pack(ws, a)
    ws, a = yarn(128, 1e6, 4.0, 32768.0, attention_factor=1.25)
    out["yarn_override"] = pack(ws, a)
    # Phi-3-mini-128k: d 96, base 1e4, original 4096, max 131072.
    for tag, n in (("short", 4096), ("long", 4097)):
        ws, a = longrope(96, 1e4, 4096.0, 131072.0, PHI3_SHORT, PHI3_LONG, n)
        out["phi3_" + tag] = pack(ws, a)
    # Dynamic NTK, factor 2, original 4096, at several sequence lengths.
    for n in (1000, 4096, 4097, 8192, 16384, 100000):
        out["dynamic_%d" % n] = pack(dynamic(128, 1e4, 2.0, 4096.0, n))
    # Linear interpolation factor 4 (e.g. LongChat-style) and NTK-aware alpha 8.
    out["linear"] = pack(linear(128, 1e4, 4.0))
    out["ntk"] = pack(ntk(128, 1e4, 8.0))
    # Partial rotary (Pythia: 25% of 128) and GPT-J (64 of 256): plain frequencies of r.
    out["pythia"] = pack(plain(32, 1e4))
    out["gptj"] = pack(plain(64, 1e4))
    # xPos: plain frequencies, then zeta_i (gamma 0.4) in the same layout.
    out["xpos"] = pack(plain(128, 1e4))
    out["xpos_zeta"] = pack(xpos_zeta(128, 0.4))

    # GGUF / llama.cpp expressions of the same models (ggml's own formulation).
    ws, a = ggml(128, 1e6, freq_scale=0.25, ext_factor=1.0, attn_factor=1.0, n_ctx_orig=32768)
    same(ws, out["qwen2_yarn"][1:], "gguf qwen2 yarn inv_freq")
    same([a], out["qwen2_yarn"][:1], "gguf qwen2 yarn attention factor")
    out["gguf_qwen2_yarn"] = pack(ws, a)
    ff = llama3_freq_factors(128, 5e5, 8.0, 8192.0, 1.0, 4.0)
    ws, a = ggml(128, 5e5, freq_factors=ff)
    same(ws, out["llama31_8b"][1:], "gguf llama3 inv_freq")
    out["gguf_llama31_8b"] = pack(ws, a)
    out["gguf_llama31_8b_freq_factors"] = np.array(ff, dtype=np.float64)
    phi_attn = math.sqrt(1.0 + math.log(32.0) / math.log(4096.0))
    ws, a = ggml(96, 1e4, attn_factor=phi_attn, freq_factors=PHI3_LONG)
    same(ws, out["phi3_long"][1:], "gguf phi3 long inv_freq")
    out["gguf_phi3_long"] = pack(ws, a)
    ws, a = ggml(128, 1e4, freq_scale=0.25)
    same(ws, out["linear"][1:], "gguf linear inv_freq")
    out["gguf_linear"] = pack(ws, a)
    # Partial extrapolation blend (ext_factor 0.5) and a non-unit attn_factor: ggml only.
    ws, a = ggml(128, 1e4, freq_scale=0.125, ext_factor=0.5, attn_factor=0.9, n_ctx_orig=4096)
    out["gguf_yarn_half_ext"] = pack(ws, a)

    # End to end: q, k rows of one head rotated at scattered positions (half pairing).
    apply_case(out, "llama31_8b", out["llama31_8b"], 128, [0, 1, 2, 8191, 8192, 65535, 131071], 31)
    apply_case(out, "qwen2_yarn", out["qwen2_yarn"], 128, [0, 5, 32767, 32768, 70000, 131071], 2)
    apply_case(out, "phi3_long", out["phi3_long"], 96, [0, 1, 4096, 50000, 131071], 3)
    apply_case(out, "phi3_short", out["phi3_short"], 96, [0, 1, 100, 4095], 4)
    return out


def main():
    return _golden.main("rope_scaling.py", _golden.npy_files(PREFIX, make_all()), rtol=1e-13,
                        atol=0.0)


if __name__ == "__main__":
    sys.exit(main())
