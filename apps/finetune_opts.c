/* finetune_opts.c - colossal-finetune's command line: every option is set by
 * name from text through ft_set, so a resumed run replays the options saved
 * in trainer_state.json through the same checks. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cliopt.h"
#include "finetune.h"

typedef struct {
    const char *name;
    bool has_arg;
    bool runtime; /* may change on --resume: does not touch the run's math */
} ft_optdef;

static const ft_optdef optdefs[] = {
    {"tokenizer", true, false},   {"template", true, false},     {"out", true, false},
    {"resume", true, true},       {"overwrite", false, true},    {"steps", true, false},
    {"batch", true, false},       {"seq", true, false},          {"grad-accum", true, false},
    {"no-shuffle", false, false}, {"seed", true, false},         {"val-percent", true, false},
    {"eval-every", true, true},   {"eval-batches", true, true},  {"eval-only", false, true},
    {"sample-every", true, true}, {"sample-len", true, true},    {"sample-prompt", true, true},
    {"sample-temperature", true, true}, {"save-every", true, true}, {"optimizer", true, false},
    {"lr", true, false},          {"beta1", true, false},        {"beta2", true, false},
    {"eps", true, false},         {"weight-decay", true, false}, {"momentum", true, false},
    {"nesterov", false, false},   {"schedule", true, false},     {"min-lr-ratio", true, false},
    {"warmup", true, false},      {"grad-clip", true, false},    {"dropout", true, false},
    {"checkpointing", false, true}, {"cpu-mem", true, true},     {"lora-rank", true, false},
    {"lora-alpha", true, false},  {"lora-targets", true, false}, {"merge-lora", false, true},
    {"json", false, true},        {"quiet", false, true},        {"help", false, true},
    {"tui", false, true},         {"gpu-mem", true, true},       {"chunk-size", true, true},
    {"nvme-dir", true, true},     {"nvme-max", true, true},      {"nvme-kinds", true, true},
    {"nvme-queue-depth", true, true}, {"data-max", true, true},  {"ignore-extra-tensors", false, true},
    {"device", true, true},
    {"precision", true, false},
    /* the process layout, replayed by --resume (which continues bit for bit under the same layout): the files
     * hold whole tensors whatever the layout, so another run may start from them as MODEL under any other */
    {"dp", true, false},          {"pp", true, false},           {"zero", true, false},
    {"micro-batches", true, false}, {"comm-timeout", true, true}, {"virtual-stages", true, false},
    {"tp", true, false},          {"tp-mode", true, false},      {"tp-depth", true, false},
    {"sp", true, false},          {"sp-mode", true, false},      {"parallel", true, false},
    {"plan-only", false, true},    {"tp-seq-split", false, false}, {"version", false, true},
    {"tensorboard", false, true},
};

/* The compute precision when --precision is not given. On the CPU backend f32: bf16 measured 5-10% slower per
 * step (docs/PERF.md, "Mixed precision on the CPU") on a CPU without AVX512_BF16 and an OpenBLAS without
 * sbgemm, where 16-bit operands are converted back to f32 for sgemm. */
#define FT_DEFAULT_PRECISION COL_F32
#define NOPTS ((int)(sizeof optdefs / sizeof optdefs[0]))

