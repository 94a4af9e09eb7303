#!/usr/bin/env python3
"""Tiny .npy and .safetensors fixtures for posenc's file readers, written by numpy and by a
hand-written safetensors writer (struct + json), never calling posenc.

The values follow simple formulas that tests/io/test_*.cpp recompute:

    ramp(n)[i] = 0.25 * i - 1.5                        (float fixtures)
    iramp(n)[i] = (i - 3) * 1000003                    (integer fixtures)

plus special-value vectors (signed zeros, extremes, subnormals, inf, nan) whose upcast to
float64 is stored next to them, so the C++ side compares decoded f16/bf16 with numpy's
own exact widening.

safetensors layout (https://github.com/huggingface/safetensors, format section):
    u64 little-endian N | N bytes of JSON header (space padded) | byte buffer
    header = {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
              "__metadata__": {"k": "v"}}
    offsets are relative to the byte buffer; tensors tile it in order, little-endian.

Usage:  io_fixtures.py            write tests/data/io/*
        io_fixtures.py --check    regenerate in memory and compare byte for byte with the
                                  committed files (exit 1 on any mismatch or missing file)
"""
import io
import json
import struct
import sys

import _golden  # exits 77 (skip) when numpy is missing
import numpy as np


def ramp(n):
    return 0.25 * np.arange(n, dtype=np.float64) - 1.5


def iramp(n):
    return (np.arange(n, dtype=np.int64) - 3) * 1000003


# Values with interesting f16 / bf16 encodings (all finite ones exactly representable in
# float32 after numpy's rounding to the small type).
SPECIALS = np.array([0.0, -0.0, 1.0, -2.0, 65504.0, 2.0 ** -14, 2.0 ** -24, 3 * 2.0 ** -24,
                     np.inf, -np.inf, np.nan, 0.1, 3.14159, -1e-3, 1e-8], dtype=np.float64)


def npy_bytes(arr, version=None):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, version=version, allow_pickle=False)
    return buf.getvalue()


def to_bf16_bits(f):
    """float32 -> bfloat16 bits: round the low 16 bits of the float32 to nearest even."""
    f = np.asarray(f, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    nan = np.isnan(f)
    lsb = (u >> 16) & 1
    r = ((u + 0x7FFF + lsb) >> 16) & 0xFFFF
    r[nan] = ((u[nan] >> 16) | 0x40) & 0xFFFF  # keep NaN a quiet NaN
    return r.astype(np.uint16)


def bf16_bits_to_f64(b):
    return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


ST_DTYPES = {np.dtype("<f2"): "F16", np.dtype("<f4"): "F32", np.dtype("<f8"): "F64",
             np.dtype("<i4"): "I32", np.dtype("<i8"): "I64", np.dtype("u1"): "U8",
             np.dtype("bool"): "BOOL"}


def safetensors_bytes(tensors, metadata=None):
    """tensors: list of (name, dtype_string, shape, raw little-endian bytes)."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors)


def st_entry(name, arr):
    arr = np.array(arr, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
    return (name, ST_DTYPES[arr.dtype.newbyteorder("<") if arr.dtype.itemsize > 1 else arr.dtype],
            arr.shape, arr.astype(arr.dtype.newbyteorder("<")).tobytes())


def fixtures():
    out = {}
    # --- .npy written by numpy
    out["f4_2x3.npy"] = npy_bytes(ramp(6).reshape(2, 3).astype(np.float32))
    out["f8_rank0.npy"] = npy_bytes(np.array(ramp(1)[0] + 0.125))
    out["f8_rank1.npy"] = npy_bytes(ramp(5))
    out["f8_2x3x4.npy"] = npy_bytes(ramp(24).reshape(2, 3, 4))
    out["f8_1x2x2x3.npy"] = npy_bytes(ramp(12).reshape(1, 2, 2, 3))
    # 20 axes: the header's growth padding pushes it past 128 bytes (checks the padding rule).
    out["f8_rank20.npy"] = npy_bytes(ramp(2).reshape((1,) * 19 + (2,)))
    out["f8_0x3.npy"] = npy_bytes(np.zeros((0, 3)))
    out["i8_2x4.npy"] = npy_bytes(iramp(8).reshape(2, 4))
    out["i4_7.npy"] = npy_bytes(iramp(7).astype(np.int32))
    out["u1_5.npy"] = npy_bytes(np.array([0, 1, 127, 128, 255], dtype=np.uint8))
    out["b1_4.npy"] = npy_bytes(np.array([True, False, False, True]))
    out["f2_specials.npy"] = npy_bytes(SPECIALS.astype(np.float16))
    out["f2_specials_as_f8.npy"] = npy_bytes(SPECIALS.astype(np.float16).astype(np.float64))
    out["f8_v2_2x3.npy"] = npy_bytes(ramp(6).reshape(2, 3), version=(2, 0))
    out["f8_v3_2x3.npy"] = npy_bytes(ramp(6).reshape(2, 3), version=(3, 0))
    out["f8_fortran_2x3.npy"] = npy_bytes(np.asfortranarray(ramp(6).reshape(2, 3)))
    out["f4_bigendian_3.npy"] = npy_bytes(ramp(3).astype(">f4"))
    out["f8_frac_3.npy"] = npy_bytes(np.array([1.0, 2.5, -3.0]))
    # --- .safetensors written by hand
    spec32 = SPECIALS.astype(np.float32)
    bf = to_bf16_bits(spec32)
    tensors = [
        st_entry("ramp_f32", ramp(6).reshape(2, 3).astype(np.float32)),
        st_entry("ramp_f64", ramp(24).reshape(2, 3, 4)),
        st_entry("specials_f16", SPECIALS.astype(np.float16)),
        st_entry("specials_f16_as_f64", SPECIALS.astype(np.float16).astype(np.float64)),
        ("specials_bf16", "BF16", bf.shape, bf.astype("<u2").tobytes()),
        st_entry("specials_bf16_as_f64", bf16_bits_to_f64(bf)),
        st_entry("specials_f32", spec32),
        st_entry("iramp_i64", iramp(8).reshape(2, 4)),
        st_entry("iramp_i32", iramp(7).astype(np.int32)),
        st_entry("bytes_u8", np.array([0, 1, 127, 128, 255], dtype=np.uint8)),
        st_entry("mask_bool", np.array([[True, False], [False, True]])),
        st_entry("scalar_f64", np.array(0.375)),
        st_entry("empty_f32", np.zeros((0, 4), dtype=np.float32)),
        st_entry("ramp_1x2x2x3_f32", ramp(12).reshape(1, 2, 2, 3).astype(np.float32)),
        st_entry('wpe/"pos" \u00e9\u4e2d\U0001F600', ramp(4).reshape(2, 2).astype(np.float32)),
    ]
    out["mixed.safetensors"] = safetensors_bytes(tensors, metadata={"format": "pt", "note": "posenc io fixtures"})
    # A GPT-2 style single position-embedding weight, with no metadata.
    out["wpe.safetensors"] = safetensors_bytes([st_entry("wpe.weight", ramp(32).reshape(8, 4).astype(np.float32))])
    return out


def main():
    files = fixtures()
    total = sum(len(b) for b in files.values())
    assert total < 64 * 1024, total
    # Bytes, compared exactly; they live in tests/data/io/.
    return _golden.main("io_fixtures.py", {"io/" + name: data for name, data in files.items()}, rtol=0, atol=0)


if __name__ == "__main__":
    sys.exit(main())
