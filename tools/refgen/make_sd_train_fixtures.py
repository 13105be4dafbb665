#!/usr/bin/env python3
"""make_sd_train_fixtures.py - diffusers' training recipe, written out, on tiny models.

Records what one and two optimizer steps of Stable Diffusion fine-tuning compute, as
diffusers' examples train (train_text_to_image.py, train_dreambooth.py and their LoRA
variants, with accelerate), so that tests/test_sd_train.c and tests/test_dm_trainer.c
can check colossal's training against it:

* trainer.safetensors - the generic trainer on a tiny attention module whose projections
  carry diffusers' names (to_q, to_k, to_v, to_out.0): loss, gradients and weights after
  two AdamW steps with gradient accumulation (2 micro-batches) and active clipping; the
  same with PEFT LoRA adapters on the projections; and diffusers' get_scheduler
  learning rates with warmup.
* images/, class/ - 16x16 training images with .txt captions (and a JPEG, and class
  images for DreamBooth's prior preservation).
* sd_full*.safetensors, sd_lora.safetensors, sd_misc.safetensors - the UNet of
  tests/fixtures/sd_pipeline/model trained with the text encoder and VAE frozen:
  latents = vae.encode(pixels).latent_dist.sample(generator) * scaling_factor, then
  noise = randn(generator), timesteps = randint(0, T, generator) (one generator, drawn
  in that order each step), DDPM add_noise, unet(noisy, t, text_encoder(ids)),
  F.mse_loss against noise (epsilon) or velocity (v_prediction), backward,
  clip_grad_norm_(1.0), AdamW.

    tools/refgen/.venv/bin/python tools/refgen/make_sd_train_fixtures.py --out tests/fixtures/sd_train

--check-output DIR loads a folder colossal-diffuse --train wrote with diffusers
(StableDiffusionPipeline.from_pretrained, and load_lora_weights for a LoRA run) and
runs two denoising steps: the by-hand check that its output is diffusers' format.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image
from st_small import write_safetensors

import diffusers
import peft
import transformers
from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
from diffusers.optimization import get_scheduler
from peft import LoraConfig, get_peft_model
from transformers import CLIPTextModel, CLIPTokenizer

SEED = 20261125
HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "..", "tests", "fixtures", "sd_pipeline", "model")
LR = 1e-3
LORA_RANK = 4
TARGETS = ["to_k", "to_q", "to_v", "to_out.0"]
IMAGES = [("cat", "a photo of a cat"), ("dawn", "the lighthouse at dawn"), ("tile", "a red tile")]

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


def versions():
    return json.dumps({"torch": torch.__version__, "diffusers": diffusers.__version__,
                       "transformers": transformers.__version__, "peft": peft.__version__}, sort_keys=True)


def save(tensors, path):
    """Deterministic bytes (st_small: sorted header keys)."""
    write_safetensors(path, {k: v.detach().contiguous().numpy() for k, v in tensors.items()},
                      metadata={"about": "make_sd_train_fixtures.py", "versions": versions()})


# ---------------------------------------------------------------- the generic trainer

class Attn(nn.Module):
    """A cross-attention block named as diffusers names its projections."""

    def __init__(self, d=8, out=4):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.to_q = nn.Linear(d, d, bias=False)
        self.to_k = nn.Linear(d, d, bias=False)
        self.to_v = nn.Linear(d, d, bias=False)
        self.to_out = nn.ModuleList([nn.Linear(d, d), nn.Dropout(0.0)])
        self.proj = nn.Linear(d, out)

    def forward(self, x, ctx):
        h = self.norm(x)
        q, k, v = self.to_q(h), self.to_k(ctx), self.to_v(ctx)
        a = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None])[:, 0]
        h = x + self.to_out[0](a)
        return self.proj(F.silu(h))


def trainer_fixture(out):
    gen = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    ref = {}
    m = Attn()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))
    base = {n: p.detach().clone() for n, p in m.state_dict().items()}
    for n, p in base.items():
        ref["init." + n] = p
    B, T, S, D = 2, 3, 5, 8
    data = []
    for k in range(4):  # two steps of two micro-batches
        x, ctx, tgt = torch.randn(B, T, D, generator=gen), torch.randn(B, S, D, generator=gen), torch.randn(B, T, 4, generator=gen)
        ref[f"x{k}"], ref[f"ctx{k}"], ref[f"target{k}"] = x, ctx, tgt
        data.append((x, ctx, tgt))

    def run(model, params, tag, clip):
        opt = torch.optim.AdamW(params, lr=LR * 10, betas=(0.9, 0.999), weight_decay=1e-2, eps=1e-8)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        for step in range(2):
            opt.zero_grad()
            for k in range(2):
                x, ctx, tgt = data[2 * step + k]
                loss = F.mse_loss(model(x, ctx), tgt) / 2  # accelerate divides by the accumulation steps
                loss.backward()
                ref[f"{tag}.loss{2 * step + k}"] = (loss * 2).detach().reshape(1)
            if step == 0:
                for n, p in named:
                    ref[f"{tag}.grad.{clean(n)}"] = p.grad.detach().clone()
            norm = torch.nn.utils.clip_grad_norm_(params, clip)
            ref[f"{tag}.norm{step}"] = norm.detach().reshape(1)
            opt.step()
            for n, p in named:
                ref[f"{tag}.step{step + 1}.{clean(n)}"] = p.detach().clone()

    run(m, list(m.parameters()), "full", 0.05)

    # LoRA: PEFT on the same module, adapters only trained; lora_B made non-zero so lora_A has a gradient
    m2 = Attn()
    m2.load_state_dict(base)
    pm = get_peft_model(m2, LoraConfig(r=2, lora_alpha=2, init_lora_weights="gaussian", target_modules=TARGETS))
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    for n, p in pm.named_parameters():
        if p.requires_grad:
            ref["lora.init." + clean(n)] = p.detach().clone()
    run(pm, [p for p in pm.parameters() if p.requires_grad], "lora", 0.05)

    # diffusers' learning rate schedules: constant_with_warmup over 3 steps, then constant
    opt = torch.optim.AdamW([nn.Parameter(torch.zeros(1))], lr=LR)
    sch = get_scheduler("constant_with_warmup", optimizer=opt, num_warmup_steps=3, num_training_steps=6)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sch.step()
    ref["warmup3.lr"] = torch.tensor(lrs, dtype=torch.float32)
    save(ref, os.path.join(out, "trainer.safetensors"))


def clean(n):
    """PEFT's parameter name without the wrapper and adapter name: to_q.lora_A.weight."""
    return n.replace("base_model.model.", "").replace(".default.", ".")


