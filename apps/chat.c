/* colossal-chat - talk to a language model in the terminal, or complete one
 * prompt for a script (see usage() for the rules).
 *
 * Interactive when stdin is a terminal: a line editor with history, the
 * reply streamed as it is generated, ctrl-c stops a reply. Otherwise each
 * line of stdin is a user turn and each reply is printed on its own line.
 * Errors: one line on stderr; exit 2 for usage errors, 1 for the rest. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "apperr.h"
#include "backend.h"
#include "chat.h"
#include "cliopt.h"
#include "device.h"
#include "memopts.h"
#include "lineedit.h"
#include "lm_quant.h"
#include "lm_session.h"
#include "lm_source.h"
#include "procsetup.h"
#include "timer.h"
#include "units.h"

#define PROG "colossal-chat"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: " PROG " MODEL [options]\n"
        "Chats with MODEL: a Hugging Face model directory (config.json, model.safetensors or pytorch_model.bin,\n"
        "tokenizer files: what colossal-finetune writes, a LoRA adapter beside its base weights included), a\n"
        "hub id (org/name) already in the Hugging Face cache, or a built-in architecture (random weights).\n"
        "Interactive when stdin is a terminal; otherwise each line of stdin is one user turn, and each reply is\n"
        "printed followed by a newline (exit 1 at the end if a turn failed).\n"
        "\n"
        "Chat or completion:\n"
        "  The conversation is rendered with --template, else with the chat template that the model's\n"
        "  tokenizer_config.json names. A model without one (a base model, as colossal-finetune trains by default)\n"
        "  is a text completer: each input is completed as it is (--raw), with no conversation.\n"
        "  --template NAME        llama2 | llama3 | chatml | plain\n"
        "  --raw                  complete the text as it is, with no template\n"
        "  --system TEXT          system prompt (chat only)\n"
        "  --prompt TEXT          generate one reply to TEXT (or complete it with --raw), print it and a newline\n"
        "  --prompt-ids LIST      generate after these token ids (e.g. 1,2,3: no template, no BOS added)\n"
        "  --json                 with --prompt or --prompt-ids: print {\"ids\":[...]}, the generated ids (the\n"
        "                         EOS, or the token that completed a stop string, included), instead of text\n"
        "Sampling (as transformers' generate):\n"
        "  --temperature T        0 = greedy (default 0.7)\n"
        "  --top-k K              keep the K most likely tokens (default 0 = off)\n"
        "  --top-p P              keep the most likely tokens up to probability P, in (0, 1] (default 0.9)\n"
        "  --repetition-penalty R >0; 1 = off (default 1)\n"
        "  --seed N               default: from the clock\n"
        "Stopping and context:\n"
        "  --max-new-tokens N     most tokens per reply (default: all the room the context has left after the\n"
        "                         prompt)\n"
        "  --stop STR             stop when the reply contains STR (repeatable; added to the template's own\n"
        "                         end-of-turn strings); STR itself is not printed\n"
        "  --ctx N                context limit in tokens (default and most: the model's positions). A prompt\n"
        "                         must leave room for a reply: --max-new-tokens, else min(256, ctx/4) tokens;\n"
        "                         when a conversation does not, the oldest turns are dropped, and a single\n"
        "                         message (or --raw text) too long alone keeps its end (a note on stderr)\n"
        "  --tokenizer PATH       tokenizer directory or file, or a bundled one (gpt2, llama2, llama3, bytes)\n"
        "  --quant TYPE           hold the weights quantized: int8 (q8_0), q4 (q4_0), q4_K or q6_K (a model\n"
        "                         colossal-quantize wrote loads quantized without it)\n"
        "  --verbose              after loading, a line on stderr: the time it took and the weights read in place\n"
        "                         from the model file (mapped, not copied); after each reply, a line: tokens,\n"
        "                         seconds and tokens/s of the reply and of the prompt (interactive: /stats\n"
        "                         turns it on and off)\n"
        "  --no-mmap              copy the weights into memory instead of reading them in place from the model\n"
        "                         file's mapping (by default tensors stored as they are held, as in GGUF files\n"
        "                         and colossal-quantize's, are read in place: the file must not change meanwhile)\n"
        "  --ignore-extra-tensors load MODEL even though its weights hold tensors the model does not use\n"
        "                         (by default an error: it often means config.json does not fit the weights)\n"
        "%s%s"
        "  --help                 print this help and exit; --version: print the version and exit\n"
        "Generation stops at the end-of-sequence token, a stop string or --max-new-tokens.\n"
        "Interactive: arrows, home/end, ctrl-a/e/k/u/w edit the line; up/down recall earlier lines (kept in\n"
        "$XDG_STATE_HOME/colossal/chat_history, else ~/.local/state/colossal/chat_history); ctrl-c stops a\n"
        "reply; ctrl-d or ctrl-c on an empty line quits. Long lines wrap. What is typed while a reply streams is\n"
        "not shown inside it: it becomes the start of the next line (Enter included, like a shell's type-ahead).\n"
        "On a terminal, stderr says \"loading MODEL ... done in S s\" around loading the weights.\n"
        "Commands (interactive or piped):\n%s%s", app_device_help, mem_opts_help, chat_commands_help, cli_exit_help);
}

/* The option (without "--") that sets s, named beside a library error that marks s (apperr.h). */
static const char *chat_flag_of(col_setting s)
{
    switch (s) {
    case COL_SETTING_TOKENIZER: return "tokenizer";
    case COL_SETTING_CHAT_TEMPLATE: return "template";
    case COL_SETTING_EXTRA_TENSORS: return "ignore-extra-tensors";
    case COL_SETTING_PRECISION: return "quant";
    default: return mem_opt_of(s);
    }
}

