/* serve_http.c - the libmicrohttpd daemon of colossal-serve: routing, limits,
 * the API key, whole and streamed responses, the access log (see
 * serve_http.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* POLLRDHUP */
#endif
#include "serve_http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "timer.h"

/* A connection idle this long (no request, or a client that stops sending) is closed; the time a request
 * waits for its tokens does not count (libmicrohttpd checks between the callbacks, which block meanwhile). */
enum { IDLE_TIMEOUT_S = 60 };

struct serve_http {
    serve_http_config cfg;
    pthread_rwlock_t sched_lock;  /* cfg.sched: NULL once quiesced (the scheduler may be freed then) */
    struct MHD_Daemon *d;
    int listen_fd;
    atomic_int in_flight;
    atomic_bool draining;
    atomic_uint_fast64_t counter; /* response ids and the seeds of requests that give none */
    long long started;            /* Unix seconds: the model's "created" */
};

/* ---- the listening socket ---- */

col_status serve_http_listen(const char *host, int port, int *fd, char *where, size_t n, col_err *err)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &res);
    if (g != 0)
        return col_err_set(err, COL_EINVAL, "cannot resolve the address '%s': %s", host, gai_strerror(g));
    int s = -1, e = 0;
    for (struct addrinfo *a = res; a && s < 0; a = a->ai_next) {
        s = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (s < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s, a->ai_addr, a->ai_addrlen) != 0 || listen(s, 128) != 0) {
            e = errno;
            close(s);
            s = -1;
        }
    }
    freeaddrinfo(res);
    if (s < 0)
        return col_err_set(err, COL_EIO, "cannot listen on %s port %d: %s", host, port, strerror(e));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char hs[NI_MAXHOST], pt[NI_MAXSERV];
    if (getsockname(s, (struct sockaddr *)&ss, &sl) != 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, hs, sizeof hs, pt, sizeof pt, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        e = errno;
        close(s);
        return col_err_set(err, COL_EIO, "cannot read the address of the listening socket: %s", strerror(e));
    }
    snprintf(where, n, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", hs, pt);
    *fd = s;
    return COL_OK;
}

/* ---- one request ---- */

typedef struct {
    serve_http *h;
    struct MHD_Connection *conn;
    pthread_mutex_t mu;
    int refs;                     /* the completion callback's, and a stream's */
    double t0;
    char method[16], path[200], addr[64];
    int status;
    int prompt_tokens, completion_tokens;
    bool aborted;                 /* the client went away before the end */
    /* the body */
    char *body;
    size_t n, cap;
    /* a request given to the scheduler */
    serve_req *req;
    serve_api_request ar;
    serve_api_head head;
    /* a stream: formatted bytes not yet sent */
    char *out;
    size_t out_n, out_off, out_cap;
    bool done;                    /* "data: [DONE]" is in out */
} req_ctx;

static void ctx_unref(req_ctx *c)
{
    pthread_mutex_lock(&c->mu);
    int left = --c->refs;
    pthread_mutex_unlock(&c->mu);
    if (left > 0)
        return;
    if (c->req)
        serve_req_release(c->req);
    serve_api_request_free(&c->ar);
    pthread_mutex_destroy(&c->mu);
    free(c->body);
    free(c->out);
    free(c);
}

static void note_usage(req_ctx *c)
{
    if (c->req)
        serve_req_usage(c->req, &c->prompt_tokens, &c->completion_tokens);
}

/* the client closed its end or the connection failed */
static bool client_gone(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0)
        return false;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL))
        return true;
    if (p.revents & POLLIN) {
        char b;
        ssize_t r = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    return false;
}

/* ---- responses ---- */

static enum MHD_Result send_json(req_ctx *c, int status, char *json, bool close_after, const char *h1,
                                 const char *v1)
{
    if (!json) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":null}}";
        status = 500;
        json = strdup(oom);
        if (!json)
            return MHD_NO;
    }
    size_t len = strlen(json);
    struct MHD_Response *r = MHD_create_response_from_buffer(len, json, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(json);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (close_after)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (h1)
        MHD_add_response_header(r, h1, v1);
    c->status = status;
    enum MHD_Result q = MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return q;
}

