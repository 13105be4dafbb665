#!/usr/bin/env python3
"""make_sd_pipeline_fixtures.py - a tiny Stable Diffusion pipeline and what diffusers computes with it.

Builds a diffusers folder (model_index.json, unet/, vae/, text_encoder/, tokenizer/,
scheduler/) of tiny random components - nothing is downloaded - and records, for every
scheduler colossal-diffuse offers, the latents after a few denoising steps with
classifier-free guidance from a seeded torch.Generator, the decoded image and its
8-bit pixels; also an image-to-image run. colossal's tests (tests/test_sd_pipeline.c,
tests/test_diffuse_cli.sh) load the folder with colossal's own loaders and compare.

    tools/refgen/.venv/bin/python tools/refgen/make_sd_pipeline_fixtures.py --out tests/fixtures/sd_pipeline

The tokenizer is a small CLIP BPE vocabulary (the 512 byte symbols, a few merges and the
two special tokens), so the text encoder's embedding stays small; its files have CLIP's
layout and transformers' CLIPTokenizer reads them like the real one.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

import argparse
import json
import shutil

import numpy as np
import torch
from safetensors.torch import save_file

import diffusers
import transformers
from diffusers import (AutoencoderKL, DDIMScheduler, DDPMScheduler, DPMSolverMultistepScheduler,
                       EulerAncestralDiscreteScheduler, EulerDiscreteScheduler, LCMScheduler, PNDMScheduler,
                       StableDiffusionImg2ImgPipeline, StableDiffusionInpaintPipeline, StableDiffusionPipeline,
                       UNet2DConditionModel)
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

SEED = 20261124
SIZE = 16            # pixels; the VAE halves once, so latents are 8 x 8
STEPS = 5
CFG = 7.5
PROMPTS = [("a photo of a cat", ""), ("The Lighthouse, at dawn!", "blurry, dark")]

MERGES = ["t h", "th e</w>", "c a", "ca t</w>", "o f</w>", "p h", "ph o", "pho t", "phot o</w>",
          "a t</w>", "d a", "w n</w>", "da wn</w>", "i g", "h t</w>", "l i", "li g", "lig ht</w>"]

SCHEDULERS = {  # colossal-diffuse's name: diffusers class and overrides
    "ddim": (DDIMScheduler, {}),
    "pndm": (PNDMScheduler, {}),
    "euler": (EulerDiscreteScheduler, {}),
    "euler-a": (EulerAncestralDiscreteScheduler, {}),
    "dpm++2m": (DPMSolverMultistepScheduler, {}),
    "dpm++2m-karras": (DPMSolverMultistepScheduler, {"use_karras_sigmas": True}),
    "lcm": (LCMScheduler, {}),
    "ddpm": (DDPMScheduler, {}),
}


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


def write_tokenizer(tmp):
    chars = bytes_to_unicode()
    vocab = chars + [c + "</w>" for c in chars]
    for m in MERGES:
        vocab.append(m.replace(" ", ""))
    vocab += ["<|startoftext|>", "<|endoftext|>"]
    os.makedirs(tmp, exist_ok=True)
    with open(os.path.join(tmp, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    with open(os.path.join(tmp, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(MERGES) + "\n")
    tok = CLIPTokenizer(os.path.join(tmp, "vocab.json"), os.path.join(tmp, "merges.txt"), model_max_length=77,
                        pad_token="<|endoftext|>")
    return tok, len(vocab)


def perturb(module, gen):
    """Every tensor moves away from its initial value, so a default (ones, zeros) hides nothing."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight") or ".norm" in name and name.endswith("weight") or "norm" in name and p.ndim == 1 and "weight" in name:
                p.copy_(1.0 + 0.5 * (torch.rand(p.shape, generator=gen) - 0.5))
            else:
                p.add_(0.1 * torch.randn(p.shape, generator=gen))


