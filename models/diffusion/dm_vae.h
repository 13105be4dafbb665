/* dm_vae.h - the Stable Diffusion VAE (diffusers AutoencoderKL) as graphs:
 * one to encode images into the latent distribution, one to decode latents.
 *
 * Encoder: conv_in, down blocks (DownEncoderBlock2D: ResnetBlock2D x
 * layers_per_block, then, but for the last block, Downsample2D = zero pad
 * (0,1,0,1) and a stride-2 3x3 conv), mid block (resnet, single-head
 * self-attention over H*W with its own group norm, resnet), conv_norm_out,
 * SiLU, conv_out, quant_conv -> mean and logvar (DiagonalGaussian; logvar
 * clamped to [-30, 20]). Decoder: post_quant_conv, conv_in, mid block, up
 * blocks (UpDecoderBlock2D: layers_per_block+1 resnets, then, but for the
 * last, Upsample2D = nearest 2x and a 3x3 conv), conv_norm_out, SiLU,
 * conv_out. Every group norm has eps 1e-6.
 *
 * Weights are named as in diffusion_pytorch_model.safetensors
 * ("encoder.down_blocks.0.resnets.1.conv2.weight", "quant_conv.bias", ...)
 * after the builder's prefix; older files name the attention's projections
 * query/key/value/proj_attn instead of to_q/to_k/to_v/to_out.0
 * (dm_vae_legacy_attention tells which; diffusers converts them on load).
 *
 * Latent scaling is the pipeline's: latents = (mean or sample - shift_factor)
 * * scaling_factor before the UNet, and the inverse before decoding.
 */
#ifndef COL_DM_VAE_H
#define COL_DM_VAE_H

#include <stdbool.h>

#include "checkpoint.h"
#include "mb_builder.h"
#include "graph.h"
#include "status.h"

#define DM_VAE_MAX_BLOCKS 8

typedef struct {
    int in_channels;                  /* in_channels (3) */
    int out_channels;                 /* out_channels (3) */
    int latent_channels;              /* latent_channels (4) */
    int n_blocks;                     /* len(block_out_channels) = len(down_block_types) = len(up_block_types) */
    int block_out[DM_VAE_MAX_BLOCKS]; /* block_out_channels ([64]) */
    int layers_per_block;             /* layers_per_block (1) */
    int norm_groups;                  /* norm_num_groups (32) */
    int sample_size;                  /* sample_size (32): diffusers' tile size in pixels */
    float scaling_factor;             /* scaling_factor (0.18215) */
    float shift_factor;               /* shift_factor (null = 0) */
    bool has_shift_factor;            /* shift_factor was a number */
    bool force_upcast;                /* force_upcast (true): run the VAE in f32 even in a half-precision pipeline */
    bool use_quant_conv;              /* use_quant_conv (true) */
    bool use_post_quant_conv;         /* use_post_quant_conv (true) */
    bool mid_attention;               /* mid_block_add_attention (true) */
    bool legacy_attention;            /* query/key/value/proj_attn names: not in config.json, see
                                         dm_vae_legacy_attention */
} dm_vae_config;

/* diffusers' AutoencoderKL defaults. */
dm_vae_config dm_vae_defaults(void);
/* Reads config.json: path is the file or its folder (vae/). Only
 * DownEncoderBlock2D / UpDecoderBlock2D blocks and the silu activation are
 * known; another class, block type or activation is COL_EUNSUPPORTED, a bad
 * or inconsistent value COL_EFORMAT / COL_EINVAL, naming the file and key; a
 * missing file COL_EIO. */
col_status dm_vae_load_config(const char *path, dm_vae_config *c, col_err *err);
col_status dm_vae_parse_config(const char *json, size_t len, const char *name, dm_vae_config *c, col_err *err);
/* COL_EINVAL when sizes are not positive or a block's channels do not split into norm_groups. */
col_status dm_vae_check_config(const dm_vae_config *c, col_err *err);

/* True when checkpoint c names the mid-block attention's projections
 * query/key/value/proj_attn (under prefix, e.g. ""): set legacy_attention from it. */
bool dm_vae_legacy_attention(const col_ckpt *c, const char *prefix);

/* Pixels per latent pixel along each axis: 2^(n_blocks-1). */
int dm_vae_downscale(const dm_vae_config *c);

