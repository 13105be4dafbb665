#!/usr/bin/env python3
"""make_sd_unet_fixtures.py - reference outputs of tiny diffusers UNet2DConditionModels.

Builds four tiny, randomly initialised UNets (no download: the configs are written
here), saves each with save_pretrained (config.json + diffusion_pytorch_model.safetensors,
as in a Stable Diffusion repository's unet/ folder) and writes what diffusers computes
with them in float32: the timestep projection and the predicted noise for a batch of
two with different timesteps, on a square and on a non-square latent; for one model
also the MSE loss against a target and every parameter's gradient (computed in float64).

    tools/refgen/.venv/bin/python tools/refgen/make_sd_unet_fixtures.py --out tests/fixtures/sd_unet

See tools/refgen/README.md ("make_sd_unet_fixtures.py") for the models and files.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.setdefault("DIFFUSERS_VERBOSITY", "error")

import argparse
import copy
import hashlib
import json
import struct

import diffusers
import safetensors
import torch
import torch.nn.functional as F
from diffusers import UNet2DConditionModel
from safetensors.torch import load_file, save_file

SEED = 20250315   # model k (in MODELS order) uses SEED + k
BATCH = 2
TIMESTEPS = [999.0, 37.0]   # one per row
CONTEXT_LEN = 77

CROSS = ("CrossAttnDownBlock2D", "DownBlock2D")
CROSS_UP = ("UpBlock2D", "CrossAttnUpBlock2D")

# name: (config, latent sizes {case: (H, W)}, context length, gradients?)
MODELS = {
    # SD 1.x layout: conv proj_in/proj_out, attention_head_dim an int (= heads)
    "sd1": (dict(sample_size=8, in_channels=4, out_channels=4, block_out_channels=(8, 16), layers_per_block=2,
                 down_block_types=CROSS, up_block_types=CROSS_UP, cross_attention_dim=32, attention_head_dim=2,
                 norm_num_groups=4, flip_sin_to_cos=True, freq_shift=0),
            {"sq": (8, 8), "ns": (9, 6)}, CONTEXT_LEN, False),
    # SD 2.x layout: Linear proj_in/proj_out, a list of heads per block, upcast_attention; three blocks,
    # two transformer layers in the first, the other time-projection settings, a mid-block scale factor
    "sd2": (dict(sample_size=8, in_channels=4, out_channels=4, block_out_channels=(4, 8, 8), layers_per_block=1,
                 down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
                 up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
                 attention_head_dim=[2, 4, 8], transformer_layers_per_block=[2, 1, 1], norm_num_groups=2,
                 use_linear_projection=True, upcast_attention=True, flip_sin_to_cos=False, freq_shift=1,
                 mid_block_scale_factor=1.5),
            {"sq": (8, 8), "ns": (6, 10)}, CONTEXT_LEN, False),
    # inpainting: 9 input channels; also downsample_padding 0 (asymmetric pad), center_input_sample, 1x1 conv_out
    "inpaint": (dict(sample_size=8, in_channels=9, out_channels=4, block_out_channels=(4, 8), layers_per_block=1,
                     down_block_types=CROSS, up_block_types=CROSS_UP, cross_attention_dim=32, attention_head_dim=2,
                     norm_num_groups=2, downsample_padding=0, center_input_sample=True, conv_out_kernel=1),
                {"sq": (8, 8), "ns": (8, 12)}, CONTEXT_LEN, False),
    # the gradient check: small enough to store every parameter's gradient
    "grad": (dict(sample_size=8, in_channels=4, out_channels=4, block_out_channels=(4, 8), layers_per_block=1,
                  down_block_types=CROSS, up_block_types=CROSS_UP, cross_attention_dim=8, attention_head_dim=2,
                  norm_num_groups=2),
             {"sq": (6, 5)}, 5, True),
}


def randomise(model, gen):
    """Nothing keeps its default: biases N(0, 0.1), norm weights U(0.5, 1.5), attention
    query weights x3 (sharper attention), other matrices keep their random init."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
            elif p.ndim == 1:
                p.copy_(1.0 + (torch.rand(p.shape, generator=gen) - 0.5))
            elif name.endswith("to_q.weight"):
                p.mul_(3.0)