void chat_print_err(const col_err *e)
{
    char line[APP_ERR_LINE_MAX];
    fprintf(stderr, PROG ": %s\n", app_err_line(e, chat_flag_of, line, sizeof line));
}

#define usage_error(...) cli_usage_error(PROG, __VA_ARGS__)
#define parse_int(s, opt, lo, hi) cli_parse_int(PROG, s, opt, lo, hi)

static float parse_float(const char *s, const char *opt)
{
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !isfinite(v) || fabs(v) > 1e30)
        usage_error("%s must be a number (got '%s')", opt, s);
    return (float)v;
}

/* "1, 2,3" -> ids; exit 2 on anything else */
static int32_t *parse_ids(const char *s, int *n)
{
    size_t cap = 16, k = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = s;
    while (ids) {
        while (*p == ' ')
            p++;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX)
            usage_error("--prompt-ids must be a comma-separated list of token ids (got '%s')", s);
        if (k == cap) {
            int32_t *q = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!q)
                break;
            ids = q;
        }
        ids[k++] = (int32_t)v;
        p = end;
        while (*p == ' ')
            p++;
        if (*p == '\0') {
            *n = (int)k;
            return ids;
        }
        if (*p++ != ',')
            usage_error("--prompt-ids must be a comma-separated list of token ids (got '%s')", s);
    }
    fprintf(stderr, PROG ": out of memory\n");
    exit(1);
}

typedef struct {
    const char *model, *tokenizer, *system, *prompt, *prompt_ids;
    bool raw, json, has_template, has_seed, ignore_extra, verbose, no_mmap;
    col_dtype quant; /* --quant; COL_F32: none (or what the model holds) */
    col_chat_family family;
    col_sample_opts so;
    long long max_new, ctx; /* -1: default */
    const char **stops;
    int nstops;
    mem_opts mem;
    app_device_choice device; /* --device */
} options;