void ft_usage(FILE *f)
{
    fprintf(f,
        "usage: colossal-finetune [MODEL DATA] [options]\n"
        "       colossal-finetune --resume DIR\n"
        "Trains a language model and writes it as a Hugging Face model directory.\n"
        "With no MODEL: the embedded default, a small byte-level GPT trained from scratch on the bundled\n"
        "King James Bible for about 3 minutes, written to colossal-default/ (replacing an earlier one, unless\n"
        "that one trained further than this run would: then only with --overwrite).\n"
        "\n"
        "MODEL  a Hugging Face model directory (config.json, model.safetensors or pytorch_model.bin, tokenizer\n"
        "       files), a hub id (org/name) already in the Hugging Face cache, or an architecture trained from\n"
        "       scratch: gpt2, gpt2-medium, gpt2-large, gpt2-xl, opt-125m, opt-350m, opt-1.3b, llama-1b-shaped,\n"
        "       llama-7b-shaped, llama3-8b-shaped, gpt2-tiny, llama-tiny, gpt2-bytes\n"
        "DATA   plain text (.txt or anything else), llm.c token files (.bin), or chat data (.jsonl: one\n"
        "       {\"messages\":[{\"role\",\"content\"},...]} per line; the loss is taken on assistant turns only);\n"
        "       .gz, .xz and .zst files are read directly\n"
        "\n"
        "  --out DIR              where the model goes (default finetune-out); written whole at each save\n"
        "  --resume DIR           continue a run saved in DIR exactly where it stopped; with --steps N above the\n"
        "                         run's own, a finished or unfinished run goes on to N steps (the schedule is\n"
        "                         then the one of an N-step run from the step it resumes at; warmup kept)\n"
        "  --overwrite            replace a run already in --out\n"
        "  --tokenizer PATH       a tokenizer directory or file, or gpt2 | llama2 | llama3 | bytes\n"
        "  --template NAME        chat template for .jsonl data: llama2 | llama3 | chatml | plain\n"
        "                         (default: the one tokenizer_config.json names, else chatml); the output's\n"
        "                         tokenizer_config.json names it (chat_template), so colossal-chat OUT chats\n"
        "  --steps N              optimizer steps (default 200)\n"
        "  --batch B --seq T      B rows of T tokens per micro-batch (default 4 x 256, T at most the model's)\n"
        "  --grad-accum N         micro-batches per step (default 1)\n"
        "  --no-shuffle           batch k is the next B*T+1 tokens of the data (as llm.c); default: random\n"
        "                         windows drawn with --seed\n"
        "  --seed N               data order, dropout and initialisation (default 1337)\n"
        "  --val-percent P        the last P%% of the data is held out for evaluation (default 5)\n"
        "  --data-max SIZE        the most data read into memory once decompressed, e.g. 8G (default: half\n"
        "                         the machine's memory); larger data is refused rather than exhausting memory;\n"
        "                         an uncompressed llm.c token file (.bin) is mapped, not read in: not counted\n"
        "  --eval-every N         evaluate every N steps (default steps/10); --eval-batches N (default 8)\n"
        "  --eval-only            print the evaluation loss of MODEL on DATA and exit\n"
        "  --sample-every N       print a sample every N steps (default 0: never)\n"
        "  --sample-len N --sample-prompt TEXT --sample-temperature T   (defaults 200, the data's start, 0.8)\n"
        "  --save-every N         save every N steps (default: at the end and on Ctrl-C only)\n"
        "  --optimizer NAME       adamw (default) | sgd | lamb | lars\n"
        "  --lr LR                peak learning rate (default 1e-4 for a model directory, 1e-3 from scratch,\n"
        "                         the optimizer's own for sgd and lars)\n"
        "  --beta1 --beta2 --eps --weight-decay --momentum --nesterov   optimizer settings\n"
        "  --schedule NAME        cosine (default) | linear | constant; --min-lr-ratio R (default 0.1)\n"
        "  --warmup N             linear warmup steps (default steps/20)\n"
        "  --grad-clip C          clip the gradient norm at C (default 1; 0 = off)\n"
        "  --dropout P            dropout probability, replacing the model's (0 for exact comparisons)\n"
        "  --checkpointing        recompute activations in backward (less memory, ~30%% more compute)\n"
        "  --precision P          fp32 (the default on the CPU) | bf16 (the default on a GPU) | fp16: weights and\n"
        "                         gradients in 16 bits for the matmuls, f32 master weights and optimizer\n"
        "                         states, f32 activations;\n"
        "                         fp16 scales the loss dynamically and skips steps whose gradients overflow;\n"
        "                         the saved model is f32 either way\n"
        "  --ignore-extra-tensors load MODEL even though its weights hold tensors the model does not use\n"
        "                         (by default an error: it often means config.json does not fit the weights)\n"
        "%s%s"
        "Several processes (started by mpirun or srun: mpirun -np N colossal-finetune MODEL DATA ...):\n"
        "  --dp D --pp P          D data parallel groups of P pipeline stages, D x P (x --tp x --sp) = N\n"
        "                         (default P = 1 and D the rest);\n"
        "                         --batch stays the rows of a whole step, split between the groups\n"
        "  --zero S               1: optimizer states split between the data parallel processes; 2 (default):\n"
        "                         gradients too; 3: parameters too, gathered chunk by chunk when needed\n"
        "  --micro-batches M      pipeline micro-batches per batch (default P)\n"
        "  --virtual-stages V     V stages per process, taken in turn (the interleaved schedule: a smaller bubble\n"
        "                         for more messages; M a multiple of P); default 1\n"
        "  --tp N --tp-mode M     tensor parallelism over N processes: 1d (Megatron, default), 2d (q x q = N),\n"
        "                         2.5d (q x q x d = N, --tp-depth d), 3d (q x q x q = N); --tp-seq-split (1d):\n"
        "                         norms and dropout on a share of the positions each (Megatron's sequence\n"
        "                         parallelism: less activation memory, the same bytes)\n"
        "  --sp N --sp-mode M     sequence parallelism over N processes: ring (ring attention, default) or\n"
        "                         ulysses (all-to-all of heads); D x P x N(tp) x N(sp) = the process count\n"
        "  --parallel auto        let the planner choose --dp/--tp/--pp/--sp, --zero and --micro-batches from the\n"
        "                         model, the budgets and a short probe of this machine; --plan-only prints its\n"
        "                         ranking and exits\n"
        "  --comm-timeout SECS    give up when a process waits this long for the others (default 45)\n"
        "  --lora-rank R          train rank-R LoRA adapters instead of all weights; --lora-alpha A (default R)\n"
        "  --lora-targets LIST    modules to adapt, e.g. q_proj,v_proj (default: the architecture's usual)\n"
        "  --merge-lora           write the adapters merged into model.safetensors\n"
        "  --json                 one JSON object per step on stdout instead of the progress line, and at\n"
        "                         the end {\"memory\":...}: the peak resident memory against the bound\n"
        "  --quiet                no progress output\n"
        "  --tensorboard          also write TensorBoard event files into OUT/runs/ (tensorboard --logdir OUT);\n"
        "                         every run writes OUT/metrics.jsonl (a JSON object per step and evaluation) and,\n"
        "                         with each save, OUT/loss.png (the training and validation curves)\n"
        "  --tui                  show the run as colossal-top does (q stops, saving, like Ctrl-C); every run\n"
        "                         publishes its statistics for colossal-top in any case\n"
        "%s"
        "  --help                 print this help and exit; --version: print the version and exit\n"
        "%s"
        "130 stopped by Ctrl-C or SIGTERM: the current step finishes and the run is saved (--resume continues it).\n",
        app_device_help, mem_opts_help, ft_rl_help, cli_exit_help);
}

