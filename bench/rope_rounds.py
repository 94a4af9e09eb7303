#!/usr/bin/env python3
"""RoPE q + k in place against the read-modify-write pass, each row in its own process.

    python3 bench/rope_rounds.py BENCH_ROPE [ROUNDS] [THREADS]

bench_rope runs its rows in one fixed order, and on a shared host a row that runs later
in the process can come out several per cent slower than the same code run first (the
interleaved rows after the half rows measured 0.83-0.88x of them that way, 0.87-0.93x
each in a process of its own). Here each round runs every `rope_qk` row of THREADS
threads in a separate process beside `rmw_qk` (which runs first in it), the rows in
forward order in odd rounds and backward in even ones, and takes rope / RMW speed per
process. Prints the median and range of that ratio per row over the rounds, and the
interleaved pairing's median over the half pairing's (cached, on the fly): issue 27's
targets (>= 0.9x the RMW pass, interleaved within 10 % of half).
"""
import json
import statistics
import subprocess
import sys

ROWS = ["half_cached", "half_on_the_fly", "interleaved_cached", "interleaved_on_the_fly"]


def ratio(binary, row, threads):
    filt = f"^rmw_qk/{threads}/|^rope_qk/{row}/{threads}/"
    out = subprocess.run([binary, f"--benchmark_filter={filt}", "--benchmark_min_time=0.4",
                          "--benchmark_format=json"], capture_output=True, text=True,
                         check=True).stdout
    times = {b["name"].split("/")[0]: b["real_time"] for b in json.loads(out)["benchmarks"]}
    return times["rmw_qk"] / times["rope_qk"]


def main():
    if len(sys.argv) not in (2, 3, 4):
        sys.exit(__doc__)
    binary = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    threads = sys.argv[3] if len(sys.argv) > 3 else "1"
    got = {r: [] for r in ROWS}
    for i in range(rounds):
        for row in (ROWS if i % 2 == 0 else ROWS[::-1]):
            got[row].append(ratio(binary, row, threads))
    med = {r: statistics.median(v) for r, v in got.items()}
    for r in ROWS:
        print(f"{r:24s} {threads} thread(s): {med[r]:.3f} of the RMW pass "
              f"({min(got[r]):.3f}-{max(got[r]):.3f})")
    print(f"interleaved / half: cached {med['interleaved_cached'] / med['half_cached']:.3f}, "
          f"on the fly {med['interleaved_on_the_fly'] / med['half_on_the_fly']:.3f}")


if __name__ == "__main__":
    main()