/* Every node but moments is contiguous. */
typedef struct {
    col_node *moments;   /* [B,2*latent,h,w] quant_conv's output (conv_out's without quant_conv) */
    col_node *mean;      /* [B,latent,h,w] latent_dist.mean (what img2img encodes with) */
    col_node *logvar;    /* [B,latent,h,w] latent_dist.logvar, clamped to [-30, 20] */
    col_node *sample;    /* [B,latent,h,w] mean + exp(logvar/2) * noise; NULL when no noise is given */
} dm_vae_encoded;

/* Builds the encoder over x [B,in_channels,H,W] (f32): h = H halved
 * n_blocks-1 times (each step as the padded stride-2 conv
 * gives: floor(H/2)), the same for w. noise: NULL or [B,latent,h,w] f32
 * standard normal values for the sample. Weights "encoder.*" and
 * "quant_conv.*" under b's prefix. Errors are recorded in b and returned. */
col_status dm_vae_build_encoder(mb_builder *b, const dm_vae_config *c, col_node *x, col_node *noise,
                                dm_vae_encoded *out);
/* Builds the decoder over latents z [B,latent,h,w] (f32, already divided by
 * the scaling factor): *out = [B,out_channels,h*f,w*f], f = dm_vae_downscale.
 * Weights "post_quant_conv.*" and "decoder.*" under b's prefix. */
col_status dm_vae_build_decoder(mb_builder *b, const dm_vae_config *c, col_node *z, col_node **out);

/* ---- tiled decoding (diffusers' enable_tiling / tiled_decode) ----
 *
 * Large latents are decoded in overlapping square tiles, each through the
 * plain decoder, and neighbouring tiles are blended linearly across their
 * overlap, so memory stays that of one tile whatever the image size. The
 * result differs slightly from decoding the whole latent at once (each tile
 * sees only its own neighbourhood in the group norms and the attention);
 * it is what diffusers computes with tiling on. Tiles start every
 * overlap_latent latent pixels, rows then columns; each is decoded, blended
 * in place with the (already blended) tile above over min(blend, both
 * heights) rows, then with the tile to its left over min(blend, both
 * widths) columns - row k gets weight k/extent, the neighbour's matching row
 * 1 - k/extent - and its top-left row_limit x row_limit pixels are kept. */
typedef struct {
    int tile_latent;      /* latent tile side: int(sample_size / downscale) (64 for SD 1.x) */
    int tile_sample;      /* decoded tile side: sample_size (512) */
    int overlap_latent;   /* distance between tile starts: int(tile_latent * 0.75) (48) */
    int blend;            /* pixels blended across a seam: int(tile_sample * 0.25) (128) */
    int row_limit;        /* pixels kept of each tile: tile_sample - blend (384) */
} dm_vae_tiling;

/* diffusers' tiling for config c (tile_overlap_factor 0.25). */
dm_vae_tiling dm_vae_tiling_of(const dm_vae_config *c);
/* Whether diffusers would tile latents of h x w: either side above tile_latent. */
bool dm_vae_needs_tiling(const dm_vae_tiling *t, int64_t h, int64_t w);

/* Decodes one tile: z [B,latent,th,tw] (host memory, contiguous) into out
 * [B,out_channels,th*f,tw*f] (f = dm_vae_downscale), e.g. by running a
 * dm_vae_build_decoder graph made for that shape (a tiling has at most four
 * tile shapes: inner, last column, last row, corner). */
typedef col_status (*dm_vae_tile_fn)(void *user, const float *z, int64_t th, int64_t tw, float *out, col_err *err);

/* Decodes z [B,latent,h,w] (host memory) into out [B,out_channels,h*f,w*f]
 * tile by tile through fn, holding two rows of decoded tiles at a time.
 * COL_EUNSUPPORTED when the tiling does not tile the output exactly
 * (row_limit != overlap_latent * f: a sample_size that is not a multiple of
 * 4 * f), COL_EINVAL for bad sizes; fn's errors are returned as they are. */
col_status dm_vae_decode_tiled(const dm_vae_config *c, const dm_vae_tiling *t, const float *z, int64_t B, int64_t h,
                               int64_t w, dm_vae_tile_fn fn, void *user, float *out, col_err *err);

#endif