static enum MHD_Result send_error(req_ctx *c, const serve_api_error *e, bool close_after)
{
    const char *h = NULL, *v = NULL;
    if (e->status == 503) {
        h = MHD_HTTP_HEADER_RETRY_AFTER;
        v = "1";
    } else if (e->status == 401) {
        h = MHD_HTTP_HEADER_WWW_AUTHENTICATE;
        v = "Bearer";
    } else if (e->status == 405) {
        h = MHD_HTTP_HEADER_ALLOW;
        v = strcmp(c->path, "/v1/chat/completions") == 0 || strcmp(c->path, "/v1/completions") == 0 ? "POST"
                                                                                                     : "GET, HEAD";
    }
    return send_json(c, e->status, serve_api_error_json(e), close_after, h, v);
}

/* ---- routing ---- */

typedef enum { R_NONE, R_HEALTH, R_MODELS, R_MODEL, R_CHAT, R_COMPLETIONS } route;

static route route_of(const char *path, bool *post)
{
    *post = false;
    if (strcmp(path, "/health") == 0)
        return R_HEALTH;
    if (strcmp(path, "/v1/models") == 0)
        return R_MODELS;
    if (strncmp(path, "/v1/models/", 11) == 0 && path[11])
        return R_MODEL;
    *post = true;
    if (strcmp(path, "/v1/chat/completions") == 0)
        return R_CHAT;
    if (strcmp(path, "/v1/completions") == 0)
        return R_COMPLETIONS;
    return R_NONE;
}

static bool authorized(serve_http *h, struct MHD_Connection *conn)
{
    const char *key = h->cfg.api_key;
    if (!key || !*key)
        return true;
    const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!a || strncasecmp(a, "Bearer ", 7) != 0) {
        (void)serve_api_key_equal(key, "", 0); /* the same time as a wrong key */
        return false;
    }
    a += 7;
    while (*a == ' ')
        a++;
    size_t len = strlen(a);
    while (len > 0 && (a[len - 1] == ' ' || a[len - 1] == '\t'))
        len--;
    return serve_api_key_equal(key, a, len);
}

static enum MHD_Result health(req_ctx *c)
{
    serve_stats s = {0};
    pthread_rwlock_rdlock(&c->h->sched_lock);
    if (c->h->cfg.sched)
        serve_sched_stats(c->h->cfg.sched, &s);
    bool draining = c->h->cfg.sched == NULL;
    pthread_rwlock_unlock(&c->h->sched_lock);
    char *j = malloc(320);
    if (j)
        snprintf(j, 320, "{\"status\":\"%s\",\"slots\":%d,\"busy\":%d,\"queued\":%d,\"queue_max\":%d,"
                 "\"requests\":%llu,\"tokens_generated\":%llu}", draining ? "draining" : "ok", s.slots,
                 s.busy_slots, s.queued, s.queue_max, (unsigned long long)s.requests,
                 (unsigned long long)s.tokens_generated);
    return send_json(c, draining ? 503 : 200, j, draining, NULL, NULL);
}

static enum MHD_Result model_object(req_ctx *c)
{
    const serve_api_model *m = &c->h->cfg.model;
    const char *name = c->path + 11;
    if (strcmp(name, m->model_name) != 0) {
        serve_api_error e;
        serve_api_set_error(&e, 404, "invalid_request_error", "model_not_found", "model",
                            "The model '%.200s' does not exist: this server serves '%s'.", name, m->model_name);
        return send_error(c, &e, false);
    }
    return send_json(c, 200, serve_api_model_json(m, c->h->started), false, NULL, NULL);
}

/* The first call for a request: everything that needs no body. Returns true with *res set when it
 * answered (an error, or a GET). */
