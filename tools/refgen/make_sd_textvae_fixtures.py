#!/usr/bin/env python3
"""Writes the fixtures of tests/test_sd_textvae.c: tiny random Stable Diffusion
text encoders (transformers CLIPTextModel) and VAEs (diffusers AutoencoderKL),
saved with save_pretrained, and what PyTorch computes with them.

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_sd_textvae_fixtures.py [--out DIR]

Outputs (tests/fixtures/sd_textvae/ by default):
  clip_qg/      CLIPTextModel, quick_gelu, 3 layers (config.json, model.safetensors
                as transformers 5 writes it: names without "text_model.")
  clip_gelu/    gelu, 5 layers, its tensors renamed "text_model.*" as in the
                transformers 4.x files of Stable Diffusion repositories (the script
                checks that transformers loads that layout to the same model)
  clip_*_ref.safetensors
                ids [3,77] (i64), last_hidden_state, and skip1 / skip2: diffusers'
                clip_skip rule, final_layer_norm(hidden_states[-(k+1)]); ids5 [2,5]
                and last5: a shorter sequence
  vae_a/, vae_b/, vae_c/
                AutoencoderKL (config.json, diffusion_pytorch_model.safetensors):
                a: block_out_channels [8,16], 1 layer per block, 4 groups;
                b: [4,8,8], 2 layers per block, 2 groups, quant_conv biases that push
                   some logvar channels past the clamp [-30, 20];
                c: [8,8], 1 layer, 2 groups, no mid-block attention, no quant_conv /
                   post_quant_conv, a shift factor
                b's file names the attention's projections query/key/value/proj_attn as
                older diffusers files do (the script checks diffusers loads it the same)
  vae_*_ref.safetensors
                enc.x [2,3,16,16] -> enc.mean, enc.logvar (latent_dist, clamped),
                enc.noise, enc.sample (latent_dist.sample(generator) = mean + std*noise);
                enc2.*: a non-square [1,3,24,40] image; dec.z [2,4,4,4] -> dec.out
                (decode(z).sample, no scaling: that is the pipeline's), dec2.*: [1,4,6,10];
                tiled.z [2,4,t+2,2t-2] -> tiled.out: decode with enable_tiling() (t = the
                latent tile side, sample_size / 2^(blocks-1)), which differs from decoding whole;
                tiled.sizes: tile_latent_min_size, tile_sample_min_size, overlap_size,
                blend_extent, row_limit

Every parameter is perturbed with random values (norm weights around 1, biases
and the rest around their initial values), so default initialisations cannot
hide a missing tensor or a swapped affine. Torch runs with one thread and
deterministic algorithms; nothing is downloaded (HF_HUB_OFFLINE=1).
"""
import argparse
import json
import os
import shutil

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["DIFFUSERS_VERBOSITY"] = "error"
os.environ["TRANSFORMERS_VERBOSITY"] = "error"

import torch  # noqa: E402
import diffusers  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from diffusers import AutoencoderKL  # noqa: E402
from transformers import CLIPTextConfig, CLIPTextModel  # noqa: E402

CLIPS = {
    "clip_qg": dict(hidden_act="quick_gelu", num_hidden_layers=3, prefix=False),
    "clip_gelu": dict(hidden_act="gelu", num_hidden_layers=5, prefix=True, layer_norm_eps=1e-6),
}

VAES = {
    "vae_a": dict(block_out_channels=[8, 16], layers_per_block=1, norm_num_groups=4, sample_size=16),
    "vae_b": dict(block_out_channels=[4, 8, 8], layers_per_block=2, norm_num_groups=2, sample_size=32,
                  clamp=True, legacy=True),
    "vae_c": dict(block_out_channels=[8, 8], layers_per_block=1, norm_num_groups=2, sample_size=16,
                  mid_block_add_attention=False, use_quant_conv=False, use_post_quant_conv=False,
                  scaling_factor=0.3611, shift_factor=0.1159, force_upcast=False),
}


