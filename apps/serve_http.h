/* serve_http.h - colossal-serve's HTTP side: a libmicrohttpd daemon that
 * routes OpenAI's endpoints to the scheduler (serve_sched.h), with the API's
 * JSON in serve_api.h.
 *
 *   POST /v1/chat/completions, /v1/completions   (stream: server-sent events)
 *   GET  /v1/models, /v1/models/NAME, /health
 *
 * Threads: libmicrohttpd's internal listening thread plus one thread per
 * connection (MHD_USE_THREAD_PER_CONNECTION). A request's thread submits it
 * and then blocks reading its events, for a whole response or for each piece
 * of a stream, so a request is one straight-line function and never needs
 * suspend/resume bookkeeping; the threads are bounded by the connection
 * limit, and the requests that hold a slot or wait for one by the scheduler's
 * slots and queue. While it waits for tokens the thread polls the client's
 * socket, so a client that goes away cancels its request (its slot is freed
 * at the scheduler's next step); libmicrohttpd's completion callback cancels
 * it too when a write fails.
 *
 * Limits: a body over max_body is refused with 413 before it is read when
 * Content-Length says so, and the connection is closed as soon as a chunked
 * body passes it (nothing past the limit is buffered). With an API key, every
 * endpoint but /health needs "Authorization: Bearer KEY", compared in
 * constant time. A connection idle for 60 s is closed (the wait for a request's tokens does not count), and
 * connections past the limit are refused by libmicrohttpd. One access log line per request goes to the log
 * stream. */
#ifndef COL_APPS_SERVE_HTTP_H
#define COL_APPS_SERVE_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "serve_api.h"
#include "serve_sched.h"
#include "status.h"

typedef struct {
    serve_sched *sched;        /* borrowed; outlives the daemon */
    serve_api_model model;     /* borrowed pointers */
    size_t max_body;           /* request bodies above this many bytes: 413 */
    const char *api_key;       /* NULL or "": no key needed */
    unsigned connection_limit; /* open connections beyond which new ones are refused */
    FILE *log;                 /* access log lines (stderr) */
} serve_http_config;

typedef struct serve_http serve_http;

/* A listening TCP socket on host (a name or an address; "127.0.0.1", "::1", "0.0.0.0") and port (0: the
 * system picks a free one). *fd: the socket; where: "HOST:PORT" as a URL writes it ("[::1]:8080"), n bytes. */
col_status serve_http_listen(const char *host, int port, int *fd, char *where, size_t n, col_err *err);

/* Starts serving on listen_fd (taken over: closed by serve_http_stop, also on failure). */
col_status serve_http_start(const serve_http_config *cfg, int listen_fd, serve_http **out, col_err *err);
/* Stops accepting connections (the listening socket is shut down) and answers new requests on open
 * connections with 503; requests in flight go on. From its return h no longer touches the scheduler
 * (serve_sched_stop may free it) but for the requests it holds. */
void serve_http_quiesce(serve_http *h);
/* Requests received and not yet answered in full. */
int serve_http_in_flight(serve_http *h);
/* Closes every connection, stops the daemon's threads and frees h. */
void serve_http_stop(serve_http *h);

#endif
