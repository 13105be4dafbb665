#!/usr/bin/env python3
"""make_sd_single_file_fixtures.py - tiny Stable Diffusion checkpoints in the original single-file layout.

Builds tiny random diffusers components (UNet2DConditionModel, AutoencoderKL, CLIPTextModel), writes
them as one LDM / CompVis / A1111 checkpoint ("model.diffusion_model.*", "first_stage_model.*",
"cond_stage_model.transformer.*" for SD 1.x or "cond_stage_model.model.*" - OpenCLIP - for SD 2.x)
by this script's own diffusers -> LDM mapping, and checks the file with diffusers itself: the file
loaded by StableDiffusionPipeline.from_single_file(file, config=<tiny diffusers folder>) and by
diffusers' convert_ldm_* functions must give back every original tensor exactly.

    tools/refgen/.venv/bin/python tools/refgen/make_sd_single_file_fixtures.py --out tests/fixtures/sd_single_file

Per case NAME it writes NAME.safetensors or NAME.ckpt (the single file), NAME_ref.safetensors (the
diffusers state dicts, names prefixed "unet.", "vae.", "text_encoder.") and NAME/{unet,vae,text_encoder}/
config.json and NAME/scheduler/scheduler_config.json: the configs a diffusers folder of that model
holds. The values weights cannot tell (heads, GroupNorm groups, sample sizes, scheduler) follow the
rules colossal's sd_single_file.c applies: SD 1.x 8 heads, SD 2.x heads of 64 channels (at least one),
GroupNorm groups the largest divisor of the channel counts' gcd not above 32, SD 1.x and SD 2.x-base
images of 512, SD 2.x-v 768; on real models these give the published configs.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

import argparse
import json
import math
import shutil
import tempfile

import torch
from safetensors.torch import load_file, save_file

import diffusers
import transformers
from diffusers import (AutoencoderKL, DDIMScheduler, PNDMScheduler, StableDiffusionPipeline,
                       UNet2DConditionModel)
from diffusers.loaders import single_file_utils as sfu
from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

SEED = 20261125
HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "..", "..", "tests", "fixtures", "sd_pipeline", "model", "tokenizer")

CASES = {
    # SD 1.x, safetensors, "text_model." in the CLIP names, LDM buffers and EMA bits that must be ignored
    "sd1": dict(family=1, fmt="safetensors", unet_ch=(8, 8), unet_lpb=1, unet_attn=(True, False),
                in_ch=4, vae_ch=(4, 8), vae_lpb=1, text_layers=2, text_prefix=True, extras=True),
    # SD 1.x inpainting (9 input channels), a .ckpt with the weights under "state_dict", three levels, one
    # layer per block in the UNet and two in the VAE, CLIP names without "text_model."
    "sd1_ckpt": dict(family=1, fmt="ckpt", unet_ch=(8, 8, 8), unet_lpb=1, unet_attn=(True, True, False),
                     in_ch=9, vae_ch=(4, 4, 8), vae_lpb=2, text_layers=1, text_prefix=False, extras=False),
    # SD 2.x: linear projections in the transformers, OpenCLIP text encoder (fused in_proj, one more
    # resblock than diffusers keeps: SD 2 takes the penultimate layer)
    "sd2": dict(family=2, fmt="safetensors", unet_ch=(4, 8), unet_lpb=2, unet_attn=(True, False),
                in_ch=4, vae_ch=(4, 8), vae_lpb=1, text_layers=2, text_prefix=True, extras=True),
}
TEXT_HIDDEN, TEXT_FF, TEXT_VOCAB, TEXT_POS = 16, 24, 60, 77


def groups(channels):
    g = 0
    for c in channels:
        g = math.gcd(g, c)
    return max(d for d in range(1, 33) if g % d == 0)


def perturb(module, gen):
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=gen))


def build(case, gen):
    fam, v = case["family"], case.get("v", False)
    ch = case["unet_ch"]
    levels = len(ch)
    down = tuple("CrossAttnDownBlock2D" if a else "DownBlock2D" for a in case["unet_attn"])
    up = tuple("CrossAttnUpBlock2D" if a else "UpBlock2D" for a in reversed(case["unet_attn"]))
    heads = 8 if fam == 1 else [max(1, c // 64) for c in ch]
    unet = UNet2DConditionModel(sample_size=64, in_channels=case["in_ch"], out_channels=4,
                                layers_per_block=case["unet_lpb"], block_out_channels=ch, down_block_types=down,
                                up_block_types=up, cross_attention_dim=TEXT_HIDDEN, attention_head_dim=heads,
                                norm_num_groups=groups(ch), use_linear_projection=fam == 2).eval()
    vch = case["vae_ch"]
    vae = AutoencoderKL(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * len(vch),
                        up_block_types=("UpDecoderBlock2D",) * len(vch), block_out_channels=vch,
                        layers_per_block=case["vae_lpb"], latent_channels=4, norm_num_groups=groups(vch),
                        sample_size=512).eval()
    tcfg = CLIPTextConfig(vocab_size=TEXT_VOCAB, hidden_size=TEXT_HIDDEN, intermediate_size=TEXT_FF,
                          num_attention_heads=max(1, TEXT_HIDDEN // 64), num_hidden_layers=case["text_layers"],
                          max_position_embeddings=TEXT_POS, hidden_act="quick_gelu" if fam == 1 else "gelu",
                          projection_dim=768 if fam == 1 else 512, bos_token_id=0, eos_token_id=2, pad_token_id=1)
    text = CLIPTextModel(tcfg).eval()
    for m in (unet, vae, text):
        perturb(m, gen)
    assert levels == len(up)
    return unet, vae, text


# ---- diffusers -> LDM (this script's own inverse of diffusers' single-file conversion) ----

RESNET_UNET = {"norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1",
               "norm2": "out_layers.0", "conv2": "out_layers.3", "conv_shortcut": "skip_connection"}


def unet_to_ldm(sd, lpb, up_attn):
    out = {}
    top = {"time_embedding.linear_1": "time_embed.0", "time_embedding.linear_2": "time_embed.2",
           "conv_in": "input_blocks.0.0", "conv_norm_out": "out.0", "conv_out": "out.2"}
    for k, t in sd.items():
        p = k.split(".")
        mod, leaf = ".".join(p[:-1]), p[-1]
        if mod in top:
            n = f"{top[mod]}.{leaf}"
        elif p[0] == "down_blocks":
            l, kind = int(p[1]), p[2]
            if kind == "resnets":
                n = f"input_blocks.{1 + l * (lpb + 1) + int(p[3])}.0.{RESNET_UNET[p[4]]}.{leaf}"
            elif kind == "attentions":
                n = f"input_blocks.{1 + l * (lpb + 1) + int(p[3])}.1." + ".".join(p[4:])
            else:
                n = f"input_blocks.{1 + l * (lpb + 1) + lpb}.0.op.{leaf}"
        elif p[0] == "mid_block":
            if p[1] == "resnets":
                n = f"middle_block.{2 * int(p[2])}.{RESNET_UNET[p[3]]}.{leaf}"
            else:
                n = "middle_block.1." + ".".join(p[3:])
        elif p[0] == "up_blocks":
            i, kind = int(p[1]), p[2]
            if kind == "resnets":
                n = f"output_blocks.{i * (lpb + 1) + int(p[3])}.0.{RESNET_UNET[p[4]]}.{leaf}"
            elif kind == "attentions":
                n = f"output_blocks.{i * (lpb + 1) + int(p[3])}.1." + ".".join(p[4:])
            else:
                n = f"output_blocks.{i * (lpb + 1) + lpb}.{2 if up_attn[i] else 1}.conv.{leaf}"
        else:
            raise ValueError(k)
        out["model.diffusion_model." + n] = t
    return out


def vae_to_ldm(sd, levels):
    out = {}
    attn = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}
    for k, t in sd.items():
        p = k.split(".")
        side, rest = p[0], p[1:]
        leaf = rest[-1]
        if side not in ("encoder", "decoder"):
            n = k   # quant_conv, post_quant_conv
        elif rest[0] in ("conv_in", "conv_out"):
            n = k
        elif rest[0] == "conv_norm_out":
            n = f"{side}.norm_out.{leaf}"
        elif rest[0] in ("down_blocks", "up_blocks"):
            b = int(rest[1]) if rest[0] == "down_blocks" else levels - 1 - int(rest[1])
            word = "down" if rest[0] == "down_blocks" else "up"
            if rest[2] == "resnets":
                sub = "nin_shortcut" if rest[4] == "conv_shortcut" else rest[4]
                n = f"{side}.{word}.{b}.block.{rest[3]}.{sub}.{leaf}"
            else:
                n = f"{side}.{word}.{b}.{'downsample' if word == 'down' else 'upsample'}.conv.{leaf}"
        elif rest[0] == "mid_block":
            if rest[1] == "resnets":
                n = f"{side}.mid.block_{int(rest[2]) + 1}.{rest[3]}.{leaf}"
            else:
                n = f"{side}.mid.attn_1.{attn['.'.join(rest[3:-1])]}.{leaf}"
                if leaf == "weight" and t.ndim == 2:
                    t = t[:, :, None, None]   # LDM's attention projections are 1x1 convolutions
        else:
            raise ValueError(k)
        out["first_stage_model." + n] = t
    return out


def clip_to_ldm(sd, text_prefix):
    pre = "cond_stage_model.transformer." + ("text_model." if text_prefix else "")
    return {pre + k: t for k, t in sd.items()}


def openclip_to_ldm(sd, layers, gen):
    pre = "cond_stage_model.model."
    out = {}
    top = {"embeddings.token_embedding.weight": "token_embedding.weight",
           "embeddings.position_embedding.weight": "positional_embedding",
           "final_layer_norm.weight": "ln_final.weight", "final_layer_norm.bias": "ln_final.bias"}
    sub = {"layer_norm1": "ln_1", "layer_norm2": "ln_2", "self_attn.out_proj": "attn.out_proj",
           "mlp.fc1": "mlp.c_fc", "mlp.fc2": "mlp.c_proj"}
    for k, t in sd.items():
        if k in top:
            out[pre + top[k]] = t
            continue
        p = k.split(".")
        assert p[0] == "encoder" and p[1] == "layers", k
        mod, leaf = ".".join(p[3:-1]), p[-1]
        if mod in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
            continue
        out[f"{pre}transformer.resblocks.{p[2]}.{sub[mod]}.{leaf}"] = t
    for i in range(layers):
        for leaf in ("weight", "bias"):
            q, k_, v = (sd[f"encoder.layers.{i}.self_attn.{x}_proj.{leaf}"] for x in "qkv")
            out[f"{pre}transformer.resblocks.{i}.attn.in_proj_{leaf}"] = torch.cat([q, k_, v], 0)
    # the last resblock (SD 2 encodes with the penultimate one), the projection and logit scale: unused
    w = TEXT_HIDDEN
    last = {"ln_1.weight": [w], "ln_1.bias": [w], "ln_2.weight": [w], "ln_2.bias": [w],
            "attn.in_proj_weight": [3 * w, w], "attn.in_proj_bias": [3 * w], "attn.out_proj.weight": [w, w],
            "attn.out_proj.bias": [w], "mlp.c_fc.weight": [TEXT_FF, w], "mlp.c_fc.bias": [TEXT_FF],
            "mlp.c_proj.weight": [w, TEXT_FF], "mlp.c_proj.bias": [w]}
    for n, s in last.items():
        out[f"{pre}transformer.resblocks.{layers}.{n}"] = 0.1 * torch.randn(s, generator=gen)
    out[pre + "text_projection"] = 0.1 * torch.randn([w, 8], generator=gen)
    out[pre + "logit_scale"] = torch.tensor(4.6)
    return out


def extras(gen):
    """What real LDM files carry besides the three models: schedule buffers, EMA counters, position ids."""
    return {"betas": torch.linspace(0.00085, 0.012, 1000), "alphas_cumprod": torch.rand(1000, generator=gen),
            "model_ema.decay": torch.tensor(0.9999), "model_ema.num_updates": torch.tensor(1000, dtype=torch.int32),
            "cond_stage_model.transformer.text_model.embeddings.position_ids": torch.arange(TEXT_POS)[None]}


def scheduler(fam, v):
    if fam == 2 and v:
        return DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                             num_train_timesteps=1000, clip_sample=False, set_alpha_to_one=False, steps_offset=1,
                             prediction_type="v_prediction")
    return PNDMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
                         set_alpha_to_one=False, skip_prk_steps=True, steps_offset=1, prediction_type="epsilon")


def write_configs(folder, unet, vae, text, fam, v):
    """The configs a diffusers folder of this model holds (SD 2.x: v-prediction unless v is False)."""
    ucfg = {k: v2 for k, v2 in unet.config.items() if k != "_use_default_values"}
    ucfg["sample_size"] = 96 if v else 64
    ucfg["upcast_attention"] = bool(v)
    u = UNet2DConditionModel.from_config(ucfg)
    u.save_config(os.path.join(folder, "unet"))
    vcfg = {k: v2 for k, v2 in vae.config.items() if k != "_use_default_values"}
    vcfg["sample_size"] = 768 if v else 512
    AutoencoderKL.from_config(vcfg).save_config(os.path.join(folder, "vae"))
    text.config.save_pretrained(os.path.join(folder, "text_encoder"))
    s = scheduler(fam, v)
    s.save_config(os.path.join(folder, "scheduler"))
    path = os.path.join(folder, "scheduler", "scheduler_config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["clip_sample"] = False      # as SD 1.5's and SD 2's own files: DDIM and DDPM must not clip
    if fam == 2 and v:
        cfg["skip_prk_steps"] = True  # SD 2's DDIM config carries it too
    with open(path, "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def verify(path, unet, vae, text, case, tmp):
    """diffusers reads the single file back to exactly the original tensors."""
    fam = case["family"]
    if path.endswith(".ckpt"):
        ck = torch.load(path, weights_only=True)["state_dict"]
    else:
        ck = load_file(path)
    orig = {"unet": unet.state_dict(), "vae": vae.state_dict(), "text": text.state_dict()}

    def same(name, got, want, allow_extra=()):
        extra = set(got) - set(want)
        assert all(any(e.startswith(a) for a in allow_extra) for e in extra), (name, sorted(extra)[:5])
        missing = set(want) - set(got)
        assert not missing, (name, sorted(missing)[:5])
        for k in want:
            assert got[k].shape == want[k].shape and torch.equal(got[k], want[k]), (name, k)

    same("unet", sfu.convert_ldm_unet_checkpoint(ck, dict(unet.config)), orig["unet"])
    same("vae", sfu.convert_ldm_vae_checkpoint(ck, dict(vae.config)), orig["vae"])
    if fam == 1:
        got = {k.removeprefix("text_model."): t for k, t in sfu.convert_ldm_clip_checkpoint(ck).items()}
        same("text", got, orig["text"], allow_extra=("embeddings.position_ids",))
    else:
        got = {k.removeprefix("text_model."): t for k, t in sfu.convert_open_clip_checkpoint(text, ck).items()}
        # diffusers drops SD 2's resblock 23 by number; the tiny model's extra last layer is kept
        same("text", got, orig["text"], allow_extra=(f"encoder.layers.{case['text_layers']}.", "text_projection"))
    # the whole pipeline through from_single_file, configs from a tiny diffusers folder
    folder = os.path.join(tmp, "folder")
    pipe = StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=CLIPTokenizer.from_pretrained(TOKENIZER),
                                   unet=unet, scheduler=scheduler(fam, False), safety_checker=None,
                                   feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(folder)
    # diffusers finds CLIP only under "cond_stage_model.transformer.text_model.": without it, pass the encoder
    given = {} if case["text_prefix"] else {"text_encoder": text}
    p2 = StableDiffusionPipeline.from_single_file(path, config=folder, local_files_only=True, safety_checker=None,
                                                  requires_safety_checker=False, **given)
    for name, mod in (("unet", p2.unet), ("vae", p2.vae), ("text", p2.text_encoder)):
        same(name + " (from_single_file)", mod.state_dict(), orig[name])
    shutil.rmtree(folder)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp()
    for k, (name, case) in enumerate(CASES.items()):
        gen = torch.Generator().manual_seed(SEED + k)
        torch.manual_seed(SEED + k)
        unet, vae, text = build(case, gen)
        lpb = case["unet_lpb"]
        ck = unet_to_ldm(unet.state_dict(), lpb, tuple(reversed(case["unet_attn"])))
        ck.update(vae_to_ldm(vae.state_dict(), len(case["vae_ch"])))
        if case["family"] == 1:
            ck.update(clip_to_ldm(text.state_dict(), case["text_prefix"]))
        else:
            ck.update(openclip_to_ldm(text.state_dict(), case["text_layers"], gen))
        if case["extras"]:
            ck.update(extras(gen))
        ck = {k2: t.contiguous() for k2, t in ck.items()}
        if case["fmt"] == "ckpt":
            path = os.path.join(a.out, name + ".ckpt")
            torch.save({"state_dict": ck, "global_step": 875000, "epoch": 3}, path)
        else:
            path = os.path.join(a.out, name + ".safetensors")
            save_file(ck, path)
        verify(path, unet, vae, text, case, tmp)
        ref = {f"unet.{k2}": t for k2, t in unet.state_dict().items()}
        ref.update({f"vae.{k2}": t for k2, t in vae.state_dict().items()})
        ref.update({f"text_encoder.{k2}": t for k2, t in text.state_dict().items()})
        save_file({k2: t.contiguous() for k2, t in ref.items()}, os.path.join(a.out, name + "_ref.safetensors"))
        folder = os.path.join(a.out, name)
        if os.path.exists(folder):
            shutil.rmtree(folder)
        write_configs(folder, unet, vae, text, case["family"], case["family"] == 2)
        if case["family"] == 2:   # the same file read as SD 2.x-base (epsilon, 512)
            base = os.path.join(a.out, name + "_base")
            if os.path.exists(base):
                shutil.rmtree(base)
            write_configs(base, unet, vae, text, 2, False)
        print(f"{name}: {len(ck)} tensors in {os.path.basename(path)} ({os.path.getsize(path)} bytes), verified")
    shutil.rmtree(tmp)
    with open(os.path.join(a.out, "versions.json"), "w") as f:
        json.dump({"script": "make_sd_single_file_fixtures.py", "torch": torch.__version__,
                   "diffusers": diffusers.__version__, "transformers": transformers.__version__}, f, indent=1,
                  sort_keys=True)


if __name__ == "__main__":
    main()
