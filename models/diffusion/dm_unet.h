/* dm_unet.h - the denoising UNet of Stable Diffusion 1.x / 2.x
 * (diffusers' UNet2DConditionModel) as a graph.
 *
 * dm_unet_parse_config reads the component's config.json (unet/config.json)
 * into dm_unet_config, refusing with one clear line what the builder does
 * not make (class embeddings, SDXL's added embeddings, other block types,
 * ...). dm_unet builds the forward pass on a mb_builder, asking for every
 * weight by its diffusers name (down_blocks.0.attentions.0.proj_in.weight,
 * ...), so mb_bind_checkpoint binds unet/diffusion_pytorch_model.safetensors
 * directly.
 *
 * The timestep goes in as its sinusoidal projection (diffusers' Timesteps),
 * computed on the host by dm_unet_time_proj: [B, block_out_channels[0]]
 * floats, one row per sample, so each row may have its own timestep.
 * Everything after it (time_embedding.linear_1, SiLU, linear_2) is in the
 * graph. Classifier-free guidance is the caller's batch (2B rows).
 *
 * Numerics are diffusers' in float32; upcast_attention (SD 2.1) changes
 * nothing there, since attention already runs in f32.
 */
#ifndef COL_DM_UNET_H
#define COL_DM_UNET_H

#include <stdbool.h>
#include <stddef.h>

#include "mb_builder.h"
#include "graph.h"
#include "status.h"

#define DM_UNET_MAX_BLOCKS 8

typedef struct {
    int in_channels;                            /* 4, or 9 for inpainting UNets */
    int out_channels;
    int n_blocks;                               /* len(block_out_channels) = down blocks = up blocks */
    int block_out_channels[DM_UNET_MAX_BLOCKS];
    /* per down block i; the up blocks take them reversed (up block j = down block n-1-j),
     * with layers_per_block + 1 resnets each */
    int layers_per_block[DM_UNET_MAX_BLOCKS];
    int transformer_layers[DM_UNET_MAX_BLOCKS]; /* BasicTransformerBlocks per Transformer2DModel */
    /* attention heads of down block i; the mid block has heads[n-1]. This is
     * config.json's "attention_head_dim": diffusers reads it as the number of
     * heads (head size = channels / heads), e.g. SD 1.x 8, SD 2.x [5,10,20,20]. */
    int heads[DM_UNET_MAX_BLOCKS];
    bool down_cross_attn[DM_UNET_MAX_BLOCKS];   /* CrossAttnDownBlock2D, else DownBlock2D */
    bool up_cross_attn[DM_UNET_MAX_BLOCKS];     /* CrossAttnUpBlock2D, else UpBlock2D (up block order) */
    int cross_attention_dim;                    /* width of encoder_hidden_states */
    int norm_num_groups;
    float norm_eps;                             /* resnets' GroupNorms and conv_norm_out (transformers: 1e-6) */
    bool use_linear_projection;                 /* proj_in/proj_out Linear (SD 2.x), else 1x1 conv (SD 1.x) */
    bool upcast_attention;                      /* read, no effect in f32 */
    bool center_input_sample;                   /* sample -> 2 * sample - 1 first */
    bool flip_sin_to_cos;                       /* time projection: [cos | sin] rather than [sin | cos] */
    float freq_shift;                           /* Timesteps' downscale_freq_shift */
    float mid_block_scale_factor;               /* the mid block's resnets divide their output by it */
    int downsample_padding;                     /* 1 (conv pad 1), or 0 (pad right and bottom by one) */
    int conv_in_kernel, conv_out_kernel;        /* odd, padded to keep the size */
    int time_embed_dim;                         /* linear_1's width (time_embedding_dim or 4 * block_out_channels[0]) */
    int sample_size[2];                         /* default latent height, width (informational) */
} dm_unet_config;

/* Parses config.json text (name is used in messages). Fields that are absent
 * take diffusers' defaults. COL_EFORMAT for a malformed file or a value of
 * the wrong type, COL_EUNSUPPORTED for a model this builder does not make,
 * COL_EINVAL for inconsistent sizes (groups that do not divide the channels,
 * heads that do not divide a block's width, ...). */
col_status dm_unet_parse_config(const char *json, size_t len, const char *name, dm_unet_config *out, col_err *err);
/* Reads path: a config.json file, or a directory holding one. */
col_status dm_unet_load_config(const char *path, dm_unet_config *out, col_err *err);
/* The consistency checks of dm_unet_parse_config alone (for configs made in code). */
col_status dm_unet_check_config(const dm_unet_config *c, col_err *err);

/* diffusers' get_timestep_embedding in float32: for each of the n timesteps,
 * dim values [sin(t f_k) | cos(t f_k)] (swapped when flip_sin_to_cos), with
 * f_k = exp(-ln(10000) k / (dim/2 - shift)), k < dim/2, and a zero last
 * column when dim is odd. out holds n * dim floats. */
void dm_timestep_embedding(const float *t, int n, int dim, bool flip_sin_to_cos, float shift, float *out);
/* The same with the UNet's settings: out holds n * block_out_channels[0] floats,
 * the t_proj input of dm_unet. */
void dm_unet_time_proj(const dm_unet_config *c, const float *t, int n, float *out);

/* The UNet's forward pass on b's graph:
 *   sample   [B, in_channels, H, W]       (f32; any H, W >= 1: odd sizes are
 *                                           upsampled back to the skip's size)
 *   t_proj   [B, block_out_channels[0]]   (dm_unet_time_proj of the timesteps)
 *   context  [B, S, cross_attention_dim]  (encoder_hidden_states, any S)
 * returns the predicted noise [B, out_channels, H, W], or NULL with the error
 * in the builder (mb_builder_status). Weights are created on first use with
 * their diffusers names under b's current prefix (normally ""). */
col_node *dm_unet(mb_builder *b, const dm_unet_config *c, col_node *sample, col_node *t_proj, col_node *context);

/* A whole graph's inputs and output: dm_unet_build makes the three inputs
 * (col_input leaves named "sample", "t_proj", "encoder_hidden_states") and
 * the forward pass; out is marked as an output. */
typedef struct {
    col_node *sample, *t_proj, *context, *out;
} dm_unet_io;
col_status dm_unet_build(mb_builder *b, const dm_unet_config *c, int batch, int height, int width, int context_len,
                         dm_unet_io *io, col_err *err);

#endif
