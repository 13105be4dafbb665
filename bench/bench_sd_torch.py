#!/usr/bin/env python3
"""bench_sd_torch.py - diffusers' time for one Stable Diffusion 1.5 UNet step and a VAE decode on the CPU.

The peer figure beside bench/bench_sd (the same shapes in colossal): a UNet2DConditionModel
with SD 1.5's config (bench/sd15/unet_config.json) and random weights, one denoising step
at 512x512 (64x64 latents), batch 2 (classifier-free guidance), 77 text tokens; then the
VAE decoder on one 64x64 latent. Prints one JSON line of median seconds.

    tools/refgen/.venv/bin/python bench/bench_sd_torch.py --threads 2 --runs 3
"""
import argparse
import json
import os
import statistics
import time

os.environ["HF_HUB_OFFLINE"] = "1"

import torch
from diffusers import AutoencoderKL, UNet2DConditionModel

here = os.path.dirname(os.path.abspath(__file__))


def timed(fn, runs):
    fn()  # warm-up
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with open(os.path.join(here, "sd15", "unet_config.json")) as f:
        ucfg = json.load(f)
    with open(os.path.join(here, "sd15", "vae_config.json")) as f:
        vcfg = json.load(f)
    unet = UNet2DConditionModel.from_config(ucfg).eval()
    vae = AutoencoderKL.from_config(vcfg).eval()
    lat = a.size // 8
    x = torch.randn(a.batch, 4, lat, lat)
    ctx = torch.randn(a.batch, 77, 768)
    t = torch.tensor([500] * a.batch)
    z = torch.randn(1, 4, lat, lat)
    with torch.inference_mode():
        unet_s = timed(lambda: unet(x, t, encoder_hidden_states=ctx), a.runs)
        vae_s = timed(lambda: vae.decode(z), a.runs)
    print(json.dumps({"peer": "diffusers", "torch": torch.__version__, "threads": a.threads, "size": a.size,
                      "batch": a.batch, "unet_step_s": round(unet_s, 3), "vae_decode_s": round(vae_s, 3)}))


if __name__ == "__main__":
    main()
