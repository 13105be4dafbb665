/* diffuse_opts.c - colossal-diffuse's command line. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cliopt.h"
#include "diffuse.h"

const char *const diffuse_schedulers[] = {"ddim", "pndm", "euler", "euler-a", "dpm++2m", "dpm++2m-karras", "lcm", "ddpm", NULL};

void diffuse_usage(FILE *f)
{
    fprintf(f,
            "usage: " DIFFUSE_PROG " [options] MODEL PROMPT\n"
            "Generates images with a Stable Diffusion 1.x/2.x model. MODEL is a diffusers folder (model_index.json,\n"
            "unet/, vae/, text_encoder/, tokenizer/, scheduler/), a hub id (org/name) already in the Hugging Face\n"
            "cache, or a single-file checkpoint (.safetensors or .ckpt with the original LDM key names).\n"
            "  -o, --out FILE        the PNG to write (default colossal.png; with --batch N: FILE-1.png ...);\n"
            "                        the generation parameters go into it as a 'parameters' text chunk\n"
            "      --negative TEXT   the negative prompt (default empty)\n"
            "      --steps N         denoising steps (default 30; 4 with lcm)\n"
            "      --cfg X           classifier-free guidance scale (default 7.5; 1 turns guidance off)\n"
            "      --seed N          the seed (default: a fresh one, printed and written into the PNG)\n"
            "      --size WxH        the image size, multiples of 8 (default: the model's own, e.g. 512x512)\n"
            "      --batch N         images from one prompt, their noise drawn from one generator as diffusers\n"
            "                        draws a batch (default 1)\n"
            "      --scheduler NAME  ddim, pndm, euler, euler-a, dpm++2m, dpm++2m-karras, lcm, ddpm\n"
            "                        (default: the one scheduler/scheduler_config.json names)\n"
            "      --init IMAGE      image-to-image: start from this PNG or JPEG (resized to --size if given)\n"
            "      --strength S      with --init: how much of it is repainted, 0 < S <= 1 (default 0.8)\n"
            "      --mask IMAGE      inpainting (an inpainting model): white repaints, black keeps --init\n"
            "      --lora FILE[:W]   apply a LoRA (diffusers or kohya .safetensors) with weight W (default 1);\n"
            "                        up to %d\n"
            "      --rng torch-cpu|philox  starting noise: torch's CPU generator, so a diffusers script with\n"
            "                        torch.Generator().manual_seed(seed) starts from the same latents (default),\n"
            "                        or colossal's counter-based generator\n"
            "      --tokenizer DIR   the tokenizer folder (vocab.json + merges.txt) to use in place of the model's\n"
            "                        (a single file's is the CLIP tokenizer colossal carries)\n"
            "      --force           replace an existing --out file that colossal-diffuse did not write\n"
            "  -q, --quiet           no progress bar\n"
            "%s%s%s"
            "  -h, --help            print this help and exit; --version: print the version and exit\n"
            "%s",
            DF_MAX_LORA, diffuse_train_help, app_device_help, mem_opts_help, cli_exit_help);
}

bool diffuse_to_num(const char *s, double lo, double hi, float *v)
{
    char *end;
    double x = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !isfinite(x) || x < lo || x > hi) return false;
    *v = (float)x;
    return true;
}

#define bad cli_bad
#define to_int cli_to_ll
static bool to_float(const char *s, float *v) { return diffuse_to_num(s, -1e6, 1e6, v); }

static bool parse_size(const char *s, int *w, int *h)
{
    char buf[64];
    if (strlen(s) >= sizeof buf) return false;
    strcpy(buf, s);
    char *x = strchr(buf, 'x');
    if (!x) x = strchr(buf, 'X');
    if (!x) return false;
    *x = '\0';
    long long a, b;
    if (!to_int(buf, 8, 16384, &a) || !to_int(x + 1, 8, 16384, &b)) return false;
    *w = (int)a;
    *h = (int)b;
    return true;
}

int diffuse_parse(int argc, char **argv, diffuse_opts *o, char *msg, size_t n)
{
    enum { O_NEG = 256, O_STEPS, O_CFG, O_SEED, O_SIZE, O_BATCH, O_SCHED, O_INIT, O_STRENGTH, O_MASK, O_LORA, O_RNG,
           O_DEVICE, O_FORCE, O_TOK, O_VERSION, O_MEM /* + index in mem_opt_names */, O_TRAIN = O_MEM + 16 /* + k */ };
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'}, {"negative", required_argument, 0, O_NEG},
        {"steps", required_argument, 0, O_STEPS}, {"cfg", required_argument, 0, O_CFG},
        {"seed", required_argument, 0, O_SEED}, {"size", required_argument, 0, O_SIZE},
        {"batch", required_argument, 0, O_BATCH}, {"scheduler", required_argument, 0, O_SCHED},
        {"init", required_argument, 0, O_INIT}, {"strength", required_argument, 0, O_STRENGTH},
        {"mask", required_argument, 0, O_MASK}, {"lora", required_argument, 0, O_LORA},
        {"rng", required_argument, 0, O_RNG}, {"device", required_argument, 0, O_DEVICE},
        {"force", no_argument, 0, O_FORCE}, {"tokenizer", required_argument, 0, O_TOK}, {"quiet", no_argument, 0, 'q'}, {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, O_VERSION},
        {"cpu-mem", required_argument, 0, O_MEM}, {"gpu-mem", required_argument, 0, O_MEM + 1},
        {"chunk-size", required_argument, 0, O_MEM + 2}, {"nvme-dir", required_argument, 0, O_MEM + 3},
        {"nvme-max", required_argument, 0, O_MEM + 4}, {"nvme-kinds", required_argument, 0, O_MEM + 5},
        {"nvme-queue-depth", required_argument, 0, O_MEM + 6},
        /* --train (diffuse_train_opt_names, in order) */
        {"train", no_argument, 0, O_TRAIN}, {"resume", no_argument, 0, O_TRAIN + 1}, {"flip", no_argument, 0, O_TRAIN + 2},
        {"instance-prompt", required_argument, 0, O_TRAIN + 3}, {"class-dir", required_argument, 0, O_TRAIN + 4},
        {"class-prompt", required_argument, 0, O_TRAIN + 5}, {"prior-weight", required_argument, 0, O_TRAIN + 6},
        {"resolution", required_argument, 0, O_TRAIN + 7}, {"lr", required_argument, 0, O_TRAIN + 8},
        {"grad-accum", required_argument, 0, O_TRAIN + 9}, {"warmup", required_argument, 0, O_TRAIN + 10},
        {"max-grad-norm", required_argument, 0, O_TRAIN + 11}, {"save-every", required_argument, 0, O_TRAIN + 12},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->out = "colossal.png";
    o->negative = "";
    o->cfg = -1;
    o->batch = 1;
    o->strength = -1;
    diffuse_train_defaults(o);
    int c;
    long long v;
    opterr = 0;
    optind = 0; /* getopt restarts (the tests parse several command lines) */
    while ((c = getopt_long(argc, argv, ":ho:q", opts, NULL)) != -1) {
        if (c >= O_TRAIN && c < O_TRAIN + DF_TRAIN_NOPTS) {
            if (diffuse_train_opt(o, c - O_TRAIN, optarg, msg, n) != 0) return 2;
            continue;
        }
        switch (c) {
        case 'o':
            if (!*optarg) return bad(msg, n, "--out needs a file name");
            o->out = optarg;
            o->out_given = true;
            break;
        case O_NEG: o->negative = optarg; break;
        case O_STEPS:
            if (!to_int(optarg, 1, 100000000, &v))
                return bad(msg, n, "--steps must be an integer in 1..1000 (training: 1..100000000) (got '%s')", optarg);
            o->steps = (int)v;
            break;
        case O_CFG:
            if (!to_float(optarg, &o->cfg) || o->cfg < 0)
                return bad(msg, n, "--cfg must be a number >= 0 (got '%s')", optarg);
            break;
        case O_SEED:
            if (!to_int(optarg, 0, 0x7fffffffffffffffLL, &v))
                return bad(msg, n, "--seed must be an integer >= 0 (got '%s')", optarg);
            o->seed = (uint64_t)v;
            o->has_seed = true;
            break;
        case O_SIZE:
            if (!parse_size(optarg, &o->width, &o->height) || o->width % 8 || o->height % 8)
                return bad(msg, n, "--size must be WxH, both multiples of 8 in 8..16384 (got '%s')", optarg);
            break;
        case O_BATCH:
            if (!to_int(optarg, 1, 64, &v)) return bad(msg, n, "--batch must be an integer in 1..64 (got '%s')", optarg);
            o->batch = (int)v;
            break;
        case O_SCHED: {
            int k = 0;
            while (diffuse_schedulers[k] && strcmp(diffuse_schedulers[k], optarg) != 0) k++;
            if (!diffuse_schedulers[k])
                return bad(msg, n, "--scheduler: unknown scheduler '%s' (known: ddim, pndm, euler, euler-a, dpm++2m, "
                                   "dpm++2m-karras, lcm, ddpm)", optarg);
            snprintf(o->scheduler, sizeof o->scheduler, "%s", optarg);
            break;
        }
        case O_INIT: o->init = optarg; break;
        case O_STRENGTH:
            if (!to_float(optarg, &o->strength) || !(o->strength > 0 && o->strength <= 1))
                return bad(msg, n, "--strength must be a number in (0, 1] (got '%s')", optarg);
            break;
        case O_MASK: o->mask = optarg; break;
        case O_LORA: {
            if (o->nlora == DF_MAX_LORA) return bad(msg, n, "--lora: at most %d", DF_MAX_LORA);
            float w = 1;
            char *colon = strrchr(optarg, ':');
            if (colon && to_float(colon + 1, &w)) *colon = '\0'; /* FILE:W (a ':' in a path without a number stays) */
            if (!*optarg) return bad(msg, n, "--lora needs a file");
            o->lora[o->nlora] = optarg;
            o->lora_weight[o->nlora++] = w;
            break;
        }
        case O_RNG:
            if (strcmp(optarg, "torch-cpu") == 0) o->philox = false;
            else if (strcmp(optarg, "philox") == 0) o->philox = true;
            else return bad(msg, n, "--rng must be torch-cpu or philox (got '%s')", optarg);
            break;
        case O_DEVICE:
            if (!app_device_parse(optarg, &o->device, msg, n)) return 2;
            break;
        case O_FORCE: o->force = true; break;
        case O_TOK: o->tokenizer = optarg; break;
        case 'q': o->quiet = true; break;
        case 'h': diffuse_usage(stdout); return 1;
        case O_VERSION: cli_print_version(DIFFUSE_PROG); return 1;
        case O_MEM: case O_MEM + 1: case O_MEM + 2: case O_MEM + 3: case O_MEM + 4: case O_MEM + 5: case O_MEM + 6:
            if (mem_opt_set(&o->mem, mem_opt_names[c - O_MEM], optarg, msg, n) != 1) return 2;
            break;
        case ':': return bad(msg, n, "option '%s' needs a value", argv[optind - 1]);
        default: {
            char line[512];
            return bad(msg, n, "%s", cli_unknown_option(argv[optind - 1], opts, line, sizeof line));
        }
        }
    }
    if (o->train) return diffuse_train_finish(argc, argv, optind, o, msg, n);
    if (o->train_only) return bad(msg, n, "--%s goes with --train", o->train_only);
    if (o->steps > 1000) return bad(msg, n, "--steps must be an integer in 1..1000 (got %d)", o->steps);
    if (optind >= argc) return bad(msg, n, "no MODEL given (a diffusers folder or a hub id in the Hugging Face cache)");
    o->model = argv[optind++];
    if (optind >= argc) return bad(msg, n, "no PROMPT given");
    o->prompt = argv[optind++];
    if (optind < argc) return bad(msg, n, "unexpected argument '%s' (quote a prompt with spaces)", argv[optind]);
    if (o->mask && !o->init) return bad(msg, n, "--mask needs --init (the image to inpaint)");
    if (o->strength >= 0 && !o->init) return bad(msg, n, "--strength goes with --init");
    if (o->init && o->strength < 0) o->strength = o->mask ? 1.0f : 0.8f;
    if (o->mem.nvme_dir[0]) return bad(msg, n, "--nvme-dir: colossal-diffuse keeps its weights in host memory for now");
    return 0;
}