def build(out):
    gen = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    tok, vocab_size = write_tokenizer(os.path.join(out, "_tok"))
    text = CLIPTextModel(CLIPTextConfig(vocab_size=vocab_size, hidden_size=16, intermediate_size=37,
                                        num_attention_heads=2, num_hidden_layers=2, max_position_embeddings=77,
                                        hidden_act="quick_gelu", bos_token_id=vocab_size - 2,
                                        eos_token_id=vocab_size - 1, pad_token_id=vocab_size - 1)).eval()
    unet = UNet2DConditionModel(sample_size=SIZE // 2, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
                                attention_head_dim=2, norm_num_groups=4).eval()
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=(8, 16), layers_per_block=1,
                        latent_channels=4, norm_num_groups=4, sample_size=SIZE).eval()
    for m in (text, unet, vae):
        perturb(m, gen)
    # keep the noise predictions and the decoded pixels in a useful range (random weights overshoot)
    with torch.no_grad():
        unet.conv_out.weight.mul_(0.1)
        unet.conv_out.bias.mul_(0.1)
        vae.decoder.conv_out.weight.mul_(0.1)
    sched = PNDMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
                          set_alpha_to_one=False, skip_prk_steps=True, steps_offset=1)
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=tok, unet=unet, scheduler=sched,
                                   safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    model_dir = os.path.join(out, "model")
    pipe.save_pretrained(model_dir, safe_serialization=True)
    # as Stable Diffusion 1.5's own scheduler_config.json: DDIM and DDPM must not clip the samples
    cfg_path = os.path.join(model_dir, "scheduler", "scheduler_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["clip_sample"] = False
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    # transformers 5 saves tokenizer.json alone; the models on the hub carry vocab.json and merges.txt
    for f in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(out, "_tok", f), os.path.join(model_dir, "tokenizer", f))
    shutil.rmtree(os.path.join(out, "_tok"))
    return StableDiffusionPipeline.from_pretrained(model_dir, safety_checker=None, requires_safety_checker=False)