def perturb(model, seed):
    """Random values on top of every parameter: none keeps its default."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("embedding.weight"):
                p.copy_(noise * 0.5)
            elif p.ndim == 1:        # norm weights (around 1) and biases (around 0)
                p.add_(noise * 0.2)
            else:
                p.add_(noise * 0.5 / max(1.0, p[0].numel()) ** 0.5)


def save_ref(path, tensors):
    save_file({k: v.detach().contiguous() for k, v in tensors.items()}, path)


def make_clip(out, name, spec):
    cfg = CLIPTextConfig(vocab_size=1000, hidden_size=32, intermediate_size=37, num_attention_heads=4,
                         num_hidden_layers=spec["num_hidden_layers"], max_position_embeddings=77,
                         hidden_act=spec["hidden_act"], layer_norm_eps=spec.get("layer_norm_eps", 1e-5),
                         projection_dim=16, bos_token_id=998, eos_token_id=999, pad_token_id=999)
    torch.manual_seed(11)
    m = CLIPTextModel(cfg).eval()
    perturb(m, 100 + len(name))
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    m.save_pretrained(d)
    st = os.path.join(d, "model.safetensors")
    if spec["prefix"]:
        sd = load_file(st)
        save_file({"text_model." + k: v for k, v in sd.items()}, st, metadata={"format": "pt"})
        m2 = CLIPTextModel.from_pretrained(d).eval()
        for (k, a), (k2, b) in zip(sorted(m.state_dict().items()), sorted(m2.state_dict().items())):
            assert k == k2 and torch.equal(a, b), "transformers loads the text_model. layout differently: " + k

    g = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 998, (3, 77), generator=g)
    ids[:, 0] = 998                       # bos
    ids[1, 9:] = 999                      # a short prompt padded with eos, as the tokenizer gives
    ids[2, 40] = 999
    ids5 = torch.randint(0, 1000, (2, 5), generator=g)
    with torch.no_grad():
        o = m(ids, output_hidden_states=True)
        hs = o.hidden_states
        assert len(hs) == cfg.num_hidden_layers + 1
        ref = {"ids": ids, "last_hidden_state": o.last_hidden_state, "ids5": ids5,
               "last5": m(ids5).last_hidden_state}
        for k in (1, 2):   # diffusers encode_prompt with clip_skip=k
            ref["skip%d" % k] = m.final_layer_norm(hs[-(k + 1)])
        assert torch.equal(m.final_layer_norm(hs[-1]), o.last_hidden_state)
    save_ref(os.path.join(out, name + "_ref.safetensors"), ref)


def make_vae(out, name, spec):
    spec = dict(spec)
    clamp = spec.pop("clamp", False)
    legacy = spec.pop("legacy", False)
    n = len(spec["block_out_channels"])
    kw = dict(in_channels=3, out_channels=3, latent_channels=4, down_block_types=["DownEncoderBlock2D"] * n,
              up_block_types=["UpDecoderBlock2D"] * n)
    kw.update(spec)
    torch.manual_seed(21)
    m = AutoencoderKL(**kw).eval()
    perturb(m, 200 + len(name) + n)
    if clamp:
        with torch.no_grad():   # logvar channels 4..7: push channel 5 above 20 and 6 below -30
            m.quant_conv.bias[5] += 40.0
            m.quant_conv.bias[6] -= 60.0
    d = os.path.join(out, name)
    shutil.rmtree(d, ignore_errors=True)
    m.save_pretrained(d)
    if legacy:   # the attention's old names, which diffusers still converts on load
        st = os.path.join(d, "diffusion_pytorch_model.safetensors")
        old = {"to_q": "query", "to_k": "key", "to_v": "value", "to_out.0": "proj_attn"}
        sd = {}
        for k, v in load_file(st).items():
            for new, was in old.items():
                k = k.replace(".attentions.0.%s." % new, ".attentions.0.%s." % was)
            sd[k] = v
        assert "encoder.mid_block.attentions.0.query.weight" in sd
        save_file(sd, st, metadata={"format": "pt"})
    m2 = AutoencoderKL.from_pretrained(d).eval()
    for (k, a), (k2, b) in zip(sorted(m.state_dict().items()), sorted(m2.state_dict().items())):
        assert k == k2 and torch.equal(a, b), k

    g = torch.Generator().manual_seed(7)
    ref = {}
    with torch.no_grad():
        for tag, shape in (("enc", (2, 3, 16, 16)), ("enc2", (1, 3, 24, 40))):
            x = torch.randn(shape, generator=g)
            dist = m.encode(x).latent_dist
            seed = 1000 + shape[2]
            sample = dist.sample(generator=torch.Generator().manual_seed(seed))
            noise = torch.randn(dist.mean.shape, generator=torch.Generator().manual_seed(seed))
            assert torch.equal(sample, dist.mean + dist.std * noise)
            if clamp and tag == "enc":
                assert dist.logvar.max() == 20.0 and dist.logvar.min() == -30.0
            ref.update({tag + ".x": x, tag + ".mean": dist.mean, tag + ".logvar": dist.logvar,
                        tag + ".noise": noise, tag + ".sample": sample})
        for tag, shape in (("dec", (2, 4, 4, 4)), ("dec2", (1, 4, 6, 10))):
            z = torch.randn(shape, generator=g)
            ref.update({tag + ".z": z, tag + ".out": m.decode(z).sample})
        # tiled decoding (enable_tiling): latents larger than sample_size / 2^(blocks-1)
        tl = m.tile_latent_min_size
        z = torch.randn((2, 4, tl + 2, 2 * tl - 2), generator=g)
        whole = m.decode(z).sample
        m.enable_tiling()
        tiled = m.decode(z).sample
        m.disable_tiling()
        assert tiled.shape == whole.shape and not torch.allclose(tiled, whole, rtol=1e-3, atol=1e-3)
        ov = int(m.tile_latent_min_size * (1 - m.tile_overlap_factor))     # as tiled_decode computes them
        blend = int(m.tile_sample_min_size * m.tile_overlap_factor)
        ref.update({"tiled.z": z, "tiled.out": tiled,
                    "tiled.sizes": torch.tensor([m.tile_latent_min_size, m.tile_sample_min_size, ov, blend,
                                                 m.tile_sample_min_size - blend], dtype=torch.int32)})
    save_ref(os.path.join(out, name + "_ref.safetensors"), ref)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join("tests", "fixtures", "sd_textvae"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    for name, spec in CLIPS.items():
        make_clip(args.out, name, spec)
    for name, spec in VAES.items():
        make_vae(args.out, name, spec)
    with open(os.path.join(args.out, "VERSIONS.json"), "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                   "diffusers": diffusers.__version__}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