static void parse_options(int argc, char **argv, options *o)
{
    enum { O_TEMPLATE = 256, O_SYSTEM, O_TEMP, O_TOPK, O_TOPP, O_REP, O_SEED, O_MAXNEW, O_STOP, O_CTX, O_TOK,
           O_PROMPT, O_RAW, O_IDS, O_JSON, O_EXTRA, O_NO_MMAP, O_DEVICE, O_QUANT, O_VERSION, O_VERBOSE,
           O_MEM /* + index in mem_opt_names */ };
    static const struct option opts[] = {
        {"template", required_argument, 0, O_TEMPLATE}, {"system", required_argument, 0, O_SYSTEM},
        {"temperature", required_argument, 0, O_TEMP}, {"top-k", required_argument, 0, O_TOPK},
        {"top-p", required_argument, 0, O_TOPP}, {"repetition-penalty", required_argument, 0, O_REP},
        {"seed", required_argument, 0, O_SEED}, {"max-new-tokens", required_argument, 0, O_MAXNEW},
        {"stop", required_argument, 0, O_STOP}, {"ctx", required_argument, 0, O_CTX},
        {"tokenizer", required_argument, 0, O_TOK}, {"prompt", required_argument, 0, O_PROMPT},
        {"raw", no_argument, 0, O_RAW}, {"prompt-ids", required_argument, 0, O_IDS},
        {"json", no_argument, 0, O_JSON}, {"help", no_argument, 0, 'h'},
        {"ignore-extra-tensors", no_argument, 0, O_EXTRA}, {"no-mmap", no_argument, 0, O_NO_MMAP},
        {"device", required_argument, 0, O_DEVICE},
        {"quant", required_argument, 0, O_QUANT}, {"version", no_argument, 0, O_VERSION},
        {"verbose", no_argument, 0, O_VERBOSE},
        {"cpu-mem", required_argument, 0, O_MEM}, {"gpu-mem", required_argument, 0, O_MEM + 1},
        {"chunk-size", required_argument, 0, O_MEM + 2}, {"nvme-dir", required_argument, 0, O_MEM + 3},
        {"nvme-max", required_argument, 0, O_MEM + 4}, {"nvme-kinds", required_argument, 0, O_MEM + 5},
        {"nvme-queue-depth", required_argument, 0, O_MEM + 6}, {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->so = col_sample_defaults();
    o->so.temperature = 0.7f;
    o->so.top_p = 0.9f;
    o->max_new = o->ctx = -1;
    o->stops = calloc((size_t)argc + 1, sizeof *o->stops);
    if (!o->stops) {
        fprintf(stderr, PROG ": out of memory\n");
        exit(1);
    }
    col_err err = {0};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case O_TEMPLATE:
            if (col_chat_family_parse(optarg, &o->family, &err) != COL_OK)
                usage_error("--template: %s", err.msg);
            o->has_template = true;
            break;
        case O_SYSTEM: o->system = optarg; break;
        case O_TEMP: o->so.temperature = parse_float(optarg, "--temperature"); break;
        case O_TOPK: o->so.top_k = (int)parse_int(optarg, "--top-k", 0, INT_MAX); break;
        case O_TOPP: o->so.top_p = parse_float(optarg, "--top-p"); break;
        case O_REP: o->so.repetition_penalty = parse_float(optarg, "--repetition-penalty"); break;
        case O_SEED:
            o->so.seed = (uint64_t)parse_int(optarg, "--seed", 0, LLONG_MAX);
            o->has_seed = true;
            break;
        case O_MAXNEW: o->max_new = parse_int(optarg, "--max-new-tokens", 0, 1 << 24); break;
        case O_STOP:
            if (!*optarg)
                usage_error("--stop needs a non-empty string");
            o->stops[o->nstops++] = optarg;
            break;
        case O_CTX: o->ctx = parse_int(optarg, "--ctx", 2, 1 << 24); break;
        case O_TOK: o->tokenizer = optarg; break;
        case O_PROMPT: o->prompt = optarg; break;
        case O_RAW: o->raw = true; break;
        case O_IDS: o->prompt_ids = optarg; break;
        case O_JSON: o->json = true; break;
        case O_EXTRA: o->ignore_extra = true; break;
        case O_NO_MMAP: o->no_mmap = true; break;
        case O_VERBOSE: o->verbose = true; break;
        case O_QUANT:
            if (!col_lm_quant_parse(optarg, &o->quant))
                usage_error("--quant '%s' is not one of " COL_LM_QUANT_NAMES, optarg);
            break;
        case O_DEVICE: {
            char msg[256];
            if (!app_device_parse(optarg, &o->device, msg, sizeof msg))
                usage_error("%s", msg);
            break;
        }
        case 'h': usage(stdout); exit(0);
        case O_VERSION: cli_print_version(PROG); exit(0);
        case O_MEM: case O_MEM + 1: case O_MEM + 2: case O_MEM + 3: case O_MEM + 4: case O_MEM + 5: case O_MEM + 6: {
            char msg[256];
            if (mem_opt_set(&o->mem, mem_opt_names[c - O_MEM], optarg, msg, sizeof msg) != 1)
                usage_error("%s", msg);
            break;
        }
        case ':': usage_error("option '%s' needs a value", argv[optind - 1]);
        default: {
            char msg[512];
            usage_error("%s", cli_unknown_option(argv[optind - 1], opts, msg, sizeof msg));
        }
        }
    }
    if (optind >= argc)
        usage_error("no MODEL given");
    o->model = argv[optind++];
    if (optind < argc)
        usage_error("unexpected argument '%s'", argv[optind]);
    if (col_sample_check(&o->so, &err) != COL_OK)
        usage_error("%s", err.msg);
    if (o->prompt && o->prompt_ids)
        usage_error("--prompt and --prompt-ids exclude each other");
    if (o->raw && o->has_template)
        usage_error("--raw and --template exclude each other");
    if (o->prompt_ids && (o->has_template || o->system || o->raw))
        usage_error("--prompt-ids takes the ids as they are: no --template, --system or --raw");
    if (o->json && !o->prompt && !o->prompt_ids)
        usage_error("--json goes with --prompt or --prompt-ids");
    if (o->raw && o->system)
        usage_error("--system needs a chat template, not --raw");
}

