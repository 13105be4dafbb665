/* sd_model.h - the files of a Stable Diffusion model in the diffusers layout.
 *
 * A diffusers folder holds model_index.json naming the pipeline class and its
 * components, each in a sub-folder: unet/, vae/, text_encoder/, tokenizer/,
 * scheduler/ (config.json, or scheduler_config.json, beside the weights).
 * MODEL is such a folder or a hub id found in the Hugging Face cache.
 */
#ifndef COL_SD_MODEL_H
#define COL_SD_MODEL_H

#include <stdbool.h>

#include "status.h"

#define SD_PATH_MAX 4096

typedef enum { SD_UNET, SD_VAE, SD_TEXT_ENCODER, SD_NCOMPONENTS } sd_component;

typedef struct {
    char single_file[SD_PATH_MAX];            /* MODEL is one checkpoint file (LDM keys: sd_single_file.h); then
                                                 only this is set */
    char dir[SD_PATH_MAX];                    /* the model folder */
    char pipeline[64];                        /* model_index.json's _class_name */
    bool inpainting;                          /* an inpainting pipeline (its UNet takes 9 channels) */
    char config[SD_NCOMPONENTS][SD_PATH_MAX];  /* each component's config.json */
    char weights[SD_NCOMPONENTS][SD_PATH_MAX]; /* each component's weights (a file, or a sharded index) */
    char tokenizer[SD_PATH_MAX];              /* the tokenizer folder */
    char scheduler[SD_PATH_MAX];              /* scheduler/scheduler_config.json */
    char scheduler_class[64];                 /* the scheduler's class as model_index.json names it (diffusers
                                                 takes it over the config's _class_name); "" if it names none */
} sd_model_files;

/* Finds a model's files. A regular file is a single-file checkpoint (.safetensors or .ckpt), opened by
 * the pipeline. Weights are taken in this order of preference:
 * NAME.safetensors, NAME.safetensors.index.json (shards), NAME.fp16.safetensors,
 * NAME.bin, NAME.fp16.bin, with NAME diffusion_pytorch_model (unet, vae) or
 * model / pytorch_model (text_encoder). A missing model_index.json, component
 * or weight file is COL_EIO with a message naming what is missing and where. */
col_status sd_model_locate(const char *model, sd_model_files *out, col_err *err);

const char *sd_component_name(sd_component c);

#endif
