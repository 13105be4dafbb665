#!/usr/bin/env python3
"""make_sd15_random.py - an SD 1.5-shaped single-file checkpoint with random weights (for benchmarks only).

Writes OUT (LDM key names, as the published v1-5-pruned files; f16 to halve the file) from diffusers' and
transformers' SD 1.5 configs (bench/sd15/*.json and CLIP ViT-L/14's text config) with random
initialisation. Both colossal-diffuse and stable-diffusion.cpp load it, so their speed can be compared
without downloading a model.

    tools/refgen/.venv/bin/python bench/make_sd15_random.py /tmp/sd15/sd15-random.safetensors
    tools/refgen/.venv/bin/python bench/make_sd15_random.py --diffusers /tmp/sd15/folder   # a diffusers folder (f16)
"""
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
import torch
from diffusers import AutoencoderKL, UNet2DConditionModel
from safetensors.torch import save_file
from transformers import CLIPTextConfig, CLIPTextModel

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "tools", "refgen"))
from make_sd_single_file_fixtures import clip_to_ldm, unet_to_ldm, vae_to_ldm  # noqa: E402


def main():
    folder = sys.argv[1] == "--diffusers"
    out = sys.argv[2] if folder else sys.argv[1]
    torch.manual_seed(0)
    with open(os.path.join(here, "sd15", "unet_config.json")) as f:
        unet = UNet2DConditionModel.from_config(json.load(f))
    with open(os.path.join(here, "sd15", "vae_config.json")) as f:
        vae = AutoencoderKL.from_config(json.load(f))
    text = CLIPTextModel(CLIPTextConfig(vocab_size=49408, hidden_size=768, intermediate_size=3072,
                                        num_attention_heads=12, num_hidden_layers=12, max_position_embeddings=77,
                                        hidden_act="quick_gelu"))
    if folder:  # the same random model as a diffusers folder, with colossal's bundled CLIP tokenizer
        import shutil
        from diffusers import PNDMScheduler, StableDiffusionPipeline
        from transformers import CLIPTokenizer
        tok = CLIPTokenizer.from_pretrained(os.path.join(here, "..", "assets", "tokenizers", "clip"))
        sched = PNDMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              set_alpha_to_one=False, skip_prk_steps=True, steps_offset=1)
        pipe = StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=tok, unet=unet, scheduler=sched,
                                       safety_checker=None, feature_extractor=None, requires_safety_checker=False)
        pipe.to(torch.float16).save_pretrained(out, safe_serialization=True)
        for f in ("vocab.json", "merges.txt"):
            shutil.copy(os.path.join(here, "..", "assets", "tokenizers", "clip", f), os.path.join(out, "tokenizer", f))
        return
    sd = {}
    sd.update(unet_to_ldm(unet.state_dict(), 2, (False, True, True, True)))
    sd.update(vae_to_ldm(vae.state_dict(), 4))
    sd.update(clip_to_ldm(text.state_dict(), True))
    save_file({k: v.half().contiguous() for k, v in sd.items()}, out)


if __name__ == "__main__":
    main()
