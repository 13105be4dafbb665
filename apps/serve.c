/* colossal-serve - an OpenAI-compatible HTTP server for a language model (see
 * usage()). The model is loaded as colossal-chat loads it; requests are
 * batched by the scheduler (serve_sched.h) and answered by the HTTP side
 * (serve_http.h, serve_api.h).
 *
 * Signals: SIGTERM or SIGINT stops accepting connections, lets the requests
 * in flight finish and exits 0; a second one exits at once. Errors before
 * serving: one line on stderr; exit 2 for usage errors, 1 for the rest. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "apperr.h"
#include "backend.h"
#include "cliopt.h"
#include "device.h"
#include "lm_quant.h"
#include "lm_session.h"
#include "lm_source.h"
#include "memopts.h"
#include "procsetup.h"
#include "serve_http.h"
#include "serve_sched.h"
#include "units.h"

#define PROG "colossal-serve"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: " PROG " MODEL [options]\n"
        "Serves MODEL over HTTP with OpenAI's API. MODEL is what colossal-chat takes: a Hugging Face model\n"
        "directory (a LoRA adapter beside its base weights included), a hub id (org/name) already in the\n"
        "Hugging Face cache, or a built-in architecture (random weights). The server prints\n"
        "\"" PROG ": listening on http://HOST:PORT\" on stderr once it takes requests.\n"
        "\n"
        "Endpoints:\n"
        "  POST /v1/chat/completions  messages rendered with the model's chat template (or --template)\n"
        "  POST /v1/completions       a prompt completed as it is\n"
        "  GET  /v1/models            the one model served (--model-name)\n"
        "  GET  /health               {\"status\":\"ok\",\"slots\":..,\"busy\":..,\"queued\":..}; needs no API key\n"
        "  Requests take max_tokens, temperature (0..2; 0 = greedy), top_p, top_k, repetition_penalty, stop\n"
        "  (up to 4 strings, besides a chat template's end-of-turn strings), seed, n (up to --parallel) and\n"
        "  stream (server-sent events, with stream_options.include_usage); responses count usage. A request\n"
        "  asking for more tokens than the context leaves ends there (finish_reason \"length\").\n"
        "  Errors are OpenAI's error objects: 400 for a\n"
        "  bad request, 401 without the API key, 404 for an unknown path or model, 413 for a body over\n"
        "  --max-body, 503 (with Retry-After) when the queue is full or the server is stopping.\n"
        "\n"
        "Server:\n"
        "  --host HOST            address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 or ::\n"
        "                         for every interface)\n"
        "  --port N               TCP port (default 8080; 0 = a free port, named in the listening line)\n"
        "  --parallel N           sequences decoded together in one batch (default 4); also the most\n"
        "                         completions (n) one request may ask for\n"
        "  --queue N              requests that may wait for a free sequence (default 64); beyond: 503\n"
        "  --max-body SIZE        largest request body (default 1M; K/M/G are powers of 1024)\n"
        "  --api-key KEY          requests must send 'Authorization: Bearer KEY' (default: the environment's\n"
        "                         COLOSSAL_API_KEY, which keeps the key out of the process list; none if unset)\n"
        "  --model-name NAME      the model's name in the API (default: the name of MODEL's directory or file)\n"
        "Model:\n"
        "  --ctx N                positions per sequence: prompt and completion (default: the model's, or\n"
        "                         as many as --kv-mem holds)\n"
        "  --kv-mem SIZE          memory for the key/value caches of the --parallel sequences (e.g. 2G; default:\n"
        "                         what --parallel x --ctx needs); more than SIZE is refused at the start\n"
        "  --template NAME        chat template llama2 | llama3 | chatml | plain (default: the one the model's\n"
        "                         tokenizer_config.json names; without one, /v1/chat/completions is refused)\n"
        "  --tokenizer PATH       tokenizer directory or file, or a bundled one (gpt2, llama2, llama3, bytes)\n"
        "  --quant TYPE           hold the weights quantized: int8 (q8_0), q4 (q4_0), q4_K or q6_K (a model\n"
        "                         colossal-quantize wrote, or a .gguf file, loads quantized without it)\n"
        "  --no-mmap              copy the weights into memory instead of reading them in place from the model\n"
        "                         file's mapping (by default tensors stored as they are held, as in GGUF files\n"
        "                         and colossal-quantize's, are read in place: the file must not change meanwhile)\n"
        "  --ignore-extra-tensors load MODEL even though its weights hold tensors the model does not use\n"
        "%s%s"
        "  --help                 print this help and exit; --version: print the version and exit\n"
        "SIGTERM or SIGINT (ctrl-c): stop accepting connections, finish the requests in flight, exit 0; a second\n"
        "signal exits at once. One access log line per request goes to stderr.\n"
        "%s", app_device_help, mem_opts_help, cli_exit_help);
}

static const char *serve_flag_of(col_setting s)
{
    switch (s) {
    case COL_SETTING_TOKENIZER: return "tokenizer";
    case COL_SETTING_CHAT_TEMPLATE: return "template";
    case COL_SETTING_EXTRA_TENSORS: return "ignore-extra-tensors";
    case COL_SETTING_PRECISION: return "quant";
    default: return mem_opt_of(s);
    }
}

static void print_err(const col_err *e)
{
    char line[APP_ERR_LINE_MAX];
    fprintf(stderr, PROG ": %s\n", app_err_line(e, serve_flag_of, line, sizeof line));
}

#define usage_error(...) cli_usage_error(PROG, __VA_ARGS__)
#define parse_int(s, opt, lo, hi) cli_parse_int(PROG, s, opt, lo, hi)

typedef struct {
    const char *model, *tokenizer, *host, *api_key, *model_name;
    bool has_template, ignore_extra, no_mmap;
    col_dtype quant; /* --quant; COL_F32: none (or what the model holds) */
    col_chat_family family;
    int port, parallel, queue;
    long long ctx; /* -1: the model's */
    size_t kv_mem; /* --kv-mem; 0: what the sequences need */
    size_t max_body;
    mem_opts mem;
    app_device_choice device;
} options;

