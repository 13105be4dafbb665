#!/usr/bin/env python3
"""Writes the PyTorch checkpoint fixtures for tests/test_torchbin.c.

Run from the repository root with the refgen virtual environment:

    tools/refgen/.venv/bin/python tools/refgen/make_torch_fixtures.py

Outputs (tests/fixtures/torchbin/, all small):
  dtypes.bin        every dtype a state dict holds, special float values, a 0-d and an empty tensor
  views.bin         tensors sharing storage: the same tensor twice (tied), a row (storage offset),
                    a column slice, a transpose, a permuted 3-d view, an expand (stride 0), a 0-d view
  module.bin        nn.Sequential(Linear(4, 3), LayerNorm(3)).state_dict(), saved to a buffer
                    (archive prefix "archive/"), with nn.Module's _metadata (a BUILD)
  module_p4.bin     the same state dict with pickle protocol 4 (FRAME, MEMOIZE, STACK_GLOBAL, ...)
  module_deflate.bin  module.bin re-zipped with deflate
  nested.bin        {"model": state dict, "epoch": 3, "lr": 0.5, "tag": "x", "hist": [1, 2]}
  params.bin        nn.Parameter values (torch._utils._rebuild_parameter)
  legacy.bin        the pre-1.6 (non-zip) torch.save format, which is refused
  malicious.bin     a zip laid out like torch's whose data.pkl calls os.system via REDUCE
  reference.json    for every valid file: tensor names in order, dtype, shape and the raw
                    little-endian bytes of the contiguous tensor (hex), taken from torch directly
and the seed corpus of tests/fuzz/fuzz_torchbin.c (tests/fuzz/corpus_torchbin/).
"""
import collections
import io
import json
import os
import pickle
import zipfile

import torch

OUT = os.path.join("tests", "fixtures", "torchbin")
CORPUS = os.path.join("tests", "fuzz", "corpus_torchbin")

DTYPE_NAME = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}


def zinfo(name, compress=zipfile.ZIP_STORED):
    """A zip entry with a fixed date, so that reruns write the same bytes."""
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = compress
    info.external_attr = 0o644 << 16
    return info


def ref_of(t):
    c = t.detach().contiguous().reshape(-1)
    raw = c.view(torch.uint8).numpy().tobytes() if c.numel() else b""
    return {"dtype": DTYPE_NAME[t.dtype], "shape": list(t.shape), "hex": raw.hex()}


def flat(sd, prefix=""):
    """(name, tensor) pairs in the order the C reader reports them."""
    out = []
    for k, v in sd.items():
        name = prefix + k
        if isinstance(v, torch.Tensor):
            out.append((name, v))
        elif isinstance(v, dict):
            out.extend(flat(v, name + "."))
    return out


def save(name, obj, refs, **kw):
    path = os.path.join(OUT, name)
    torch.save(obj, path, **kw)
    refs[name] = [dict(name=n, **ref_of(t)) for n, t in flat(obj)]
    return path


def write_fuzz_seeds(g):
    """Seeds for tests/fuzz/fuzz_torchbin.c: whole checkpoints, and bare data.pkl pickles that the
    harness wraps in a zip whose storages archive/data/0..15 hold 64 bytes each."""
    os.makedirs(CORPUS, exist_ok=True)
    for name in ("module.bin", "module_p4.bin", "module_deflate.bin", "params.bin", "views.bin",
                 "malicious.bin", "legacy.bin"):
        with open(os.path.join(OUT, name), "rb") as src, open(os.path.join(CORPUS, name), "wb") as dst:
            dst.write(src.read())
    m = torch.randn(4, 4, generator=g)
    sd = collections.OrderedDict()
    sd["m"] = m                                        # 16 floats = 64 bytes
    sd["mt"] = m.t()
    sd["row"] = m[2]
    sd["col"] = m[:, 1]
    sd["h"] = torch.randn(32, generator=g).half()
    sd["bf"] = torch.randn(2, 16, generator=g).bfloat16()[:, ::3]
    sd["d"] = torch.randn(8, generator=g, dtype=torch.float64).reshape(2, 2, 2).permute(2, 1, 0)
    sd["l"] = torch.arange(8)
    sd["i"] = torch.arange(16, dtype=torch.int32).reshape(4, 4)[1:, 1:]
    sd["s"] = torch.arange(32, dtype=torch.int16)
    sd["c"] = torch.arange(64, dtype=torch.int8).reshape(8, 8).t()
    sd["u"] = torch.arange(64, dtype=torch.uint8)[5]
    sd["b"] = torch.ones(64, dtype=torch.bool).reshape(4, 16)
    sd["e"] = torch.randn(4, 1, generator=g).expand(4, 4).contiguous()[:, :1].expand(4, 5)
    ckpt = {"model": collections.OrderedDict(w=sd["m"], b=sd["h"]), "epoch": 3, "lr": 1e-3, "tag": "run",
            "opt": {"state": {0: {"step": 1}}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}}
    for proto, obj, name in ((2, sd, "state_p2"), (4, sd, "state_p4"), (2, ckpt, "ckpt_p2")):
        buf = io.BytesIO()
        torch.save(obj, buf, pickle_protocol=proto)
        with zipfile.ZipFile(buf) as z:
            pkl = z.read("archive/data.pkl")
            assert all(i.file_size == 64 for i in z.infolist() if "/data/" in i.filename)
        with open(os.path.join(CORPUS, name + ".pkl"), "wb") as fh:
            fh.write(pkl)
    with zipfile.ZipFile(os.path.join(OUT, "malicious.bin")) as z, \
            open(os.path.join(CORPUS, "malicious.pkl"), "wb") as fh:
        fh.write(z.read("archive/data.pkl"))