# ---------------------------------------------------------------- images

def write_images(out):
    gen = torch.Generator().manual_seed(SEED + 1)
    d = os.path.join(out, "images")
    c = os.path.join(out, "class")
    for p in (d, c):
        shutil.rmtree(p, ignore_errors=True)
        os.makedirs(p)
    yy, xx = np.mgrid[0:16, 0:16]
    for k, (name, caption) in enumerate(IMAGES):
        noise = (torch.rand(16, 16, 3, generator=gen).numpy() * 80).astype(np.int32)
        base = np.stack([(xx * (5 + 3 * k)) % 256, (yy * (7 + k)) % 256, ((xx + yy) * (4 + 2 * k)) % 256], -1)
        img = np.clip(base + noise, 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(d, name + ".png"))
        with open(os.path.join(d, name + ".txt"), "w") as f:
            f.write(caption + "\n")
    # a JPEG of another size (resized and cropped by the trainer; not used by the parity steps)
    img = np.clip(np.stack([xx * 12, yy * 9, 255 - xx * 8], -1), 0, 255).astype(np.uint8)
    Image.fromarray(img).resize((24, 20), Image.BILINEAR).save(os.path.join(d, "wide.jpg"), quality=95)
    with open(os.path.join(d, "wide.txt"), "w") as f:
        f.write("a wide blue gradient\n")
    for k in range(2):
        img = (torch.rand(16, 16, 3, generator=gen).numpy() * 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(c, f"class{k}.png"))