static void parse_options(int argc, char **argv, options *o)
{
    enum { O_HOST = 256, O_PORT, O_PAR, O_QUEUE, O_BODY, O_KEY, O_NAME, O_CTX, O_TEMPLATE, O_TOK, O_EXTRA, O_NO_MMAP,
           O_DEVICE, O_VERSION, O_QUANT, O_KVMEM, O_MEM /* + index in mem_opt_names */ };
    static const struct option opts[] = {
        {"host", required_argument, 0, O_HOST}, {"port", required_argument, 0, O_PORT},
        {"parallel", required_argument, 0, O_PAR}, {"queue", required_argument, 0, O_QUEUE},
        {"max-body", required_argument, 0, O_BODY}, {"api-key", required_argument, 0, O_KEY},
        {"model-name", required_argument, 0, O_NAME}, {"ctx", required_argument, 0, O_CTX},
        {"kv-mem", required_argument, 0, O_KVMEM},
        {"template", required_argument, 0, O_TEMPLATE}, {"tokenizer", required_argument, 0, O_TOK},
        {"ignore-extra-tensors", no_argument, 0, O_EXTRA}, {"no-mmap", no_argument, 0, O_NO_MMAP},
        {"device", required_argument, 0, O_DEVICE},
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, O_VERSION}, {"quant", required_argument, 0, O_QUANT},
        {"cpu-mem", required_argument, 0, O_MEM}, {"gpu-mem", required_argument, 0, O_MEM + 1},
        {"chunk-size", required_argument, 0, O_MEM + 2}, {"nvme-dir", required_argument, 0, O_MEM + 3},
        {"nvme-max", required_argument, 0, O_MEM + 4}, {"nvme-kinds", required_argument, 0, O_MEM + 5},
        {"nvme-queue-depth", required_argument, 0, O_MEM + 6}, {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 4;
    o->queue = 64;
    o->max_body = 1 << 20;
    o->ctx = -1;
    col_err err = {0};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case O_HOST:
            if (!*optarg)
                usage_error("--host needs an address");
            o->host = optarg;
            break;
        case O_PORT: o->port = (int)parse_int(optarg, "--port", 0, 65535); break;
        case O_PAR: o->parallel = (int)parse_int(optarg, "--parallel", 1, 1024); break;
        case O_QUEUE: o->queue = (int)parse_int(optarg, "--queue", 0, 1 << 20); break;
        case O_BODY:
            if (!mem_parse_size(optarg, &o->max_body) || o->max_body == 0 || o->max_body > ((size_t)1 << 32))
                usage_error("--max-body must be a size from 1 byte to 4G, such as 64K or 1M (got '%s')", optarg);
            break;
        case O_KEY:
            if (!*optarg)
                usage_error("--api-key needs a non-empty key");
            o->api_key = optarg;
            break;
        case O_NAME:
            if (!*optarg)
                usage_error("--model-name needs a non-empty name");
            o->model_name = optarg;
            break;
        case O_CTX: o->ctx = parse_int(optarg, "--ctx", 2, 1 << 24); break;
        case O_KVMEM:
            if (!mem_parse_size(optarg, &o->kv_mem) || o->kv_mem == 0)
                usage_error("--kv-mem must be a size such as 512M or 2G (got '%s')", optarg);
            break;
        case O_TEMPLATE:
            if (col_chat_family_parse(optarg, &o->family, &err) != COL_OK)
                usage_error("--template: %s", err.msg);
            o->has_template = true;
            break;
        case O_TOK: o->tokenizer = optarg; break;
        case O_EXTRA: o->ignore_extra = true; break;
        case O_NO_MMAP: o->no_mmap = true; break;
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
    if (!o->api_key) {
        const char *k = getenv("COLOSSAL_API_KEY");
        if (k && *k)
            o->api_key = k;
    }
}

/* ---- signals: the handler only counts and wakes the main thread ---- */

static volatile sig_atomic_t g_signals; /* the only state a signal handler may touch */
static volatile sig_atomic_t g_serving;  /* the server has started: a signal drains it */
static int g_wake[2] = {-1, -1};

static void on_signal(int sig)
{
    if (g_signals++ > 0 || !g_serving)
        _exit(128 + sig); /* the second, or while loading: at once */
    int e = errno;
    char b = 1;
    if (write(g_wake[1], &b, 1) < 0) {
        /* nothing to do: the main thread also polls g_signals */
    }
    errno = e;
}

static bool install_signals(void)
{
    if (pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) != 0)
        return false;
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    struct sigaction ign = {.sa_handler = SIG_IGN};
    return sigaction(SIGTERM, &sa, NULL) == 0 && sigaction(SIGINT, &sa, NULL) == 0 &&
           sigaction(SIGPIPE, &ign, NULL) == 0;
}

