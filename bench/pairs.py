#!/usr/bin/env python3
"""Paired A/B of two Google Benchmark binaries on a shared, noisy machine.

    python3 bench/pairs.py ROUNDS FILTER MIN_TIME OLD NEW [COUNTER]

Each round runs OLD and NEW back to back (OLD first in rounds 1, 3, 5, ..., NEW first in
the others, so neither always runs on the warmer or quieter side), with
--benchmark_filter=FILTER and --benchmark_min_time=MIN_TIME, and takes the ratio NEW / OLD
of COUNTER (default GFLOP/s; "real_time" compares times, inverted so that above 1 means
NEW is faster) for every row both report. Prints, per row, the median ratio over the rounds, its range, and
in how many rounds NEW was faster. Drifts between rounds (other tenants, clock) cancel in
each ratio, which medians of separate runs do not do.
"""
import json
import statistics
import subprocess
import sys


def run(binary, filt, min_time, counter):
    out = subprocess.run([binary, f"--benchmark_filter={filt}", f"--benchmark_min_time={min_time}",
                          "--benchmark_format=json"], capture_output=True, text=True, check=True).stdout
    rows = {}
    for b in json.loads(out)["benchmarks"]:
        if counter in b:
            rows[b["name"]] = 1.0 / b[counter] if counter == "real_time" else b[counter]
    return rows


def main():
    if len(sys.argv) not in (6, 7):
        sys.exit(__doc__)
    rounds, filt, min_time, old, new = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    counter = sys.argv[6] if len(sys.argv) == 7 else "GFLOP/s"
    ratios = {}
    for i in range(rounds):
        if i % 2 == 0:
            a = run(old, filt, min_time, counter)
            b = run(new, filt, min_time, counter)
        else:
            b = run(new, filt, min_time, counter)
            a = run(old, filt, min_time, counter)
        for name, value in a.items():
            if name in b and value > 0:
                ratios.setdefault(name, []).append(b[name] / value)
    for name, r in ratios.items():
        won = sum(x > 1.0 for x in r)
        print(f"{name:40s} new/old {statistics.median(r):.3f}  ({min(r):.3f}-{max(r):.3f})  new faster in {won}/{len(r)}")


if __name__ == "__main__":
    main()
