#!/usr/bin/env python3
"""Writes the diffusers scheduler fixtures for tests/test_scheduler.c.

Run from the repository root with the refgen virtual environment:

    tools/refgen/.venv/bin/python tools/refgen/make_scheduler_fixtures.py

Outputs (tests/fixtures/diffusion/):
  sched_default_KIND.json    each class's defaults, as save_config writes them
  sched_cfg_NAME.json        scheduler configs as diffusers reads them: the Stable Diffusion 1.5
                             and 2 (v-prediction) scheduler_config.json, DDPMScheduler's defaults,
                             a DPMSolverMultistepScheduler config as save_config writes it
                             ("lambda_min_clipped": -Infinity), and variants
  scheduler_runs.safetensors for every run of the plan (its __metadata__ "plan", JSON): the
                             timesteps (F64), sigmas (F32, the kinds that have them), init noise
                             sigma, the latents after step "mid" and after the last step
                             ("R.timesteps", "R.sigmas", "R.init_sigma", "R.mid", "R.final");
                             per config its alphas_cumprod ("cfg.NAME.acp"); the training
                             add_noise / get_velocity results ("train.*")

The NMSE bound of each run is its "tol" (1e-10 but where noted). torch's float32 sqrt, log and
exp (MKL on the CPU) are not correctly rounded and depend on the CPU, so the C code (correctly
rounded sqrt, the C library's logf/expf) can differ from them by an ulp: sigmas and the
fractional timesteps computed from them are compared within a few ulps.

A run is what a diffusers pipeline does with the scheduler, the UNet replaced by a
deterministic function computed the same way in the C test:

    g = torch.Generator().manual_seed(seed)
    latents = torch.randn((1, 4, 8, 8), generator=g) * scheduler.init_noise_sigma   # txt2img
    noise0 = torch.randn((1, 4, 8, 8), generator=torch.Generator().manual_seed(seed + 1000))
    for t in timesteps:
        x = scheduler.scale_model_input(latents, t)
        c = 0.05 * float(t) / 1000.0
        eps = 0.3 * x / (1 + x * x) + c * noise0
        latents = scheduler.step(eps, t, latents, generator=g).prev_sample  (eta= for DDIM)

img2img runs (strength < 1) follow StableDiffusionImg2ImgPipeline (LCM: its own img2img
pipeline, strength given to set_timesteps): image latents
torch.randn(..., generator=manual_seed(seed + 2000)) * 0.5 are noised with
torch.randn(..., generator=g) by scheduler.add_noise at the first remaining timestep.
The kinds are built with Kind.from_config(config), as users switch schedulers.
"""
import json
import os
import sys

import numpy as np
import torch
import diffusers
from diffusers import (DDIMScheduler, DDPMScheduler, DPMSolverMultistepScheduler, EulerAncestralDiscreteScheduler,
                       EulerDiscreteScheduler, LCMScheduler, PNDMScheduler)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_small import write_safetensors  # noqa: E402

OUT = os.path.join("tests", "fixtures", "diffusion")
SHAPE = (1, 4, 8, 8)

SD15 = {"_class_name": "PNDMScheduler", "_diffusers_version": "0.6.0", "beta_end": 0.012,
        "beta_schedule": "scaled_linear", "beta_start": 0.00085, "num_train_timesteps": 1000,
        "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1, "trained_betas": None,
        "clip_sample": False}
SD2V = {"_class_name": "DDIMScheduler", "_diffusers_version": "0.8.0", "beta_end": 0.012,
        "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
        "num_train_timesteps": 1000, "prediction_type": "v_prediction", "set_alpha_to_one": False,
        "skip_prk_steps": True, "steps_offset": 1, "trained_betas": None}

