#!/usr/bin/python3
"""posenc's CUDA kernels next to PyTorch on the same GPU, in one run (scripts/gpu_check.sh).

    python3 bench/compare_torch_cuda.py [--posenc-json DIR] [--reps 30]

PyTorch side, timed here with CUDA events (median of --reps calls after a warm-up):

  copy            dst.copy_(src) of q and k: the bandwidth every ratio is written against
  RoPE (HF)       q, k [1, 32, 16384, 128] float32 and bfloat16: q*cos + rotate_half(q)*sin
                  (transformers' apply_rotary_pos_emb, cos/sin precomputed), eager and under
                  torch.compile; bytes = q and k read and written once
  sinusoid table  the PyTorch tutorial's PositionalEncoding table [65536, 1024] float32:
                  arange, exp, sin and cos into even and odd columns; G elements/s

posenc side: the JSON files bench_cuda_*.json that gpu_check.sh wrote into DIR (Google
Benchmark, CUDA-event manual time). For each posenc RoPE benchmark the table shows its TB/s,
its ratio to its own same-run copy baseline (vs_baseline) and its speed-up over torch eager
and torch.compile on the same dtype. Exits 77 when torch or a CUDA device is missing.
"""

import argparse
import glob
import json
import math
import os
import statistics
import sys

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
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "bench_cuda_*.json"))):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        for b in data.get("benchmarks", []):
            if b.get("error_occurred") or b.get("run_type") == "aggregate":
                continue
            rows.append((os.path.basename(path)[:-5], b["name"], b.get("TB/s"), b.get("vs_baseline")))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posenc-json", default="", help="folder of bench_cuda_*.json")
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    print("GPU: %s, torch %s" % (torch.cuda.get_device_name(0), torch.__version__))
    t = torch_figures(args.reps)
    print("\nPyTorch (same run):")
    for (what, dtype), v in sorted(t.items()):
        unit = "G elements/s" if what == "sinusoid_table" else "TB/s"
        scale = 1e-9 if what == "sinusoid_table" else 1e-12
        print("  %-16s %-9s %8.3f %s" % (what, dtype, v * scale, unit))
    if not args.posenc_json:
        return 0
    rows = posenc_figures(args.posenc_json)
    if not rows:
        print("\nno posenc benchmark JSON in %s" % args.posenc_json)
        return 0
    print("\nposenc (bench JSON) against PyTorch:")
    print("  %-58s %8s %9s %9s %9s" % ("benchmark", "TB/s", "vs copy", "vs eager", "vs compile"))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