RESIZE = [("down", 37, 23, 16), ("up", 5, 7, 16), ("odd", 30, 19, 12), ("square", 20, 20, 16)]


def torchvision_resize_crop(img, r):
    """torchvision.transforms.Resize(r, BILINEAR) + CenterCrop(r) on a PIL image (torchvision's own arithmetic)."""
    w, h = img.size
    short, long = (w, h) if w <= h else (h, w)
    new_short, new_long = r, int(r * long / short)
    nw, nh = (new_short, new_long) if w <= h else (new_long, new_short)
    img = img.resize((nw, nh), Image.BILINEAR)
    top, left = int(round((nh - r) / 2.0)), int(round((nw - r) / 2.0))
    return img.crop((left, top, left + r, top + r))


def write_resize(out):
    """Images of other sizes and what diffusers' scripts' transforms make of them (tests/test_diffuse_data.c)."""
    gen = torch.Generator().manual_seed(SEED + 2)
    d = os.path.join(out, "resize")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for name, w, h, r in RESIZE:
        a = (torch.rand(h, w, 3, generator=gen).numpy() * 255).astype(np.uint8)
        src = Image.fromarray(a)
        src.save(os.path.join(d, f"{name}.png"))
        torchvision_resize_crop(src, r).save(os.path.join(d, f"{name}_{r}.png"))


def pixels(out, names, sub="images"):
    """torchvision's ToTensor + Normalize([0.5], [0.5]) on 16x16 images (no resize needed)."""
    xs = []
    for n in names:
        a = np.asarray(Image.open(os.path.join(out, sub, n)).convert("RGB"), dtype=np.uint8)
        t = torch.from_numpy(a.copy()).permute(2, 0, 1).float().div(255)
        xs.append((t - 0.5) / 0.5)
    return torch.stack(xs)


# ---------------------------------------------------------------- Stable Diffusion

def load_sd(prediction_type="epsilon"):
    tok = CLIPTokenizer.from_pretrained(MODEL, subfolder="tokenizer")
    text = CLIPTextModel.from_pretrained(MODEL, subfolder="text_encoder").eval()
    vae = AutoencoderKL.from_pretrained(MODEL, subfolder="vae").eval()
    unet = UNet2DConditionModel.from_pretrained(MODEL, subfolder="unet")
    sched = DDPMScheduler.from_pretrained(MODEL, subfolder="scheduler", prediction_type=prediction_type)
    text.requires_grad_(False)
    vae.requires_grad_(False)
    unet.train()
    return tok, text, vae, unet, sched


def ids_of(tok, captions):
    return tok(captions, max_length=tok.model_max_length, padding="max_length", truncation=True,
               return_tensors="pt").input_ids


def sd_loss(text, vae, unet, sched, pix, ids, gen, ref=None, tag="", n_instance=None, prior_weight=1.0):
    """One micro-batch of the recipe: returns the loss (the graph attached)."""
    with torch.no_grad():
        latents = vae.encode(pix).latent_dist.sample(generator=gen) * vae.config.scaling_factor
        noise = torch.randn(latents.shape, generator=gen)
        t = torch.randint(0, sched.config.num_train_timesteps, (latents.shape[0],), generator=gen)
        noisy = sched.add_noise(latents, noise, t)
        ehs = text(ids, return_dict=False)[0]
        target = noise if sched.config.prediction_type == "epsilon" else sched.get_velocity(latents, noise, t)
    pred = unet(noisy, t, ehs, return_dict=False)[0]
    if n_instance is None:
        loss = F.mse_loss(pred.float(), target.float(), reduction="mean")
    else:  # train_dreambooth.py: instance half + prior_loss_weight * class half
        loss = F.mse_loss(pred[:n_instance].float(), target[:n_instance].float(), reduction="mean") + \
            prior_weight * F.mse_loss(pred[n_instance:].float(), target[n_instance:].float(), reduction="mean")
    if ref is not None:
        for k, v in (("latents", latents), ("noise", noise), ("timesteps", t), ("noisy", noisy), ("ehs", ehs),
                     ("target", target), ("pred", pred), ("loss", loss.reshape(1)), ("ids", ids.to(torch.int32))):
            ref[tag + k] = v.detach().clone()
    return loss


