/* sd_ldm_names.h - Stable Diffusion 1.x/2.x tensor names in the original
 * LDM / CompVis layout, and in kohya's LoRA spelling, turned into the names
 * diffusers and transformers give the same tensors.
 *
 * Pure string work shared by the single-file source (sd_single_file.h) and
 * the LoRA merge (sd_lora.h). Every function writes the diffusers name into
 * out (cap bytes) and returns 0, or returns -1 for a name it does not know
 * (or one that does not fit). A name may end with a leaf (".weight",
 * ".bias") or be a module path without one: the leaf, if any, is kept.
 */
#ifndef COL_SD_LDM_NAMES_H
#define COL_SD_LDM_NAMES_H

#include <stddef.h>

/* A UNet name after "model.diffusion_model." ("input_blocks.1.1.proj_in.weight",
 * "output_blocks.2.1.conv.bias", "time_embed.0.weight", "out.2.weight") for a
 * UNet of lpb resnets per down block; the diffusers name
 * ("down_blocks.0.attentions.0.proj_in.weight", "up_blocks.0.upsamplers.0.conv.bias",
 * "time_embedding.linear_1.weight", "conv_out.weight"). */
int sd_ldm_unet_name(const char *ldm, int lpb, char *out, size_t cap);

/* A VAE name after "first_stage_model." ("decoder.up.0.block.1.nin_shortcut.weight",
 * "encoder.mid.attn_1.q.weight") for a decoder of levels up blocks (LDM
 * numbers them from the bottom, diffusers from the top). *conv1x1 (may be
 * NULL) is set when the LDM tensor is a 1x1 convolution whose diffusers
 * counterpart is a Linear (the mid-block attention's q, k, v, proj_out). */
int sd_ldm_vae_name(const char *ldm, int levels, char *out, size_t cap, int *conv1x1);

/* An OpenCLIP text-tower name after "cond_stage_model.model." (SD 2.x):
 * "transformer.resblocks.3.mlp.c_fc.weight" -> "encoder.layers.3.mlp.fc1.weight"
 * (transformers' CLIPTextModel names without "text_model."). The fused
 * "attn.in_proj_weight" / "in_proj_bias" give the q_proj name and *fused = 1
 * (rows [0,C) are q, [C,2C) k, [2C,3C) v; the caller derives the other two).
 * *layer is the resblock number, or -1 outside the resblocks. Names that
 * diffusers does not use ("text_projection", "logit_scale", "attn_mask")
 * return 1 (ignored), not -1. */
int sd_openclip_name(const char *ldm, char *out, size_t cap, int *fused, int *layer);

/* A CLIP text-model name after "cond_stage_model.transformer." with or without
 * "text_model."; out drops that prefix. "embeddings.position_ids" (a buffer)
 * returns 1 (ignored). Only the names of CLIPTextModel's parameters return 0. */
int sd_clip_name(const char *ldm, char *out, size_t cap);

/* kohya's underscore spelling of a module path ("down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q",
 * "text_model_encoder_layers_0_self_attn_q_proj", "input_blocks_4_0_in_layers_2") in dots, the
 * underscores that belong to a name kept ("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q"). */
int sd_kohya_dots(const char *kohya, char *out, size_t cap);

/* Whether name is a UNet name of the LDM layout (input_blocks / middle_block /
 * output_blocks / time_embed / out.N), which sd_ldm_unet_name maps. */
int sd_ldm_unet_is_ldm(const char *name);

#endif
