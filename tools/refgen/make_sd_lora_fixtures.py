#!/usr/bin/env python3
"""make_sd_lora_fixtures.py - LoRA files for a tiny Stable Diffusion and the weights diffusers fuses from them.

The base is the tiny pipeline of tests/fixtures/sd_pipeline/model (make_sd_pipeline_fixtures.py): its
UNet (1x1-convolution proj_in/proj_out, as SD 1.x) and CLIP text encoder. Two adapters are trained on
nothing - random - and written as the files people meet:

  a_peft.safetensors      adapter A as diffusers saves it (pipe.save_lora_weights: "unet.<module>.lora_A.weight",
                          "text_encoder.<module>.lora_B.weight", PEFT's config in the "lora_adapter_metadata"
                          metadata: r 4, lora_alpha 8, alpha_pattern {"proj_out": 2}, rank_pattern {"ff.net.2": 2});
                          attention, feed-forward, proj_in/out, time_emb_proj and 3x3 convolutions (LoCon:
                          down [r, Cin, 3, 3], up [Cout, r, 1, 1]), the text encoder's q/k/v/out_proj and fc1/fc2
  a_kohya.safetensors     adapter A in kohya-ss sd-scripts' names ("lora_unet_down_blocks_0_attentions_0_proj_in
                          .lora_down.weight", ".lora_up.weight", ".alpha"; "lora_te_text_model_encoder_layers_0_...")
  a_kohya_ldm.safetensors adapter A with the UNet in LDM names ("lora_unet_input_blocks_1_1_transformer_blocks_0_attn1_to_q")
  b_kohya.safetensors     adapter B (rank 2, no ".alpha": scale 1) in kohya names, fewer modules

and reference.safetensors holds every adapted weight after diffusers' load_lora_weights + fuse_lora:
"a.unet.<name>" / "a.text_encoder.<name>" for A at weight 0.7, "ab.*" for A at 0.7 and B at -0.5 stacked
(set_adapters; only the weights B adapts: the others are A's alone). Each kohya file is checked with diffusers too: loaded and fused it gives the same weights
as the PEFT file (relative 1e-6). The fused weights are also checked against W + w * alpha / r * up @ down
computed here in float64.

    tools/refgen/.venv/bin/python tools/refgen/make_sd_lora_fixtures.py --out tests/fixtures/sd_lora
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

import argparse
import json
import re
import shutil
import tempfile

import torch
from safetensors import safe_open
from safetensors.torch import save_file

import diffusers
import peft
import transformers
from diffusers import StableDiffusionPipeline
from peft import LoraConfig
from peft.utils import get_peft_model_state_dict

SEED = 20261126
HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(HERE, "..", "..", "tests", "fixtures", "sd_pipeline", "model")
W_A, W_B = 0.7, -0.5
LPB = 1                     # the base UNet's layers per block
UP_ATTN = (False, True)     # its up blocks with attention (diffusers' order)

A_UNET = dict(r=4, lora_alpha=8, alpha_pattern={"proj_out": 2}, rank_pattern={"ff.net.2": 2},
              target_modules=["to_q", "to_k", "to_v", "to_out.0", "proj_in", "proj_out", "ff.net.0.proj", "ff.net.2",
                              "time_emb_proj", "conv1", "conv2", "conv_shortcut", "conv"])
A_TEXT = dict(r=4, lora_alpha=4, target_modules=["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"])
B_UNET = dict(r=2, lora_alpha=2, target_modules=["to_k", "to_out.0", "conv2"])
# diffusers 0.42 drops a kohya file's text-encoder attention LoRA when the file has no ".alpha" keys
# ("to_q_lora" never becomes q_proj): B adapts the text encoder's MLP only, so that diffusers' reference holds
B_TEXT = dict(r=2, lora_alpha=2, target_modules=["fc1", "fc2"])


def load_pipe():
    pipe = StableDiffusionPipeline.from_pretrained(BASE, safety_checker=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def randomize(model, gen):
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_" in n:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))


def make_adapter(pipe, ucfg, tcfg, gen):
    """PEFT adapters on the pipeline's UNet and text encoder, random; their state dicts and configs."""
    uc = LoraConfig(init_lora_weights=False, **ucfg)
    tc = LoraConfig(init_lora_weights=False, **tcfg)
    pipe.unet.add_adapter(uc)
    pipe.text_encoder.add_adapter(tc)
    randomize(pipe.unet, gen)
    randomize(pipe.text_encoder, gen)
    u = {k: v.detach().clone().contiguous() for k, v in get_peft_model_state_dict(pipe.unet).items()}
    t = {k: v.detach().clone().contiguous() for k, v in get_peft_model_state_dict(pipe.text_encoder).items()}
    return u, t, uc, tc


def modules(sd):
    """{module: (down, up)} of a PEFT state dict."""
    out = {}
    for k in sd:
        if k.endswith(".lora_A.weight"):
            m = k[: -len(".lora_A.weight")]
            out[m] = (sd[k], sd[m + ".lora_B.weight"])
    return out