void ft_defaults(ft_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->out, sizeof o->out, "finetune-out");
    o->steps = 200;
    o->batch = 4;
    o->seq = 0; /* 256, capped at the model's positions */
    o->grad_accum = 1;
    o->zero = 2;
    o->comm_timeout = 45;
    o->shuffle = true;
    o->seed = 1337;
    o->val_percent = 5;
    o->eval_every = 0; /* steps / 10 */
    o->eval_batches = 8;
    o->sample_len = 200;
    o->sample_temperature = 0.8f;
    o->optimizer = COL_OPT_ADAMW;
    o->lr = o->beta1 = o->beta2 = o->eps = o->weight_decay = o->momentum = NAN;
    o->schedule = COL_LR_COSINE;
    o->min_lr_ratio = 0.1f;
    o->warmup = -1; /* steps / 20 */
    o->grad_clip = 1.0f;
    o->dropout = -1;
    o->lora_alpha = 0;
    o->precision = FT_DEFAULT_PRECISION;
    ft_rl_defaults(&o->rl);
}

const char *ft_precision_name(col_dtype dt) { return dt == COL_BF16 ? "bf16" : dt == COL_F16 ? "fp16" : "fp32"; }

void ft_free(ft_opts *o)
{
    for (int i = 0; i < o->nargs; i++)
        free(o->arg_name[i]), free(o->arg_value[i]);
    o->nargs = 0;
}

const char *ft_flag_of(col_setting s)
{
    switch (s) {
    case COL_SETTING_TOKENIZER: return "tokenizer";
    case COL_SETTING_CHAT_TEMPLATE: return "template";
    case COL_SETTING_OUTPUT_DIR: return "out";
    case COL_SETTING_EXTRA_TENSORS: return "ignore-extra-tensors";
    case COL_SETTING_PRECISION: return "precision";
    default: return mem_opt_of(s);
    }
}

