/* sd_sf_internal.h - what sd_single_file.c learns from a file's tensors, and
 * the config texts sd_sf_config.c writes from it (internal to the two). */
#ifndef COL_SD_SF_INTERNAL_H
#define COL_SD_SF_INTERNAL_H

#include <stdbool.h>

#include "sd_single_file.h"

#define SF_MAX_LEVELS 8

typedef struct {
    int levels, lpb;                       /* blocks, resnets per down block */
    int ch[SF_MAX_LEVELS];                 /* block_out_channels */
    bool attn_down[SF_MAX_LEVELS];         /* CrossAttnDownBlock2D */
    bool attn_up[SF_MAX_LEVELS];           /* CrossAttnUpBlock2D (diffusers' order: from the bottom) */
    int in_ch, out_ch, cross_dim, depth;   /* depth: transformer_layers_per_block */
    int conv_in_kernel, conv_out_kernel, time_dim;
    bool linear_proj;
} sf_unet_info;

typedef struct {
    int levels, lpb, ch[SF_MAX_LEVELS];
    int in_ch, out_ch, latent;
    bool mid_attn, quant, post_quant;
} sf_vae_info;

typedef struct {
    int hidden, vocab, positions, ff, layers;
} sf_text_info;

/* The largest divisor of the channels' gcd not above 32 (GroupNorm groups). */
int sd_sf_groups(const int *ch, int n);

/* Each returns a malloc'd NUL-terminated JSON text, or NULL without memory.
 * big: the 768-pixel SD 2.x-v model (sample sizes, upcast attention);
 * v: v-prediction (DDIM) rather than epsilon (PNDM). */
char *sd_sf_unet_config(const sf_unet_info *u, sd_family fam, bool big);
char *sd_sf_vae_config(const sf_vae_info *a, bool big);
char *sd_sf_text_config(const sf_text_info *t, sd_family fam);
char *sd_sf_scheduler_config(bool v);

#endif
