#!/usr/bin/python3
"""posenc's CUDA kernels next to PyTorch on the same GPU, in one run (scripts/gpu_check.sh).

    python3 bench/compare_torch_cuda.py [--posenc-json DIR] [--reps 30] [--time-budget 220]

PyTorch side, timed here with CUDA events (median of --reps calls after a warm-up):

  copy            dst.copy_(src) of q and k: the bandwidth every ratio is written against
  RoPE (HF)       q, k [1, 32, 16384, 128] float32 and bfloat16: q*cos + rotate_half(q)*sin
                  (transformers' apply_rotary_pos_emb, cos/sin precomputed), eager and under
                  torch.compile; bytes = q and k read and written once
  sinusoid table  the PyTorch tutorial's PositionalEncoding table [65536, 1024] float32:
                  arange, exp, sin and cos into even and odd columns; G elements/s

  attention       (rows of bench_cuda_flash, issue 24) inputs [B, H, N, d], H = 32,
                  B = 16384 / N, TFLOP/s = 4·B·H·N²·d (halved when causal) / time:
                  - scaled_dot_product_attention with each backend forced (sdpa_kernel):
                    FLASH_ATTENTION and CUDNN_ATTENTION for bf16/fp16, EFFICIENT_ATTENTION
                    for float32, at every prefill shape posenc measured (or the default set)
                  - FlexAttention under torch.compile, causal (block mask), bf16, d 128,
                    N 4096: no score_mod, ALiBi as a score_mod, a T5 bucketed table (32
                    buckets, max distance 128, unidirectional) as a score_mod
                  - decode: SDPA with enable_gqa=True (torch's own backend choice), 32/8
                    heads, d 128, bf16 cache, 1/4/8 queries (no mask) against 16k and 128k
                    keys; TB/s of the unique K and V bytes
                  Each piece is guarded: a missing feature or an unsupported backend prints
                  one line and the rest goes on. --time-budget stops starting new pieces.

posenc side: the JSON files bench_cuda_*.json that gpu_check.sh wrote into DIR (Google
Benchmark, CUDA-event manual time). For each posenc RoPE benchmark the table shows its TB/s,
its ratio to its own same-run copy baseline (vs_baseline) and its speed-up over torch eager
and torch.compile on the same dtype. For each bench_cuda_flash row a second table shows its
figure, the ratio the issue's goal is written in and whether it is met: prefill bf16/fp16
>= 0.7x torch's flash backend, float32 >= 1.0x torch (EFFICIENT_ATTENTION), position
variants >= 0.85x posenc's own no-position kernel (vs_none), decode >= 0.85x the copy at
128k keys and >= 0.7x at 16k (vs_copy); with cuBLAS (vs_cublas), cuDNN, FlexAttention and
torch's decode beside it. Exits 77 when torch or a CUDA device is missing.
"""

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time
import warnings

try:
    import torch
except ImportError:
    print("compare_torch_cuda: torch is not importable: skipped")
    sys.exit(77)
if not torch.cuda.is_available():
    print("compare_torch_cuda: no CUDA device: skipped")
    sys.exit(77)

B, H, L, D = 1, 32, 16384, 128