bool ft_runtime_option(const char *name)
{
    for (int i = 0; i < NOPTS; i++)
        if (strcmp(optdefs[i].name, name) == 0)
            return optdefs[i].runtime;
    return false;
}

bool ft_int_in(const char *v, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!*v || *end || errno || x < lo || x > hi)
        return false;
    *out = (int)x;
    return true;
}

bool ft_num_in(const char *v, double lo, double hi, bool lo_open, float *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(x) || x < lo || x > hi)
        return false;
    float f = (float)x; /* the range holds for the float actually used: 2e-88 is no learning rate */
    if (f < lo || f > hi || (lo_open && f <= lo))
        return false;
    *out = f;
    return true;
}

/* "8G", "512M", "4096" -> bytes */
static bool copy_str(char *dst, size_t n, const char *v)
{
    if (strlen(v) >= n)
        return false;
    snprintf(dst, n, "%s", v);
    return true;
}

#define BAD(...) (snprintf(msg, n, __VA_ARGS__), false)

bool ft_set(ft_opts *o, const char *name, const char *v, char *msg, size_t n)
{
    int i;
    float f;
    int mem = mem_opt_set(&o->mem, name, v, msg, n);
    if (mem >= 0)
        return mem;
    int rl = ft_rl_set(&o->rl, name, v, msg, n);
    if (rl >= 0)
        return rl;
    if (!strcmp(name, "device")) return app_device_parse(v, &o->device, msg, n);
    if (!strcmp(name, "tokenizer")) return copy_str(o->tokenizer, sizeof o->tokenizer, v) || BAD("--tokenizer: path too long");
    if (!strcmp(name, "template")) {
        static const char *const names[] = {"llama2", "llama3", "chatml", "plain"};
        for (i = 0; i < 4; i++)
            if (!strcmp(v, names[i]))
                return copy_str(o->chat_template, sizeof o->chat_template, v);
        return BAD("--template must be llama2, llama3, chatml or plain (got '%s')", v);
    }
    if (!strcmp(name, "out")) return (*v && copy_str(o->out, sizeof o->out, v)) || BAD("--out: give a directory path");
    if (!strcmp(name, "resume")) return (*v && copy_str(o->resume, sizeof o->resume, v)) || BAD("--resume: give a directory");
    if (!strcmp(name, "overwrite")) return o->overwrite = true;
    if (!strcmp(name, "steps")) return ft_int_in(v, 1, 100000000, &o->steps) || BAD("--steps must be an integer in 1..1e8 (got '%s')", v);
    if (!strcmp(name, "batch")) return ft_int_in(v, 1, 65536, &o->batch) || BAD("--batch must be an integer in 1..65536 (got '%s')", v);
    if (!strcmp(name, "seq")) return ft_int_in(v, 1, 1 << 20, &o->seq) || BAD("--seq must be an integer in 1..1048576 (got '%s')", v);
    if (!strcmp(name, "dp")) return ft_int_in(v, 1, 65536, &o->dp) || BAD("--dp must be an integer in 1..65536 (got '%s')", v);
    if (!strcmp(name, "pp")) return ft_int_in(v, 1, 65536, &o->pp) || BAD("--pp must be an integer in 1..65536 (got '%s')", v);
    if (!strcmp(name, "zero")) return ft_int_in(v, 1, 3, &o->zero) || BAD("--zero must be 1, 2 or 3 (got '%s')", v);
    if (!strcmp(name, "tp")) return ft_int_in(v, 1, 65536, &o->tp) || BAD("--tp must be an integer in 1..65536 (got '%s')", v);
    if (!strcmp(name, "sp")) return ft_int_in(v, 1, 65536, &o->sp) || BAD("--sp must be an integer in 1..65536 (got '%s')", v);
    if (!strcmp(name, "tp-depth"))
        return ft_int_in(v, 1, 256, &o->tp_depth) || BAD("--tp-depth must be an integer in 1..256 (got '%s')", v);
    if (!strcmp(name, "tp-mode"))
        return col_tp_mode_parse(v, &o->tp_mode, NULL) == COL_OK || BAD("--tp-mode must be 1d, 2d, 2.5d or 3d (got '%s')", v);
    if (!strcmp(name, "sp-mode"))
        return col_sp_mode_parse(v, &o->sp_mode, NULL) == COL_OK || BAD("--sp-mode must be ring or ulysses (got '%s')", v);
    if (!strcmp(name, "parallel"))
        return (!strcmp(v, "auto") && (o->parallel_auto = true)) || BAD("--parallel takes 'auto' (got '%s')", v);
    if (!strcmp(name, "plan-only")) return o->plan_only = true;
    if (!strcmp(name, "tp-seq-split")) return o->tp_seq_split = true;
    if (!strcmp(name, "virtual-stages"))
        return ft_int_in(v, 1, 64, &o->virtual_stages) || BAD("--virtual-stages must be an integer in 1..64 (got '%s')", v);
    if (!strcmp(name, "micro-batches"))
        return ft_int_in(v, 1, 65536, &o->micro_batches) || BAD("--micro-batches must be an integer in 1..65536 (got '%s')", v);
    if (!strcmp(name, "comm-timeout")) {
        char *end;
        errno = 0;
        double x = strtod(v, &end);
        return (*v && !*end && !errno && x > 0 && x <= 86400 && (o->comm_timeout = x, true)) ||
               BAD("--comm-timeout must be seconds in (0, 86400] (got '%s')", v);
    }
    if (!strcmp(name, "grad-accum")) return ft_int_in(v, 1, 65536, &o->grad_accum) || BAD("--grad-accum must be an integer in 1..65536 (got '%s')", v);
    if (!strcmp(name, "no-shuffle")) return !(o->shuffle = false);
    if (!strcmp(name, "seed")) {
        char *end;
        errno = 0;
        unsigned long long x = strtoull(v, &end, 10);
        if (!*v || *end || errno || *v == '-')
            return BAD("--seed must be a non-negative integer (got '%s')", v);
        o->seed = x;
        return true;
    }
    if (!strcmp(name, "val-percent")) {
        if (!ft_num_in(v, 0, 100, false, &f) || f >= 100)
            return BAD("--val-percent must be a number in [0, 100) (got '%s')", v);
        o->val_percent = f;
        return true;
    }
    if (!strcmp(name, "data-max")) {
        size_t b;
        if (!mem_parse_size(v, &b) || b == 0)
            return BAD("--data-max must be a size above 0 such as 512M or 8G (got '%s')", v);
        o->data_max = b;
        return true;
    }
    if (!strcmp(name, "eval-every")) return ft_int_in(v, 0, 100000000, &o->eval_every) || BAD("--eval-every must be an integer >= 0 (got '%s')", v);
    if (!strcmp(name, "eval-batches")) return ft_int_in(v, 1, 1000000, &o->eval_batches) || BAD("--eval-batches must be an integer >= 1 (got '%s')", v);
    if (!strcmp(name, "eval-only")) return o->eval_only = true;
    if (!strcmp(name, "ignore-extra-tensors")) return o->ignore_extra = true;
    if (!strcmp(name, "sample-every")) return ft_int_in(v, 0, 100000000, &o->sample_every) || BAD("--sample-every must be an integer >= 0 (got '%s')", v);
    if (!strcmp(name, "sample-len")) return ft_int_in(v, 1, 100000, &o->sample_len) || BAD("--sample-len must be an integer in 1..100000 (got '%s')", v);
    if (!strcmp(name, "sample-prompt")) return copy_str(o->sample_prompt, sizeof o->sample_prompt, v) || BAD("--sample-prompt: at most 255 bytes");
    if (!strcmp(name, "sample-temperature")) return ft_num_in(v, 0, 100, false, &o->sample_temperature) || BAD("--sample-temperature must be a number in [0, 100] (got '%s')", v);
    if (!strcmp(name, "save-every")) return ft_int_in(v, 0, 100000000, &o->save_every) || BAD("--save-every must be an integer >= 0 (got '%s')", v);
    if (!strcmp(name, "optimizer")) {
        static const char *const names[] = {"sgd", "adamw", "lamb", "lars"};
        static const col_opt_kind kinds[] = {COL_OPT_SGD, COL_OPT_ADAMW, COL_OPT_LAMB, COL_OPT_LARS};
        for (i = 0; i < 4; i++)
            if (!strcmp(v, names[i]))
                return (o->optimizer = kinds[i]), true;
        return BAD("--optimizer must be sgd, adamw, lamb or lars (got '%s')", v);
    }
    if (!strcmp(name, "lr")) return ft_num_in(v, 0, 10, true, &o->lr) || BAD("--lr must be a number in (0, 10] (got '%s')", v);
    if (!strcmp(name, "beta1")) return (ft_num_in(v, 0, 1, false, &o->beta1) && o->beta1 < 1) || BAD("--beta1 must be in [0, 1) (got '%s')", v);
    if (!strcmp(name, "beta2")) return (ft_num_in(v, 0, 1, false, &o->beta2) && o->beta2 < 1) || BAD("--beta2 must be in [0, 1) (got '%s')", v);
    if (!strcmp(name, "eps")) return ft_num_in(v, 0, 1, false, &o->eps) || BAD("--eps must be in [0, 1] (got '%s')", v);
    if (!strcmp(name, "weight-decay")) return ft_num_in(v, 0, 10, false, &o->weight_decay) || BAD("--weight-decay must be in [0, 10] (got '%s')", v);
    if (!strcmp(name, "momentum")) return (ft_num_in(v, 0, 1, false, &o->momentum) && o->momentum < 1) || BAD("--momentum must be in [0, 1) (got '%s')", v);
    if (!strcmp(name, "nesterov")) return o->nesterov = true;
    if (!strcmp(name, "schedule")) {
        if (!strcmp(v, "cosine")) o->schedule = COL_LR_COSINE;
        else if (!strcmp(v, "linear")) o->schedule = COL_LR_LINEAR;
        else if (!strcmp(v, "constant")) o->schedule = COL_LR_CONSTANT;
        else return BAD("--schedule must be cosine, linear or constant (got '%s')", v);
        return true;
    }
    if (!strcmp(name, "min-lr-ratio")) return ft_num_in(v, 0, 1, false, &o->min_lr_ratio) || BAD("--min-lr-ratio must be in [0, 1] (got '%s')", v);
    if (!strcmp(name, "warmup")) {
        if (!ft_int_in(v, 0, 100000000, &i))
            return BAD("--warmup must be an integer >= 0 (got '%s')", v);
        o->warmup = i;
        return true;
    }
    if (!strcmp(name, "grad-clip")) return ft_num_in(v, 0, 1e6, false, &o->grad_clip) || BAD("--grad-clip must be a number >= 0 (got '%s')", v);
    if (!strcmp(name, "dropout")) return (ft_num_in(v, 0, 1, false, &o->dropout) && o->dropout < 1) || BAD("--dropout must be in [0, 1) (got '%s')", v);
    if (!strcmp(name, "checkpointing")) return o->checkpointing = true;
    if (!strcmp(name, "precision")) {
        static const col_dtype dts[] = {COL_F32, COL_BF16, COL_F16};
        for (i = 0; i < 3; i++)
            if (!strcmp(v, ft_precision_name(dts[i])))
                return (o->precision = dts[i]), true;
        return BAD("--precision must be fp32, bf16 or fp16 (got '%s')", v);
    }
    if (!strcmp(name, "lora-rank")) return ft_int_in(v, 1, 65536, &o->lora_rank) || BAD("--lora-rank must be an integer in 1..65536 (got '%s')", v);
    if (!strcmp(name, "lora-alpha")) return ft_num_in(v, 0, 1e6, true, &o->lora_alpha) || BAD("--lora-alpha must be a number > 0 (got '%s')", v);
    if (!strcmp(name, "lora-targets")) return (*v && copy_str(o->lora_targets, sizeof o->lora_targets, v)) || BAD("--lora-targets: give module names like q_proj,v_proj");
    if (!strcmp(name, "merge-lora")) return o->merge_lora = true;
    if (!strcmp(name, "json")) return o->json = true;
    if (!strcmp(name, "quiet")) return o->quiet = true;
    if (!strcmp(name, "tui")) return o->tui = true;
    if (!strcmp(name, "tensorboard")) return o->tensorboard = true;
    return BAD("unknown option --%s", name);
}