/* ---- one prompt ---- */

static int print_json(const chat_reply *r)
{
    printf("{\"ids\":[");
    for (int i = 0; i < r->nids; i++)
        printf(i ? ",%d" : "%d", (int)r->ids[i]);
    printf("]}\n");
    return 0;
}

static int run_prompt(chat_session *s, const options *o, col_err *err)
{
    chat_reply r;
    col_status st;
    bool skipped = false;
    FILE *out = o->json ? NULL : stdout;
    if (o->prompt_ids) {
        int n;
        int32_t *ids = parse_ids(o->prompt_ids, &n);
        for (int i = 0; i < n; i++)
            if (ids[i] >= s->g->vocab) {
                fprintf(stderr, PROG ": --prompt-ids: id %d (at position %d) is out of range: the model's "
                                "vocabulary has %d ids\n", (int)ids[i], i, s->g->vocab);
                free(ids);
                return 1;
            }
        if (n + (s->g->max_new >= 0 ? s->g->max_new : 1) > s->g->ctx) {
            if (s->g->max_new >= 0)
                fprintf(stderr, PROG ": %d prompt ids plus --max-new-tokens %d exceed the context of %d; lower "
                                "--max-new-tokens or raise --ctx\n", n, s->g->max_new, s->g->ctx);
            else
                fprintf(stderr, PROG ": %d prompt ids leave no room for a reply in the context of %d; raise --ctx\n",
                        n, s->g->ctx);
            free(ids);
            return 1;
        }
        st = chat_generate(s->g, ids, n, out, &r, err);
        free(ids);
    } else if (s->conv) {
        st = chat_turn(s->g, s->conv, o->prompt, out, &r, &skipped, err);
    } else {
        st = chat_complete(s->g, o->prompt, out, &r, err);
    }
    if (st != COL_OK) {
        chat_print_err(err);
        return 1;
    }
    if (skipped)
        return 1;
    if (o->json)
        print_json(&r);
    else
        printf("\n");
    fflush(stdout);
    if (s->stats)
        chat_print_stats(&r);
    chat_reply_free(&r);
    return 0;
}

