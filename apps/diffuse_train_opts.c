/* diffuse_train_opts.c - colossal-diffuse --train's command line. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "diffuse.h"

const char *const diffuse_train_opt_names[DF_TRAIN_NOPTS] = {
    "train", "resume", "flip", "instance-prompt", "class-dir", "class-prompt", "prior-weight",
    "resolution", "lr", "grad-accum", "warmup", "max-grad-norm", "save-every"};

const char diffuse_train_help[] =
    "\n"
    "Fine-tuning: " DIFFUSE_PROG " --train MODEL IMAGES_DIR --out DIR [options]\n"
    "Trains the UNet (whole, or LoRA adapters on its attention projections) on the PNG/JPEG images of\n"
    "IMAGES_DIR, each with a same-named .txt caption, as diffusers' train_text_to_image.py and\n"
    "train_dreambooth.py do (text encoder and VAE frozen, DDPM noise, MSE, AdamW, max_grad_norm 1). DIR\n"
    "becomes a diffusers folder (or, with --lora, pytorch_lora_weights.safetensors) plus the state that\n"
    "--resume continues from, replaced whole at each save; files of yours in DIR are kept.\n"
    "      --steps N         optimizer steps (default 500)\n"
    "      --batch N         images per micro-batch (default 1; with --class-dir as many class images more)\n"
    "      --grad-accum N    micro-batches per step (default 1)\n"
    "      --lr X            learning rate (default 1e-5; with --lora 1e-4)\n"
    "      --warmup N        linear warmup steps (diffusers' constant_with_warmup; default 0)\n"
    "      --max-grad-norm X gradient clipping (default 1; 0 = off)\n"
    "      --lora RANK       train LoRA adapters of this rank (alpha = rank) on to_q/to_k/to_v/to_out.0\n"
    "      --resolution R    images resized (shorter side, bilinear) and centre-cropped to RxR (default:\n"
    "                        the model's own, e.g. 512)\n"
    "      --flip            mirror images left-right at random\n"
    "      --instance-prompt P  DreamBooth: this caption for every image (no .txt files needed)\n"
    "      --class-dir D     DreamBooth prior preservation: class images, with --class-prompt P\n"
    "      --prior-weight W  the class images' loss weight (default 1)\n"
    "      --seed N          data order, flips and the noise draws (default 0)\n"
    "      --save-every N    save DIR every N steps as well as at the end (default 0: at the end)\n"
    "      --resume          continue the run saved in DIR (the same options; --steps may grow)\n";

void diffuse_train_defaults(diffuse_opts *o)
{
    o->lr = -1;
    o->max_grad_norm = -1;
    o->prior_weight = 1.0f;
    o->grad_accum = 1;
}

#define bad cli_bad
#define to_ll cli_to_ll
#define to_num diffuse_to_num

int diffuse_train_opt(diffuse_opts *o, int k, const char *arg, char *msg, size_t n)
{
    const char *name = diffuse_train_opt_names[k];
    long long v = 0;
    if (k > 0 && !o->train_only) o->train_only = name;
    switch (k) {
    case 0: o->train = true; return 0;
    case 1: o->resume = true; return 0;
    case 2: o->flip = true; return 0;
    case 3: if (!*arg) return bad(msg, n, "--instance-prompt is empty"); o->instance_prompt = arg; return 0;
    case 4: if (!*arg) return bad(msg, n, "--class-dir needs a folder"); o->class_dir = arg; return 0;
    case 5: if (!*arg) return bad(msg, n, "--class-prompt is empty"); o->class_prompt = arg; return 0;
    case 6:
        if (!to_num(arg, 0, 1e6, &o->prior_weight)) return bad(msg, n, "--prior-weight must be a number >= 0 (got '%s')", arg);
        return 0;
    case 7:
        if (!to_ll(arg, 8, 4096, &v)) return bad(msg, n, "--resolution must be an integer in 8..4096 (got '%s')", arg);
        o->resolution = (int)v;
        return 0;
    case 8:
        if (!to_num(arg, 0, 10, &o->lr) || o->lr <= 0) return bad(msg, n, "--lr must be a number in (0, 10] (got '%s')", arg);
        return 0;
    case 9:
        if (!to_ll(arg, 1, 65536, &v)) return bad(msg, n, "--grad-accum must be an integer in 1..65536 (got '%s')", arg);
        o->grad_accum = (int)v;
        return 0;
    case 10:
        if (!to_ll(arg, 0, 100000000, &v)) return bad(msg, n, "--warmup must be an integer >= 0 (got '%s')", arg);
        o->warmup = (int)v;
        return 0;
    case 11:
        if (!to_num(arg, 0, 1e6, &o->max_grad_norm)) return bad(msg, n, "--max-grad-norm must be a number >= 0 (got '%s')", arg);
        return 0;
    case 12:
        if (!to_ll(arg, 0, 100000000, &v)) return bad(msg, n, "--save-every must be an integer >= 0 (got '%s')", arg);
        o->save_every = (int)v;
        return 0;
    }
    return bad(msg, n, "unknown training option %d", k);
}

int diffuse_train_finish(int argc, char **argv, int optind, diffuse_opts *o, char *msg, size_t n)
{
    if (optind >= argc) return bad(msg, n, "--train: no MODEL given (a diffusers folder or a hub id in the Hugging Face cache)");
    o->model = argv[optind++];
    if (optind >= argc) return bad(msg, n, "--train: no IMAGES_DIR given (images with .txt captions)");
    o->images = argv[optind++];
    if (optind < argc) return bad(msg, n, "unexpected argument '%s'", argv[optind]);
    if (!o->out_given) return bad(msg, n, "--train needs --out DIR (the trained model's folder)");
    /* generation's options have no meaning here */
    const char *gen = o->init ? "init" : o->mask ? "mask" : o->negative[0] ? "negative" : o->cfg >= 0 ? "cfg"
                      : o->width ? "size" : o->scheduler[0] ? "scheduler" : o->strength >= 0 ? "strength" : NULL;
    if (gen) return bad(msg, n, "--%s is an option of image generation, not of --train", gen);
    /* --lora RANK */
    if (o->nlora > 1) return bad(msg, n, "--train takes one --lora RANK");
    if (o->nlora == 1) {
        long long r;
        if (!to_ll(o->lora[0], 1, 1024, &r) || o->lora_weight[0] != 1.0f)
            return bad(msg, n, "--lora with --train is the adapters' rank, an integer in 1..1024 (got '%s')", o->lora[0]);
        o->lora_rank = (int)r;
        o->nlora = 0;
    }
    if (!o->steps) o->steps = 500;
    if (!!o->class_dir != !!o->class_prompt) return bad(msg, n, "--class-dir and --class-prompt go together");
    if (o->class_dir && !o->instance_prompt)
        return bad(msg, n, "--class-dir (prior preservation) needs --instance-prompt, as DreamBooth trains");
    if (o->lr < 0) o->lr = o->lora_rank ? 1e-4f : 1e-5f;
    if (o->max_grad_norm < 0) o->max_grad_norm = 1.0f;
    if (o->mem.nvme_dir[0]) return bad(msg, n, "--nvme-dir: colossal-diffuse keeps its weights in host memory for now");
    return 0;
}