CONFIGS = {
    "sd15": SD15,
    "sd2v": SD2V,
    "ddpm_default": json.loads(DDPMScheduler().to_json_string()),
    "dpm_saved": json.loads(DPMSolverMultistepScheduler(beta_schedule="scaled_linear", beta_start=0.00085,
                                                        beta_end=0.012, steps_offset=1).to_json_string()),
    "sd15_trailing": dict(SD15, timestep_spacing="trailing"),
    "sd15_linspace": dict(SD15, timestep_spacing="linspace"),
    "sd15_leading": dict(SD15, timestep_spacing="leading"),
    "zsnr": dict(SD2V, timestep_spacing="trailing", rescale_betas_zero_snr=True),
    "cosine": {"_class_name": "DDIMScheduler", "beta_schedule": "squaredcos_cap_v2", "clip_sample": True,
               "num_train_timesteps": 1000, "set_alpha_to_one": True},
    "linear_sample": {"_class_name": "DDIMScheduler", "beta_schedule": "linear", "prediction_type": "sample",
                      "clip_sample": True, "clip_sample_range": 2.0, "timestep_spacing": "linspace"},
    "prk": dict(SD15, skip_prk_steps=False),
    "dpm3": dict(SD15, _class_name="DPMSolverMultistepScheduler", solver_order=3, lower_order_final=False),
    "dpm_heun": dict(SD15, _class_name="DPMSolverMultistepScheduler", solver_type="heun",
                     final_sigmas_type="sigma_min", timestep_spacing="trailing"),
    "euler_min": dict(SD15, _class_name="EulerDiscreteScheduler", final_sigmas_type="sigma_min",
                      use_karras_sigmas=True),
    "dpm_clip": dict(SD15, _class_name="DPMSolverMultistepScheduler", lambda_min_clipped=-2.0),
    "euler_cont": dict(SD2V, _class_name="EulerDiscreteScheduler", timestep_type="continuous"),
    "ddpm_log": dict(SD15, _class_name="DDPMScheduler", variance_type="fixed_small_log", clip_sample=True),
    "ddpm_large": dict(SD15, _class_name="DDPMScheduler", variance_type="fixed_large", timestep_spacing="trailing"),
    "lcm_orig": {"_class_name": "LCMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
                 "beta_start": 0.00085, "clip_sample": False, "num_train_timesteps": 1000,
                 "original_inference_steps": 50, "prediction_type": "epsilon", "set_alpha_to_one": True,
                 "steps_offset": 1, "timestep_scaling": 10.0, "timestep_spacing": "leading"},
}
# c_skip = 0.25 / ((t * scaling)^2 + 0.25) is below 1e-5 for SD's scaling 10: a small scaling exercises it
CONFIGS["lcm_small_scale"] = dict(CONFIGS["lcm_orig"], timestep_scaling=0.01, original_inference_steps=100)

CLASSES = {"ddim": DDIMScheduler, "pndm": PNDMScheduler, "euler": EulerDiscreteScheduler,
           "euler-a": EulerAncestralDiscreteScheduler, "dpm++2m": DPMSolverMultistepScheduler,
           "dpm++2m-karras": DPMSolverMultistepScheduler, "lcm": LCMScheduler, "ddpm": DDPMScheduler}
KINDS = list(CLASSES)