def main():
    os.makedirs(OUT, exist_ok=True)
    g = torch.Generator().manual_seed(1234)
    refs = {}

    # every dtype, special values included
    f = torch.randn(2, 3, generator=g, dtype=torch.float64)
    f[0, 0], f[0, 1], f[0, 2] = float("inf"), float("nan"), -0.0
    f[1, 0] = 5e-324  # subnormal
    sd = collections.OrderedDict()
    sd["f64"] = f
    sd["f32"] = torch.randn(3, 4, generator=g)
    sd["f32"][0, 0] = float("-inf")
    sd["f16"] = torch.randn(5, generator=g).half()
    sd["bf16"] = torch.randn(2, 2, 2, generator=g).bfloat16()
    sd["i64"] = torch.tensor([0, -1, 2**62, -(2**63), 2**63 - 1, 7], dtype=torch.int64)
    sd["i32"] = torch.tensor([[1, -2], [2**31 - 1, -(2**31)]], dtype=torch.int32)
    sd["i16"] = torch.tensor([-32768, 32767, 5], dtype=torch.int16)
    sd["i8"] = torch.tensor([-128, 127, 0, -1], dtype=torch.int8)
    sd["u8"] = torch.tensor([0, 255, 17], dtype=torch.uint8)
    sd["bool"] = torch.tensor([True, False, True], dtype=torch.bool)
    sd["scalar"] = torch.tensor(3.25)
    sd["empty"] = torch.zeros(0, 3)
    save("dtypes.bin", sd, refs)

    # views of shared storages
    base = torch.randn(4, 6, generator=g)
    small = torch.randn(3, 1, generator=g)
    cube = torch.randn(2, 3, 4, generator=g)
    sd = collections.OrderedDict()
    sd["base"] = base
    sd["tied"] = base
    sd["row"] = base[1]
    sd["cols"] = base[:, 2:4]
    sd["t"] = base.t()
    sd["elem"] = base[2, 3]
    sd["expand"] = small.expand(3, 4)
    sd["perm"] = cube.permute(2, 0, 1)
    sd["strided"] = cube[:, ::2, 1::2]
    save("views.bin", sd, refs)

    # a module's state dict
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    with torch.no_grad():
        model[1].weight.uniform_(0.5, 1.5)
        model[1].bias.uniform_(-0.5, 0.5)
    msd = model.state_dict()
    buf = io.BytesIO()
    torch.save(msd, buf)
    with open(os.path.join(OUT, "module.bin"), "wb") as fh:
        fh.write(buf.getvalue())
    refs["module.bin"] = [dict(name=n, **ref_of(t)) for n, t in flat(msd)]
    save("module_p4.bin", msd, refs, pickle_protocol=4)

    # the same, deflated
    with zipfile.ZipFile(os.path.join(OUT, "module.bin")) as zin, \
            zipfile.ZipFile(os.path.join(OUT, "module_deflate.bin"), "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(zinfo(info.filename, zipfile.ZIP_DEFLATED), zin.read(info.filename))
    refs["module_deflate.bin"] = refs["module.bin"]

    # a training checkpoint: nested dict and plain values
    save("nested.bin", {"model": msd, "epoch": 3, "lr": 0.5, "tag": "x", "hist": [1, 2]}, refs)

    # parameters (rebuilt through torch._utils._rebuild_parameter)
    save("params.bin", collections.OrderedDict(w=torch.nn.Parameter(torch.randn(2, 3, generator=g)),
                                               b=torch.nn.Parameter(torch.zeros(3), requires_grad=False)),
         refs)

    # the legacy format
    torch.save({"w": torch.ones(2)}, os.path.join(OUT, "legacy.bin"), _use_new_zipfile_serialization=False)

    # a malicious pickle in a torch-like zip
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with zipfile.ZipFile(os.path.join(OUT, "malicious.bin"), "w", zipfile.ZIP_STORED) as z:
        z.writestr(zinfo("archive/data.pkl"), pickle.dumps(collections.OrderedDict(w=Evil()), protocol=2))
        z.writestr(zinfo("archive/byteorder"), "little")
        z.writestr(zinfo("archive/version"), "3\n")

    write_fuzz_seeds(g)

    with open(os.path.join(OUT, "reference.json"), "w") as fh:
        json.dump(refs, fh, indent=1)
        fh.write("\n")
    total = sum(os.path.getsize(os.path.join(OUT, n)) for n in os.listdir(OUT))
    print(f"wrote {len(os.listdir(OUT))} files, {total} bytes, torch {torch.__version__}")


if __name__ == "__main__":
    main()
