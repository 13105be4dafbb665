#!/usr/bin/env python3
"""Writes the NumPy .npz fixtures of tests/test_npz.c and the seed corpus of tests/fuzz/fuzz_npz.c.

Run from the repository root with the refgen virtual environment:

    tools/refgen/.venv/bin/python tools/refgen/make_npz_fixtures.py

Outputs (tests/fixtures/npz/, ~20 KB in all):
  good.npz             np.savez (stored entries) of arrays of every dtype the reader takes (f8 f4 f2 i8 i4 i2
                       i1 u1 bool), odd values (inf, nan, -0, subnormals, integer extremes), a scalar (shape ()),
                       0-size arrays, an 8-d array, a positional array (arr_0) and AlphaFold-style names holding
                       '/' and '//' ("alphafold/alphafold_iteration/evoformer/.../transition1//weights")
  good_compressed.npz  np.savez_compressed of the same arrays (deflated entries)
  good.ref.safetensors for every array NAME of good.npz as np.load reads it back: "raw/NAME", the array itself
                       (same dtype, shape and bytes), and "f32/NAME", numpy's .astype(np.float32); the metadata
                       "order" lists the names in the order np.savez was given them, one per line
  versions.npz         hand-written .npy headers numpy reads: format 1.0, 2.0 and 3.0 (np.lib.format.write_array
                       with version=...), keys in another order, double quotes, no trailing comma, extra spaces,
                       Python 2's 3L, a header without the trailing newline, stored and deflated entries mixed
  versions.ref.safetensors  the same kind of reference for versions.npz
  bad_*.npz            files the reader refuses (each with its own message; see tests/test_npz.c): truncated,
                       bad magic, Fortran order, big-endian, wrong data length, an extra header key, a missing
                       key, a non-.npy entry, object / structured / complex dtypes, format version 4.0, a header
                       running past the entry, 9 dimensions, '(3)' as a shape, a name twice, a bare .npy file
The values come from numpy (np.load of the written files); zip entries carry a fixed date, so reruns write
the same bytes (np.savez's own entries are dated by a patched clock).
"""
import contextlib
import io
import os
import struct
import time
import warnings
import zipfile

import numpy as np
from safetensors.numpy import save_file

OUT = os.path.join("tests", "fixtures", "npz")
CORPUS = os.path.join("tests", "fuzz", "corpus_npz")
AF = "alphafold/alphafold_iteration/evoformer/evoformer_iteration/msa_transition/"
FIXED = time.mktime((2020, 1, 1, 0, 0, 0, 0, 1, -1))


@contextlib.contextmanager
def fixed_clock():
    """zipfile dates the entries np.savez writes with time.localtime(time.time()): fix it."""
    real = time.time
    time.time = lambda: FIXED
    try:
        yield
    finally:
        time.time = real


def zinfo(name, compress=zipfile.ZIP_STORED):
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = compress
    info.external_attr = 0o644 << 16
    return info


def good_arrays():
    rng = np.random.default_rng(20261201)
    a = {}
    a[AF + "transition1//weights"] = rng.standard_normal((2, 3, 4)).astype(np.float32)
    a[AF + "transition1//bias"] = rng.standard_normal((4,)).astype(np.float32)
    a[AF + "input_layer_norm//scale"] = np.ones((3,), np.float32) + rng.standard_normal(3).astype(np.float32) / 8
    a["f64"] = np.array([[1.0, -0.0], [np.inf, -np.inf], [np.nan, 1e-40], [1e300, 3.141592653589793],
                         [2.0 ** -149, 1 + 2.0 ** -24]], np.float64)
    a["f16"] = np.array([0.5, -2.0, 6.1e-5, 6e-8, 65504.0, np.inf, -0.0, np.nan], np.float16)
    a["i64"] = np.array([[-(2 ** 63), 2 ** 63 - 1], [2 ** 24 + 1, -7]], np.int64)
    a["i32"] = np.array([-(2 ** 31), 2 ** 31 - 1, 16777217, 0, 5], np.int32)
    a["i16"] = np.array([[-32768, 32767, -1]], np.int16)
    a["i8"] = np.array([-128, 127, 0, -3], np.int8)
    a["u8"] = np.arange(250, 256, dtype=np.uint8).reshape(2, 3)
    a["bool"] = np.array([[True, False, True], [False, False, True]])
    a["scalar"] = np.array(2.5, np.float32)
    a["scalar_i64"] = np.array(-12345678901, np.int64)
    a["empty"] = np.zeros((0, 3), np.float32)
    a["empty_f16"] = np.zeros((4, 0, 2), np.float16)
    a["dims8"] = rng.standard_normal((1, 2, 1, 2, 1, 1, 2, 3)).astype(np.float32)
    a["big"] = rng.standard_normal((16, 64)).astype(np.float32)
    return a