/* the model's name in the API: --model-name, else the base name of a directory or file (a .gguf), else MODEL as
 * given (a hub id or a preset) */
static void model_name_of(const options *o, char *buf, size_t n)
{
    struct stat st;
    if (o->model_name) {
        snprintf(buf, n, "%s", o->model_name);
        return;
    }
    if (stat(o->model, &st) == 0) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s", o->model);
        size_t L = strlen(tmp);
        while (L > 1 && tmp[L - 1] == '/')
            tmp[--L] = '\0';
        const char *b = strrchr(tmp, '/');
        snprintf(buf, n, "%s", b && b[1] ? b + 1 : tmp);
        return;
    }
    snprintf(buf, n, "%s", o->model);
}

/* serving until a signal; returns the exit code */
static int serve(const options *o, serve_sched *sched, const serve_api_model *m)
{
    col_err err = {0};
    int fd;
    char where[300];
    if (serve_http_listen(o->host, o->port, &fd, where, sizeof where, &err) != COL_OK) {
        fprintf(stderr, PROG ": %s (--host, --port)\n", err.msg);
        return 1;
    }
    unsigned limit = (unsigned)o->parallel + (unsigned)o->queue + 64;
    serve_http_config hc = {.sched = sched, .model = *m, .max_body = o->max_body, .api_key = o->api_key,
                            .connection_limit = limit, .log = stderr};
    serve_http *h;
    if (serve_http_start(&hc, fd, &h, &err) != COL_OK) {
        print_err(&err);
        return 1;
    }
    g_serving = 1;
    fprintf(stderr, PROG ": listening on http://%s\n", where);
    fflush(stderr);
    while (g_signals == 0) {
        struct pollfd p = {.fd = g_wake[0], .events = POLLIN};
        poll(&p, 1, 1000);
    }
    serve_http_quiesce(h); /* no new connections; the scheduler is not touched from here on */
    int left = serve_http_in_flight(h);
    fprintf(stderr, PROG ": stopping: %d request%s in flight to finish (a second signal exits at once)\n", left,
            left == 1 ? "" : "s");
    fflush(stderr);
    serve_sched_stop(sched); /* lets every queued and running request finish */
    while (serve_http_in_flight(h) > 0) {
        struct pollfd p = {.fd = g_wake[0], .events = POLLIN};
        poll(&p, 1, 20);
    }
    serve_http_stop(h);
    fprintf(stderr, PROG ": stopped\n");
    return 0;
}