SELECT = ["conv_in.weight", "time_embedding.linear_1.weight", "down_blocks.0.resnets.0.norm1.weight",
          "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight",
          "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight",
          "down_blocks.0.attentions.0.transformer_blocks.0.ff.net.0.proj.weight", "mid_block.resnets.1.conv2.bias",
          "mid_block.attentions.0.proj_out.weight", "up_blocks.1.attentions.1.transformer_blocks.0.norm3.bias",
          "up_blocks.0.upsamplers.0.conv.weight", "conv_norm_out.weight", "conv_out.weight", "conv_out.bias"]

STEPS = [["cat.png", "dawn.png"], ["tile.png", "cat.png"]]


def sd_full(out, prediction_type, tag, all_grads):
    tok, text, vae, unet, sched = load_sd(prediction_type)
    gen = torch.Generator().manual_seed(SEED)
    opt = torch.optim.AdamW(unet.parameters(), lr=LR, betas=(0.9, 0.999), weight_decay=1e-2, eps=1e-8)
    ref, grads, after = {}, {}, {}
    caps = dict(IMAGES)
    for step, names in enumerate(STEPS):
        pix = pixels(out, names)
        ids = ids_of(tok, [caps[n[:-4]] for n in names])
        loss = sd_loss(text, vae, unet, sched, pix, ids, gen, ref, f"step{step}.")
        loss.backward()
        if step == 0:
            for n, p in unet.named_parameters():
                if all_grads or n in SELECT:
                    grads["grad." + n] = p.grad.detach().clone()
        ref[f"step{step}.norm"] = torch.nn.utils.clip_grad_norm_(unet.parameters(), 1.0).reshape(1)
        opt.step()
        opt.zero_grad()
    for n, p in unet.named_parameters():
        if n in SELECT:
            after["after." + n] = p.detach().clone()
    return ref, grads, after


def sd_prior(out):
    """train_dreambooth.py with prior preservation: one instance and one class image in a batch."""
    tok, text, vae, unet, sched = load_sd()
    gen = torch.Generator().manual_seed(SEED)
    pix = torch.cat([pixels(out, ["cat.png"]), pixels(out, ["class0.png"], "class")])
    ids = ids_of(tok, ["a photo of sks cat", "a photo of a cat"])
    ref = {}
    loss = sd_loss(text, vae, unet, sched, pix, ids, gen, ref, "prior.", n_instance=1, prior_weight=0.5)
    loss.backward()
    for n, p in unet.named_parameters():
        if n in SELECT:
            ref["prior.grad." + n] = p.grad.detach().clone()
    return ref


def sd_lora(out):
    tok, text, vae, unet, sched = load_sd()
    unet.requires_grad_(False)
    unet.add_adapter(LoraConfig(r=LORA_RANK, lora_alpha=LORA_RANK, init_lora_weights="gaussian", target_modules=TARGETS))
    gen = torch.Generator().manual_seed(SEED)
    ref = {}
    init_gen = torch.Generator().manual_seed(SEED + 7)
    with torch.no_grad():  # lora_B starts at zero in PEFT; made non-zero here so lora_A's gradient is tested too
        for n, p in unet.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=init_gen))
    params = [p for p in unet.parameters() if p.requires_grad]
    named = [(clean(n), p) for n, p in unet.named_parameters() if p.requires_grad]
    for n, p in named:
        ref["init." + n] = p.detach().clone()
    opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.999), weight_decay=1e-2, eps=1e-8)
    caps = dict(IMAGES)
    for step, names in enumerate(STEPS):
        pix = pixels(out, names)
        ids = ids_of(tok, [caps[n[:-4]] for n in names])
        loss = sd_loss(text, vae, unet, sched, pix, ids, gen)
        ref[f"step{step}.loss"] = loss.detach().reshape(1)
        loss.backward()
        if step == 0:
            for n, p in named:
                ref["grad." + n] = p.grad.detach().clone()
        ref[f"step{step}.norm"] = torch.nn.utils.clip_grad_norm_(params, 1.0).reshape(1)
        opt.step()
        opt.zero_grad()
    for n, p in named:
        ref["after." + n] = p.detach().clone()
    return ref