def write_reference(npz_path, ref_path, order):
    """What np.load reads back from npz_path, as safetensors."""
    tensors = {}
    with np.load(npz_path) as z, np.errstate(over="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")   # numpy notes the Python 2 header; 1e300 overflows float32 (to inf)
        assert list(z.files) == order, (z.files, order)
        for name in order:
            arr = z[name]   # np.array(order="C"), not np.ascontiguousarray: that makes a 0-d array 1-d
            tensors["raw/" + name] = np.array(arr, order="C")
            tensors["f32/" + name] = np.array(arr.astype(np.float32), order="C")
            assert tensors["raw/" + name].shape == arr.shape
    save_file(tensors, ref_path, metadata={"order": "\n".join(order)})


def npy_bytes(arr, version):
    b = io.BytesIO()
    np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def npy_raw(header, data, version=(1, 0)):
    """A .npy image with a header given as text (padded with spaces to numpy's 64-byte alignment + '\\n')."""
    h = header.encode("latin1")
    pre = b"\x93NUMPY" + bytes(version)
    size = 2 if version[0] == 1 else 4
    total = len(pre) + size + len(h) + 1
    h += b" " * ((-total) % 64) + b"\n"
    return pre + (struct.pack("<H", len(h)) if size == 2 else struct.pack("<I", len(h))) + h + data


def write_zip(path, entries):
    """entries: (name, bytes, compress) in order."""
    with zipfile.ZipFile(path, "w") as z:
        for name, data, comp in entries:
            z.writestr(zinfo(name, comp), data)


def versions(path):
    f4 = np.arange(6, dtype=np.float32).reshape(2, 3) / 4 - 0.5
    i2 = np.array([[1, -2], [3, -4]], np.int16)
    d = zipfile.ZIP_DEFLATED
    s = zipfile.ZIP_STORED
    noline = b"{'descr': '|u1', 'fortran_order': False, 'shape': ()}"   # no padding, no newline
    entries = [
        ("v1.npy", npy_bytes(f4, (1, 0)), s),
        ("v2.npy", npy_bytes(f4 * 2, (2, 0)), d),
        ("v3.npy", npy_bytes(i2, (3, 0)), s),
        ("reordered.npy", npy_raw("{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}", (f4 + 1).tobytes()), s),
        ("dquotes.npy", npy_raw('{"descr": "<f4", "fortran_order": False, "shape": (3,)}', f4[0].tobytes()), d),
        ("spaces.npy", npy_raw("{ 'descr' : '<i2' ,'fortran_order':False,'shape':( 2 , 2 , ) , }", i2.tobytes()), s),
        ("long/py2.npy", npy_raw("{'descr': '<i2', 'fortran_order': False, 'shape': (2L, 2L), }", (i2 * 3).tobytes()), s),
        ("noline.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", len(noline)) + noline + b"\x07", s),
        ("scalar_v2.npy", npy_bytes(np.array(-1.5, np.float64), (2, 0)), s),
    ]
    write_zip(path, entries)
    return [e[0][:-4] for e in entries]


