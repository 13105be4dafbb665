#!/usr/bin/env python3
"""Writes the fixtures of tests/test_ops_image.c: PyTorch's conv2d, GroupNorm and
nearest upsampling, forward and gradients, on small random inputs.

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_image_ops_fixtures.py

Outputs (tests/fixtures/image_ops/, f32, about 100 KB in all):
  conv.safetensors   for each case k: c{k}.cfg (i64: stride_h, stride_w, pad_top,
                     pad_bottom, pad_left, pad_right, has_bias), c{k}.x, c{k}.w,
                     c{k}.b (when has_bias), c{k}.y = conv2d of x (zero padding
                     as F.pad then F.conv2d, the way diffusers pads its VAE
                     downsampler asymmetrically), c{k}.dy (a random upstream
                     gradient) and the gradients of sum(y * dy): c{k}.dx,
                     c{k}.dw, c{k}.db (when has_bias)
  norm_upsample.safetensors
                     g{k}.cfg (i64: groups, affine; eps is 1e-5 or 1e-6 as
                     g{k}.eps f32), g{k}.x, g{k}.w, g{k}.b (affine: perturbed
                     from ones / zeros), g{k}.y = nn.GroupNorm, g{k}.dy, g{k}.dx,
                     g{k}.dw, g{k}.db; u{k}.cfg (i64: scale), u{k}.x,
                     u{k}.y = F.interpolate(mode="nearest"), u{k}.dy, u{k}.dx
The header's metadata records the versions. The files are written by this
script's own safetensors writer (tensors and metadata keys sorted), so a rerun
with the same versions gives the same bytes. torch runs on one thread with
deterministic algorithms; nothing is downloaded.
"""
import json
import os
import struct
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

OUT = os.path.join("tests", "fixtures", "image_ops")

# (B, Cin, H, W, Cout, kh, kw, stride_h, stride_w, top, bottom, left, right, bias)
CONV_CASES = [
    (2, 3, 5, 6, 5, 1, 1, 1, 1, 0, 0, 0, 0, True),     # 1x1: the direct GEMM
    (2, 3, 9, 11, 7, 3, 3, 1, 1, 1, 1, 1, 1, True),    # 3x3, padding 1
    (2, 5, 10, 9, 6, 3, 3, 2, 2, 1, 1, 1, 1, True),    # 3x3, stride 2, padding 1
    (2, 4, 8, 8, 4, 3, 3, 2, 2, 0, 1, 0, 1, True),     # diffusers' VAE downsampler: F.pad (0, 1, 0, 1), stride 2
    (2, 3, 7, 6, 5, 1, 1, 2, 2, 0, 0, 0, 0, False),    # 1x1 with stride 2 (im2col), no bias
    (2, 7, 6, 9, 3, 2, 3, 1, 2, 2, 0, 1, 1, True),     # 2x3 kernel, strides (1, 2), padding (2, 0, 1, 1)
    (2, 2, 6, 5, 3, 5, 5, 1, 1, 2, 2, 2, 2, False),    # 5x5, padding 2: taps mostly outside the image
    (1, 13, 4, 4, 11, 3, 3, 1, 1, 1, 1, 1, 1, True),   # Cin, Cout odd primes, B = 1
]

# (shape, groups, affine, eps)
NORM_CASES = [
    ((2, 6, 5, 7), 3, True, 1e-5),
    ((2, 8, 4, 4), 2, False, 1e-6),
    ((2, 6, 10), 2, True, 1e-5),        # a 3-D input [B, C, L]
    ((1, 64, 8, 8), 32, True, 1e-6),    # 32 groups of 2 channels, as in Stable Diffusion
    ((2, 5, 3, 3), 5, True, 1e-5),      # one channel per group
]

# (shape, scale)
UPSAMPLE_CASES = [((2, 3, 4, 5), 2), ((1, 2, 3, 2), 3)]


def save(path, tensors, metadata):
    """A safetensors file with tensors in name order and a sorted, compact header."""
    names = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, off = {"__metadata__": dict(sorted(metadata.items()))}, [], 0
    for k in sorted(tensors):
        t = tensors[k].detach().contiguous()
        b = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[k] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float32)


def conv_fixtures(gen):
    out = {}
    for k, (B, Cin, H, W, Cout, kh, kw, sh, sw, pt, pb, pl, pr, has_b) in enumerate(CONV_CASES):
        x = randn(gen, B, Cin, H, W).requires_grad_()
        w = (randn(gen, Cout, Cin, kh, kw) / (Cin * kh * kw) ** 0.5).requires_grad_()
        b = randn(gen, Cout).requires_grad_() if has_b else None
        y = F.conv2d(F.pad(x, (pl, pr, pt, pb)), w, b, stride=(sh, sw))
        dy = randn(gen, *y.shape)
        (y * dy).sum().backward()
        p = f"c{k}."
        out[p + "cfg"] = torch.tensor([sh, sw, pt, pb, pl, pr, int(has_b)], dtype=torch.int64)
        out.update({p + "x": x, p + "w": w, p + "y": y, p + "dy": dy, p + "dx": x.grad, p + "dw": w.grad})
        if has_b:
            out.update({p + "b": b, p + "db": b.grad})
    return out


def norm_upsample_fixtures(gen):
    out = {}
    for k, (shape, groups, affine, eps) in enumerate(NORM_CASES):
        m = torch.nn.GroupNorm(groups, shape[1], eps=eps, affine=affine)
        if affine:
            with torch.no_grad():
                m.weight.copy_(1.0 + 0.3 * randn(gen, shape[1]))
                m.bias.copy_(0.2 * randn(gen, shape[1]))
        x = (1.5 * randn(gen, *shape) + 0.7).requires_grad_()
        y = m(x)
        dy = randn(gen, *shape)
        (y * dy).sum().backward()
        p = f"g{k}."
        out[p + "cfg"] = torch.tensor([groups, int(affine)], dtype=torch.int64)
        out[p + "eps"] = torch.tensor([eps], dtype=torch.float32)
        out.update({p + "x": x, p + "y": y, p + "dy": dy, p + "dx": x.grad})
        if affine:
            out.update({p + "w": m.weight, p + "b": m.bias, p + "dw": m.weight.grad, p + "db": m.bias.grad})
    for k, (shape, scale) in enumerate(UPSAMPLE_CASES):
        x = randn(gen, *shape).requires_grad_()
        y = F.interpolate(x, scale_factor=scale, mode="nearest")
        dy = randn(gen, *y.shape)
        (y * dy).sum().backward()
        p = f"u{k}."
        out[p + "cfg"] = torch.tensor([scale], dtype=torch.int64)
        out.update({p + "x": x, p + "y": y, p + "dy": dy, p + "dx": x.grad})
    return out


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    meta = {"generator": "tools/refgen/make_image_ops_fixtures.py", "torch": torch.__version__,
            "numpy": np.__version__, "python": sys.version.split()[0]}
    gen = torch.Generator().manual_seed(20250115)
    save(os.path.join(OUT, "conv.safetensors"), conv_fixtures(gen), meta)
    save(os.path.join(OUT, "norm_upsample.safetensors"), norm_upsample_fixtures(gen), meta)
    for f in sorted(os.listdir(OUT)):
        print(f, os.path.getsize(os.path.join(OUT, f)))


if __name__ == "__main__":
    main()
