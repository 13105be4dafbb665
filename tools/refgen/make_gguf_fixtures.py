#!/usr/bin/env python3
"""Writes the GGUF reader fixtures of tests/test_gguf.c (and the dequantizer checks of tests/test_lm_gguf.c).

Run from the repository root with the refgen venv (the `gguf` package, 0.19):
    tools/refgen/.venv/bin/python tools/refgen/make_gguf_fixtures.py

Outputs (tests/fixtures/gguf/):
  basic.gguf      version 3, alignment 32: a metadata value of every type (u8 .. f64, bool, strings with
                  multi-byte UTF-8 and a NUL byte, arrays of each, an array of strings, arrays of arrays) and
                  tensors of the types the loader reads: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, plus I32 and
                  Q5_K (listed, not read), 1 to 4 dims
  align64_v2.gguf the same kind of file with general.alignment = 64, its version field set to 2 (GGUF v2
                  and v3 lay little-endian files out alike: v3 only added big-endian files)
  big_endian.gguf a big-endian file (GGUFWriter's endianess=BIG): the reader must refuse it
  ../../fuzz/corpus_gguf/   seeds of tests/fuzz/fuzz_gguf: basic.gguf, align64_v2.gguf, and the tokenizer
                  metadata alone of tests/fixtures/gguf_model/{llama,gpt2}-f32.gguf (when
                  make_gguf_model_fixtures.py has made them): {llama,gpt2}_vocab.gguf
  expected.json   for each file: version, alignment, data offset, every metadata entry (type; value with
                  integers as decimal strings so 64-bit values stay exact, strings as hex of their bytes,
                  floats as numbers that are exact doubles of the stored value) and every tensor (ggml type
                  number, ne innermost first, offset, its bytes in hex, and for the float and quantized types
                  the values gguf-py's dequantize gives, which test_lm_gguf compares its dequantizers with)
Quantized tensors are real blocks: Q8_0 and Q4_0 by gguf-py's quantize of random floats; Q4_K, Q6_K and
Q5_K (which gguf-py only dequantizes) random bytes with the f16 scales set to small finite values.
"""
import json
import os
import struct

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q, GGUFValueType as V

OUT = "tests/fixtures/gguf/"
rng = np.random.default_rng(19)


