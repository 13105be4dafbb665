/* sd_single_file.h - a Stable Diffusion 1.x / 2.x checkpoint in one file, in
 * the original LDM / CompVis / A1111 layout (.safetensors, or a PyTorch .ckpt
 * whose weights may sit under "state_dict"):
 *   model.diffusion_model.*            the UNet (input_blocks, middle_block, output_blocks, ...)
 *   first_stage_model.*                the VAE (encoder.down.N, decoder.up.N numbered from the bottom, ...)
 *   cond_stage_model.transformer.*     SD 1.x: the CLIP text model ("text_model." optional)
 *   cond_stage_model.model.*           SD 2.x: the OpenCLIP text tower (fused q/k/v)
 * Other tensors (the noise schedule's buffers, EMA copies "model_ema.*") are
 * ignored.
 *
 * Opening the file reads the names and shapes only: it finds the family and
 * the components' sizes (levels, channels, layers per block, projection kind,
 * text width and depth) from the tensors, and writes the configs a diffusers
 * folder of the same model holds, so the pipeline parses them as it parses
 * a folder's. Each component is a mb_source that answers diffusers' names by
 * reading the file's tensors (slicing OpenCLIP's fused projection, dropping
 * the 1x1 of the VAE attention's convolutions); the text encoder's source
 * answers names with and without "text_model.".
 *
 * What weights cannot tell follows the published models: SD 1.x has 8
 * attention heads per block; SD 2.x heads of 64 channels; text heads of 64
 * channels; GroupNorm in 32 groups (fewer for a tiny model whose channels 32
 * does not divide: the largest divisor of their gcd); SD 2.x's text encoder
 * stops at the penultimate resblock (its last one is ignored). Epsilon or
 * v-prediction cannot be told from weights: as diffusers, an SD 2.x file is
 * taken as the 768-pixel v-prediction model (2.0-v / 2.1) unless it is an
 * inpainting UNet or the caller says otherwise.
 */
#ifndef COL_SD_SINGLE_FILE_H
#define COL_SD_SINGLE_FILE_H

#include <stdbool.h>

#include "mb_source.h"
#include "sd_model.h"
#include "status.h"

typedef enum { SD_FAMILY_SD1 = 1, SD_FAMILY_SD2 = 2 } sd_family;
typedef enum { SD_PREDICTION_AUTO, SD_PREDICTION_EPSILON, SD_PREDICTION_V } sd_prediction;

typedef struct sd_single_file sd_single_file;

/* Opens path (col_ckpt_open: safetensors or a PyTorch zip). prediction
 * (AUTO: as above) picks SD 2.x's variant: EPSILON is the 512-pixel base
 * model (scheduler PNDM), V the 768-pixel one (DDIM, v_prediction); SD 1.x
 * is always epsilon. A file that is not SD 1.x/2.x in this layout, tensors
 * under a component's prefix that are not part of that component, or an
 * inconsistent structure give COL_EFORMAT (COL_EUNSUPPORTED for SDXL and
 * other families) with one line naming the file and what is wrong. */
col_status sd_single_file_open(const char *path, sd_prediction prediction, sd_single_file **out, col_err *err);
void sd_single_file_close(sd_single_file *f);

sd_family sd_single_file_family(const sd_single_file *f);
bool sd_single_file_v_prediction(const sd_single_file *f);
bool sd_single_file_inpainting(const sd_single_file *f);     /* a UNet of 9 input channels */
/* "StableDiffusionPipeline" or "StableDiffusionInpaintPipeline" (model_index.json's _class_name) */
const char *sd_single_file_pipeline(const sd_single_file *f);

/* Whether the file holds component c (the UNet always; a file may lack the
 * VAE or the text encoder, to be taken from elsewhere). */
bool sd_single_file_has(const sd_single_file *f, sd_component c);
/* c's weights by diffusers name, or NULL if the file lacks c. Valid until close. */
const mb_source *sd_single_file_source(const sd_single_file *f, sd_component c);
/* How many diffusers tensors c's source answers (0 if the file lacks c). */
int sd_single_file_count(const sd_single_file *f, sd_component c);
/* c's config.json text (JSON, as diffusers / transformers write it), or NULL if the file lacks c. */
const char *sd_single_file_config(const sd_single_file *f, sd_component c);
/* scheduler/scheduler_config.json's text. */
const char *sd_single_file_scheduler_config(const sd_single_file *f);

/* The tokenizer: CLIP's BPE ("clip", the bundled one); SD 1.x pads with
 * "<|endoftext|>", SD 2.x with "!". */
const char *sd_single_file_tokenizer(const sd_single_file *f);
const char *sd_single_file_pad_token(const sd_single_file *f);

#endif