def cuda_seconds(fn, reps):
    """Median seconds per call of fn, CUDA events, after two warm-up calls."""
    fn()
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    return statistics.median(times)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_rope(q, k, cos, sin):
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rope_tables(dtype):
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, D, 2, device="cuda", dtype=torch.float32) / D))
    t = torch.arange(L, device="cuda", dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[None, None].to(dtype), emb.sin()[None, None].to(dtype)


def tutorial_table(max_len=65536, d=1024):
    position = torch.arange(max_len, device="cuda").unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2, device="cuda") * (-math.log(10000.0) / d))
    pe = torch.zeros(max_len, d, device="cuda")
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def torch_figures(reps):
    out = {}
    for name, dtype in (("float", torch.float32), ("bfloat16", torch.bfloat16)):
        q = torch.randn(B, H, L, D, device="cuda", dtype=dtype)
        k = torch.randn(B, H, L, D, device="cuda", dtype=dtype)
        cos, sin = rope_tables(dtype)
        moved = 4 * q.numel() * q.element_size()  # q and k, read + write
        dq, dk = torch.empty_like(q), torch.empty_like(k)

        def copy():
            dq.copy_(q)
            dk.copy_(k)

        out[("copy", name)] = moved / cuda_seconds(copy, reps)
        out[("eager", name)] = moved / cuda_seconds(lambda: hf_rope(q, k, cos, sin), reps)
        try:
            compiled = torch.compile(hf_rope)
            out[("compile", name)] = moved / cuda_seconds(lambda: compiled(q, k, cos, sin), reps)
        except Exception as e:  # no compiler toolchain for inductor: say so, go on
            print("torch.compile unavailable (%s): %s" % (name, str(e).splitlines()[0]))
        del q, k, dq, dk
    s = cuda_seconds(tutorial_table, reps)
    out[("sinusoid_table", "float")] = 65536 * 1024 / s
    return out


def posenc_figures(folder):
    """(binary, name, TB/s, vs_baseline) of every bandwidth benchmark (not the flash rows)."""
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "bench_cuda_*.json"))):
        if os.path.basename(path) == "bench_cuda_flash.json":
            continue
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for b in data.get("benchmarks", []):
            if b.get("error_occurred") or b.get("run_type") == "aggregate":
                continue
            rows.append((os.path.basename(path)[:-5], b["name"], b.get("TB/s"), b.get("vs_baseline")))
    return rows


# ---- attention (bench_cuda_flash's rows) --------------------------------------------------

HEADS, TOKENS = 32, 16384  # H and B·N of every prefill row
DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}


def default_prefill():
    """bench_cuda_flash's default prefill rows: (type, N, d, causal)."""
    rows = []
    for n in (1024, 4096, 16384):
        for d in (64, 128):
            for causal in (False, True):
                if n < 16384 or (d == 128 and causal):
                    rows.append(("bf16", n, d, causal))
    rows += [("bf16", 4096, d, True) for d in (80, 96)]
    rows.append(("f16", 4096, 128, True))
    rows += [("f32", n, d, c) for n in (1024, 4096) for d in (64, 128) for c in (False, True)]
    return rows