def kquant_blocks(qtype, rows, cols):
    """Random k-quant blocks whose f16 super-block scales are small finite numbers."""
    blck, size = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * cols // blck
    raw = rng.integers(0, 256, size=(nb, size), dtype=np.uint8)
    # the f16 fields: Q4_K/Q5_K start with d, dmin; Q6_K ends with d
    scale_at = {Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [size - 2]}[qtype]
    for b in range(nb):
        for off in scale_at:
            raw[b, off:off + 2] = np.frombuffer(np.float16(rng.uniform(-0.05, 0.05)).tobytes(), np.uint8)
    return raw.reshape(rows, cols // blck * size)


def tensors():
    """(name, numpy shape, ggml type, bytes) of the fixture tensors."""
    out = []
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    out.append(("t.f32", f32, None))
    out.append(("t.f16", rng.standard_normal((2, 3, 8)).astype(np.float16), None))
    bf = rng.standard_normal((4, 6)).astype(np.float32)
    out.append(("t.bf16", gguf.quants.quantize(bf, Q.BF16), Q.BF16))
    out.append(("t.q8_0", gguf.quants.quantize(rng.standard_normal((3, 64)).astype(np.float32), Q.Q8_0), Q.Q8_0))
    out.append(("t.q4_0", gguf.quants.quantize(rng.standard_normal((2, 96)).astype(np.float32), Q.Q4_0), Q.Q4_0))
    out.append(("t.q4_k", kquant_blocks(Q.Q4_K, 2, 512), Q.Q4_K))
    out.append(("t.q6_k", kquant_blocks(Q.Q6_K, 3, 256), Q.Q6_K))
    out.append(("t.q5_k", kquant_blocks(Q.Q5_K, 1, 256), Q.Q5_K))
    out.append(("t.i32_4d", rng.integers(-1000, 1000, size=(2, 1, 3, 2), dtype=np.int32), None))
    out.append(("t.scalar1", np.array([2.5], dtype=np.float32), None))
    return out


METADATA = [
    ("k.u8", V.UINT8, 200), ("k.i8", V.INT8, -100), ("k.u16", V.UINT16, 60000), ("k.i16", V.INT16, -30000),
    ("k.u32", V.UINT32, 4000000000), ("k.i32", V.INT32, -2000000000), ("k.f32", V.FLOAT32, 0.1),
    ("k.bool_t", V.BOOL, True), ("k.bool_f", V.BOOL, False),
    ("k.str", V.STRING, "h\u00e9llo \u2581w\u00f6rld \U0001F680"), ("k.str_nul", V.STRING, b"a\x00b"),
    ("k.str_empty", V.STRING, ""),
    ("k.u64", V.UINT64, 18446744073709551615), ("k.i64", V.INT64, -9223372036854775807 - 1),
    ("k.f64", V.FLOAT64, 1e300),
]
ARRAYS = [
    ("a.u8", V.UINT8, [0, 1, 255]), ("a.i8", V.INT8, [-128, 127]), ("a.u16", V.UINT16, [65535, 7]),
    ("a.i16", V.INT16, [-32768, 5]), ("a.u32", V.UINT32, [1, 4294967295]), ("a.i32", V.INT32, [-7, 2147483647]),
    ("a.f32", V.FLOAT32, [0.5, -1e-3, 3.4e38]), ("a.bool", V.BOOL, [True, False, True]),
    ("a.u64", V.UINT64, [2**64 - 1, 0]), ("a.i64", V.INT64, [-(2**63), 2**63 - 1]), ("a.f64", V.FLOAT64, [1.5, -2e-300]),
    ("a.str", V.STRING, ["<s>", "\u2581the", "<0x0A>", "", "\u65e5\u672c"]),
    ("a.nested", V.ARRAY, [[1, 2, 3], [4], [5, 6]]),
    ("a.nested_str", V.ARRAY, [["x", "yz"], ["\u00e9"]]),
]


def exact(x, vt):
    """A JSON-exact form of a scalar as stored."""
    if vt in (V.FLOAT32,):
        return float(np.float32(x))
    if vt == V.FLOAT64:
        return float(x)
    if vt == V.BOOL:
        return bool(x)
    if vt == V.STRING:
        b = x.encode("utf-8") if isinstance(x, str) else x
        return b.hex()
    return str(int(x))


def sub_type(val):
    return V.get_type(val[0]) if not isinstance(val[0], list) else V.ARRAY


def expect_array(val, et):
    if et == V.ARRAY:
        return [{"elem": sub_type(v).name, "items": expect_array(v, sub_type(v))} for v in val]
    return [exact(v, et) for v in val]


def write(path, alignment=None, endian=gguf.GGUFEndian.LITTLE, values=True):
    w = gguf.GGUFWriter(path, "testarch", endianess=endian)
    exp_kv = [{"key": "general.architecture", "type": "STRING", "value": exact("testarch", V.STRING)}]
    if alignment:
        w.add_custom_alignment(alignment)
        exp_kv.append({"key": "general.alignment", "type": "UINT32", "value": str(alignment)})
    for key, vt, val in METADATA:
        w.add_key_value(key, val, vt)
        exp_kv.append({"key": key, "type": vt.name, "value": exact(val, vt)})
    for key, et, val in ARRAYS:
        if et == V.ARRAY:
            w.add_key_value(key, val, V.ARRAY, sub_type=V.ARRAY)
        else:
            w.add_key_value(key, val, V.ARRAY, sub_type=et)
        exp_kv.append({"key": key, "type": "ARRAY", "elem": et.name, "value": expect_array(val, et)})
    exp_t = []
    for name, arr, raw in tensors():
        if raw is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if endian != gguf.GGUFEndian.LITTLE:
        return None
    r = gguf.GGUFReader(path)
    for t in r.tensors:
        e = {"name": t.name, "type": int(t.tensor_type), "ne": [int(x) for x in t.shape],
             "offset": int(t.data_offset - r.data_offset), "hex": bytes(np.ascontiguousarray(t.data).view(np.uint8)).hex()}
        if values and t.tensor_type in (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_K, Q.Q6_K):
            deq = gguf.quants.dequantize(np.ascontiguousarray(t.data), t.tensor_type).astype(np.float32).ravel()
            e["f32"] = [float(x) for x in deq]
        exp_t.append(e)
    return {"version": 3, "alignment": alignment or 32, "data_offset": int(r.data_offset), "kv": exp_kv,
            "tensors": exp_t}


def main():
    os.makedirs(OUT, exist_ok=True)
    exp = {"basic.gguf": write(OUT + "basic.gguf")}
    exp["align64_v2.gguf"] = write(OUT + "align64_v2.gguf", alignment=64, values=False)
    with open(OUT + "align64_v2.gguf", "r+b") as f:  # version 3 -> 2 (same layout for little-endian files)
        f.seek(4)
        assert struct.unpack("<I", f.read(4))[0] == 3
        f.seek(4)
        f.write(struct.pack("<I", 2))
    exp["align64_v2.gguf"]["version"] = 2
    write(OUT + "big_endian.gguf", endian=gguf.GGUFEndian.BIG)
    with open(OUT + "expected.json", "w") as f:
        json.dump(exp, f, separators=(",", ":"))
    corpus = "tests/fuzz/corpus_gguf/"
    os.makedirs(corpus, exist_ok=True)
    for n in ("basic.gguf", "align64_v2.gguf"):
        with open(OUT + n, "rb") as f, open(corpus + n, "wb") as g:
            g.write(f.read())
    for fam in ("llama", "gpt2"):
        src = f"tests/fixtures/gguf_model/{fam}-f32.gguf"
        if not os.path.exists(src):
            continue
        r = gguf.GGUFReader(src)
        w = gguf.GGUFWriter(corpus + f"{fam}_vocab.gguf", fam)
        for k, f in r.fields.items():
            if k.startswith("tokenizer."):
                vt = f.types[0]
                w.add_key_value(k, f.contents(), vt, sub_type=f.types[-1] if vt == V.ARRAY else None)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    for n in sorted(os.listdir(OUT)):
        print(n, os.path.getsize(OUT + n))


if __name__ == "__main__":
    main()
