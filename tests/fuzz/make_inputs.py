#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora and the known bad inputs of issue 25, with the
Python standard library only (struct, json), never calling posenc.

    corpus/<harness>/       small valid inputs that start each fuzzer off (and are replayed)
    regressions/<harness>/  past crashers and slow inputs, replayed by every build
    pending/<harness>/      known bad inputs whose fix has not landed: not replayed; move a
                            file to regressions/ in the commit that fixes it

Harnesses: npy (.npy bytes), safetensors (.safetensors bytes), hf_config (config.json
text), cli (first byte picks the subcommand, '0'..'5'; then argv strings separated by NUL).

Usage:  make_inputs.py          (re)write every file listed here
Crashers found by scripts/fuzz.sh are copied into regressions/ by hand (see
docs/contributing.md); this script only writes the files it lists, it never deletes.
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def npy(descr, shape, data=b"", version=(1, 0), shape_text=None, pad_to=None):
    """An .npy file as numpy.save writes it (numpy.lib.format): magic, version, header
    length, a dict literal padded with spaces and ending in a newline, then the data."""
    if shape_text is None:
        shape_text = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_text)
    prefix = 10 if version[0] == 1 else 12
    total = pad_to if pad_to is not None else -(-(prefix + len(header) + 1) // 64) * 64
    header += " " * (total - prefix - len(header) - 1) + "\n"
    length = struct.pack("<H" if version[0] == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes(version) + length + header.encode("latin-1") + data


def safetensors(tensors, metadata=None, pad=True):
    """A .safetensors file: (name, dtype, shape, raw bytes) in order, tiling the buffer."""
    header, buffer = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(buffer), len(buffer) + len(raw)]}
        buffer += raw
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + buffer


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def f64(*v):
    return struct.pack("<%dd" % len(v), *v)


def cli(command, *argv):
    """Input of the cli harness: the subcommand's digit, then NUL-separated argv."""
    return (str(command) + "\0".join(argv)).encode("utf-8")


def hf(obj):
    return json.dumps(obj, indent=1).encode("utf-8")


def phi3_like():
    # LongRoPE (Phi-3 "su") on a small head: head dim 32, so 16 factors per list
    return hf({"hidden_size": 96, "num_attention_heads": 3, "max_position_embeddings": 131072,
               "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
               "sliding_window": None,
               "rope_scaling": {"type": "su",
                                "short_factor": [1.0 + 0.01 * i for i in range(16)],
                                "long_factor": [1.0 + 0.5 * i for i in range(16)]}})