def plan():
    runs = []

    def add(cfg, kind, steps, seed, strength=1.0, eta=0.0, tol=1e-10):
        runs.append({"name": f"r{len(runs)}", "config": cfg, "kind": kind, "steps": steps, "seed": seed,
                     "strength": strength, "eta": eta, "tol": tol})

    for kind in KINDS:
        for steps in ([4, 8] if kind == "lcm" else [4, 10, 25]):
            add("sd15", kind, steps, 100 + steps)
        add("sd2v", kind, 4 if kind == "lcm" else 12, 7)
        add("sd15", kind, 4 if kind == "lcm" else 20, 11, strength=0.6)
    for cfg in ["sd15_trailing", "sd15_linspace", "sd15_leading"]:
        for kind in ["ddim", "euler", "euler-a", "dpm++2m", "dpm++2m-karras", "pndm", "ddpm"]:
            add(cfg, kind, 15, 3)
    add("sd15_trailing", "ddim", 61, 5)          # a trailing schedule one longer, ending at -1
    add("sd15_trailing", "euler", 7, 5)
    add("zsnr", "ddim", 10, 21)
    # zero terminal SNR: sigma_max = sqrt((1 - 2^-24) / 2^-24) ~ 4096, where torch's float32 sqrt (MKL,
    # not correctly rounded) and C's differ by an ulp; the first step cancels terms of size 4096 and
    # amplifies that difference about a thousandfold
    add("zsnr", "euler", 10, 21, tol=1e-9)
    add("zsnr", "dpm++2m", 10, 21)
    add("cosine", "ddim", 10, 22)
    add("cosine", "euler-a", 10, 22)
    add("linear_sample", "ddim", 9, 23)
    add("sd15", "ddim", 12, 24, eta=1.0)
    add("sd15", "ddim", 12, 24, eta=0.3, strength=0.75)
    add("prk", "pndm", 10, 25)
    add("prk", "pndm", 20, 25, strength=0.5)
    add("dpm3", "dpm++2m", 12, 26)
    add("dpm3", "dpm++2m-karras", 20, 26)
    add("dpm_heun", "dpm++2m", 12, 27)
    add("dpm_saved", "auto", 15, 28)
    add("dpm_clip", "auto", 15, 28)
    add("dpm_clip", "dpm++2m-karras", 9, 28)
    add("euler_min", "auto", 12, 29)
    add("euler_cont", "auto", 10, 29)
    add("euler_cont", "euler", 10, 29, strength=0.7)
    add("ddpm_log", "auto", 10, 30)
    add("ddpm_large", "auto", 10, 30)
    add("ddpm_default", "auto", 50, 31)
    add("lcm_orig", "auto", 4, 32)
    add("lcm_orig", "auto", 6, 32, strength=0.5)
    add("lcm_small_scale", "auto", 8, 33)
    return runs


def scheduler_for(cfg, kind):
    c = CONFIGS[cfg]
    if kind == "auto":
        cls = {"DDIMScheduler": DDIMScheduler, "PNDMScheduler": PNDMScheduler, "DDPMScheduler": DDPMScheduler,
               "EulerDiscreteScheduler": EulerDiscreteScheduler, "LCMScheduler": LCMScheduler,
               "DPMSolverMultistepScheduler": DPMSolverMultistepScheduler}[c["_class_name"]]
        return cls.from_config(c)
    extra = {"use_karras_sigmas": True} if kind == "dpm++2m-karras" else {}
    if kind == "dpm++2m":
        extra = {"use_karras_sigmas": False}
    return CLASSES[kind].from_config(c, **extra)