def pattern_value(pattern, module, default):
    for p, v in pattern.items():
        if re.match(rf"(.*\.)?({p})$", module):
            return v
    return default


RES_LDM = {"norm1": "in_layers.0", "conv1": "in_layers.2", "time_emb_proj": "emb_layers.1", "norm2": "out_layers.0",
           "conv2": "out_layers.3", "conv_shortcut": "skip_connection"}


def ldm_module(m):
    """A diffusers UNet module path in LDM names (layers per block LPB)."""
    p = m.split(".")
    if p[0] == "down_blocks":
        l, kind = int(p[1]), p[2]
        if kind == "downsamplers":
            return f"input_blocks.{1 + l * (LPB + 1) + LPB}.0.op"
        idx = 1 + l * (LPB + 1) + int(p[3])
        return f"input_blocks.{idx}.0.{RES_LDM[p[4]]}" if kind == "resnets" else f"input_blocks.{idx}.1." + ".".join(p[4:])
    if p[0] == "up_blocks":
        i, kind = int(p[1]), p[2]
        if kind == "upsamplers":
            return f"output_blocks.{i * (LPB + 1) + LPB}.{2 if UP_ATTN[i] else 1}.conv"
        idx = i * (LPB + 1) + int(p[3])
        return f"output_blocks.{idx}.0.{RES_LDM[p[4]]}" if kind == "resnets" else f"output_blocks.{idx}.1." + ".".join(p[4:])
    if p[0] == "mid_block":
        if p[1] == "resnets":
            return f"middle_block.{2 * int(p[2])}.{RES_LDM[p[3]]}"
        return "middle_block.1." + ".".join(p[3:])
    raise ValueError(m)


def kohya(u, t, ucfg, tcfg, ldm=False, alphas=True):
    """kohya-ss names: lora_unet_<module with _>.lora_down.weight / .lora_up.weight / .alpha."""
    out = {}
    for part, sd, cfg, pre in (("unet", u, ucfg, "lora_unet_"), ("te", t, tcfg, "lora_te_text_model_")):
        for m, (down, up) in modules(sd).items():
            path = ldm_module(m) if ldm and part == "unet" else m
            name = pre + path.replace(".", "_")
            out[name + ".lora_down.weight"] = down
            out[name + ".lora_up.weight"] = up
            if alphas:
                out[name + ".alpha"] = torch.tensor(float(pattern_value(cfg.get("alpha_pattern", {}), m,
                                                                        cfg["lora_alpha"])))
    return out


def fused(pipe):
    """The adapted weights of the pipeline after fuse_lora: {"unet.<name>": tensor, "text_encoder.<name>": ...}."""
    out = {}
    for comp, model in (("unet", pipe.unet), ("text_encoder", pipe.text_encoder)):
        for k, v in model.state_dict().items():
            if ".base_layer." in k and k.endswith(".weight"):
                out[f"{comp}.{k.replace('.base_layer.', '.')}"] = v.detach().clone().contiguous()
    return out


def direct(pipe0, adapters):
    """W + sum w * alpha / r * up @ down in float64, for every module of the adapters."""
    base = {f"unet.{k}": v.double() for k, v in pipe0.unet.state_dict().items()}
    base.update({f"text_encoder.{k}": v.double() for k, v in pipe0.text_encoder.state_dict().items()})
    out = {}
    for w, u, t, ucfg, tcfg in adapters:
        for comp, sd, cfg in (("unet", u, ucfg), ("text_encoder", t, tcfg)):
            for m, (down, up) in modules(sd).items():
                name = f"{comp}.{m}.weight"
                cur = out.get(name, base[name])
                r = down.shape[0]
                alpha = pattern_value(cfg.get("alpha_pattern", {}), m, cfg["lora_alpha"])
                d = up.double().reshape(up.shape[0], r) @ down.double().reshape(r, -1)
                out[name] = cur + w * alpha / r * d.reshape(cur.shape)
    return {k: v.float() for k, v in out.items()}