FILES = {
    # ---- npy: every dtype, rank 0..3, format 1.0/2.0/3.0, numpy 1 'L' longs -------------
    "corpus/npy/f4_rows_2x8.npy": npy("<f4", (2, 8), f32(*[0.25 * i - 1.5 for i in range(16)])),
    "corpus/npy/f4_heads_3x2x4.npy": npy("<f4", (3, 2, 4), f32(*[0.5 * i for i in range(24)])),
    "corpus/npy/f8_2x3.npy": npy("<f8", (2, 3), f64(1.0, -2.0, 3.5, 0.0, -0.0, 1e300)),
    "corpus/npy/f8_rank0.npy": npy("<f8", (), f64(42.0)),
    "corpus/npy/f8_0x3.npy": npy("<f8", (0, 3)),
    "corpus/npy/f8_v2.npy": npy("<f8", (2,), f64(1.0, 2.0), version=(2, 0)),
    "corpus/npy/f8_v3.npy": npy("<f8", (1, 1), f64(-1.0), version=(3, 0)),
    "corpus/npy/f2_specials.npy": npy("<f2", (6,), struct.pack("<6H", 0x0000, 0x8000, 0x7C00,
                                                              0xFC00, 0x7E00, 0x0001)),
    "corpus/npy/i4_5.npy": npy("<i4", (5,), struct.pack("<5i", -3, 0, 1, 2**31 - 1, -2**31)),
    "corpus/npy/i8_2x2.npy": npy("<i8", (2, 2), struct.pack("<4q", 1, -1, 2**53, -2**62)),
    "corpus/npy/u1_3.npy": npy("|u1", (3,), bytes([0, 7, 255])),
    "corpus/npy/b1_4.npy": npy("|b1", (4,), bytes([0, 1, 1, 0])),
    "corpus/npy/native_f4_long_dims.npy": npy("=f4", (1, 2), f32(3.0, 4.0), shape_text="(1L, 2L)"),
    # ---- safetensors: every dtype, scalars, empty tensors, metadata, UTF-8 names --------
    "corpus/safetensors/f32_2x3.safetensors": safetensors(
        [("wpe.weight", "F32", [2, 3], f32(*[0.25 * i for i in range(6)]))]),
    "corpus/safetensors/mixed.safetensors": safetensors(
        [("f16", "F16", [2], struct.pack("<2H", 0x3C00, 0xC000)),
         ("bf16", "BF16", [2], struct.pack("<2H", 0x3F80, 0x7F80)),
         ("f64", "F64", [1], f64(-0.5)),
         ("i32", "I32", [2], struct.pack("<2i", 7, -7)),
         ("i64", "I64", [1, 1], struct.pack("<q", 2**40)),
         ("u8", "U8", [3], bytes([1, 2, 3])),
         ("bool", "BOOL", [2], bytes([1, 0]))],
        metadata={"format": "pt"}),
    "corpus/safetensors/scalar_and_empty.safetensors": safetensors(
        [("scalar", "F32", [], f32(1.5)), ("empty", "F64", [0, 4], b"")]),
    "corpus/safetensors/utf8_name.safetensors": safetensors(
        [("wpé.weight", "F32", [1, 2], f32(1.0, 2.0))], metadata={"clé": "välue"}),
    "corpus/safetensors/no_tensors.safetensors": safetensors([], pad=False),
    # ---- hf_config: every rope_type and the key spellings of the model families ---------
    "corpus/hf_config/llama2.json": hf({"hidden_size": 4096, "num_attention_heads": 32,
                                        "max_position_embeddings": 4096, "rope_theta": 10000.0,
                                        "rope_scaling": None, "model_type": "llama"}),
    "corpus/hf_config/llama31.json": hf({
        "hidden_size": 4096, "num_attention_heads": 32, "max_position_embeddings": 131072,
        "rope_theta": 500000.0, "eos_token_id": [128001, 128008],
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"}}),
    "corpus/hf_config/qwen2_yarn.json": hf({
        "head_dim": 128, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "yarn",
                                             "factor": 4.0,
                                             "original_max_position_embeddings": 32768}}),
    "corpus/hf_config/deepseek_yarn.json": hf({
        "head_dim": 64, "max_position_embeddings": 163840,
        "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096}}),
    "corpus/hf_config/phi3_longrope.json": phi3_like(),
    "corpus/hf_config/gptj.json": hf({"n_embd": 256, "n_head": 16, "rotary_dim": 8,
                                      "model_type": "gptj"}),
    "corpus/hf_config/neox.json": hf({"hidden_size": 512, "num_attention_heads": 8,
                                      "rotary_pct": 0.25, "rotary_emb_base": 10000}),
    "corpus/hf_config/dynamic.json": hf({"head_dim": 16, "max_position_embeddings": 2048,
                                         "rope_scaling": {"type": "dynamic", "factor": 2.0}}),
    "corpus/hf_config/linear_partial.json": hf({
        "head_dim": 64, "partial_rotary_factor": 0.5,
        "rope_scaling": {"rope_type": "linear", "factor": 4.0}}),
    "corpus/hf_config/ntk_alpha.json": hf({"head_dim": 32,
                                           "rope_scaling": {"rope_type": "ntk", "alpha": 8}}),
    "corpus/hf_config/xpos.json": hf({"head_dim": 16, "rope_scaling": {
        "rope_type": "xpos", "xpos_scale_base": 512, "xpos_gamma": 0.4}}),
    "corpus/hf_config/per_layer.json": hf({
        "head_dim": 128, "partial_rotary_factor": 1.0, "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0,
                                  "partial_rotary_factor": 0.25}}}),
    "corpus/hf_config/escapes.json": (
        b'{"head_dim": 8, "name": "a\\"b\\\\c\\u00e9\\ud83d\\ude00", "x": [1e-5, -0.0, 2E+3], '
        b'"nested": {"a": [[], {}], "b": null, "c": true}}'),
    # ---- cli: each subcommand with its flag forms (separate and inline values) ----------
    "corpus/cli/sinusoidal": cli(0, "--dim", "8", "--len", "4", "--offset", "3", "--base",
                                 "500", "--preset", "vaswani", "--out", "pe.npy"),
    "corpus/cli/sinusoidal_inline": cli(0, "--dim=7", "--len=2", "--preset=t2t",
                                        "--out=pe.npy"),
    "corpus/cli/learned": cli(1, "--dim", "4", "--len", "3", "--seed", "7", "--out", "w.npy"),
    "corpus/cli/rope_yarn": cli(2, "--head-dim", "8", "--scaling", "yarn", "--factor", "4",
                                "--original-max", "4096", "--beta-fast", "32", "--beta-slow",
                                "1", "--mscale", "0.7", "--key", "--offset", "5", "--in", "x.npy",
                                "--out", "y.npy", "--print-attention-factor"),
    "corpus/cli/rope_longrope": cli(2, "--head-dim=8", "--rotary-dim=4", "--scaling=longrope",
                                    "--short-factor=1,1", "--long-factor=1.5,2e0",
                                    "--original-max=4096", "--seq-len=9000", "--in=x.npy",
                                    "--out=y.npy", "--inv-freq-out=f.npy"),
    "corpus/cli/bias_alibi": cli(3, "--heads", "4", "--len-q", "3", "--len-k", "5",
                                 "--q-offset", "2", "--symmetric", "--max-bias", "8",
                                 "--dtype", "f32", "--out", "b.npy"),
    "corpus/cli/bias_t5": cli(4, "--len-q", "3", "--len-k", "5", "--buckets", "32",
                              "--max-distance", "128", "--unidirectional", "--out", "b.npy"),
    "corpus/cli/attention": cli(5, "--q", "q.npy", "--k", "k.npy", "--v", "v.npy", "--causal",
                                "--alibi-heads", "8", "--alibi-head", "3", "--scale", "0.125",
                                "--dtype", "f64", "--weights-out", "w.npy", "--out", "o.npy"),
    "corpus/cli/attention_rope": cli(5, "--q=q.npy", "--k=k.npy", "--v=v.npy", "--rope-base=1e4",
                                     "--rotary-dim=4", "--out=o.npy"),
    # ---- issue 25: the known bad inputs ---------------------------------------------------
    # 128 bytes: shape (10**12, 0, 8) float32, no data. `posenc rope` (and the npy harness's
    # copy of it) rotated 10**12 tokens of zero heads, one cos/sin row each: hours.
    "regressions/npy/issue25_rope_zero_heads.npy": npy("<f4", (10**12, 0, 8), pad_to=128),
    # a valid header with 2048 tensor keys: the JSON reader's duplicate-key check was
    # quadratic in the keys of an object (a 100 MB header could hold millions)
    "regressions/safetensors/issue25_many_keys.safetensors": safetensors(
        [("t%04d" % i, "U8", [1], bytes([i % 251])) for i in range(2048)]),
    # head_dim 8e15 passed validation and frequencies() asked for 4e15 doubles
    "regressions/hf_config/issue25_head_dim_8e15.json": hf({"head_dim": 8000000000000000}),
    # a list holding a string: skipped as a whole, then reported as a missing key
    "regressions/hf_config/issue25_short_factor_string.json": hf({
        "head_dim": 8, "max_position_embeddings": 8192, "original_max_position_embeddings": 4096,
        "rope_scaling": {"type": "longrope", "short_factor": [1, "x"],
                         "long_factor": [1, 1, 1, 1]}}),
}

# Files whose fix has not landed: written to pending/ instead of regressions/ (same name).
# Empty since acd93b4 and 1837b43 fixed every known bad input of issue 25.
PENDING = set()


def main():
    for rel, data in FILES.items():
        if rel in PENDING:
            rel = "pending/" + rel[len("regressions/"):]
        path = os.path.join(HERE, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    print("make_inputs: wrote %d files under %s" % (len(FILES), HERE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