def build_inpaint(pipe, out):
    """The same text encoder and VAE with a 9-channel UNet (latents, mask, masked image latents)."""
    gen = torch.Generator().manual_seed(SEED + 99)
    unet = UNet2DConditionModel(sample_size=SIZE // 2, in_channels=9, out_channels=4, layers_per_block=1,
                                block_out_channels=(8, 16), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
                                attention_head_dim=2, norm_num_groups=4).eval()
    perturb(unet, gen)
    with torch.no_grad():
        unet.conv_out.weight.mul_(0.1)
        unet.conv_out.bias.mul_(0.1)
    comps = dict(pipe.components)
    comps["unet"] = unet
    inp = StableDiffusionInpaintPipeline(**comps)
    model_dir = os.path.join(out, "inpaint")
    inp.save_pretrained(model_dir, safe_serialization=True)
    for f in ("scheduler/scheduler_config.json", "tokenizer/vocab.json", "tokenizer/merges.txt"):
        shutil.copy(os.path.join(out, "model", f), os.path.join(model_dir, f))
    inp = StableDiffusionInpaintPipeline.from_pretrained(model_dir, safety_checker=None, requires_safety_checker=False)
    inp.set_progress_bar_config(disable=True)
    from PIL import Image
    mask = np.zeros((SIZE, SIZE), np.uint8)
    mask[SIZE // 4: 3 * SIZE // 4, SIZE // 2:] = 255
    Image.fromarray(mask).save(os.path.join(out, "mask.png"))
    lat = inp(prompt=PROMPTS[1][0], negative_prompt=PROMPTS[1][1], image=Image.open(os.path.join(out, "init.png")),
              mask_image=Image.open(os.path.join(out, "mask.png")), num_inference_steps=STEPS, guidance_scale=CFG,
              height=SIZE, width=SIZE, generator=torch.Generator().manual_seed(SEED + 7), output_type="latent").images
    return lat.contiguous()


def build_single_file(pipe, out):
    """The same kind of tiny pipeline, shaped as a Stable Diffusion 1.x single file implies (8 heads, GroupNorm
    groups from the channels, one text head per 64 channels), saved twice: a diffusers folder (sf_model/) and an
    LDM single file (sf_model.safetensors, by make_sd_single_file_fixtures.py's inverse mapping). colossal must
    give the same latents from both; diffusers' latents from the folder anchor them."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from make_sd_single_file_fixtures import clip_to_ldm, groups, unet_to_ldm, vae_to_ldm
    gen = torch.Generator().manual_seed(SEED + 123)
    ch = (8, 16)
    unet = UNet2DConditionModel(sample_size=SIZE // 2, in_channels=4, out_channels=4, layers_per_block=1,
                                block_out_channels=ch, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=16,
                                attention_head_dim=8, norm_num_groups=groups(ch)).eval()
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 2,
                        up_block_types=("UpDecoderBlock2D",) * 2, block_out_channels=ch, layers_per_block=1,
                        latent_channels=4, norm_num_groups=groups(ch), sample_size=SIZE).eval()
    tc = pipe.text_encoder.config
    text = CLIPTextModel(CLIPTextConfig(vocab_size=tc.vocab_size, hidden_size=16, intermediate_size=37,
                                        num_attention_heads=1, num_hidden_layers=2, max_position_embeddings=77,
                                        hidden_act="quick_gelu", bos_token_id=tc.bos_token_id,
                                        eos_token_id=tc.eos_token_id, pad_token_id=tc.pad_token_id)).eval()
    for m in (unet, vae, text):
        perturb(m, gen)
    with torch.no_grad():
        unet.conv_out.weight.mul_(0.1)
        unet.conv_out.bias.mul_(0.1)
        vae.decoder.conv_out.weight.mul_(0.1)
    comps = dict(pipe.components)
    comps.update(unet=unet, vae=vae, text_encoder=text, scheduler=PNDMScheduler.from_config(pipe.scheduler.config))
    sf = StableDiffusionPipeline(**comps)
    model_dir = os.path.join(out, "sf_model")
    sf.save_pretrained(model_dir, safe_serialization=True)
    for f in ("scheduler/scheduler_config.json", "tokenizer/vocab.json", "tokenizer/merges.txt"):
        shutil.copy(os.path.join(out, "model", f), os.path.join(model_dir, f))
    ldm = {}
    ldm.update(unet_to_ldm(unet.state_dict(), 1, (False, True)))
    ldm.update(vae_to_ldm(vae.state_dict(), 2))
    ldm.update(clip_to_ldm(text.state_dict(), True))
    save_file({k: v.contiguous() for k, v in ldm.items()}, os.path.join(out, "sf_model.safetensors"))
    sf = StableDiffusionPipeline.from_pretrained(model_dir, safety_checker=None, requires_safety_checker=False)
    sf.set_progress_bar_config(disable=True)
    lat = sf(prompt=PROMPTS[0][0], num_inference_steps=STEPS, guidance_scale=CFG, height=SIZE, width=SIZE,
             generator=torch.Generator().manual_seed(SEED + 11), output_type="latent").images
    return lat.contiguous()


def run_all(pipe, out):
    pipe.set_progress_bar_config(disable=True)
    with open(os.path.join(out, "model", "scheduler", "scheduler_config.json")) as f:
        base = json.load(f)
    ref = {}
    meta = {"steps": STEPS, "cfg": CFG, "size": SIZE, "cases": []}
    for name, (cls, extra) in SCHEDULERS.items():
        pipe.scheduler = cls.from_config({**base, **extra})
        for k, (prompt, negative) in enumerate(PROMPTS):
            seed = SEED + 17 * k
            args = dict(prompt=prompt, negative_prompt=negative or None, num_inference_steps=STEPS,
                        guidance_scale=CFG, height=SIZE, width=SIZE)
            lat = pipe(**args, generator=torch.Generator().manual_seed(seed), output_type="latent").images
            img = pipe(**args, generator=torch.Generator().manual_seed(seed), output_type="np").images
            key = f"{name}.{k}"
            ref[key + ".latents"] = lat.contiguous()
            sat = float(((img <= 0) | (img >= 1)).mean())
            assert sat < 0.2, f"{key}: {sat:.0%} of the pixels saturate"
            ref[key + ".image"] = torch.from_numpy(np.ascontiguousarray(img)).float()
            ref[key + ".pixels"] = torch.from_numpy(np.ascontiguousarray((img * 255).round().astype(np.uint8))).to(torch.int32).contiguous()
            meta["cases"].append({"key": key, "scheduler": name, "prompt": prompt, "negative": negative, "seed": seed})
    # guidance off (one UNet half), and a batch of two images from one generator
    pipe.scheduler = EulerDiscreteScheduler.from_config(base)
    lat = pipe(prompt=PROMPTS[0][0], num_inference_steps=STEPS, guidance_scale=1.0, height=SIZE, width=SIZE,
               generator=torch.Generator().manual_seed(SEED), output_type="latent").images
    ref["noguide.latents"] = lat.contiguous()
    lat = pipe(prompt=PROMPTS[1][0], negative_prompt=PROMPTS[1][1], num_inference_steps=STEPS, guidance_scale=CFG,
               num_images_per_prompt=2, height=SIZE, width=SIZE, generator=torch.Generator().manual_seed(SEED + 1),
               output_type="latent").images
    ref["batch2.latents"] = lat.contiguous()
    # image-to-image from a fixed picture, strength 0.6
    rng = np.random.default_rng(SEED)
    init = (rng.random((SIZE, SIZE, 3)) * 255).astype(np.uint8)
    from PIL import Image
    Image.fromarray(init).save(os.path.join(out, "init.png"))
    i2i = StableDiffusionImg2ImgPipeline(**pipe.components)
    i2i.set_progress_bar_config(disable=True)
    i2i.scheduler = DDIMScheduler.from_config(base)
    img = i2i(prompt=PROMPTS[0][0], image=Image.open(os.path.join(out, "init.png")), strength=0.6,
              num_inference_steps=STEPS, guidance_scale=CFG, generator=torch.Generator().manual_seed(SEED + 5),
              output_type="latent").images
    ref["img2img.latents"] = img.contiguous()
    ref["inpaint.latents"] = build_inpaint(pipe, out)
    ref["single_file.latents"] = build_single_file(pipe, out)
    meta["single_file"] = {"scheduler": "pndm", "seed": SEED + 11, "prompt": PROMPTS[0][0]}
    # inpaint/model_index.json names EulerDiscreteScheduler (the pipeline's scheduler when it was saved) while
    # its scheduler_config.json says PNDMScheduler: diffusers takes model_index.json's class
    meta["inpaint"] = {"scheduler": "euler", "seed": SEED + 7, "prompt": PROMPTS[1][0], "negative": PROMPTS[1][1],
                       "strength": 1.0}
    meta["img2img"] = {"scheduler": "ddim", "strength": 0.6, "seed": SEED + 5, "prompt": PROMPTS[0][0]}
    meta["noguide"] = {"scheduler": "euler", "seed": SEED, "prompt": PROMPTS[0][0]}
    meta["batch2"] = {"scheduler": "euler", "seed": SEED + 1}  # the scheduler set for "noguide" above
    meta["versions"] = {"torch": torch.__version__, "diffusers": diffusers.__version__,
                        "transformers": transformers.__version__}
    save_file(ref, os.path.join(out, "reference.safetensors"), metadata={"about": "make_sd_pipeline_fixtures.py"})
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    pipe = build(a.out)
    run_all(pipe, a.out)


if __name__ == "__main__":
    main()