def attention_flops(n, d, causal):
    f = 4.0 * (TOKENS // n) * HEADS * n * n * d
    return f / 2 if causal else f


def parse_name(name):
    """'BM_flash_prefill/bf16/N:4096/d:128/causal:1/iterations:3/manual_time' ->
    ('prefill', 'bf16', {'N': '4096', 'd': '128', 'causal': '1', ...})"""
    parts = name.split("/")
    kind = parts[0][len("BM_flash_"):] if parts[0].startswith("BM_flash_") else parts[0]
    fields = dict(p.split(":", 1) for p in parts[1:] if ":" in p)
    return kind, parts[1] if len(parts) > 1 else "", fields


def flash_rows(folder):
    """bench_cuda_flash's rows from its JSON: dicts with kind, type, fields, counters (the
    rows that ran) or error (the message of a skipped row)."""
    path = os.path.join(folder, "bench_cuda_flash.json")
    if not folder or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    rows = []
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        kind, dtype, fields = parse_name(b["name"])
        row = {"name": b["name"], "kind": kind, "type": dtype, "fields": fields}
        if b.get("error_occurred"):
            row["error"] = b.get("error_message", "skipped")
        for key in ("TFLOP/s", "vs_cublas", "vs_none", "TB/s", "vs_copy", "copy_TB/s"):
            if key in b:
                row[key] = b[key]
        rows.append(row)
    return rows


def first_line(e):
    text = str(e).strip().splitlines()
    return "%s: %s" % (type(e).__name__, text[0] if text else "")


class Budget:
    """Stops starting new torch measurements after `seconds` (the run's time is short)."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self, what):
        if time.monotonic() < self.end:
            return True
        print("  %s: skipped (time budget spent)" % what)
        return False


def sdpa_figures(prefill, reps, budget):
    """{("sdpa", backend, type, N, d, causal): TFLOP/s} for every prefill shape."""
    out = {}
    try:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as e:  # an old torch: no sdpa_kernel
        print("  SDPA backends unavailable: %s" % first_line(e))
        return out
    for dtype_name, n, d, causal in prefill:
        what = "SDPA %s N %d d %d%s" % (dtype_name, n, d, " causal" if causal else "")
        if not budget.left(what):
            break
        dtype = getattr(torch, DTYPES[dtype_name])
        b = TOKENS // n
        try:
            q, k, v = (torch.randn(b, HEADS, n, d, device="cuda", dtype=dtype) for _ in range(3))
        except Exception as e:
            print("  %s: inputs: %s" % (what, first_line(e)))
            continue
        backends = (("efficient", "EFFICIENT_ATTENTION"),) if dtype_name == "f32" else (
            ("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"))
        for label, backend_name in backends:
            backend = getattr(SDPBackend, backend_name, None)
            if backend is None:
                print("  %s %s: SDPBackend.%s missing in this torch" % (what, label, backend_name))
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with sdpa_kernel([backend]):
                        s = cuda_seconds(
                            lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                            reps)
                out[("sdpa", label, dtype_name, n, d, causal)] = (
                    attention_flops(n, d, causal) / s)
            except Exception as e:  # the backend does not take these inputs here
                print("  %s %s: %s" % (what, label, first_line(e)))
        del q, k, v
        torch.cuda.empty_cache()
    return out


def t5_bucket(n, num_buckets=32, max_distance=128):
    """T5's unidirectional bucket of the distance n = i - j >= 0 (HF's
    _relative_position_bucket with bidirectional=False), on int tensors."""
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(n.clamp(min=1).float() / max_exact)
                         / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.int32)
    large = large.clamp(max=num_buckets - 1)
    return torch.where(n < max_exact, n, large)


def flex_figures(reps, budget):
    """{("flex", variant): TFLOP/s}: FlexAttention under torch.compile, causal, bf16,
    [4, 32, 4096, 128]."""
    out = {}
    n, d = 4096, 128
    b = TOKENS // n
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except Exception as e:
        print("  FlexAttention unavailable: %s" % first_line(e))
        return out
    if not budget.left("FlexAttention"):
        return out
    try:
        q, k, v = (torch.randn(b, HEADS, n, d, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        block_mask = create_block_mask(lambda b_, h, q_idx, kv_idx: q_idx >= kv_idx,
                                       None, None, n, n, device="cuda")
        flex = torch.compile(flex_attention)
    except Exception as e:
        print("  FlexAttention setup: %s" % first_line(e))
        return out
    slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / HEADS) for h in range(HEADS)],
                          device="cuda", dtype=torch.float32)
    table = torch.empty(32, HEADS, device="cuda", dtype=torch.float32).uniform_(-2.0, 2.0)

    def alibi(score, b_, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    def t5(score, b_, h, q_idx, kv_idx):
        return score + table[t5_bucket((q_idx - kv_idx).clamp(min=0)), h]

    for variant, mod in (("none", None), ("alibi", alibi), ("t5", t5)):
        if not budget.left("FlexAttention " + variant):
            break
        try:
            s = cuda_seconds(lambda: flex(q, k, v, score_mod=mod, block_mask=block_mask), reps)
            out[("flex", variant)] = attention_flops(n, d, True) / s
        except Exception as e:
            print("  FlexAttention %s: %s" % (variant, first_line(e)))
    del q, k, v
    torch.cuda.empty_cache()
    return out


def decode_figures(reps, budget):
    """{("decode", Lq, Lk): unique K+V bytes/s} of SDPA with enable_gqa=True, and
    {("decode_copy", Lk): bytes/s} of a copy of the same K and V (read + write)."""
    out = {}
    import torch.nn.functional as F
    for lk in (16384, 131072):
        if not budget.left("decode %d keys" % lk):
            break
        kv_bytes = 2 * lk * 8 * 128 * 2
        try:
            k, v = (torch.randn(1, 8, lk, 128, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2))
            dk, dv = torch.empty_like(k), torch.empty_like(v)

            def copy():
                dk.copy_(k)
                dv.copy_(v)

            out[("decode_copy", lk)] = 2 * kv_bytes / cuda_seconds(copy, reps)
        except Exception as e:
            print("  decode %d keys: %s" % (lk, first_line(e)))
            continue
        for lq in (1, 4, 8):
            try:
                q = torch.randn(1, 32, lq, 128, device="cuda", dtype=torch.bfloat16)
                s = cuda_seconds(
                    lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), reps)
                out[("decode", lq, lk)] = kv_bytes / s
            except Exception as e:  # enable_gqa needs torch >= 2.5
                print("  decode %d queries, %d keys: %s" % (lq, lk, first_line(e)))
        del k, v, dk, dv
        torch.cuda.empty_cache()
    return out


def attention_figures(rows, reps, budget):
    prefill = sorted({(r["type"], int(r["fields"]["N"]), int(r["fields"]["d"]),
                       r["fields"].get("causal") == "1")
                      for r in rows if r["kind"] == "prefill"}) or default_prefill()
    t = {}
    t.update(sdpa_figures(prefill, max(3, reps // 3), budget))
    t.update(decode_figures(reps, budget))
    t.update(flex_figures(max(3, reps // 3), budget))
    return t


def print_torch_attention(t):
    print("\nPyTorch attention (same run; TFLOP/s = 4·B·H·N²·d, halved when causal):")
    for key in sorted(k for k in t if k[0] == "sdpa"):
        _, backend, dtype, n, d, causal = key
        print("  SDPA %-9s %-4s N %5d d %3d %-6s %8.1f TFLOP/s" % (
            backend, dtype, n, d, "causal" if causal else "", t[key] * 1e-12))
    for key in sorted(k for k in t if k[0] == "flex"):
        print("  FlexAttention causal bf16 N 4096 d 128 %-5s %8.1f TFLOP/s" % (
            key[1], t[key] * 1e-12))
    for key in sorted(k for k in t if k[0] in ("decode", "decode_copy")):
        if key[0] == "decode_copy":
            print("  copy of K+V, %6d keys (read + write)        %8.3f TB/s" % (
                key[1], t[key] * 1e-12))
        else:
            print("  decode SDPA enable_gqa %d queries, %6d keys  %8.3f TB/s (unique K+V)" % (
                key[1], key[2], t[key] * 1e-12))


def ratio(a, b):
    return a / b if a and b else None


def fmt(x, spec=None):
    if x is None:
        return "-"
    return (spec or ("%.2fx" if x >= 0.1 else "%.3fx")) % x


def print_flash_table(rows, t):
    """One line per bench_cuda_flash row: its figure, the goal's ratio, the others."""
    print("\nposenc flash attention (bench_cuda_flash) against its goals and PyTorch:")
    print("  %-46s %9s %8s %6s %4s  %s" % ("row", "posenc", "ratio", "goal", "met", "beside"))
    flex_of = {"none": "none", "alibi": "alibi", "t5": "t5", "rope": "none"}
    for r in rows:
        f, kind, dtype = r["fields"], r["kind"], r["type"]
        if kind == "prefill":
            n, d, causal = int(f["N"]), int(f["d"]), f.get("causal") == "1"
            what = "prefill %s N %d d %d%s" % (dtype, n, d, " causal" if causal else "")
        elif kind == "position":
            what = "position %s (bf16 N 4096 d 128 causal)" % f.get("pos", "?")
        elif kind == "decode":
            what = "decode %s queries, %s keys (32/8, d 128)" % (f.get("Lq"), f.get("Lk"))
        else:
            continue
        if "error" in r:
            print("  %-46s skipped: %s" % (what, r["error"]))
            continue
        beside = []
        if kind == "prefill":
            mine = r.get("TFLOP/s")
            value = "%.1f TF/s" % mine if mine else "-"
            if dtype == "f32":
                ref, goal, ref_name = t.get(("sdpa", "efficient", dtype, n, d, causal)), 1.0, "eff"
            else:
                ref, goal, ref_name = t.get(("sdpa", "flash", dtype, n, d, causal)), 0.7, "flash"
                cudnn = t.get(("sdpa", "cudnn", dtype, n, d, causal))
                beside.append("vs cudnn %s" % fmt(ratio(mine and mine * 1e12, cudnn)))
            got = ratio(mine and mine * 1e12, ref)
            beside.insert(0, "torch %s %s" % (ref_name, fmt(ref and ref * 1e-12, "%.1f")))
            beside.append("vs cublas %s" % fmt(r.get("vs_cublas")))
        elif kind == "position":
            mine = r.get("TFLOP/s")
            value = "%.1f TF/s" % mine if mine else "-"
            got, goal = r.get("vs_none"), 0.85
            flex = t.get(("flex", flex_of.get(f.get("pos"), "none")))
            beside.append("vs flex %s %s" % (flex_of.get(f.get("pos"), "none"),
                                             fmt(ratio(mine and mine * 1e12, flex))))
        else:
            mine = r.get("TB/s")
            value = "%.3f TB/s" % mine if mine else "-"
            got, goal = r.get("vs_copy"), 0.85 if f.get("Lk") == "131072" else 0.7
            torch_bw = t.get(("decode", int(f.get("Lq", 0)), int(f.get("Lk", 0))))
            beside.append("vs torch gqa %s" % fmt(ratio(mine and mine * 1e12, torch_bw)))
        met = "-" if got is None else ("yes" if got >= goal else "no")
        print("  %-46s %9s %8s %6s %4s  %s" % (what, value, fmt(got), ">=%.2g" % goal, met,
                                             ", ".join(beside)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posenc-json", default="", help="folder of bench_cuda_*.json")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--time-budget", type=float, default=220.0,
                        help="seconds after which no new torch attention piece starts")
    args = parser.parse_args()
    budget = Budget(args.time_budget)
    print("GPU: %s, torch %s" % (torch.cuda.get_device_name(0), torch.__version__))
    t = torch_figures(args.reps)
    print("\nPyTorch (same run):")
    for (what, dtype), v in sorted(t.items()):
        unit = "G elements/s" if what == "sinusoid_table" else "TB/s"
        scale = 1e-9 if what == "sinusoid_table" else 1e-12
        print("  %-16s %-9s %8.3f %s" % (what, dtype, v * scale, unit))
    flash = flash_rows(args.posenc_json)
    print("\nPyTorch attention, measuring:")
    attention = attention_figures(flash, args.reps, budget)
    print_torch_attention(attention)
    if not args.posenc_json:
        return 0
    rows = posenc_figures(args.posenc_json)
    if not rows and not flash:
        print("\nno posenc benchmark JSON in %s" % args.posenc_json)
        return 0
    if rows:
        print("\nposenc (bench JSON) against PyTorch:")
        print("  %-58s %8s %9s %9s %9s" % ("benchmark", "TB/s", "vs copy", "vs eager",
                                           "vs compile"))
    for binary, name, tbs, vs in rows:
        eager = compile_ = ""
        if binary == "bench_cuda_rope" and tbs:
            dtype = "bfloat16" if "bfloat16" in name else "float"
            if ("eager", dtype) in t:
                eager = "%.2fx" % (tbs * 1e12 / t[("eager", dtype)])
            if ("compile", dtype) in t:
                compile_ = "%.2fx" % (tbs * 1e12 / t[("compile", dtype)])
        print("  %-58s %8s %9s %9s %9s" % (name[:58], "%.3f" % tbs if tbs else "-",
                                           "%.3f" % vs if vs else "-", eager, compile_))
    if flash:
        print_flash_table(flash, attention)
    else:
        print("\nno bench_cuda_flash.json in %s" % args.posenc_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
