#!/usr/bin/env python3
"""bench_sd_cpp.py - stable-diffusion.cpp's time on the same SD 1.5-shaped single file (the peer beside bench/bench_sd).

Runs stable-diffusion.cpp (stable-diffusion-cpp-python, which builds it from source; install it in a scratch
venv) on MODEL (bench/make_sd15_random.py writes one) at 512x512 with guidance, for 1 and for 3 Euler steps, in
f32 weights, n threads: the difference of the two totals over 2 is its time per denoising step (a step is one
UNet call with batch 2, or two of batch 1), and the 1-step run less one step is the rest (text encoder, VAE
decode). Prints one JSON line.

    /tmp/sdcpp-venv/bin/python bench/bench_sd_cpp.py /tmp/sd15/sd15-random.safetensors --threads 2
"""
import argparse
import json
import time

from stable_diffusion_cpp import StableDiffusion


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    sd = StableDiffusion(model_path=a.model, n_threads=a.threads, wtype="f32", verbose=False)
    t = {}
    for steps in (1, 3):
        t0 = time.perf_counter()
        sd.generate_image(prompt="a lighthouse at dawn", width=512, height=512, cfg_scale=7.5, sample_steps=steps,
                          sample_method="euler", seed=1)
        t[steps] = time.perf_counter() - t0
    step = (t[3] - t[1]) / 2
    print(json.dumps({"peer": "stable-diffusion.cpp", "threads": a.threads, "step_s": round(step, 3),
                      "rest_s": round(t[1] - step, 3), "total_1_step_s": round(t[1], 3),
                      "total_3_steps_s": round(t[3], 3)}))


if __name__ == "__main__":
    main()
