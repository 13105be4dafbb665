#!/usr/bin/env python3
"""Writes tests/fixtures/diffusion/torch_rng.safetensors for tests/test_rng_torch.c.

Run from the repository root with the refgen virtual environment:

    tools/refgen/.venv/bin/python tools/refgen/make_torch_rng_fixtures.py

torch.rand / torch.randn (float32, CPU) drawn from torch.Generator().manual_seed(seed),
call after call on the same generator, for the two kernels torch chooses between by the
CPU capability it starts with: "avx2" (ATEN_CPU_CAPABILITY=avx2) and "libm"
(ATEN_CPU_CAPABILITY=default; AVX512 machines compute the same). Each capability runs in
its own child process, as torch reads the setting once at start-up.

The file's __metadata__ "plan" is JSON: a list of runs {"name", "path", "seed", "ops"},
ops being ["randn", n], ["rand", n] or ["seed", s] in order on one generator (seeds are
decimal strings: they reach 2^64 - 1, beyond a JSON reader's doubles). For op k of
run R the tensors are "R.k" (all n values) when n <= 256, else "R.k.head" and "R.k.tail"
(the first and last 32 values) and "R.k.hash" (I64: FNV-1a 64 over the little-endian
bytes of all n float32 values).
"""
import json
import os
import subprocess
import sys

OUT = os.path.join("tests", "fixtures", "diffusion", "torch_rng.safetensors")

SEEDS = [0, 1, 42, 2**32 + 5, 2**63 - 1, 2**64 - 1, 1234567890123, 67280421310721]
SIZES = [1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 47, 100, 255, 256, 257, 1000, 4 * 64 * 64, 4 * 64 * 64 + 9]


def runs_for(path):
    runs = []
    # one fresh generator per size
    for n in SIZES:
        runs.append({"name": f"{path}.size{n}", "path": path, "seed": "42", "ops": [["randn", n]]})
    # every seed, a mixed sequence on one generator
    mixed = [["randn", 1], ["randn", 2], ["randn", 15], ["randn", 16], ["randn", 17], ["rand", 5],
             ["randn", 3], ["randn", 31], ["rand", 40], ["randn", 4 * 64 * 64], ["randn", 1], ["randn", 33]]
    for i, s in enumerate(SEEDS):
        runs.append({"name": f"{path}.seed{i}", "path": path, "seed": str(s), "ops": mixed})
    # the cached second normal: across a large call, and dropped by manual_seed
    runs.append({"name": f"{path}.cache", "path": path, "seed": "7",
                 "ops": [["randn", 1], ["randn", 64], ["randn", 1], ["randn", 5], ["seed", "7"], ["randn", 1],
                         ["rand", 3], ["randn", 2]]})
    # diffusers: initial latents, then per-step noise of the same shape (SD at 512 px and a tiny one)
    runs.append({"name": f"{path}.latents", "path": path, "seed": "1234",
                 "ops": [["randn", 4 * 64 * 64]] * 4 + [["randn", 4 * 8 * 8]] * 3})
    # past the twister's 624-word state several times with odd counts
    runs.append({"name": f"{path}.twist", "path": path, "seed": "3",
                 "ops": [["rand", 623], ["rand", 1], ["rand", 625], ["randn", 1247], ["randn", 9], ["rand", 2000]]})
    return runs


def fnv64(raw):
    h = 0xcbf29ce484222325
    for b in raw:
        h ^= b
        h = (h * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def child(path):
    import numpy as np
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    cap = torch.backends.cpu.get_cpu_capability()
    want = {"avx2": "AVX2", "libm": "DEFAULT"}[path]
    if cap != want:
        sys.exit(f"torch runs with CPU capability {cap}, not {want}")
    out = {}
    for run in runs_for(path):
        g = torch.Generator().manual_seed(int(run["seed"]))
        for k, (op, n) in enumerate(run["ops"]):
            if op == "seed":
                g.manual_seed(int(n))
                continue
            f = torch.randn if op == "randn" else torch.rand
            v = f(n, generator=g, dtype=torch.float32).numpy()
            key = f"{run['name']}.{k}"
            if n <= 256:
                out[key] = v.tolist()
            else:
                raw = v.astype("<f4").tobytes()
                out[key + ".head"] = v[:32].tolist()
                out[key + ".tail"] = v[-32:].tolist()
                out[key + ".hash"] = fnv64(raw) - (1 << 64 if fnv64(raw) >= 1 << 63 else 0)
    json.dump({"torch": torch.__version__, "capability": cap, "out": out}, sys.stdout)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    import numpy as np
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from st_small import write_safetensors
    tensors, plan, caps = {}, [], {}
    for path, cap in [("avx2", "avx2"), ("libm", "default")]:
        env = dict(os.environ, ATEN_CPU_CAPABILITY=cap, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
        res = subprocess.run([sys.executable, __file__, "--child", path], env=env, capture_output=True,
                             text=True, check=True)
        got = json.loads(res.stdout)
        caps[path] = got["capability"]
        for key, v in got["out"].items():
            if key.endswith(".hash"):
                tensors[key] = np.array([v], dtype=np.int64)
            else:
                tensors[key] = np.array(v, dtype=np.float32)
        plan += runs_for(path)
    meta = {"plan": json.dumps(plan, separators=(",", ":")), "torch": torch.__version__,
            "capabilities": json.dumps(caps, sort_keys=True), "generator": "make_torch_rng_fixtures.py"}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    write_safetensors(OUT, tensors, meta)
    print(f"{OUT}: {len(tensors)} tensors, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