def run_one(r):
    s = scheduler_for(r["config"], r["kind"])
    steps, strength = r["steps"], r["strength"]
    is_lcm = isinstance(s, LCMScheduler)
    if is_lcm:
        s.set_timesteps(steps, strength=strength)
        timesteps = s.timesteps
    else:
        s.set_timesteps(steps)
        timesteps = s.timesteps
        if strength < 1:
            init_timestep = min(int(steps * strength), steps)
            t_start = max(steps - init_timestep, 0)
            timesteps = s.timesteps[t_start * s.order:]
            if hasattr(s, "set_begin_index"):
                s.set_begin_index(t_start * s.order)
    g = torch.Generator().manual_seed(r["seed"])
    if strength < 1:
        image = torch.randn(SHAPE, generator=torch.Generator().manual_seed(r["seed"] + 2000)) * 0.5
        noise = torch.randn(SHAPE, generator=g)
        latents = s.add_noise(image, noise, timesteps[:1].repeat(1))
    else:
        latents = torch.randn(SHAPE, generator=g) * s.init_noise_sigma
    noise0 = torch.randn(SHAPE, generator=torch.Generator().manual_seed(r["seed"] + 1000))
    out = {}
    ts = np.array([float(t) for t in timesteps], dtype=np.float64)
    out["timesteps"] = ts
    if hasattr(s, "sigmas") and isinstance(s, (EulerDiscreteScheduler, EulerAncestralDiscreteScheduler,
                                               DPMSolverMultistepScheduler)):
        out["sigmas"] = s.sigmas.numpy().astype(np.float32)
    ins = s.init_noise_sigma
    out["init_sigma"] = np.array([float(ins)], dtype=np.float32)
    mid = len(timesteps) // 2
    kw = {"eta": r["eta"]} if isinstance(s, DDIMScheduler) else {}
    if isinstance(s, (EulerAncestralDiscreteScheduler, LCMScheduler, DDPMScheduler)) or r["eta"] > 0:
        kw["generator"] = g
    for i, t in enumerate(timesteps):
        x = s.scale_model_input(latents, t)
        c = 0.05 * float(t) / 1000.0
        eps = 0.3 * x / (1 + x * x) + c * noise0
        latents = s.step(eps, t, latents, **kw).prev_sample
        if i == mid - 1:
            out["mid"] = latents.numpy().reshape(-1).astype(np.float32)
    out["final"] = latents.numpy().reshape(-1).astype(np.float32)
    r["mid"] = mid
    r["num_steps"] = len(timesteps)
    return out


def training(tensors):
    """DDPMScheduler (its defaults) and DDIM (SD2 v) add_noise / get_velocity, four items at different t."""
    orig = torch.randn((4, 1, 8, 8), generator=torch.Generator().manual_seed(5))
    noise = torch.randn((4, 1, 8, 8), generator=torch.Generator().manual_seed(6))
    t = torch.tensor([0, 1, 500, 999])
    for name, s in [("ddpm_default", DDPMScheduler.from_config(CONFIGS["ddpm_default"])),
                    ("sd2v", DDIMScheduler.from_config(CONFIGS["sd2v"]))]:
        tensors[f"train.{name}.noisy"] = s.add_noise(orig, noise, t).numpy().reshape(-1)
        tensors[f"train.{name}.velocity"] = s.get_velocity(orig, noise, t).numpy().reshape(-1)


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(OUT, exist_ok=True)
    for name, cfg in CONFIGS.items():
        with open(os.path.join(OUT, f"sched_cfg_{name}.json"), "w") as f:
            f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    # every class's defaults as save_config writes them (the C reader must fill in the same)
    for kind in ["ddim", "pndm", "euler", "euler-a", "dpm++2m", "lcm", "ddpm"]:
        with open(os.path.join(OUT, f"sched_default_{kind}.json"), "w") as f:
            f.write(CLASSES[kind]().to_json_string())
    tensors = {}
    runs = plan()
    for r in runs:
        for key, v in run_one(r).items():
            tensors[f"{r['name']}.{key}"] = v
    for name in ["sd15", "sd2v", "ddpm_default", "dpm_saved", "zsnr", "cosine", "linear_sample", "lcm_orig"]:
        s = DDPMScheduler.from_config(CONFIGS[name]) if "DPM" not in CONFIGS[name].get("_class_name", "") \
            else DPMSolverMultistepScheduler.from_config(CONFIGS[name])
        tensors[f"cfg.{name}.acp"] = s.alphas_cumprod.numpy().astype(np.float32)
    training(tensors)
    meta = {"plan": json.dumps(runs, separators=(",", ":")), "torch": torch.__version__,
            "diffusers": diffusers.__version__, "numpy": np.__version__,
            "capability": torch.backends.cpu.get_cpu_capability(), "generator": "make_scheduler_fixtures.py"}
    path = os.path.join(OUT, "scheduler_runs.safetensors")
    write_safetensors(path, tensors, meta)
    print(f"{path}: {len(runs)} runs, {len(tensors)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