def sd_fixtures(out):
    ref, grads, after = sd_full(out, "epsilon", "", True)
    save(ref, os.path.join(out, "sd_full.safetensors"))
    save(grads, os.path.join(out, "sd_full_grads.safetensors"))
    save(after, os.path.join(out, "sd_full_after.safetensors"))
    vref, vgrads, vafter = sd_full(out, "v_prediction", "v.", False)
    misc = {"v." + k: v for k, v in vref.items() if k.startswith("step0.")}
    misc.update({"v." + k: v for k, v in vgrads.items()})
    misc.update(sd_prior(out))
    save(misc, os.path.join(out, "sd_misc.safetensors"))
    save(sd_lora(out), os.path.join(out, "sd_lora.safetensors"))


def check_output(d):
    """What a user does with colossal-diffuse --train's output: load it in diffusers and sample."""
    from diffusers import StableDiffusionPipeline
    lora = os.path.exists(os.path.join(d, "pytorch_lora_weights.safetensors"))
    if lora:
        pipe = StableDiffusionPipeline.from_pretrained(MODEL, safety_checker=None)
        pipe.load_lora_weights(d)
        print("loaded LoRA adapters:", pipe.get_active_adapters())
        from safetensors.torch import load_file
        lw = load_file(os.path.join(d, "pytorch_lora_weights.safetensors"))
        mod = "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_v"
        base = UNet2DConditionModel.from_pretrained(MODEL, subfolder="unet").get_parameter(mod + ".weight")
        pipe.fuse_lora()
        fused = pipe.unet.get_parameter(mod + ".base_layer.weight" if hasattr(pipe.unet.get_submodule(mod), "base_layer")
                                        else mod + ".weight")
        with torch.no_grad():
            want = base + lw[f"unet.{mod}.lora.up.weight"] @ lw[f"unet.{mod}.lora.down.weight"]
            print("fused", mod, "= base + up @ down within", float((fused - want).abs().max()),
                  "(the adapter moved it by", float((want - base).abs().max()), ")")
    else:
        pipe = StableDiffusionPipeline.from_pretrained(d, safety_checker=None)
        ref = UNet2DConditionModel.from_pretrained(MODEL, subfolder="unet")
        moved = sum(float((a - b).abs().max()) for a, b in zip(pipe.unet.parameters(), ref.parameters()))
        print("loaded the pipeline; UNet weights moved by", moved)
    img = pipe("a photo of a cat", num_inference_steps=2, height=16, width=16,
               generator=torch.Generator().manual_seed(0), output_type="np").images[0]
    print("generated", img.shape, "finite" if np.isfinite(img).all() else "NOT FINITE")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", "tests", "fixtures", "sd_train"))
    ap.add_argument("--check-output", metavar="DIR")
    a = ap.parse_args()
    if a.check_output:
        check_output(a.check_output)
        return
    os.makedirs(a.out, exist_ok=True)
    trainer_fixture(a.out)
    write_images(a.out)
    write_resize(a.out)
    sd_fixtures(a.out)
    for f in sorted(os.listdir(a.out)):
        p = os.path.join(a.out, f)
        if os.path.isfile(p):
            print(f"{f}: {os.path.getsize(p)} bytes")


if __name__ == "__main__":
    main()