static bool early(req_ctx *c, route rt, bool post, enum MHD_Result *res)
{
    serve_http *h = c->h;
    serve_api_error e;
    bool is_get = strcmp(c->method, "GET") == 0 || strcmp(c->method, "HEAD") == 0;
    bool is_post = strcmp(c->method, "POST") == 0;
    /* a request whose body will not be read closes the connection: what follows is not a request */
    bool close_after = !is_get;
    if (rt == R_NONE)
        serve_api_set_error(&e, 404, "invalid_request_error", "unknown_url", NULL,
                            "Invalid URL (%s %.150s): this server has /v1/chat/completions, /v1/completions, "
                            "/v1/models and /health.", c->method, c->path);
    else if (post ? !is_post : !is_get)
        serve_api_set_error(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                            "Method %s is not allowed on %s: use %s.", c->method, c->path, post ? "POST" : "GET");
    else if (rt != R_HEALTH && !authorized(h, c->conn))
        serve_api_set_error(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                            "Incorrect or missing API key: send the server's key as 'Authorization: Bearer KEY'.");
    else if (rt == R_HEALTH) {
        *res = health(c);
        return true;
    } else if (atomic_load(&h->draining))
        serve_api_set_error(&e, 503, "server_error", "server_shutting_down", NULL,
                            "The server is shutting down and takes no new requests.");
    else if (rt == R_MODELS) {
        *res = send_json(c, 200, serve_api_models_json(&h->cfg.model, h->started), false, NULL, NULL);
        return true;
    } else if (rt == R_MODEL) {
        *res = model_object(c);
        return true;
    } else {
        const char *cl = MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (!cl || strtoull(cl, NULL, 10) <= h->cfg.max_body)
            return false; /* read the body */
        serve_api_set_error(&e, 413, "invalid_request_error", "request_too_large", NULL,
                            "The request body of %.30s bytes is over this server's limit of %zu bytes.", cl,
                            h->cfg.max_body);
    }
    *res = send_error(c, &e, close_after || e.status == 503);
    return true;
}

/* ---- completions ---- */

static bool out_add(req_ctx *c, const char *a, size_t na, const char *b, size_t nb)
{
    size_t need = c->out_n + na + nb;
    if (need > c->out_cap) {
        size_t cap = need * 2 + 256;
        char *p = realloc(c->out, cap);
        if (!p)
            return false;
        c->out = p;
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_n, a, na);
    memcpy(c->out + c->out_n + na, b, nb);
    c->out_n += na + nb;
    return true;
}

/* "data: JSON\n\n" (json freed) */
static bool out_event(req_ctx *c, char *json)
{
    bool ok = json && out_add(c, "data: ", 6, json, strlen(json)) && out_add(c, "\n\n", 2, "", 0);
    free(json);
    return ok;
}

