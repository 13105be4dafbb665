#!/usr/bin/env python3
"""Writes the safetensors fixtures of tests/test_safetensors.c.

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_safetensors_fixtures.py

Outputs (tests/fixtures/safetensors/, a few KB in all):
  dtypes.safetensors   one or more tensors of every dtype safetensors.torch
                       writes (F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL),
                       including 0-d, empty and 4-d tensors and odd values
                       (inf, nan, -0, subnormals, int extremes)
  dtypes.json          for each tensor: dtype, shape, and the expected f32
                       values after torch's `.to(torch.float32)`, as uint32
                       bit patterns (exact, and JSON can hold nan/inf that way)
  roundtrip_ref.safetensors
                       f32 tensors with values v[i] = i * 0.25 - 1 (exact in
                       f32) and metadata {"format": "pt"}: col_st_write_f32
                       must produce the same bytes
  sharded/             a state dict split by huggingface_hub into two
                       shards + model.safetensors.index.json, the way
                       transformers' save_pretrained does; sharded.json holds
                       the expected values as in dtypes.json
"""
import json
import os
import shutil
import struct

import torch
from safetensors.torch import save_file
from huggingface_hub import save_torch_state_dict

OUT = os.path.join("tests", "fixtures", "safetensors")


def f32_bits(t):
    """uint32 bit patterns of t converted to f32 by torch, row-major."""
    f = t.detach().to(torch.float32).contiguous().reshape(-1)
    return list(struct.unpack("<%dI" % f.numel(), f.numpy().tobytes()))


def write_expected(path, sd):
    """One line per tensor (readable diffs)."""
    exp = expected(sd)
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(json.dumps(k) + ": " + json.dumps(v) for k, v in exp.items()) + "\n}\n")


def expected(sd):
    names = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
             torch.uint8: "U8", torch.bool: "BOOL"}
    return {k: {"dtype": names[v.dtype], "shape": list(v.shape), "bits": f32_bits(v)} for k, v in sorted(sd.items())}


def dtype_tensors():
    g = torch.Generator().manual_seed(1234)
    special = torch.tensor([0.0, -0.0, 1.0, -2.5, float("inf"), float("-inf"), float("nan"), 65504.0, 1e-7,
                            3.0e38, 1e-40], dtype=torch.float64)
    sd = {
        "f64.special": special.clone(),
        "f64.big": torch.tensor([1e300, -1e300, 1e-300, 0.1], dtype=torch.float64),
        "f32.special": special.to(torch.float32),
        "f32.rand.4d": torch.randn(2, 3, 1, 2, generator=g),
        "f32.scalar": torch.tensor(3.25),
        "f32.empty": torch.zeros(0, 3),
        "f16.special": special.to(torch.float16),
        "f16.subnormal": torch.tensor([6e-8, 3e-5, -6.1e-5], dtype=torch.float16),
        "f16.rand": torch.randn(3, 5, generator=g).to(torch.float16),
        "bf16.special": special.to(torch.bfloat16),
        "bf16.rand": torch.randn(4, 3, generator=g).to(torch.bfloat16),
        "i64.vals": torch.tensor([0, -1, 2**40 + 1, -(2**63), 2**63 - 1, 16777217], dtype=torch.int64),
        "i32.vals": torch.tensor([[0, -1, 2**31 - 1], [-(2**31), 123456789, 7]], dtype=torch.int32),
        "i16.vals": torch.tensor([0, -1, 32767, -32768], dtype=torch.int16),
        "i8.vals": torch.tensor([0, -1, 127, -128, 5], dtype=torch.int8),
        "u8.vals": torch.tensor([0, 1, 200, 255], dtype=torch.uint8),
        "bool.vals": torch.tensor([[True, False], [False, True]]),
        "bool.scalar": torch.tensor(True),
    }
    return sd


def main():
    os.makedirs(OUT, exist_ok=True)

    sd = dtype_tensors()
    save_file(sd, os.path.join(OUT, "dtypes.safetensors"), metadata={"format": "pt", "note": "dtype fixture"})
    write_expected(os.path.join(OUT, "dtypes.json"), sd)

    # Same tensors the C test builds: v[i] = i * 0.25 - 1.
    shapes = {"b.weight": [2, 3], "a.bias": [4], "c.scalar": [], "d.conv": [2, 1, 2, 3], "e.empty": [0, 5]}
    rt = {}
    for name, shape in shapes.items():
        n = 1
        for s in shape:
            n *= s
        rt[name] = (torch.arange(n, dtype=torch.float32) * 0.25 - 1).reshape(shape)
    save_file(rt, os.path.join(OUT, "roundtrip_ref.safetensors"), metadata={"format": "pt"})

    # A small state dict sharded the way transformers does it.
    shard_dir = os.path.join(OUT, "sharded")
    shutil.rmtree(shard_dir, ignore_errors=True)
    os.makedirs(shard_dir)
    g = torch.Generator().manual_seed(99)
    sh = {
        "model.embed.weight": torch.randn(8, 4, generator=g),
        "model.layers.0.w": torch.randn(4, 4, generator=g).to(torch.bfloat16),
        "model.layers.0.b": torch.randn(4, generator=g),
        "model.layers.1.w": torch.randn(4, 4, generator=g).to(torch.float16),
        "model.layers.1.b": torch.randn(4, generator=g),
        "lm_head.weight": torch.randn(8, 4, generator=g),
    }
    save_torch_state_dict(sh, shard_dir, max_shard_size=160, safe_serialization=True)
    write_expected(os.path.join(OUT, "sharded.json"), sh)
    print(sorted(os.listdir(shard_dir)))


if __name__ == "__main__":
    main()