bool ft_given(const ft_opts *o, const char *name)
{
    for (int i = 0; i < o->nargs; i++)
        if (!strcmp(o->arg_name[i], name))
            return true;
    return false;
}

bool ft_remember(ft_opts *o, const char *name, const char *value)
{
    if (o->nargs == FT_MAX_ARGS)
        return false;
    o->arg_name[o->nargs] = strdup(name);
    o->arg_value[o->nargs] = strdup(value ? value : "");
    if (!o->arg_name[o->nargs] || !o->arg_value[o->nargs])
        return false;
    o->nargs++;
    return true;
}

bool ft_parse(int argc, char **argv, ft_opts *o, int *exit_code)
{
    struct option lo[NOPTS + 64];
    int nlo = 0;
    /* each option its own value: an abbreviation of several is ambiguous, not the first of them */
    for (int i = 0; i < NOPTS; i++, nlo++)
        lo[nlo] = (struct option){optdefs[i].name, optdefs[i].has_arg ? required_argument : no_argument, NULL, 256 + nlo};
    for (int i = 0; i < ft_rl_noptdefs && nlo < NOPTS + 63; i++, nlo++)
        lo[nlo] = (struct option){ft_rl_optdefs[i].name, ft_rl_optdefs[i].has_arg ? required_argument : no_argument,
                                  NULL, 256 + nlo};
    lo[nlo] = (struct option){0, 0, 0, 0};
    *exit_code = 2;
    char msg[512];
    int idx, c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", lo, &idx)) != -1) {
        if (c == 'h') {
            ft_usage(stdout);
            *exit_code = 0;
            return false;
        }
        if (c == ':') {
            fprintf(stderr, "colossal-finetune: option '%s' needs a value\n", argv[optind - 1]);
            return false;
        }
        if (c == '?') {
            fprintf(stderr, "colossal-finetune: %s (see --help)\n", cli_unknown_option(argv[optind - 1], lo, msg, sizeof msg));
            return false;
        }
        const char *name = lo[idx].name;
        if (!strcmp(name, "help") || !strcmp(name, "version")) {
            if (name[0] == 'h')
                ft_usage(stdout);
            else
                cli_print_version("colossal-finetune");
            *exit_code = 0;
            return false;
        }
        if (!ft_set(o, name, optarg ? optarg : "", msg, sizeof msg)) {
            fprintf(stderr, "colossal-finetune: %s\n", msg);
            return false;
        }
        if (!ft_remember(o, name, optarg)) {
            fprintf(stderr, "colossal-finetune: too many options\n");
            return false;
        }
    }
    int npos = argc - optind;
    if (npos == 1) {
        fprintf(stderr, "colossal-finetune: give DATA after MODEL (a text, .bin or .jsonl file)\n");
        return false;
    }
    if (npos > 2) {
        fprintf(stderr, "colossal-finetune: unexpected argument '%s' (MODEL DATA, then options)\n", argv[optind + 2]);
        return false;
    }
    if (npos == 2 && (!copy_str(o->model, sizeof o->model, argv[optind]) ||
                      !copy_str(o->data, sizeof o->data, argv[optind + 1]))) {
        fprintf(stderr, "colossal-finetune: MODEL or DATA path too long\n");
        return false;
    }
    if (npos == 2 && o->resume[0]) {
        fprintf(stderr, "colossal-finetune: --resume DIR continues a saved run: give no MODEL and DATA with it\n");
        return false;
    }
    o->embedded = npos == 0 && !o->resume[0];
    if (!ft_rl_check(o, msg, sizeof msg)) {
        fprintf(stderr, "colossal-finetune: %s\n", msg);
        return false;
    }
    if (o->rl.method != COL_RLM_SFT && o->embedded) {
        fprintf(stderr, "colossal-finetune: --method %s needs MODEL and DATA\n", col_rl_method_name(o->rl.method));
        return false;
    }
    ft_rl_finish(&o->rl);
    *exit_code = 0;
    return true;
}