/* the SSE bytes of one scheduler event */
static bool stream_event(req_ctx *c, const serve_event *ev)
{
    const char *t = ev->text;
    size_t len = ev->len;
    bool inc = c->ar.include_usage;
    if (len > 0 && !out_event(c, serve_api_chunk_json(&c->head, ev->choice, false, t, len, SERVE_FINISH_NONE, inc)))
        return false;
    if (ev->finish == SERVE_FINISH_ERROR) {
        serve_api_error e;
        serve_api_set_error(&e, 500, "server_error", NULL, NULL, "The model failed: %s", serve_req_error(c->req));
        return out_event(c, serve_api_error_json(&e));
    }
    if (ev->finish != SERVE_FINISH_NONE && ev->finish != SERVE_FINISH_CANCELLED)
        return out_event(c, serve_api_chunk_json(&c->head, ev->choice, false, "", 0, ev->finish, inc));
    return true;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    req_ctx *c = cls;
    while (c->out_off == c->out_n) {
        c->out_off = c->out_n = 0;
        if (c->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        serve_event ev;
        int k = serve_req_next(c->req, &ev, 200);
        if (k == 0) {
            if (client_gone(c->conn)) {
                c->aborted = true;
                serve_req_cancel(c->req);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            continue;
        }
        bool ok;
        if (k > 0) {
            ok = stream_event(c, &ev);
        } else {
            note_usage(c);
            ok = (!c->ar.include_usage ||
                  out_event(c, serve_api_usage_chunk_json(&c->head, c->prompt_tokens, c->completion_tokens))) &&
                 out_add(c, "data: [DONE]\n\n", 14, "", 0);
            c->done = true;
        }
        if (!ok) {
            serve_req_cancel(c->req);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t k = c->out_n - c->out_off < max ? c->out_n - c->out_off : max;
    memcpy(buf, c->out + c->out_off, k);
    c->out_off += k;
    return (ssize_t)k;
}

static void stream_free(void *cls)
{
    req_ctx *c = cls;
    pthread_mutex_lock(&c->mu);
    note_usage(c);
    if (c->req && !c->done)
        serve_req_cancel(c->req);
    pthread_mutex_unlock(&c->mu);
    ctx_unref(c);
}

static enum MHD_Result start_stream(req_ctx *c)
{
    int n = c->ar.n;
    /* chat: each choice's first chunk carries the role, at once */
    for (int i = 0; i < n && c->ar.kind == SERVE_API_CHAT; i++)
        if (!out_event(c, serve_api_chunk_json(&c->head, i, true, "", 0, SERVE_FINISH_NONE, c->ar.include_usage)))
            return send_json(c, 500, NULL, false, NULL, NULL);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, c,
                                                               stream_free);
    if (!r)
        return MHD_NO;
    pthread_mutex_lock(&c->mu);
    c->refs++; /* the response's */
    pthread_mutex_unlock(&c->mu);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    c->status = 200;
    enum MHD_Result q = MHD_queue_response(c->conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return q;
}

/* a whole response: every event read, then one JSON object */
static enum MHD_Result whole(req_ctx *c)
{
    int n = c->ar.n;
    char **texts = calloc((size_t)n, sizeof *texts);
    size_t *lens = calloc((size_t)n, sizeof *lens), *caps = calloc((size_t)n, sizeof *caps);
    serve_finish *fin = calloc((size_t)n, sizeof *fin);
    bool ok = texts && lens && caps && fin, failed = false;
    for (;;) {
        serve_event ev;
        int k = serve_req_next(c->req, &ev, 200);
        if (k < 0)
            break;
        if (k == 0) {
            if (client_gone(c->conn)) {
                c->aborted = true;
                serve_req_cancel(c->req);
                ok = false;
                break;
            }
            continue;
        }
        int i = ev.choice;
        const char *t = ev.text;
        size_t len = ev.len;
        if (ok && lens[i] + len + 1 > caps[i]) {
            size_t cap = (lens[i] + len + 1) * 2;
            char *p = realloc(texts[i], cap);
            if (p) {
                texts[i] = p;
                caps[i] = cap;
            } else
                ok = false;
        }
        if (ok && len > 0) {
            memcpy(texts[i] + lens[i], t, len);
            lens[i] += len;
        }
        if (ev.finish != SERVE_FINISH_NONE)
            fin[i] = ev.finish;
        failed |= ev.finish == SERVE_FINISH_ERROR;
    }
    note_usage(c);
    enum MHD_Result res = MHD_NO;
    if (c->aborted) {
        c->status = 499; /* nginx's "client closed request", for the log */
        res = MHD_NO;    /* nobody to answer: close */
    } else if (failed) {
        serve_api_error e;
        serve_api_set_error(&e, 500, "server_error", NULL, NULL, "The model failed: %s", serve_req_error(c->req));
        res = send_error(c, &e, false);
    } else {
        char *j = ok ? serve_api_response_json(&c->head, n, texts, lens, fin, c->prompt_tokens, c->completion_tokens)
                     : NULL;
        res = send_json(c, 200, j, false, NULL, NULL);
    }
    for (int i = 0; texts && i < n; i++)
        free(texts[i]);
    free(texts);
    free(lens);
    free(caps);
    free(fin);
    return res;
}

/* the param of a scheduler's COL_EINVAL message: the field it starts with */
static const char *param_of(const char *msg)
{
    static const char *const fields[] = {"max_tokens", "n", "stop", "prompt", "temperature", "top_p", "top_k",
                                         "repetition_penalty", "seed"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        size_t L = strlen(fields[i]);
        if (strncmp(msg, fields[i], L) == 0 && !(msg[L] == '_' || (msg[L] >= 'a' && msg[L] <= 'z')))
            return fields[i];
    }
    return NULL;
}

static enum MHD_Result completion(req_ctx *c, serve_api_kind kind)
{
    serve_http *h = c->h;
    serve_api_error e;
    uint64_t nonce = atomic_fetch_add(&h->counter, 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)(col_seconds() * 1e9);
    if (!serve_api_parse(&h->cfg.model, kind, c->body ? c->body : "", c->n, nonce, &c->ar, &e))
        return send_error(c, &e, false);
    serve_api_head_init(&c->head, kind, h->cfg.model.model_name, (long long)time(NULL), nonce ^ 0x5851f42d4c957f2dull);
    serve_params p;
    serve_api_params(&c->ar, &p);
    col_err err = {0};
    pthread_rwlock_rdlock(&h->sched_lock);
    col_status st = h->cfg.sched ? serve_submit(h->cfg.sched, &p, &c->req, &err) : COL_ESTATE;
    pthread_rwlock_unlock(&h->sched_lock);
    if (st != COL_OK) {
        c->req = NULL;
        if (st == COL_EBUSY)
            serve_api_set_error(&e, 503, "server_error", "server_overloaded", NULL,
                                "The server is busy: every slot is taken and the queue is full. Retry later.");
        else if (st == COL_ESTATE)
            serve_api_set_error(&e, 503, "server_error", "server_shutting_down", NULL,
                                "The server is shutting down and takes no new requests.");
        else if (st == COL_EINVAL)
            serve_api_set_error(&e, 400, "invalid_request_error", "invalid_value", param_of(err.msg), "%s", err.msg);
        else
            serve_api_set_error(&e, 500, "server_error", NULL, NULL, "%s", err.msg);
        return send_error(c, &e, e.status == 503);
    }
    return c->ar.stream ? start_stream(c) : whole(c);
}

/* ---- libmicrohttpd's callbacks ---- */

static void client_address(struct MHD_Connection *conn, char *buf, size_t n)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(buf, n, "-");
    if (!ci || !ci->client_addr)
        return;
    const struct sockaddr *sa = ci->client_addr;
    socklen_t sl = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    char hs[64];
    if (getnameinfo(sa, sl, hs, sizeof hs, NULL, 0, NI_NUMERICHOST) == 0)
        snprintf(buf, n, "%s", hs);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    serve_http *h = cls;
    req_ctx *c = *con_cls;
    if (!c) {
        if (!(c = calloc(1, sizeof *c)))
            return MHD_NO;
        pthread_mutex_init(&c->mu, NULL);
        c->refs = 1;
        c->h = h;
        c->conn = conn;
        c->t0 = col_seconds();
        snprintf(c->method, sizeof c->method, "%s", method);
        snprintf(c->path, sizeof c->path, "%s", url);
        client_address(conn, c->addr, sizeof c->addr);
        atomic_fetch_add(&h->in_flight, 1);
        *con_cls = c;
        bool post;
        route rt = route_of(url, &post);
        enum MHD_Result res;
        if (early(c, rt, post, &res))
            return res;
        return MHD_YES;
    }
    if (c->status != 0) { /* answered already (e.g. 413 at the first call): the rest is not read */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t k = *upload_size;
        *upload_size = 0;
        if (c->n + k > h->cfg.max_body) {
            /* a chunked body past the limit: 413 at once, the rest unread (libmicrohttpd closes the connection
             * after it); if the response cannot be queued now, the connection is closed without one */
            serve_api_error e;
            serve_api_set_error(&e, 413, "invalid_request_error", "request_too_large", NULL,
                                "The request body is over this server's limit of %zu bytes.", h->cfg.max_body);
            if (send_error(c, &e, true) == MHD_YES)
                return MHD_YES;
            c->status = 413;
            c->aborted = true;
            return MHD_NO;
        }
        if (c->n + k + 1 > c->cap) {
            size_t cap = (c->n + k + 1) * 2;
            if (cap > h->cfg.max_body + 1)
                cap = h->cfg.max_body + 1;
            char *p = realloc(c->body, cap);
            if (!p)
                return MHD_NO;
            c->body = p;
            c->cap = cap;
        }
        memcpy(c->body + c->n, upload, k);
        c->n += k;
        c->body[c->n] = '\0';
        return MHD_YES;
    }
    bool post;
    route rt = route_of(url, &post);
    return completion(c, rt == R_CHAT ? SERVE_API_CHAT : SERVE_API_COMPLETION);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    serve_http *h = cls;
    req_ctx *c = *con_cls;
    if (!c)
        return;
    *con_cls = NULL;
    pthread_mutex_lock(&c->mu);
    note_usage(c);
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        c->aborted = true;
        if (c->req)
            serve_req_cancel(c->req);
    }
    int status = c->status, pt = c->prompt_tokens, ct = c->completion_tokens;
    bool aborted = c->aborted;
    pthread_mutex_unlock(&c->mu);
    /* the access log: time, client, method, path, status, tokens, duration */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[40];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    if (h->cfg.log) {
        fprintf(h->cfg.log, "%s.%03ldZ %s %s %s %d prompt_tokens=%d completion_tokens=%d %.3fs%s\n", when,
                ts.tv_nsec / 1000000, c->addr, c->method, c->path, status ? status : 500, pt, ct,
                col_seconds() - c->t0, aborted ? " aborted" : "");
        fflush(h->cfg.log);
    }
    atomic_fetch_sub(&h->in_flight, 1);
    ctx_unref(c);
}

/* ---- the daemon ---- */

col_status serve_http_start(const serve_http_config *cfg, int listen_fd, serve_http **out, col_err *err)
{
    *out = NULL;
    serve_http *h = calloc(1, sizeof *h);
    if (!h) {
        close(listen_fd);
        return col_err_set(err, COL_ENOMEM, "out of memory");
    }
    h->cfg = *cfg;
    h->listen_fd = listen_fd;
    pthread_rwlock_init(&h->sched_lock, NULL);
    atomic_init(&h->in_flight, 0);
    atomic_init(&h->draining, false);
    atomic_init(&h->counter, (uint64_t)time(NULL) << 20);
    h->started = (long long)time(NULL);
    unsigned limit = cfg->connection_limit ? cfg->connection_limit : 256;
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                                MHD_USE_POLL,
                            0, NULL, NULL, on_request, h, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_CONNECTION_LIMIT, limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S, MHD_OPTION_END);
    if (!h->d) {
        close(listen_fd);
        pthread_rwlock_destroy(&h->sched_lock);
        free(h);
        return col_err_set(err, COL_EIO, "the HTTP server (libmicrohttpd) did not start");
    }
    *out = h;
    return COL_OK;
}

void serve_http_quiesce(serve_http *h)
{
    atomic_store(&h->draining, true);
    pthread_rwlock_wrlock(&h->sched_lock);
    h->cfg.sched = NULL;
    pthread_rwlock_unlock(&h->sched_lock);
    MHD_socket s = MHD_quiesce_daemon(h->d);
    /* the socket stays open until the daemon stops (libmicrohttpd's rule); shut down, it refuses connections */
    if (s != MHD_INVALID_SOCKET)
        shutdown(s, SHUT_RDWR);
}

int serve_http_in_flight(serve_http *h)
{
    return atomic_load(&h->in_flight);
}

void serve_http_stop(serve_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    close(h->listen_fd);
    pthread_rwlock_destroy(&h->sched_lock);
    free(h);
}
