#!/usr/bin/python3
"""posenc next to PyTorch on this machine: the same operations, float32, timed in one run.

    /usr/bin/python3 bench/compare_torch.py BUILD_DIR [--threads 1] [--quick]

posenc is timed by its own Google Benchmark binaries (BUILD_DIR/bench/bench_absolute,
bench_rope, bench_flash, run with --benchmark_format=json and a filter); PyTorch by
best-of-N timing of the equivalent torch code (with one thread, both sides are CPU time
of the running thread, so a shared machine's load does not skew the ratio):

  sinusoidal table   L = 32768, d = 512: angles pos * 10000^(-2i/d), sin and cos halves
  RoPE (HF style)    q, k [4096, 32, 128] in place semantics: x*cos + rotate_half(x)*sin,
                     cos/sin precomputed (cached), as transformers' apply_rotary_pos_emb
  attention          8 heads, N in {512, 2048}, d in {64, 128}, causal and not:
                     softmax(q kᵀ / sqrt(d) + mask) v as matmul + softmax + matmul

Prints, per operation, posenc's time, torch's time and the ratio posenc/torch (time;
< 1 means posenc is faster), plus posenc's own GFLOP/s or GB/s. Exits 77 (skipped) when
torch is not importable, 2 when a benchmark binary is missing.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

try:
    import torch
except ImportError:
    print("compare_torch: torch is not importable: skipped")
    sys.exit(77)


def posenc_times(binary, bench_filter, min_time):
    """Median time (seconds) of each benchmark matching the filter, by name: the time
    Google Benchmark reports (the benchmark thread's CPU time unless it uses real time)."""
    if not os.path.exists(binary):
        print("compare_torch: missing %s (build with -DPOSENC_BUILD_BENCHMARKS=ON)" % binary)
        sys.exit(2)
    cmd = [binary, "--benchmark_filter=" + bench_filter, "--benchmark_format=json",
           "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true",
           "--benchmark_min_time=%g" % min_time]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    res = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"]
        t = b["real_time"] if name.endswith("/real_time") else b["cpu_time"]
        res[name] = dict(seconds=t * scale[b["time_unit"]],
                         counters={k: v for k, v in b.items() if k in ("GFLOP/s", "per_thread",
                                                                       "bytes_per_second")})
    return res


def torch_time(fn, reps, clock):
    fn()  # warm-up
    best = math.inf
    for _ in range(reps):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best


def torch_sinusoidal(L, d):
    pos = torch.arange(L, dtype=torch.float32)[:, None]
    inv = torch.pow(10000.0, -torch.arange(0, d, 2, dtype=torch.float32) / d)[None, :]
    ang = pos * inv
    return torch.cat([torch.sin(ang), torch.cos(ang)], dim=1)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build", help="CMake build directory with the benchmarks built")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, N = 512 only")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    # One thread: this thread's CPU time, like Google Benchmark's default (steady on a shared,
    # oversubscribed machine); several: wall-clock time.
    clock = time.thread_time if a.threads == 1 else time.perf_counter
    reps = 2 if a.quick else 5
    min_time = 0.05 if a.quick else 0.2
    bench = os.path.join(a.build, "bench")
    rows = []

    # Sinusoidal table.
    p = posenc_times(os.path.join(bench, "bench_absolute"), "^bm_sinusoidal_table<float>/32768/512$", min_time)
    t = torch_time(lambda: torch_sinusoidal(32768, 512), reps, clock)
    for name, r in p.items():
        rows.append(("sinusoidal table L=32768 d=512", r["seconds"], t, r["counters"]))

    # HF-style RoPE on q and k [4096, 32, 128] (posenc: rope_qk, half pairing, cached).
    q = torch.rand(4096, 32, 128) * 2 - 1
    k = torch.rand(4096, 32, 128) * 2 - 1
    inv = 1.0 / (10000.0 ** (torch.arange(0, 128, 2, dtype=torch.float32) / 128))
    ang = torch.arange(4096, dtype=torch.float32)[:, None] * inv[None, :]
    emb = torch.cat((ang, ang), dim=-1)
    cos, sin = emb.cos()[:, None, :], emb.sin()[:, None, :]

    def rope():
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    p = posenc_times(os.path.join(bench, "bench_rope"), "^rope_qk/half_cached", min_time)
    t = torch_time(rope, reps, clock)
    for name, r in p.items():
        rows.append(("RoPE q,k [4096,32,128] half, cached", r["seconds"], t, r["counters"]))
    del q, k

    # Attention: 8 heads, matmul + softmax + matmul.
    sizes = [512] if a.quick else [512, 2048]
    p = posenc_times(os.path.join(bench, "bench_flash"), "^flash/(%s)/(64|128)/[01]/1$" %
                     "|".join(str(n) for n in sizes), min_time)
    for n in sizes:
        for d in (64, 128):
            qh = torch.rand(8, n, d) * 2 - 1
            kh = torch.rand(8, n, d) * 2 - 1
            vh = torch.rand(8, n, d) * 2 - 1
            mask = torch.full((n, n), float("-inf")).triu(1)
            for causal in (0, 1):
                def attn():
                    s = torch.matmul(qh, kh.transpose(1, 2)) * (1.0 / math.sqrt(d))
                    if causal:
                        s = s + mask
                    return torch.matmul(torch.softmax(s, dim=-1), vh)
                t = torch_time(attn, reps, clock)
                key = "flash/%d/%d/%d/1" % (n, d, causal)
                if key in p:
                    rows.append(("attention 8 heads N=%d d=%d%s" % (n, d, " causal" if causal else ""),
                                 p[key]["seconds"], t, p[key]["counters"]))

    print("CPU: %s; torch %s, %d thread(s); posenc: one thread" %
          (cpu_name(), torch.__version__, a.threads))
    print("%-42s %12s %12s %14s  %s" % ("operation", "posenc ms", "torch ms", "posenc/torch", "posenc figure"))
    for what, ps, ts, c in rows:
        fig = ""
        if "GFLOP/s" in c:
            fig = "%.1f GFLOP/s" % c["GFLOP/s"]
        elif "bytes_per_second" in c:
            fig = "%.1f GB/s" % (c["bytes_per_second"] * 1e-9)
        print("%-42s %12.3f %12.3f %14.2f  %s" % (what, ps * 1e3, ts * 1e3, ps / ts, fig))
    return 0


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
