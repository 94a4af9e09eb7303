#!/usr/bin/env python3
"""Writes the seed corpus of the gguf fuzz harness (corpus/gguf/), with the Python standard
library only, from the GGUF format description (ggml docs/gguf.md), never calling posenc:

    "GGUF" | u32 version | u64 tensor_count | u64 kv_count | kv... | tensor infos...
    | padding to general.alignment (default 32) | tensor data

Each seed is a small model header as llama.cpp's converter writes it (llama with its
rope_freqs, qwen2 with YaRN, phi3 with LongRoPE factor tensors, gemma), plus one file with
every value type, nested arrays, alignment 64, version 2 and each unquantised tensor type.

Usage:  make_gguf_inputs.py     (re)writes the files listed here, deletes nothing
"""
import math
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
          BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}


def gstr(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    """The bytes of value v of type t; an array is (element type, [values])."""
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors=(), version=3, align=32):
    """kvs: (key, type, value); tensors: (name, dims ne0 first, ggml type, data bytes)."""
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += gstr(key) + struct.pack("<I", t) + value(t, v)
    data, offset = b"", 0
    for name, dims, gtype, raw in tensors:
        out += gstr(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", gtype, offset)
        raw += b"\0" * (-len(raw) % align)
        data += raw
        offset += len(raw)
    out += b"\0" * (-len(out) % align)
    return out + data


def f32s(values):
    return struct.pack("<%df" % len(values), *values)


def llama3_factors():
    """convert_hf_to_gguf.py's rope_freqs for Llama 3.1 (factor 8, low 1, high 4, 8192)."""
    out = []
    for i in range(0, 128, 2):
        wavelen = 2 * math.pi * 500000.0 ** (i / 128)
        if wavelen < 8192 / 4:
            out.append(1.0)
        elif wavelen > 8192 / 1:
            out.append(8.0)
        else:
            smooth = (8192 / wavelen - 1) / 3
            out.append(1 / ((1 - smooth) / 8 + smooth))
    return out


def arch_kvs(arch, ctx, width, heads, kv_heads, extra=()):
    return [("general.architecture", STR, arch), ("general.name", STR, arch + " seed"),
            (arch + ".context_length", U32, ctx), (arch + ".embedding_length", U32, width),
            (arch + ".block_count", U32, 2), (arch + ".attention.head_count", U32, heads),
            (arch + ".attention.head_count_kv", U32, kv_heads)] + list(extra)


SEEDS = {
    "llama31.gguf": gguf(
        arch_kvs("llama", 131072, 4096, 32, 8, [
            ("llama.rope.freq_base", F32, 500000.0), ("llama.rope.dimension_count", U32, 128),
            ("tokenizer.ggml.tokens", ARR, (STR, ["<s>", "a", "b"])),
            ("tokenizer.ggml.scores", ARR, (F32, [0.0, -1.0, -2.0]))]),
        [("rope_freqs.weight", [64], 0, f32s(llama3_factors())),
         ("blk.0.attn_q.weight", [256, 2], 12, bytes(2 * 144))]),
    "qwen2_yarn.gguf": gguf(arch_kvs("qwen2", 131072, 3584, 28, 4, [
        ("qwen2.rope.freq_base", F32, 1e6), ("qwen2.rope.scaling.type", STR, "yarn"),
        ("qwen2.rope.scaling.factor", F32, 4.0),
        ("qwen2.rope.scaling.original_context_length", U32, 32768)])),
    "phi3_longrope.gguf": gguf(
        arch_kvs("phi3", 131072, 3072, 32, 32, [
            ("phi3.rope.dimension_count", U32, 96), ("phi3.rope.freq_base", F32, 10000.0),
            ("phi3.rope.scaling.original_context_length", U32, 4096),
            ("phi3.rope.scaling.attn_factor", F32, 1.19),
            ("phi3.attention.sliding_window", U32, 262144)]),
        [("rope_factors_long.weight", [48], 0, f32s([1.0 + i for i in range(48)])),
         ("rope_factors_short.weight", [48], 0, f32s([1.0 + i / 16 for i in range(48)]))]),
    "gemma.gguf": gguf(arch_kvs("gemma", 8192, 3072, 16, 16, [
        ("gemma.attention.key_length", U32, 256), ("gemma.attention.value_length", U32, 256)])),
    "all_types_v2.gguf": gguf(
        [("general.alignment", U32, 64), ("u8", U8, 200), ("i8", I8, -5), ("u16", U16, 65000),
         ("i16", I16, -30000), ("u32", U32, 4000000000), ("i32", I32, -2000000000),
         ("f32", F32, 0.1), ("bool", BOOL, True), ("str", STR, "h\u00e9llo"),
         ("u64", U64, 2 ** 63 + 5), ("i64", I64, -2 ** 62), ("f64", F64, math.pi),
         ("arr", ARR, (ARR, [(I8, [1, -2]), (STR, ["x"]), (ARR, [(U16, [])])]))],
        [("f32", [2, 2], 0, f32s([1, 2, 3, 4])), ("f16", [2], 1, struct.pack("<2e", 1, -2)),
         ("bf16", [1], 30, b"\x80\x3f"), ("f64", [1], 28, struct.pack("<d", 0.5)),
         ("i32", [1], 26, struct.pack("<i", -7)), ("i64", [1], 27, struct.pack("<q", 9)),
         ("q8", [32], 8, bytes(34)), ("unknown", [3], 99, b"")],
        version=2, align=64),
}

if __name__ == "__main__":
    for name, data in SEEDS.items():
        with open(os.path.join(HERE, "corpus", "gguf", name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to corpus/gguf/" % len(SEEDS))
