/* sd_lora.h - LoRA adapters merged into Stable Diffusion 1.x/2.x weights as
 * they are read.
 *
 * A LoRA file holds, for some weights W of the UNet and the text encoder, a
 * pair down [r, in...] and up [out, r, (1, 1)]; merged with weight w it
 * gives W + w * scale * up @ down, scale = alpha / r (alpha / sqrt(r) for
 * rsLoRA; no alpha: 1). Convolutions (LoCon: down [r, Cin, kh, kw], up
 * [Cout, r, 1, 1]) and a 1x1 convolution adapted by a Linear-shaped pair (or
 * the other way round) are merged alike: down flattens to [r, K], the
 * product to W's shape.
 *
 * Files read:
 *  - diffusers / PEFT (pipe.save_lora_weights): "unet.<module>.lora_A.weight" / ".lora_B.weight",
 *    "text_encoder.<module>...", alpha from the "lora_adapter_metadata" metadata (lora_alpha,
 *    alpha_pattern, use_rslora) or "<module>.alpha" tensors; the older spellings ".lora.down.weight",
 *    ".lora_linear_layer.down.weight" and "attn1.processor.to_q_lora.down.weight" (a UNet-only file
 *    may lack "unet.");
 *  - kohya-ss ("lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q.lora_down.weight",
 *    ".lora_up.weight", ".alpha"; "lora_te_text_model_encoder_layers_0_self_attn_q_proj...") with the
 *    UNet in diffusers' or in LDM names ("lora_unet_input_blocks_1_1_transformer_blocks_0_attn1_to_q",
 *    mapped with the base UNet's layers per block).
 * LoHa, LoKr, DoRA, Tucker (lora_mid) and SDXL's second text encoder are
 * refused (COL_EUNSUPPORTED) rather than merged wrong.
 */
#ifndef COL_SD_LORA_H
#define COL_SD_LORA_H

#include "mb_source.h"
#include "sd_model.h"
#include "status.h"

typedef struct sd_lora sd_lora;

/* Opens a LoRA file (safetensors, or a PyTorch zip .bin/.pt) and sorts its
 * tensors into adapted modules. A file with no LoRA tensors, tensors this
 * reader does not know (the count and the first), a down without its up,
 * ranks that disagree: COL_EFORMAT naming the file. */
col_status sd_lora_open(const char *path, sd_lora **out, col_err *err);
void sd_lora_close(sd_lora *l);
const char *sd_lora_path(const sd_lora *l);
/* How many modules of component c the file adapts. */
int sd_lora_modules(const sd_lora *l, sd_component c);

typedef struct sd_lora_source sd_lora_source;

/* A source of component c's weights: base's, with the n files' adapters of
 * c merged in (file i with weight weights[i], in order). Every module of c
 * in every file must name a tensor base holds: otherwise COL_EFORMAT with
 * the file, how many match nothing and the first (a misspelt file never
 * silently does nothing). base, the files and the arrays' contents must
 * outlive the source (the arrays themselves are copied). A module whose
 * product does not fit its tensor's shape fails when that tensor is read
 * (COL_ESHAPE naming both). */
col_status sd_lora_source_create(const mb_source *base, sd_component c, sd_lora *const *loras, const float *weights,
                                 int n, sd_lora_source **out, col_err *err);
const mb_source *sd_lora_source_get(const sd_lora_source *s);
/* How many of base's tensors the files adapt (a tensor adapted by two files counts once). */
int sd_lora_source_adapted(const sd_lora_source *s);
void sd_lora_source_free(sd_lora_source *s);

#endif