def close(a, b, what, tol=1e-6):
    assert set(a) == set(b), (what, sorted(set(a) ^ set(b))[:4])
    for k in a:
        err = (a[k].double() - b[k].double()).abs().max().item() / b[k].double().abs().max().item()
        assert err <= tol, (what, k, err)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.makedirs(a.out)
    tmp = tempfile.mkdtemp()
    gen = torch.Generator().manual_seed(SEED)

    p = load_pipe()
    ua, ta, _, _ = make_adapter(p, A_UNET, A_TEXT, gen)
    StableDiffusionPipeline.save_lora_weights(os.path.join(tmp, "a"), unet_lora_layers=ua, text_encoder_lora_layers=ta,
                                              unet_lora_adapter_metadata=LoraConfig(**A_UNET).to_dict(),
                                              text_encoder_lora_adapter_metadata=LoraConfig(**A_TEXT).to_dict())
    p = load_pipe()
    ub, tb, _, _ = make_adapter(p, B_UNET, B_TEXT, gen)

    files = {
        "a_kohya": kohya(ua, ta, A_UNET, A_TEXT),
        "a_kohya_ldm": kohya(ua, ta, A_UNET, A_TEXT, ldm=True),
        "b_kohya": kohya(ub, tb, B_UNET, B_TEXT, alphas=False),
    }
    # the diffusers file keeps diffusers' bytes but for the metadata, rewritten with sorted keys (stable)
    src = os.path.join(tmp, "a", "pytorch_lora_weights.safetensors")
    with safe_open(src, "pt") as f:
        meta = dict(f.metadata())
        sd = {k: f.get_tensor(k) for k in f.keys()}
    # (target_modules, a set, is listed in hash order: sorted here)
    lm = {k: sorted(v) if isinstance(v, list) else v for k, v in json.loads(meta["lora_adapter_metadata"]).items()}
    save_file(sd, os.path.join(a.out, "a_peft.safetensors"),
              metadata={"lora_adapter_metadata": json.dumps(lm, indent=2, sort_keys=True)})
    for name, sd in files.items():
        save_file(sd, os.path.join(a.out, name + ".safetensors"))

    base = load_pipe()
    want_a = direct(base, [(W_A, ua, ta, A_UNET, A_TEXT)])
    want_ab = direct(base, [(W_A, ua, ta, A_UNET, A_TEXT), (W_B, ub, tb, B_UNET, B_TEXT)])

    # diffusers: adapter A from the PEFT file, fused at W_A
    p = load_pipe()
    p.load_lora_weights(os.path.join(a.out, "a_peft.safetensors"), adapter_name="a")
    p.fuse_lora(lora_scale=W_A)
    ref_a = fused(p)
    close(ref_a, want_a, "a_peft vs W + w * alpha / r * up @ down")
    # the kohya spellings of A give the same fused weights
    for name in ("a_kohya", "a_kohya_ldm"):
        p = load_pipe()
        path = os.path.join(a.out, name + ".safetensors")
        if name == "a_kohya_ldm":
            # diffusers maps an up block's upsampler at output_blocks.N.1.conv (no attention) to an attention
            # block: give it the file without them (colossal's test reads them all)
            # and SD's load_lora_weights maps LDM block names only when told the UNet's config (as SDXL's does)
            with safe_open(path, "pt") as f:
                sd = {k: f.get_tensor(k) for k in f.keys() if not re.search(r"output_blocks_\d+_1_conv", k)}
            sd, alphas = StableDiffusionPipeline.lora_state_dict(sd, unet_config=p.unet.config)
            p.load_lora_into_unet(sd, alphas, p.unet, adapter_name="a", _pipeline=p)
            p.load_lora_into_text_encoder(sd, alphas, p.text_encoder, adapter_name="a", _pipeline=p)
        else:
            p.load_lora_weights(path, adapter_name="a")
        p.fuse_lora(lora_scale=W_A)
        got = fused(p)
        if name == "a_kohya_ldm":
            want = {k: v for k, v in ref_a.items() if not k.startswith("unet.up_blocks.0.upsamplers")}
            close(got, want, name)
        else:
            close(got, ref_a, name)
    # A and B stacked
    p = load_pipe()
    p.load_lora_weights(os.path.join(a.out, "a_peft.safetensors"), adapter_name="a")
    p.load_lora_weights(os.path.join(a.out, "b_kohya.safetensors"), adapter_name="b")
    p.set_adapters(["a", "b"], adapter_weights=[W_A, W_B])
    p.fuse_lora(adapter_names=["a", "b"])
    ref_ab = fused(p)
    close(ref_ab, want_ab, "a + b vs W + sum w * alpha / r * up @ down")

    # the stacked weights of the modules B adapts (the others are A's alone)
    b_mods = {f"unet.{m}.weight" for m in modules(ub)} | {f"text_encoder.{m}.weight" for m in modules(tb)}
    for k in ref_ab:
        if k not in b_mods:
            close({k: ref_ab[k]}, {k: ref_a[k]}, "a + b where b adapts nothing", tol=0)
    ref = {f"a.{k}": v for k, v in ref_a.items()}
    ref.update({f"ab.{k}": v for k, v in ref_ab.items() if k in b_mods})
    save_file(ref, os.path.join(a.out, "reference.safetensors"))
    with open(os.path.join(a.out, "versions.json"), "w") as f:
        json.dump({"script": "make_sd_lora_fixtures.py", "torch": torch.__version__, "diffusers": diffusers.__version__,
                   "transformers": transformers.__version__, "peft": peft.__version__, "w_a": W_A, "w_b": W_B},
                  f, indent=1, sort_keys=True)
    shutil.rmtree(tmp)
    print(f"{len(ref_a)} weights adapted by A, {len(b_mods)} by B; verified with diffusers")


if __name__ == "__main__":
    main()
