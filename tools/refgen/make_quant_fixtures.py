#!/usr/bin/env python3
"""Writes the fixtures of tests/test_quant.c: gguf-py's quantize() and dequantize() (which
mirror ggml's reference quantizers) of small matrices, for the block-quantized dtypes.

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_quant_fixtures.py

Output: tests/fixtures/quant/quant.bin, little-endian:
    "COLQUANT" (8 bytes), u32 version (1), u32 number of cases, then each case:
    u32 ggml type (8 q8_0, 2 q4_0, 12 q4_K, 14 q6_K), u32 rows, u32 cols,
    u32 has_x (1: x is meaningful and q = gguf-py quantize(x); 0: gguf-py has no
    quantizer for the type, q is random bytes with finite scales and x is zeros),
    f32 x[rows][cols], u8 q[rows][cols / block * block bytes], f32 dq[rows][cols] =
    gguf-py dequantize(q).
The q8_0 and q4_0 cases hold the edge cases: a block of zeros (and one led by -0.0),
values so large the f16 scale overflows to infinity, values so small it underflows,
a negative maximum, a negative and a positive value of the same largest magnitude,
values exactly halfway between levels. About 60 KB; the bytes depend only on the
seed and the numpy/gguf versions (printed).
"""
import os
import struct

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

OUT = os.path.join("tests", "fixtures", "quant")
BLOCK = {T.Q8_0: (32, 34), T.Q4_0: (32, 18), T.Q4_K: (256, 144), T.Q6_K: (256, 210)}


def edge_rows(rng, cols):
    """rows of `cols` values, each block of 32 an edge case or random"""
    rows = []
    r = rng.standard_normal((6, cols)).astype(np.float32)
    r[0, 0:32] = 0.0                                   # a block of zeros
    r[0, 32:64] = 0.0
    r[0, 32] = -0.0                                    # zeros led by -0.0
    r[0, 64:96] *= np.float32(1e7)                     # q8_0: d = amax / 127 > 65504: inf
    r[0, 96:128] *= np.float32(1e6)                    # q4_0: d = max / -8 > 65504: inf
    r[1, 0:32] *= np.float32(1e-6)                     # d an f16 subnormal
    r[1, 32:64] *= np.float32(1e-9)                    # d underflows to 0 in f16
    r[1, 64:96] = -np.abs(r[1, 64:96])                 # every value negative
    r[1, 96:128] = np.abs(r[1, 96:128])
    r[1, 100] = -r[1, 96:128].max() * 1.5              # the negative maximum inside positives
    r[2, 0:32] = np.linspace(-1, 1, 32, dtype=np.float32)
    r[2, 5] = -2.0                                     # -2 and 2: the first of the largest
    r[2, 20] = 2.0
    r[2, 32:64] = (np.arange(32, dtype=np.float32) - 16.0) * np.float32(0.5)
    r[2, 32] = -127.0                                  # q8_0: id = 1, halves round away
    r[2, 33] = 63.5
    r[2, 34] = -63.5
    r[2, 35] = 0.5
    r[2, 64:96] = np.float32(7.0)                      # constant block
    r[3, :] = rng.uniform(-1, 1, cols).astype(np.float32) * np.float32(100)
    r[4, :] = rng.standard_t(2, cols).astype(np.float32)  # heavy tails
    r[5, :] = rng.standard_normal(cols).astype(np.float32) * np.float32(0.02)  # weight-like
    rows.append(r)
    return np.concatenate(rows, axis=0)


def random_kquant_bytes(rng, qt, rows, cols):
    """random blocks with finite, moderate f16 scales (gguf-py cannot quantize to K types)"""
    nb = cols // 256
    bs = BLOCK[qt][1]
    q = rng.integers(0, 256, size=(rows, nb, bs), dtype=np.uint8)
    d = (rng.standard_normal((rows, nb)) * 0.01).astype(np.float16).view(np.uint8).reshape(rows, nb, 2)
    if qt == T.Q4_K:
        dmin = (rng.standard_normal((rows, nb)) * 0.01).astype(np.float16).view(np.uint8).reshape(rows, nb, 2)
        q[:, :, 0:2] = d
        q[:, :, 2:4] = dmin
    else:
        q[:, :, 208:210] = d
    q[0, 0, :] = 0  # an all-zero block
    return q.reshape(rows, nb * bs)


def main():
    np.seterr(over="ignore", invalid="ignore")  # the edge cases overflow the f16 scale on purpose
    rng = np.random.default_rng(20240519)
    cases = []
    for qt in (T.Q8_0, T.Q4_0):
        for cols in (128, 256):
            x = edge_rows(rng, cols) if cols == 128 else rng.standard_normal((4, cols)).astype(np.float32)
            q = quants.quantize(x, qt)
            cases.append((qt, x, q, 1))
    for qt in (T.Q4_K, T.Q6_K):
        rows, cols = 6, 512
        q = random_kquant_bytes(rng, qt, rows, cols)
        cases.append((qt, np.zeros((rows, cols), np.float32), q, 0))
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "quant.bin")
    with open(path, "wb") as f:
        f.write(b"COLQUANT")
        f.write(struct.pack("<II", 1, len(cases)))
        for qt, x, q, has_x in cases:
            rows, cols = x.shape
            block, bbytes = BLOCK[qt]
            assert q.shape == (rows, cols // block * bbytes) and q.dtype == np.uint8
            dq = quants.dequantize(q, qt).astype(np.float32)
            assert dq.shape == (rows, cols)
            f.write(struct.pack("<IIII", int(qt), rows, cols, has_x))
            f.write(np.ascontiguousarray(x, dtype="<f4").tobytes())
            f.write(np.ascontiguousarray(q).tobytes())
            f.write(np.ascontiguousarray(dq, dtype="<f4").tobytes())
    print(f"{path}: {os.path.getsize(path)} bytes, {len(cases)} cases (numpy {np.__version__}, "
          f"gguf {getattr(gguf, '__version__', 'installed')})")


if __name__ == "__main__":
    main()
