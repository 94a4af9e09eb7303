#!/usr/bin/env python3
"""Float64 goldens for the SIMD backend tests (tests/backend).

Independent of posenc: numpy and the C library's sin/cos/pow (_golden.sin, .cos, .pow), float64, from the Vaswani et al. formula
PE(p, 2i) = sin(p * w_i), PE(p, 2i+1) = cos(p * w_i), w_i = 10000^(-2i/d).

Writes tests/data/simd_sinusoidal_freq.npy (the w_i, so the C++ test forms exactly the
same double angles p * w_i) and tests/data/simd_sinusoidal_far.npy, one row per position:
[p, sin(p w_0), cos(p w_0), sin(p w_1), ...]. Positions cover the first coarse blocks of
the angle-addition kernel, their boundaries, and the far end up to 1,000,000.

Usage: simd.py            regenerate the files
       simd.py --check    regenerate in memory, compare with the committed files (exit 1
                          on any mismatch; 77 when numpy is missing)
"""
import os
import sys

import _golden  # exits 77 (skip) when numpy is missing
import numpy as np

DATA = _golden.DATA
DIM = 32


def goldens():
    pairs = DIM // 2
    i = np.arange(pairs, dtype=np.float64)
    w = 1.0 / _golden.pow(10000.0, 2.0 * i / DIM)
    positions = [0, 1, 2, 31, 63, 64, 65, 127, 128, 1000, 4095, 4096, 65535, 65536, 99_999,
                 524_287, 524_288, 999_000, 999_936, 999_937, 999_999, 1_000_000]
    # a dense run at the far end, across a block boundary (999,936 = 64 * 15,624)
    positions += list(range(999_930, 999_945))
    p = np.array(positions, dtype=np.float64)[:, None]
    angle = p * w[None, :]  # float64 products, exactly what the C++ side forms
    table = np.empty((len(positions), 1 + DIM), dtype=np.float64)
    table[:, 0] = p[:, 0]
    table[:, 1::2] = _golden.sin(angle)
    table[:, 2::2] = _golden.cos(angle)
    return {"simd_sinusoidal_freq.npy": w, "simd_sinusoidal_far.npy": table}


def main():
    check = "--check" in sys.argv[1:]
    bad = 0
    for name, value in goldens().items():
        path = os.path.join(DATA, name)
        if check:
            stored = np.load(path)
            # 1e-15: numpy's vectorised sin may differ by an ulp between CPUs
            if stored.shape != value.shape or stored.dtype != value.dtype or np.max(np.abs(stored - value)) > 1e-15:
                print(f"simd.py: {name} differs from the reference", file=sys.stderr)
                bad += 1
        else:
            np.save(path, value)
            print(f"wrote {path} {value.shape}")
    if check:
        print("simd.py: goldens " + ("MISMATCH" if bad else "match"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