/* everything after the options and the device; returns the exit code */
static int run_on(const options *opt, app_device *dev)
{
    options o = *opt;
    col_err err = {0};
    col_lm_source src;
    if (col_lm_source_open(o.model, o.tokenizer, true, &src, &err) != COL_OK) {
        print_err(&err);
        return 1;
    }
    const col_lm_config *mc = &src.config;
    if (o.ctx > mc->max_positions) {
        fprintf(stderr, PROG ": --ctx %lld is more than the model's %d positions\n", o.ctx, mc->max_positions);
        col_lm_source_close(&src);
        return 2;
    }
    int ctx = o.ctx > 0 ? (int)o.ctx : mc->max_positions;
    size_t per_pos = col_lm_batch_cache_bytes(mc, o.parallel, 1); /* one position of every sequence */
    if (o.kv_mem && o.ctx <= 0 && per_pos > 0 && o.kv_mem / per_pos < (size_t)ctx)
        ctx = (int)(o.kv_mem / per_pos); /* as many positions as --kv-mem holds */
    if (o.kv_mem && (ctx < 2 || col_lm_batch_cache_bytes(mc, o.parallel, ctx) > o.kv_mem)) {
        char have[32], need[32], pos[32];
        col_fmt_bytes(have, sizeof have, o.kv_mem);
        col_fmt_bytes(need, sizeof need, col_lm_batch_cache_bytes(mc, o.parallel, ctx < 2 ? 2 : ctx));
        col_fmt_bytes(pos, sizeof pos, per_pos);
        fprintf(stderr, PROG ": --kv-mem %s is too little: %d sequences of %d positions need %s of key/value caches "
                "(%s a position); raise --kv-mem or lower --parallel or --ctx\n", have, o.parallel, ctx < 2 ? 2 : ctx,
                need, pos);
        col_lm_source_close(&src);
        return 2;
    }
    /* the rule of colossal-chat: an explicit --template, else the model's own template, else none */
    bool chat = o.has_template || src.has_chat;
    col_chat_family family = o.has_template ? o.family : src.chat;
    if (!o.has_template && src.chat_unknown[0])
        fprintf(stderr, PROG ": warning: %s has a chat template colossal does not know (%s); /v1/chat/completions "
                "is refused: choose the format with --template llama2|llama3|chatml|plain\n",
                src.tok_dir[0] ? src.tok_dir : o.model, src.chat_unknown);

    col_lm_trainer *tr = NULL;
    char budget[256];
    col_lm_load_report rep = {0};
    serve_sched *sched = NULL;
    app_stats *stats = NULL;
    int rc = 1;
    app_lm_opts lo = {.mem = &o.mem, .dev = dev, .quant = o.quant, .ignore_extra = o.ignore_extra,
                       .no_mmap = o.no_mmap};
    if (app_lm_session(&src, &lo, &tr, &rep, budget, sizeof budget, &err) != COL_OK) {
        print_err(&err);
        goto done;
    }
    stats = app_lm_stats(PROG, o.model, tr, &lo); /* for colossal-top */
    app_load_warnings(stderr, PROG, &rep);
    if (src.preset[0])
        fprintf(stderr, PROG ": %s is a built-in architecture with random weights: expect noise\n", src.preset);
    int32_t eos[2];
    int neos = 0;
    if (col_tok_eos_id(src.tok) >= 0)
        eos[neos++] = col_tok_eos_id(src.tok);
    if (mc->eos_id >= 0 && mc->eos_id < mc->vocab_size && (neos == 0 || eos[0] != mc->eos_id))
        eos[neos++] = mc->eos_id;
    serve_sched_config sc = {.tr = tr, .tok = src.tok, .slots = o.parallel, .ctx = ctx, .queue_max = o.queue,
                             .eos = eos, .neos = neos};
    if (serve_sched_start(&sc, &sched, &err) != COL_OK) {
        print_err(&err);
        goto done;
    }
    char name[4200];
    model_name_of(&o, name, sizeof name);
    serve_api_model m = {.tok = src.tok, .vocab = mc->vocab_size, .ctx = ctx, .max_n = o.parallel,
                         .model_name = name, .has_chat = chat, .family = family};
    char kv[32];
    col_fmt_bytes(kv, sizeof kv, col_lm_batch_cache_bytes(mc, o.parallel, ctx));
    fprintf(stderr, PROG ": %s on %s: '%s', %s, context %d, %d parallel (%s of key/value caches), queue %d\n",
            o.model, dev->desc, name, chat ? col_chat_info(family)->name : "no chat template (completions only)", ctx,
            o.parallel, kv, o.queue);
    if (budget[0])
        fprintf(stderr, PROG ": %s\n", budget);
    if (dev->note[0])
        fprintf(stderr, PROG ": note: %s\n", dev->note);
    rc = serve(&o, sched, &m);
    if (rc != 0)
        serve_sched_stop(sched);
done:
    app_stats_end(stats);
    col_lm_trainer_free(tr);
    col_lm_source_close(&src);
    return rc;
}

int main(int argc, char **argv)
{
    col_proc_setup_decode(argv);
    options o;
    parse_options(argc, argv, &o);
    if (!install_signals()) {
        fprintf(stderr, PROG ": cannot set up the signal handlers: %s\n", strerror(errno));
        return 1;
    }
    app_device dev;
    col_err err = {0};
    int rc = app_device_open(&o.device, &dev, &err);
    if (rc != 0) {
        print_err(&err);
        return rc;
    }
    rc = run_on(&o, &dev);
    app_device_close(&dev);
    return rc;
}
