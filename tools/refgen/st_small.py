"""A small, deterministic safetensors writer for the fixture scripts.

The header is written with sorted keys and the tensors in name order, so a rerun
writes the same bytes (safetensors.numpy.save_file orders __metadata__ by hash).
"""
import json
import struct

import numpy as np

_DT = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64",
       np.dtype("int32"): "I32", np.dtype("uint8"): "U8"}


def write_safetensors(path, tensors, metadata=None):
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        if a.dtype not in _DT:
            raise ValueError(f"{name}: dtype {a.dtype} not supported")
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _DT[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    h = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