def bad_files():
    s = zipfile.ZIP_STORED
    f4 = np.arange(6, dtype=np.float32).reshape(2, 3)
    ok = ("ok.npy", npy_bytes(f4, (1, 0)), s)
    files = {
        "bad_magic": [ok, ("x.npy", b"\x93NUMPX" + npy_bytes(f4, (1, 0))[6:], s)],
        "bad_fortran": [("w.npy", npy_bytes(np.asfortranarray(f4), (1, 0)), s)],
        "bad_big_endian": [("w.npy", npy_bytes(f4.astype(">f4"), (1, 0)), s)],
        "bad_length": [("w.npy", npy_bytes(f4, (1, 0))[:-4], s)],
        "bad_length_long": [("w.npy", npy_bytes(f4, (1, 0)) + b"\0\0\0\0", s)],
        "bad_extra_key": [("w.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'foo': 1, }",
                                            f4.tobytes()), s)],
        "bad_missing_key": [("w.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, }", f4.tobytes()), s)],
        "bad_not_npy": [ok, ("readme.txt", b"hello\n", s)],
        "bad_object": [("w.npy", npy_bytes(np.array([1, "a"], dtype=object), (1, 0)), s)],
        "bad_structured": [("w.npy", npy_bytes(np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]), (1, 0)), s)],
        "bad_complex": [("w.npy", npy_bytes(np.zeros(2, np.complex64), (1, 0)), s)],
        "bad_version": [("w.npy", b"\x93NUMPY\x04\x00" + npy_bytes(f4, (2, 0))[8:], s)],
        "bad_header_past_end": [("w.npy", b"\x93NUMPY\x01\x00" + struct.pack("<H", 500) + b"{'descr': '<f4'", s)],
        "bad_dims9": [("w.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, "
                                        "1, 1), }", b"\0" * 4), s)],
        "bad_paren_shape": [("w.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (3), }",
                                              b"\0" * 12), s)],
        "bad_duplicate": [ok, ok],
    }
    return files


def main():
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(CORPUS, exist_ok=True)
    arrays = good_arrays()
    pos = np.array([[7, 8, 9]], np.int32)
    good = os.path.join(OUT, "good.npz")
    with fixed_clock():
        np.savez(good, pos, **arrays)
        np.savez_compressed(os.path.join(OUT, "good_compressed.npz"), pos, **arrays)
    order = list(arrays) + ["arr_0"]
    write_reference(good, os.path.join(OUT, "good.ref.safetensors"), order)
    with np.load(os.path.join(OUT, "good_compressed.npz")) as z:   # the same arrays, deflated
        with np.load(good) as g:
            for k in order:
                assert z[k].tobytes() == g[k].tobytes() and z[k].shape == g[k].shape

    vpath = os.path.join(OUT, "versions.npz")
    vorder = versions(vpath)
    write_reference(vpath, os.path.join(OUT, "versions.ref.safetensors"), vorder)

    for name, entries in bad_files().items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # zipfile warns about the duplicate name
            write_zip(os.path.join(OUT, name + ".npz"), entries)
    data = open(good, "rb").read()
    open(os.path.join(OUT, "bad_truncated.npz"), "wb").write(data[: len(data) // 2])
    open(os.path.join(OUT, "bad_single_npy.npz"), "wb").write(npy_bytes(np.ones(3, np.float32), (1, 0)))

    # seeds: small archives and bare .npy images (the harness wraps those in a zip)
    write_zip(os.path.join(CORPUS, "small.npz"), [
        ("a/b//w.npy", npy_bytes(np.arange(6, dtype=np.float32).reshape(2, 3), (1, 0)), zipfile.ZIP_STORED),
        ("s.npy", npy_bytes(np.array(3, np.int64), (1, 0)), zipfile.ZIP_DEFLATED),
        ("e.npy", npy_bytes(np.zeros((0, 2), np.float16), (2, 0)), zipfile.ZIP_STORED)])
    open(os.path.join(CORPUS, "f4.npy"), "wb").write(npy_bytes(np.arange(4, dtype=np.float32), (1, 0)))
    open(os.path.join(CORPUS, "bool_v3.npy"), "wb").write(npy_bytes(np.array([[True, False]]), (3, 0)))
    open(os.path.join(CORPUS, "py2.npy"), "wb").write(
        npy_raw("{'shape': (2L,), \"descr\": '<i2', 'fortran_order': False}", b"\1\0\2\0"))


if __name__ == "__main__":
    main()