static const char *bundled_corpus(void)
{
    static const char *const candidates[] = {COL_ASSET_DIR "/kjv.txt.gz", COL_SRC_ASSET_DIR "/corpus/kjv.txt.gz"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
        if (access(candidates[i], R_OK) == 0)
            return candidates[i];
    return candidates[0];
}

/* The embedded default: a 3-block byte-level GPT (gpt2-bytes) on the King
 * James Bible, sized to show a clearly falling loss and KJV-like samples in
 * about 3 minutes on 2 cores. The user's own options go on top. */
bool ft_embedded_defaults(ft_opts *o, char *msg, size_t n)
{
    static const char *const pairs[][2] = {
        {"out", "colossal-default"}, {"steps", "600"}, {"batch", "16"}, {"seq", "128"}, {"lr", "2e-3"},
        {"weight-decay", "0.1"}, {"beta2", "0.95"}, {"warmup", "30"}, {"eval-every", "60"}, {"eval-batches", "4"},
        {"sample-every", "200"}, {"sample-prompt", "And God said"},
    };
    ft_opts user = *o; /* the options as parsed: replayed after the defaults */
    ft_defaults(o);
    snprintf(o->model, sizeof o->model, "gpt2-bytes");
    snprintf(o->data, sizeof o->data, "%s", bundled_corpus());
    o->embedded = true;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (!ft_set(o, pairs[i][0], pairs[i][1], msg, n) || !ft_remember(o, pairs[i][0], pairs[i][1]))
            return false;
    for (int i = 0; i < user.nargs; i++)
        if (!ft_set(o, user.arg_name[i], user.arg_value[i], msg, n) ||
            !ft_remember(o, user.arg_name[i], user.arg_value[i]))
            return false;
    ft_free(&user);
    return true;
}

/* sets the saved option name to value (replacing it, else added) */
static bool replace_saved(ft_opts *o, const char *name, const char *value)
{
    for (int i = 0; i < o->nargs; i++)
        if (!strcmp(o->arg_name[i], name)) {
            char *v = strdup(value);
            if (!v)
                return false;
            free(o->arg_value[i]);
            o->arg_value[i] = v;
            return true;
        }
    return ft_remember(o, name, value);
}

/* --resume DIR --steps N: a run goes on to N steps, N at least its own. The schedule is the one of an N-step
 * run (session from the options: cosine and linear decay towards step N from where the run is); the warmup
 * stays what it was (by default steps/20 of the old steps, pinned as --warmup). */
static bool extend_steps(ft_opts *o, const ft_state *s, const char *value, col_err *err)
{
    int steps, old = o->steps;
    char msg[512];
    if (!ft_set(o, "steps", value, msg, sizeof msg))
        return col_err_set(err, COL_EINVAL, "%s", msg), false;
    steps = o->steps;
    if (steps < old)
        return col_err_set(err, COL_EINVAL, "--steps %d is fewer than the run's %d steps: on --resume, --steps can "
                           "only extend a run (%lld done)", steps, old, (long long)s->step), false;
    if (steps == old)
        return true;
    char num[32];
    bool ok = true;
    if (o->warmup < 0) { /* the default warmup was steps/20 of the run as started */
        snprintf(num, sizeof num, "%d", old / 20);
        ok = ft_set(o, "warmup", num, msg, sizeof msg) && replace_saved(o, "warmup", num);
    }
    snprintf(num, sizeof num, "%d", steps);
    if (!ok || !replace_saved(o, "steps", num))
        return col_err_set(err, COL_ENOMEM, "--steps: out of memory"), false;
    return true;
}

/* --resume DIR: the saved options, then the runtime ones given now */
bool ft_resume_options(ft_opts *o, ft_state *s, col_err *err)
{
    ft_opts given = *o;
    ft_defaults(o);
    snprintf(o->resume, sizeof o->resume, "%s", given.resume);
    if (ft_state_read(given.resume, o, s, err) != COL_OK) {
        ft_free(&given);
        return false;
    }
    snprintf(o->out, sizeof o->out, "%s", given.resume);
    char msg[512];
    bool ok = true;
    for (int i = 0; i < given.nargs && ok; i++) {
        if (!strcmp(given.arg_name[i], "steps")) {
            ok = extend_steps(o, s, given.arg_value[i], err);
        } else if (!ft_runtime_option(given.arg_name[i])) {
            col_err_set(err, COL_EINVAL, "--%s cannot change when resuming (the run's options are in %s/trainer_state.json)",
                        given.arg_name[i], given.resume);
            ok = false;
        } else if (!ft_set(o, given.arg_name[i], given.arg_value[i], msg, sizeof msg)) {
            col_err_set(err, COL_EINVAL, "%s", msg);
            ok = false;
        }
    }
    ft_free(&given);
    return ok;
}