/* everything after the options and the device; returns the exit code */
static int run_on(const options *opt, app_device *dev)
{
    options o = *opt;
    col_err err = {0};
    col_lm_source src;
    bool text_needed = !o.prompt_ids;
    if (col_lm_source_open(o.model, o.tokenizer, text_needed, &src, &err) != COL_OK) {
        chat_print_err(&err);
        return 1;
    }
    const col_lm_config *mc = &src.config;
    int rc = 1;
    if (o.ctx > mc->max_positions) {
        char from[128];
        snprintf(from, sizeof from, "%s%s", src.preset[0] ? "max_position_embeddings of the built-in " : src.gguf ?
                 "context_length in the GGUF file" : "max_position_embeddings in its config.json", src.preset);
        fprintf(stderr, PROG ": --ctx %lld is refused: the model has %d positions (%s) and was not trained past them "
                        "(a learned position table has no row beyond, rotary positions are out of the range it saw): "
                        "use --ctx %d or less\n", o.ctx, mc->max_positions, from, mc->max_positions);
        col_lm_source_close(&src);
        return 2;
    }
    int ctx = o.ctx > 0 ? (int)o.ctx : mc->max_positions;
    int max_new = o.max_new >= 0 ? (int)o.max_new : -1; /* -1: the room left after the prompt */
    if (max_new >= ctx) {
        fprintf(stderr, PROG ": --max-new-tokens %d leaves no room for a prompt in a context of %d tokens\n", max_new,
                ctx);
        col_lm_source_close(&src);
        return 2;
    }
    if (o.nstops > 0 && !src.tok) {
        fprintf(stderr, PROG ": --stop needs a tokenizer: %s has none; name one with --tokenizer\n", src.dir);
        col_lm_source_close(&src);
        return 1;
    }
    if (o.prompt_ids && !o.json && !src.tok) {
        fprintf(stderr, PROG ": %s has no tokenizer to print the reply as text: add --json or --tokenizer\n",
                src.dir);
        col_lm_source_close(&src);
        return 1;
    }
    /* the rule of --help: an explicit --template, else the model's own template, else raw completion */
    bool chat = !o.prompt_ids && !o.raw && (o.has_template || src.has_chat);
    col_chat_family family = o.has_template ? o.family : src.chat;
    if (!o.prompt_ids && !o.raw && !o.has_template && src.chat_unknown[0])
        fprintf(stderr, PROG ": warning: %s has a chat template colossal does not know (%s); going on as a plain "
                "text completer: choose the format with --template llama2|llama3|chatml|plain, or --raw to "
                "silence this\n", src.tok_dir[0] ? src.tok_dir : o.model, src.chat_unknown);
    if (o.system && !chat && !o.prompt_ids) {
        fprintf(stderr, PROG ": --system needs a chat template: %s has none in tokenizer_config.json; choose one "
                        "with --template\n", src.tok_dir[0] ? src.tok_dir : o.model);
        col_lm_source_close(&src);
        return 2;
    }

    col_lm_trainer *tr = NULL;
    char budget[256];
    col_lm_load_report rep = {0};
    app_lm_opts lo = {.mem = &o.mem, .dev = dev, .quant = o.quant, .ignore_extra = o.ignore_extra,
                       .no_mmap = o.no_mmap};
    /* on a terminal, say what is happening while the weights load (a large model takes a while) */
    bool tell_load = isatty(STDERR_FILENO);
    double t0 = col_seconds();
    if (tell_load) {
        fprintf(stderr, PROG ": loading %s ...", src.preset[0] ? src.preset : src.dir);
        fflush(stderr);
    }
    col_status lst = app_lm_session(&src, &lo, &tr, &rep, budget, sizeof budget, &err);
    double load_s = col_seconds() - t0;
    if (tell_load)
        fprintf(stderr, lst == COL_OK ? " done in %.1f s\n" : " failed\n", load_s);
    if (lst != COL_OK) {
        chat_print_err(&err);
        col_lm_source_close(&src);
        return 1;
    }
    app_stats *stats = app_lm_stats(PROG, o.model, tr, &lo); /* for colossal-top */
    chat_engine g;
    chat_conv conv = {.family = family};
    memset(&g, 0, sizeof g);
    const char **stops = NULL;
    if (chat_engine_init(&g, tr, src.tok, mc->vocab_size, ctx, &err) != COL_OK) {
        chat_print_err(&err);
        goto done;
    }
    app_load_warnings(stderr, PROG, &rep);
    if (o.verbose) { /* how the weights came in: read in place from the file's mapping, or copied */
        char mb[COL_BYTES_STR];
        fprintf(stderr, PROG ": loaded in %.2f s; %d weight tensors (%s) read in place from the model file\n", load_s,
                rep.n_mapped, col_fmt_bytes(mb, sizeof mb, rep.mapped_bytes));
    }
    if (src.preset[0])
        fprintf(stderr, PROG ": %s is a built-in architecture with random weights: expect noise\n", src.preset);
    g.max_new = max_new;
    g.reserve = max_new >= 0 ? max_new : chat_default_reserve(ctx);
    g.so = o.so;
    if (!o.has_seed)
        g.so.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    g.interrupted = &chat_interrupted;
    if (src.tok && col_tok_eos_id(src.tok) >= 0)
        g.eos[g.neos++] = col_tok_eos_id(src.tok);
    if (mc->eos_id >= 0 && mc->eos_id < mc->vocab_size && (g.neos == 0 || g.eos[0] != mc->eos_id))
        g.eos[g.neos++] = mc->eos_id;
    /* stop strings: the family's (chat only) and --stop */
    const col_chat_family_info *fi = col_chat_info(family);
    int nfam = 0;
    while (chat && fi->stop[nfam])
        nfam++;
    stops = calloc((size_t)(nfam + o.nstops) + 1, sizeof *stops);
    if (!stops) {
        fprintf(stderr, PROG ": out of memory\n");
        goto done;
    }
    for (int i = 0; i < nfam; i++)
        stops[g.nstops++] = fi->stop[i];
    for (int i = 0; i < o.nstops; i++)
        stops[g.nstops++] = o.stops[i];
    g.stops = stops;
    g.strip_leading_space = chat && family == COL_CHAT_LLAMA2;
    if (chat && chat_conv_set_system(&conv, o.system, &err) != COL_OK) {
        chat_print_err(&err);
        goto done;
    }
    chat_session s = {.g = &g, .conv = chat ? &conv : NULL, .dev = dev, .budget = budget, .stats = o.verbose};
    if (o.prompt || o.prompt_ids)
        rc = run_prompt(&s, &o, &err);
    else if (isatty(STDIN_FILENO)) {
        s.interactive = true;
        rc = chat_run_interactive(&s, &err);
    } else
        rc = chat_run_piped(&s, &err);
    if (rc == 0 && (fflush(stdout) != 0 || ferror(stdout))) {
        fprintf(stderr, PROG ": cannot write to stdout\n");
        rc = 1;
    }
done:
    app_stats_end(stats);
    free(stops);
    chat_conv_free(&conv);
    chat_engine_free(&g);
    col_lm_trainer_free(tr);
    col_lm_source_close(&src);
    return rc;
}

/* the device first (a GPU asked for but not usable is a usage error, 2), then everything else */
static int run(const options *o)
{
    app_device dev;
    col_err err = {0};
    int rc = app_device_open(&o->device, &dev, &err);
    if (rc != 0) {
        chat_print_err(&err);
        return rc;
    }
    rc = run_on(o, &dev);
    app_device_close(&dev);
    return rc;
}

int main(int argc, char **argv)
{
    col_proc_setup_decode(argv);
    options o;
    parse_options(argc, argv, &o);
    int rc = run(&o);
    free(o.stops);
    return rc;
}