def save_file_canonical(tensors, path):
    """save_file, with the header in a fixed order (tensors by data offset)."""
    save_file(tensors, path)
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    canon = {k: header[k] for k in sorted(header, key=lambda k: (header[k]["data_offsets"][0], k))}
    text = json.dumps(canon, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    back = load_file(path)
    for k in tensors:
        assert torch.equal(back[k], tensors[k])


def generate(out, name, k):
    cfg, cases, ctx_len, grads = MODELS[name]
    torch.manual_seed(SEED + k)
    gen = torch.Generator().manual_seed(SEED + k)
    model = UNet2DConditionModel(**cfg).float().eval()
    randomise(model, gen)
    folder = os.path.join(out, name)
    model.save_pretrained(folder, safe_serialization=True)
    # what the C side reads is what diffusers loads back
    model = UNet2DConditionModel.from_pretrained(folder).float().eval()
    ref = {}
    t = torch.tensor(TIMESTEPS)
    ref["timesteps"] = t.clone()
    ref["t_proj"] = model.time_proj(t).float().contiguous()
    for case, (h, w) in cases.items():
        sample = torch.randn((BATCH, cfg["in_channels"], h, w), generator=gen)
        context = torch.randn((BATCH, ctx_len, cfg["cross_attention_dim"]), generator=gen)
        with torch.no_grad():
            y = model(sample, t, context).sample
        assert y.shape == (BATCH, cfg["out_channels"], h, w)
        ref[f"sample.{case}"] = sample
        ref[f"context.{case}"] = context
        ref[f"out.{case}"] = y.contiguous()
        print(f"{name}.{case}: latent {h}x{w}, out std {y.std().item():.3f}")
        if grads:
            # in float64, so that the reference gradients are exact to f32 precision (small
            # bias gradients are sums with much cancellation)
            target = torch.randn(y.shape, generator=gen)
            m64 = copy.deepcopy(model).double()
            loss = F.mse_loss(m64(sample.double(), t, context.double()).sample, target.double())
            loss.backward()
            ref[f"target.{case}"] = target
            ref[f"loss.{case}"] = loss.detach().reshape(1)
            for pn, p in m64.named_parameters():
                ref[f"grad.{pn}"] = p.grad.detach().clone().contiguous()
    save_file_canonical({k: v.float().contiguous() for k, v in ref.items()}, os.path.join(out, f"{name}_ref.safetensors"))
    nparam = sum(p.numel() for p in model.parameters())
    print(f"{name}: {nparam} parameters")


def write_manifest(out):
    rows = []
    for root, _, files in os.walk(out):
        for fn in sorted(files):
            p = os.path.join(root, fn)
            rel = os.path.relpath(p, out)
            if rel == "MANIFEST.md":
                continue
            with open(p, "rb") as f:
                rows.append((rel, os.path.getsize(p), hashlib.sha256(f.read()).hexdigest()))
    rows.sort()
    lines = ["# tests/fixtures/sd_unet", "",
             "Generated by tools/refgen/make_sd_unet_fixtures.py (see tools/refgen/README.md). Do not edit by hand.",
             "", f"torch {torch.__version__}, diffusers {diffusers.__version__}, safetensors {safetensors.__version__}.",
             "", "| file | bytes | sha256 |", "|---|---:|---|"]
    lines += [f"| {r} | {s} | `{d}` |" for r, s, d in rows]
    lines += ["", f"Total: {sum(s for _, s, _ in rows)} bytes in {len(rows)} files.", ""]
    with open(os.path.join(out, "MANIFEST.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output folder, e.g. tests/fixtures/sd_unet")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    for k, name in enumerate(MODELS):
        generate(args.out, name, k)
    write_manifest(args.out)


if __name__ == "__main__":
    main()
