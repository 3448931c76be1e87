/* serve_http.c -- the transport of `plume serve`: libmicrohttpd, the routes, the API key,
 * CORS, limits, signals, waiting on a job and sending its bytes, /health, /metrics and the web
 * page (docs/SERVER.md).
 *
 * Connections come from the door (serve_door.c) once their request head is whole; the
 * server admits them (admit: /health and /metrics even when every connection is taken) and
 * libmicrohttpd runs one thread per connection, one request per connection (Connection:
 * close: a later request on it would meet no door). A connection thread reads the body (at
 * most max_body bytes, within --timeout, within the memory budget of requests in flight),
 * has it made into a job (serve_prepare.c: the route's dialect parses it, the prompt is
 * rendered and tokenized), submits the job to the scheduler (serve_sched.c) and then waits on the job's bytes: a streamed reply is
 * a content reader that blocks until the scheduler has written more; a whole reply is sent
 * when the job is done. While waiting, the thread peeks at its socket so that a client that
 * hangs up cancels its job at once, even during a long prefill (a client that only closed its
 * sending side still gets its answer). This file names no JSON field of a generation request:
 * the dialects do. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "digest.h"
#include "serve.h"
#include "webui.h"

/* A client address (its family and IP, not its port) and its connections in the daemon. */
typedef struct {
    uint8_t key[17];
    int32_t n;
} serve_addr_count;

/* The server: the model, the scheduler, the HTTP daemon and the counters of /metrics. */
typedef struct {
    serve_config o;
    plume_model *m;
    plume_drafter *drafter; /* the MTP drafter (BUNDLE/drafter or --drafter), or NULL */
    const plume_tokenizer *tok;
    serve_sched *sched;
    struct MHD_Daemon *d;
    char model_name[256];
    int32_t n_ctx;
    serve_info info;       /* what the dialects' model endpoints tell (busy: read when asked) */
    serve_prep prep;       /* what making a job of a request needs (serve_prepare.c) */
    atomic_int_fast64_t http_requests;
    atomic_int_fast64_t http_status[6]; /* by class: [2] 2xx ... [5] 5xx */
    atomic_int draining;  /* SIGTERM came: /health 503, no new generation, the rest finishes */
    atomic_int stopping;
    atomic_int in_flight; /* connections holding a job (waiting or streaming) */
    serve_door *door;
    atomic_int conns;       /* connections handed to the daemon and not yet closed */
    pthread_mutex_t addr_mu; /* guards addrs: the door adds, the daemon's threads remove */
    serve_addr_count *addrs; /* [n_addrs] client addresses with connections in the daemon */
    int32_t n_addrs;
    size_t cap_addrs;
    atomic_size_t mem_used; /* bytes of the memory budget taken by requests in flight */
    atomic_int_fast64_t media_abandoned; /* requests whose media decoding stopped: the client left */
} serve_server;

/* What a connection has received so far and what it waits on. */
typedef struct {
    char *body;        /* [len] the request body */
    size_t len, cap;
    int32_t too_large; /* the body passed --max-body: the rest is dropped, then 413 */
    int32_t busy;      /* the body did not fit the memory budget: the rest is dropped, then 429 */
    int32_t http11;    /* the request is HTTP/1.1 (it may be sent an interim 100) */
    size_t reserved;   /* bytes of the memory budget this request holds (its body, its parse) */
    int form;          /* the body is a multipart form, not JSON (serve_dialect.form_body) */
    double t_head;     /* when its head was read: the body must come within --timeout */
    serve_job *job;
} serve_conn;

/* What a waiting connection knows of its client. A client that closed only its sending side
 * (a half-close after a whole request: `nc -N`, some HTTP/1.0 clients) still reads the answer,
 * and the end of its input looks the same as a client that went away; what tells them apart
 * is sending it something: a closed socket answers with a reset. */
typedef struct {
    int fd;
    int http11;  /* may be sent an interim "100 Continue" (HTTP/1.0 clients may not) */
    int probed;  /* the end of input was seen and the probe sent */
} peer;

/* A streamed reply: the job, the client to watch, the server's in-flight count, how long the
 * reader may wait without sending anything. */
typedef struct {
    serve_job *job;
    peer pe;
    atomic_int *in_flight;
    double keepalive;
} serve_stream;

#define SERVE_FETCH_SECONDS 10 /* a remote image URL (--allow-remote-media): the whole fetch */
#define SERVE_WAIT_MS 100 /* how often a waiting connection checks that its client is there */

/* ---- CORS --------------------------------------------------------------------------------- */

/* The request's Origin when --cors allows it (or "*" for --cors '*'), else NULL. */
static const char *cors_origin(const serve_server *sv, struct MHD_Connection *c) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (!sv->o.cors || !origin) return NULL;
    if (!strcmp(sv->o.cors, "*")) return "*";
    size_t n = strlen(origin);
    for (const char *p = sv->o.cors; *p;) {
        const char *end = strchr(p, ',');
        size_t k = end ? (size_t)(end - p) : strlen(p);
        if (k == n && !strncmp(p, origin, n)) return origin;
        p += k + (end != NULL);
    }
    return NULL;
}

/* Add the CORS headers of an allowed origin to a response (nothing when none is allowed). */
static void cors_headers(const serve_server *sv, struct MHD_Connection *c, struct MHD_Response *r) {
    const char *origin = cors_origin(sv, c);
    if (!origin) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
    if (strcmp(origin, "*")) MHD_add_response_header(r, "Vary", "Origin");
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "X-Plume-Seed, Retry-After");
}

/* ---- replies ------------------------------------------------------------------------------ */

/* The methods a route takes, for a 405's Allow header (set by dispatch). */
static _Thread_local const char *allow_methods;

/* Queue a response of len bytes (copied) with a content type; counts it for /metrics. */
static enum MHD_Result reply(serve_server *sv, struct MHD_Connection *c, unsigned status, const char *type,
                             const char *body, size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close"); /* one request per connection */
    cors_headers(sv, c, r);
    if (status == 429 || status == 503) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 405 && allow_methods) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow_methods);
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    if (status / 100 < 6) atomic_fetch_add(&sv->http_status[status / 100], 1);
    return rc;
}

/* Queue a JSON body (NULL: out of memory, a 500). The body is freed. */
static enum MHD_Result reply_json(serve_server *sv, struct MHD_Connection *c, unsigned status, char *json) {
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}";
    enum MHD_Result rc = json ? reply(sv, c, status, "application/json", json, strlen(json))
                              : reply(sv, c, 500, "application/json", oom, sizeof oom - 1);
    free(json);
    return rc;
}

/* Queue an error in a dialect's words (OpenAI's where no dialect is known). */
static enum MHD_Result reply_serve_error(serve_server *sv, struct MHD_Connection *c, const serve_dialect *d,
                                         const serve_error *e) {
    return reply_json(sv, c, (unsigned)e->status, (d ? d : &serve_openai_chat)->error(e));
}

/* Queue an error made of its parts. */
static enum MHD_Result reply_error(serve_server *sv, struct MHD_Connection *c, const serve_dialect *d, unsigned status,
                                   serve_error_kind kind, const char *code, const char *msg) {
    serve_error e;
    serve_error_set(&e, (int32_t)status, kind, NULL, code, "%s", msg);
    return reply_serve_error(sv, c, d, &e);
}

/* ---- the memory budget of requests in flight ----------------------------------------------
 * A JSON body takes far more memory parsed than as bytes (a cJSON node per value: an 8 MB
 * list of small numbers is 4 million nodes, about 500 MB), and a client may send many at
 * once. Every request holds a share of --max-request-memory while it is in flight: its body
 * as it arrives (or as its Content-Length declares), then, for the time of parsing, what the
 * parsed tree and the text and ids made from it will take (serve_json_check counts the
 * values before anything is parsed). A request that cannot fit even alone is a 413, one that
 * does not fit beside the others now a 429 (Retry-After: 1). */

/* Take n bytes of the budget for cn (0), or take nothing when they do not fit (-1). */
static int budget_take(serve_server *sv, serve_conn *cn, size_t n) {
    size_t cap = sv->o.max_request_memory, cur = atomic_load(&sv->mem_used);
    do {
        if (n > cap || cur > cap - n) return -1;
    } while (!atomic_compare_exchange_weak(&sv->mem_used, &cur, cur + n));
    cn->reserved += n;
    return 0;
}

/* Give n bytes of cn's share back (all of it when n is SIZE_MAX). */
static void budget_give(serve_server *sv, serve_conn *cn, size_t n) {
    if (n > cn->reserved) n = cn->reserved;
    atomic_fetch_sub(&sv->mem_used, n);
    cn->reserved -= n;
}

/* Reserve what handling cn's JSON body will take beyond the body itself: the parsed tree
 * (values x SERVE_JSON_NODE_BYTES) and per_byte bytes per body byte (copies of its strings,
 * the prompt, token ids, the reply). 0 with *took set, or an error in e (400: the body is
 * not JSON a parser may be given; 413: too large for the budget; 429: not now). */
static int budget_parse(serve_server *sv, serve_conn *cn, size_t per_byte, size_t *took, serve_error *e) {
    size_t nodes = 0;
    *took = 0;
    int rc = cn->form ? 0 : serve_json_check(cn->body ? cn->body : "", cn->len, &nodes, e);
    if (rc) return rc;
    size_t need = nodes > SIZE_MAX / SERVE_JSON_NODE_BYTES / 2 || cn->len > SIZE_MAX / 64 ? SIZE_MAX
                                                                                           : nodes * SERVE_JSON_NODE_BYTES + cn->len * per_byte;
    if (need > sv->o.max_request_memory - (cn->reserved < sv->o.max_request_memory ? cn->reserved : sv->o.max_request_memory))
        return serve_error_set(e, 413, SERVE_ERR_REQUEST, NULL, "request_too_large",
                               "handling this request would take about %zu MB (%zu JSON values), more than the server "
                               "allows for all requests in flight (--max-request-memory %zu MB)",
                               need >> 20, nodes, sv->o.max_request_memory >> 20);
    if (budget_take(sv, cn, need))
        return serve_error_set(e, 429, SERVE_ERR_BUSY, NULL, "server_busy",
                               "the server is busy with other large requests; retry later");
    *took = need;
    return 0;
}

/* ---- waiting on a job --------------------------------------------------------------------- */

enum { PEER_HERE, PEER_GONE, PEER_PROBE };

/* What the socket says of the client: here, gone (reset, or an error), or, the first time its
 * input is seen to end, PEER_PROBE: send it something now (a reset will answer if it is gone). */
static int peer_check(peer *pe) {
    char ch;
    ssize_t r = recv(pe->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return PEER_HERE;
    if (r < 0) return PEER_GONE;
    /* the end of its input: from there on a read says so whatever comes, and a reset that came
     * later (the answer to the probe) shows only as the socket's error */
    int e = 0;
    socklen_t el = sizeof e;
    if (getsockopt(pe->fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e) return PEER_GONE;
    if (pe->probed) return PEER_HERE;
    pe->probed = 1;
    return PEER_PROBE;
}

/* Whether the client of a whole reply is gone. The probe is an interim "HTTP/1.1 100
 * Continue" (every HTTP/1.1 client must take 1xx replies before the final one); an HTTP/1.0
 * client may not be sent one, so its end of input is taken as a half-close. */
static int client_gone(peer *pe) {
    int st = peer_check(pe);
    if (st != PEER_PROBE) return st == PEER_GONE;
    static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
    return pe->http11 && send(pe->fd, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno != EAGAIN;
}

/* Wait up to SERVE_WAIT_MS on the job's condition. Called with j->mu held. */
static void job_wait_locked(serve_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += SERVE_WAIT_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* The socket of a connection. */
static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* The content reader of a streamed reply: block until the scheduler has written more bytes,
 * copy them; end of stream when the job is done; an error when the client has gone. A reader
 * that waits (in the queue, a long prefill) sends the dialect's idle bytes every keepalive
 * seconds: libmicrohttpd closes a connection that sent nothing for --timeout, even while its
 * reader blocks, and the stream ended empty. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    serve_stream *st = cls;
    serve_job *j = st->job;
    double t0 = plume_now();
    pthread_mutex_lock(&j->mu);
    while (j->out_sent == j->out.len && !j->done) {
        job_wait_locked(j);
        if (j->out_sent == j->out.len && !j->done) {
            pthread_mutex_unlock(&j->mu);
            int said = peer_check(&st->pe);
            const char *idle = j->head.dialect->idle; /* a stream's probe: bytes its client skips */
            if ((said == PEER_PROBE || (said == PEER_HERE && plume_now() - t0 >= st->keepalive)) && idle &&
                strlen(idle) <= max) {
                memcpy(buf, idle, strlen(idle));
                return (ssize_t)strlen(idle);
            }
            if (said != PEER_HERE) {
                serve_job_cancel(j);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
            pthread_mutex_lock(&j->mu);
        }
    }
    size_t n = j->out.len - j->out_sent;
    if (n == 0) {
        pthread_mutex_unlock(&j->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (n > max) n = max;
    memcpy(buf, j->out.p + j->out_sent, n);
    j->out_sent += n;
    pthread_mutex_unlock(&j->mu);
    return (ssize_t)n;
}

/* The end of a streamed reply (sent, or the connection closed): cancel the job if it still
 * runs and drop the stream's reference. */
static void stream_free(void *cls) {
    serve_stream *st = cls;
    serve_job_cancel(st->job);
    serve_job_unref(st->job);
    atomic_fetch_sub(st->in_flight, 1);
    free(st);
}

/* Wait for a non-streamed job to end; 0, or -1 when the client hung up (job cancelled). */
static int job_wait_done(serve_job *j, peer *pe) {
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        job_wait_locked(j);
        if (j->done) break;
        pthread_mutex_unlock(&j->mu);
        if (client_gone(pe)) {
            serve_job_cancel(j);
            return -1;
        }
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    return 0;
}

/* ---- the generation endpoints --------------------------------------------------------------- */

/* The X-Plume-Seed header: the seed a request was sampled with, so it can be replayed; and
 * X-Plume-Warning when the request asked for something plume left out. */
static void seed_header(struct MHD_Response *r, const serve_job *j) {
    char seed[32];
    snprintf(seed, sizeof seed, "%lld", (long long)(int64_t)j->head.req.sp.seed);
    MHD_add_response_header(r, "X-Plume-Seed", seed);
    if (j->head.req.warning) MHD_add_response_header(r, "X-Plume-Warning", j->head.req.warning);
}

/* A submitted job's answer streamed: the job's reference and its in_flight count pass to
 * the stream (given up here if the reply cannot be made). */
static enum MHD_Result reply_streamed(serve_server *sv, struct MHD_Connection *c, const serve_dialect *d, serve_job *j,
                                      peer pe) {
    serve_stream *st = malloc(sizeof *st);
    struct MHD_Response *r = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free) : NULL;
    if (!r) {
        free(st);
        serve_job_cancel(j);
        serve_job_unref(j);
        atomic_fetch_sub(&sv->in_flight, 1);
        return reply_error(sv, c, d, 500, SERVE_ERR_SERVER, NULL, "out of memory");
    }
    st->job = j; /* the connection's reference now belongs to the stream */
    st->pe = pe;
    st->in_flight = &sv->in_flight;
    st->keepalive = sv->o.timeout / 2.0 > 0.2 ? sv->o.timeout / 2.0 : 0.2;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, d->stream_type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    seed_header(r, j);
    cors_headers(sv, c, r);
    enum MHD_Result q = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    atomic_fetch_add(&sv->http_status[2], 1);
    return q;
}

/* A submitted job's answer whole, once done: the job's reference and its in_flight count
 * are given up here (MHD_NO, closing, when the client left while waiting). */
static enum MHD_Result reply_whole(serve_server *sv, struct MHD_Connection *c, const serve_dialect *d, serve_job *j,
                                   peer pe) {
    if (job_wait_done(j, &pe)) {
        serve_job_unref(j);
        atomic_fetch_sub(&sv->in_flight, 1);
        return MHD_NO; /* the client is gone: close */
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(j->out.len, j->out.p ? j->out.p : "", MHD_RESPMEM_MUST_COPY);
    enum MHD_Result q = MHD_NO;
    if (r) {
        const char *type = d->content_type && j->status == 200 ? d->content_type(&j->head) : NULL;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type ? type : "application/json");
        seed_header(r, j);
        cors_headers(sv, c, r);
        q = MHD_queue_response(c, (unsigned)j->status, r);
        MHD_destroy_response(r);
        if (j->status / 100 < 6) atomic_fetch_add(&sv->http_status[j->status / 100], 1);
    }
    serve_job_unref(j);
    atomic_fetch_sub(&sv->in_flight, 1);
    return q;
}

/* serve_watch's question on a connection being made ready: whether its client left. */
static int watch_gone(void *ctx) { return client_gone(ctx); }

/* A generation endpoint: the request in a dialect, its answer streamed or whole. */
static enum MHD_Result handle_generate(serve_server *sv, struct MHD_Connection *c, serve_conn *cn, const serve_dialect *d) {
    serve_error e;
    serve_job *j = NULL;
    size_t took = 0; /* the parse: its strings' copies, the prompt, its ids (4 bytes each) */
    cn->form = d->form_body;
    size_t off = 0; /* a form starts at the boundary its Content-Type declares */
    int bad = d->form_body && serve_multipart_start(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type"),
                                                    cn->body ? cn->body : "", cn->len, &off, &e);
    peer pe = {conn_fd(c), cn->http11, 0}; /* asked between the steps of decoding its media */
    const serve_watch w = {pe.fd >= 0 ? watch_gone : NULL, &pe}; /* no socket known: never gone */
    bad = bad || budget_parse(sv, cn, 6, &took, &e) ||
          serve_prepare_job(&sv->prep, d, cn->body ? cn->body + off : "", cn->len - off, &w, &j, &e);
    budget_give(sv, cn, took);
    if (bad && e.status == 499) return MHD_NO; /* the client left while its media decoded: close */
    if (bad) return reply_serve_error(sv, c, d, &e);
    if (j->head.req.kind == SERVE_LOAD) { /* nothing to generate: the model is loaded */
        serve_job_load(j);
        enum MHD_Result q = reply(sv, c, (unsigned)j->status, "application/json", j->out.p ? j->out.p : "", j->out.len);
        serve_job_unref(j);
        return q;
    }
    /* counted before looking at draining (both seq_cst): drain() either sees this job or it
     * is refused here */
    atomic_fetch_add(&sv->in_flight, 1);
    int rc = atomic_load(&sv->draining) ? SERVE_ESTOPPED : serve_sched_submit(sv->sched, j);
    if (rc) {
        int32_t n = j->head.req.n;
        serve_job_unref(j);
        atomic_fetch_sub(&sv->in_flight, 1);
        if (rc == SERVE_ESLOTS) {
            serve_error_set(&e, 400, SERVE_ERR_REQUEST, "n", "invalid_value",
                            "%d choices asked, but the server has %d slots (--parallel): at most that many", n,
                            sv->o.parallel);
            return reply_serve_error(sv, c, d, &e);
        }
        return rc == SERVE_EFULL ? reply_error(sv, c, d, 429, SERVE_ERR_BUSY, "queue_full",
                                               "every slot is busy and the queue is full; retry later")
                                 : reply_error(sv, c, d, 503, SERVE_ERR_SERVER, "shutting_down", "the server is shutting down");
    }
    if (j->head.req.stream) return reply_streamed(sv, c, d, j, pe);
    return reply_whole(sv, c, d, j, pe);
}

/* A dialect's token count of a request (Anthropic's count_tokens): parsed, rendered,
 * tokenized, counted. */
static enum MHD_Result handle_count(serve_server *sv, struct MHD_Connection *c, serve_conn *cn, const serve_dialect *d) {
    serve_error e;
    int32_t n = 0;
    size_t took = 0; /* the parse, the prompt and its ids, as for a generation */
    int rc = budget_parse(sv, cn, 6, &took, &e) || serve_prepare_count(&sv->prep, d, cn->body ? cn->body : "", cn->len, &n, &e);
    budget_give(sv, cn, took);
    if (rc) return reply_serve_error(sv, c, d, &e);
    return reply_json(sv, c, 200, d->count(n));
}

/* An endpoint of a dialect that generates nothing: the route's function answers about the
 * model. */
static enum MHD_Result handle_info(serve_server *sv, struct MHD_Connection *c, serve_conn *cn, const serve_dialect *d,
                                   serve_info_fn fn) {
    serve_error e = {0};
    serve_stats st;
    serve_sched_stats(sv->sched, &st);
    serve_info info = sv->info;
    info.busy = st.busy;
    size_t took = 0; /* a body's parse (POST /api/show, /api/embed) */
    if (cn->len && budget_parse(sv, cn, 2, &took, &e)) return reply_serve_error(sv, c, d, &e);
    char *body = fn(&info, cn->body ? cn->body : "", cn->len, &e);
    budget_give(sv, cn, took);
    if (!body && e.status) return reply_serve_error(sv, c, d, &e);
    return reply_json(sv, c, 200, body);
}

/* ---- the other endpoints ------------------------------------------------------------------- */

/* POST /tokenize: {"content"} -> {"tokens"}. The reply is written as it is (at most 12 bytes
 * an id), not built as a tree of a node per id. */
static enum MHD_Result handle_tokenize(serve_server *sv, struct MHD_Connection *c, serve_conn *cn) {
    serve_error e;
    char *content = NULL;
    int32_t special = 0, *ids = NULL, n = 0;
    size_t took = 0; /* the content's copy, its ids, the reply */
    if (budget_parse(sv, cn, 1 + 4 + 12, &took, &e) ||
        serve_tokenize_parse(cn->body ? cn->body : "", cn->len, &content, &special, &e) ||
        serve_tokenize_text(sv->tok, content, &ids, &n, &e)) {
        free(content);
        budget_give(sv, cn, took);
        return reply_serve_error(sv, c, NULL, &e);
    }
    free(content);
    char *out = serve_tokenize_reply(ids, n, special ? sv->prep.bos : -1);
    free(ids);
    enum MHD_Result q = reply_json(sv, c, 200, out);
    budget_give(sv, cn, took);
    return q;
}

/* POST /detokenize: {"tokens"} -> {"content"}. The text's share of the budget (its copy and
 * its JSON escaped, up to 6 bytes a byte) is taken once its length is known. */
static enum MHD_Result handle_detokenize(serve_server *sv, struct MHD_Connection *c, serve_conn *cn) {
    serve_error e;
    int32_t *ids = NULL, n = 0;
    size_t took = 0, took_text = 0; /* the parse and the ids; then the text */
    if (budget_parse(sv, cn, 1, &took, &e) ||
        serve_detokenize_parse(cn->body ? cn->body : "", cn->len, plume_tokenizer_n_vocab(sv->tok), &ids, &n, &e)) {
        budget_give(sv, cn, took);
        return reply_serve_error(sv, c, NULL, &e);
    }
    int64_t need = plume_detokenize(sv->tok, ids, n, 0, NULL, 0);
    char *text = NULL;
    if (need >= 0 && (uint64_t)need > (sv->o.max_request_memory >> 3)) {
        serve_error_set(&e, 413, SERVE_ERR_REQUEST, "tokens", "request_too_large",
                        "the text of these tokens is %lld bytes, more than the server allows (--max-request-memory)",
                        (long long)need);
    } else if (need >= 0 && budget_take(sv, cn, (took_text = 8 * (size_t)need))) {
        took_text = 0;
        serve_error_set(&e, 429, SERVE_ERR_BUSY, NULL, "server_busy", "the server is busy with other large requests; retry later");
    } else if (need >= 0 && (text = malloc((size_t)need + 1))) {
        plume_detokenize(sv->tok, ids, n, 0, text, (size_t)need + 1);
    } else {
        serve_error_set(&e, 500, SERVE_ERR_SERVER, NULL, NULL, "cannot detokenize");
    }
    free(ids);
    budget_give(sv, cn, took);
    if (!text) {
        budget_give(sv, cn, took_text);
        return reply_serve_error(sv, c, NULL, &e);
    }
    char *s = serve_detokenize_reply(text);
    free(text);
    enum MHD_Result q = reply_json(sv, c, 200, s);
    budget_give(sv, cn, took_text);
    return q;
}

/* GET /v1/models, GET /v1/models/NAME (one not NULL): OpenAI's bodies (serve_openai.c). */
static enum MHD_Result handle_models(serve_server *sv, struct MHD_Connection *c, const char *one) {
    return reply_json(sv, c, 200, serve_openai_models(&sv->info, one));
}

/* GET /metrics: Prometheus text. */
static enum MHD_Result handle_metrics(serve_server *sv, struct MHD_Connection *c) {
    serve_stats st;
    serve_sched_stats(sv->sched, &st);
    char buf[8192];
    int n = snprintf(buf, sizeof buf,
        "# HELP plume_http_requests_total HTTP requests received.\n# TYPE plume_http_requests_total counter\n"
        "plume_http_requests_total %lld\n"
        "# HELP plume_http_responses_total HTTP responses by status class.\n# TYPE plume_http_responses_total counter\n"
        "plume_http_responses_total{code=\"2xx\"} %lld\nplume_http_responses_total{code=\"4xx\"} %lld\n"
        "plume_http_responses_total{code=\"5xx\"} %lld\n"
        "# HELP plume_requests_total Generation requests accepted by the scheduler.\n# TYPE plume_requests_total counter\n"
        "plume_requests_total %lld\n"
        "# HELP plume_prompt_tokens_total Prompt tokens computed (prefilled).\n# TYPE plume_prompt_tokens_total counter\n"
        "plume_prompt_tokens_total %lld\n"
        "# HELP plume_prompt_tokens_cached_total Prompt tokens reused from a slot's cache.\n"
        "# TYPE plume_prompt_tokens_cached_total counter\nplume_prompt_tokens_cached_total %lld\n"
        "# HELP plume_generated_tokens_total Tokens generated.\n# TYPE plume_generated_tokens_total counter\n"
        "plume_generated_tokens_total %lld\n"
        "# HELP plume_decode_tokens_per_second Generated tokens per second of decoding steps.\n"
        "# TYPE plume_decode_tokens_per_second gauge\nplume_decode_tokens_per_second %.3f\n"
        "# HELP plume_batch_steps_total Batched forward steps run.\n# TYPE plume_batch_steps_total counter\n"
        "plume_batch_steps_total %lld\n"
        "# HELP plume_queue_length Requests waiting for a slot.\n# TYPE plume_queue_length gauge\n"
        "plume_queue_length %d\n"
        "# HELP plume_slots_busy Slots serving a request.\n# TYPE plume_slots_busy gauge\nplume_slots_busy %d\n"
        "# HELP plume_slots_total Slots (--parallel).\n# TYPE plume_slots_total gauge\nplume_slots_total %d\n"
        "# HELP plume_draft_mtp Whether the MTP drafter drafts (1), or prompt lookup (0).\n"
        "# TYPE plume_draft_mtp gauge\nplume_draft_mtp %d\n"
        "# HELP plume_draft_tokens_total Tokens guessed by speculative decoding (--draft).\n"
        "# TYPE plume_draft_tokens_total counter\nplume_draft_tokens_total %lld\n"
        "# HELP plume_draft_accepted_total Guessed tokens the model agreed with.\n"
        "# TYPE plume_draft_accepted_total counter\nplume_draft_accepted_total %lld\n"
        "# HELP plume_draft_lookup_tokens_total Of the tokens guessed, those prompt lookup guessed.\n"
        "# TYPE plume_draft_lookup_tokens_total counter\nplume_draft_lookup_tokens_total %lld\n"
        "# HELP plume_draft_lookup_accepted_total Of the guesses accepted, prompt lookup's.\n"
        "# TYPE plume_draft_lookup_accepted_total counter\nplume_draft_lookup_accepted_total %lld\n"
        "# HELP plume_http_connections Connections the HTTP daemon holds (this one included).\n"
        "# TYPE plume_http_connections gauge\nplume_http_connections %d\n"
        "# HELP plume_request_memory_bytes Bytes of --max-request-memory held by requests in flight.\n"
        "# TYPE plume_request_memory_bytes gauge\nplume_request_memory_bytes %zu\n"
        "# HELP plume_media_encoding Requests whose images and audio the encoder thread has (encoding or queued).\n"
        "# TYPE plume_media_encoding gauge\nplume_media_encoding %d\n"
        "# HELP plume_media_encodes_total Images and audio clips encoded by the towers.\n"
        "# TYPE plume_media_encodes_total counter\nplume_media_encodes_total %lld\n"
        "# HELP plume_media_encode_seconds_total Time the encoder thread spent in the towers.\n"
        "# TYPE plume_media_encode_seconds_total counter\nplume_media_encode_seconds_total %.3f\n"
        "# HELP plume_media_encode_threads Threads of the media encoder (--encode-threads; 0: no towers).\n"
        "# TYPE plume_media_encode_threads gauge\nplume_media_encode_threads %d\n"
        "# HELP plume_media_abandoned_total Media work stopped because the client left, by stage.\n"
        "# TYPE plume_media_abandoned_total counter\nplume_media_abandoned_total{stage=\"decode\"} %lld\n"
        "plume_media_abandoned_total{stage=\"encode\"} %lld\n",
        (long long)atomic_load(&sv->http_requests), (long long)atomic_load(&sv->http_status[2]),
        (long long)atomic_load(&sv->http_status[4]), (long long)atomic_load(&sv->http_status[5]), (long long)st.requests,
        (long long)st.prompt_tokens, (long long)st.cached_tokens, (long long)st.generated_tokens,
        st.decode_seconds > 0 ? (double)st.generated_tokens / st.decode_seconds : 0.0, (long long)st.steps, st.queued,
        st.busy, st.n_slots, sv->drafter != NULL, (long long)st.drafted, (long long)st.accepted,
        (long long)st.lookup_drafted, (long long)st.lookup_accepted, (int)atomic_load(&sv->conns),
        (size_t)atomic_load(&sv->mem_used), st.encoding, (long long)st.encodes, st.encode_seconds, st.encode_threads,
        (long long)atomic_load(&sv->media_abandoned), (long long)st.encodes_abandoned);
    return reply(sv, c, 200, "text/plain; version=0.0.4", buf, n > 0 && (size_t)n < sizeof buf ? (size_t)n : 0);
}

/* ---- routing ------------------------------------------------------------------------------ */

typedef enum {
    R_NONE, R_PAGE, R_HEALTH, R_MODELS, R_MODEL, R_METRICS, R_GENERATE, R_TOKENIZE, R_DETOKENIZE, R_COUNT, R_INFO,
    R_MISSING, /* no endpoint: a path under this prefix is a 404 in the row's dialect and words */
} route_kind;

/* One route: a path, the method it takes (HEAD goes with GET), what answers it and, for a
 * dialect's endpoint, the dialect its bodies and errors are written in and, for one that
 * generates nothing, the function that answers it. An R_MISSING row's path is a prefix: the
 * paths under it that no route takes get a 404 in its dialect, saying `missing`. */
typedef struct {
    const char *path;
    route_kind kind;
    int post;
    const serve_dialect *dialect;
    serve_info_fn info;
    const char *missing;
} route;

static const route routes[] = {
    {"/", R_PAGE, 0, NULL, NULL, NULL},
    {"/health", R_HEALTH, 0, NULL, NULL, NULL},
    {"/v1/health", R_HEALTH, 0, NULL, NULL, NULL},
    {"/v1/models", R_MODELS, 0, NULL, NULL, NULL},
    {"/models", R_MODELS, 0, NULL, NULL, NULL},
    {"/v1/models/", R_MODEL, 0, NULL, NULL, NULL}, /* a path ending in '/': NAME follows (no '/' in it) */
    {"/models/", R_MODEL, 0, NULL, NULL, NULL},
    {"/metrics", R_METRICS, 0, NULL, NULL, NULL},
    {"/v1/chat/completions", R_GENERATE, 1, &serve_openai_chat, NULL, NULL},
    {"/chat/completions", R_GENERATE, 1, &serve_openai_chat, NULL, NULL},
    {"/v1/completions", R_GENERATE, 1, &serve_openai_completion, NULL, NULL},
    {"/completions", R_GENERATE, 1, &serve_openai_completion, NULL, NULL},
    {"/v1/responses", R_GENERATE, 1, &serve_responses, NULL, NULL},
    {"/responses", R_GENERATE, 1, &serve_responses, NULL, NULL},
    {"/v1/messages", R_GENERATE, 1, &serve_anthropic, NULL, NULL},
    {"/v1/messages/count_tokens", R_COUNT, 1, &serve_anthropic_count, NULL, NULL},
    {"/api/chat", R_GENERATE, 1, &serve_ollama_chat, NULL, NULL},
    {"/api/generate", R_GENERATE, 1, &serve_ollama_generate, NULL, NULL},
    {"/api/version", R_INFO, 0, &serve_ollama_chat, serve_ollama_version, NULL},
    {"/api/tags", R_INFO, 0, &serve_ollama_chat, serve_ollama_tags, NULL},
    {"/api/ps", R_INFO, 0, &serve_ollama_chat, serve_ollama_ps, NULL},
    {"/api/show", R_INFO, 1, &serve_ollama_chat, serve_ollama_show, NULL},
    {"/api/embed", R_INFO, 1, &serve_ollama_chat, serve_ollama_embed, NULL},
    {"/api/embeddings", R_INFO, 1, &serve_ollama_chat, serve_ollama_embed, NULL},
    {"/v1/audio/transcriptions", R_GENERATE, 1, &serve_transcription, NULL, NULL},
    {"/audio/transcriptions", R_GENERATE, 1, &serve_transcription, NULL, NULL},
    {"/tokenize", R_TOKENIZE, 1, NULL, NULL, NULL},
    {"/detokenize", R_DETOKENIZE, 1, NULL, NULL, NULL},
    {"/api/", R_MISSING, 0, &serve_ollama_chat, NULL, /* Ollama's clients read its words */
     "no such endpoint: plume serves its one model and manages no models through the API (no pull, create, copy, "
     "push or delete: see docs/SERVER.md)"},
    {"/v1/messages", R_MISSING, 0, &serve_anthropic, NULL, "no such endpoint (see docs/SERVER.md)"},
    {"", R_MISSING, 0, &serve_openai_chat, NULL, "no such endpoint (see docs/SERVER.md)"}, /* the rest */
};

/* The route of a path, or NULL: the path itself, else a route (other than "/") ending in '/'
 * and one more non-empty component. R_MISSING rows are no routes. */
static const route *route_of(const char *url) {
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
        if (routes[i].kind != R_MISSING && !strcmp(url, routes[i].path)) return &routes[i];
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        size_t k = strlen(routes[i].path);
        if (routes[i].kind != R_MISSING && k > 1 && routes[i].path[k - 1] == '/' && !strncmp(url, routes[i].path, k) &&
            url[k] && !strchr(url + k, '/'))
            return &routes[i];
    }
    return NULL;
}

/* The R_MISSING row of a path no route takes: the first whose prefix starts it (the last row's
 * "" starts every path). */
static const route *missing_of(const char *url) {
    size_t i = 0;
    while (routes[i].kind != R_MISSING || strncmp(url, routes[i].path, strlen(routes[i].path))) i++;
    return &routes[i];
}

/* Whether s equals key, in constant time in key's length. */
static int same_key(const char *s, const char *key) {
    size_t lg = strlen(s), lk = strlen(key);
    unsigned diff = lg != lk;
    for (size_t i = 0; i < lk; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < lg ? s[i] : 0);
    return diff == 0;
}

/* Whether the request carries the API key (or none is required): "Authorization: Bearer KEY"
 * (the scheme in any case, "bearer" too, RFC 9110 section 11.1, then one or more spaces), or
 * Anthropic's "x-api-key: KEY". */
static int authorized(const serve_server *sv, struct MHD_Connection *c) {
    if (!sv->o.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    const char *given = h && !strncasecmp(h, "Bearer ", 7) ? h + 7 : NULL;
    while (given && *given == ' ') given++;
    return (given && same_key(given, sv->o.api_key)) || (x && same_key(x, sv->o.api_key));
}

/* Whether a GET / comes from a browser (it accepts HTML): the page; other clients (Ollama's
 * probe) get the banner. */
static int wants_html(struct MHD_Connection *c) {
    const char *accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    return accept && strstr(accept, "text/html");
}

/* A CORS preflight (OPTIONS from an allowed origin): the methods and the headers asked for. */
static enum MHD_Result preflight(serve_server *sv, struct MHD_Connection *c, const route *r) {
    if (!cors_origin(sv, c))
        return reply_error(sv, c, NULL, 403, SERVE_ERR_REQUEST, "cors_origin",
                           "this origin may not call the server (see --cors)");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    const char *asked = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    cors_headers(sv, c, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", r->post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            asked && *asked ? asked : "Authorization, Content-Type, x-api-key");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    enum MHD_Result q = MHD_queue_response(c, 204, resp);
    MHD_destroy_response(resp);
    atomic_fetch_add(&sv->http_status[2], 1);
    return q;
}

/* Answer a complete request. */
static enum MHD_Result dispatch(serve_server *sv, struct MHD_Connection *c, const char *url, const char *method,
                                serve_conn *cn) {
    const route *r = route_of(url);
    if (!r) {
        const route *m = missing_of(url);
        return reply_error(sv, c, m->dialect, 404, SERVE_ERR_REQUEST, "not_found", m->missing);
    }
    const serve_dialect *d = r->dialect;
    if (!strcmp(method, "OPTIONS") && sv->o.cors) return preflight(sv, c, r);
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if ((r->post && strcmp(method, "POST")) || (!r->post && !is_get)) {
        /* the route's own, in the Allow header (and OPTIONS where --cors answers preflights) */
        allow_methods = r->post ? (sv->o.cors ? "POST, OPTIONS" : "POST") : (sv->o.cors ? "GET, HEAD, OPTIONS" : "GET, HEAD");
        enum MHD_Result q = reply_error(sv, c, d, 405, SERVE_ERR_REQUEST, "method_not_allowed",
                                        r->post ? "this endpoint takes POST" : "this endpoint takes GET");
        allow_methods = NULL;
        return q;
    }
    if (r->kind != R_PAGE && r->kind != R_HEALTH && !authorized(sv, c))
        return reply_error(sv, c, d, 401, SERVE_ERR_REQUEST, "invalid_api_key",
                           "missing or wrong API key: send 'Authorization: Bearer KEY' (or 'x-api-key: KEY')");
    if (cn->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", sv->o.max_body);
        return reply_error(sv, c, d, 413, SERVE_ERR_REQUEST, "request_too_large", msg);
    }
    if (cn->busy)
        return reply_error(sv, c, d, 429, SERVE_ERR_BUSY, "server_busy",
                           "the server is busy with other large requests; retry later");
    switch (r->kind) {
    case R_PAGE:
        return wants_html(c) ? reply(sv, c, 200, "text/html; charset=utf-8", plume_webui_html, plume_webui_html_len)
                             : reply(sv, c, 200, "text/plain; charset=utf-8", serve_ollama_banner, strlen(serve_ollama_banner));
    case R_HEALTH:
        if (atomic_load(&sv->draining) && !atomic_load(&sv->stopping))
            return reply(sv, c, 503, "application/json", "{\"status\":\"draining\"}", 21);
        return atomic_load(&sv->stopping) ? reply_error(sv, c, NULL, 503, SERVE_ERR_SERVER, "shutting_down", "shutting down")
                                          : reply(sv, c, 200, "application/json", "{\"status\":\"ok\"}", 15);
    case R_MODELS: return handle_models(sv, c, NULL);
    case R_MODEL: return handle_models(sv, c, url + strlen(r->path));
    case R_METRICS: return handle_metrics(sv, c);
    case R_GENERATE: return handle_generate(sv, c, cn, d);
    case R_COUNT: return handle_count(sv, c, cn, d);
    case R_INFO: return handle_info(sv, c, cn, d, r->info);
    case R_TOKENIZE: return handle_tokenize(sv, c, cn);
    case R_DETOKENIZE: return handle_detokenize(sv, c, cn);
    default: return MHD_NO;
    }
}

/* ---- libmicrohttpd's own errors, in JSON ------------------------------------------------------
 * The door refuses the heads libmicrohttpd would refuse with its own HTML page; what is left
 * is the body: a malformed chunked encoding (400), a chunk too large (413). libmicrohttpd
 * offers no hook for those pages, but tells its logger first, in the connection's own thread
 * (one thread per connection): there the route's JSON error is written on the socket and its
 * sending side shut, so that the HTML that follows goes nowhere. */

/* The connection this thread serves: set when its head reaches on_request. */
static _Thread_local struct {
    serve_server *sv;
    int fd;
    const serve_dialect *d;
} mhd_conn;

/* This thread serves connection c, a request for url. */
static void mhd_conn_enter(serve_server *sv, struct MHD_Connection *c, const char *url) {
    const route *r = route_of(url);
    mhd_conn.sv = sv;
    mhd_conn.fd = conn_fd(c);
    mhd_conn.d = r ? r->dialect : NULL;
}

/* The request of this thread is over. */
static void mhd_conn_leave(void) { memset(&mhd_conn, 0, sizeof mhd_conn); }

/* libmicrohttpd's logger: its error replies become the route's JSON error; the rest of what
 * it says is dropped, as before there was a logger. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    static const char prefix[] = "Error processing request (HTTP response code is %u";
    if (strncmp(fmt, prefix, sizeof prefix - 1) || !mhd_conn.sv || mhd_conn.fd < 0) return;
    unsigned status = va_arg(ap, unsigned);
    serve_error e;
    serve_error_set(&e, (int32_t)status, SERVE_ERR_REQUEST, NULL, status == 413 ? "request_too_large" : "bad_request",
                    "%s", status == 413 ? "a chunk of the request body is too large"
                          : status == 400 ? "the request body is malformed (chunked encoding)"
                                          : "the request could not be read");
    char *body = (mhd_conn.d ? mhd_conn.d : &serve_openai_chat)->error(&e);
    char *msg = plume_sprintf("HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                              "Connection: close\r\n\r\n%s",
                              status, status == 413 ? "Content Too Large" : status == 400 ? "Bad Request" : "Error",
                              body ? strlen(body) : 2, body ? body : "{}");
    if (msg && send(mhd_conn.fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT) > 0) {
        shutdown(mhd_conn.fd, SHUT_WR);
        if (status / 100 < 6) atomic_fetch_add(&mhd_conn.sv->http_status[status / 100], 1);
    }
    free(msg);
    free(body);
}

/* libmicrohttpd's access handler: called once with the headers, then per piece of the body,
 * then once more with nothing left (where the request is answered). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    serve_server *sv = cls;
    serve_conn *cn = *con_cls;
    if (!cn) {
        if (!(cn = calloc(1, sizeof *cn))) return MHD_NO;
        *con_cls = cn;
        atomic_fetch_add(&sv->http_requests, 1);
        cn->http11 = !strcmp(version, MHD_HTTP_VERSION_1_1);
        cn->t_head = plume_now();
        mhd_conn_enter(sv, c, url);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long declared = cl ? strtoull(cl, NULL, 10) : 0;
        if (declared > sv->o.max_body) { /* refuse before reading it */
            cn->too_large = 1;
            return dispatch(sv, c, url, method, cn);
        }
        if (declared && budget_take(sv, cn, (size_t)declared)) { /* a body that does not fit now: 429, unread */
            cn->busy = 1;
            return dispatch(sv, c, url, method, cn);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (plume_now() - cn->t_head > sv->o.timeout) return MHD_NO; /* a body trickling in: close */
        if (cn->too_large || cn->busy || cn->len + n > sv->o.max_body) {
            cn->too_large |= !cn->busy;
            return MHD_YES;
        }
        if (cn->len + n > cn->reserved && budget_take(sv, cn, cn->len + n - cn->reserved)) { /* chunked: as it grows */
            cn->busy = 1;
            return MHD_YES;
        }
        if (cn->len + n + 1 > cn->cap) {
            size_t cap = cn->cap ? cn->cap : 4096;
            while (cap < cn->len + n + 1) cap *= 2;
            char *nb = realloc(cn->body, cap);
            if (!nb) return MHD_NO;
            cn->body = nb;
            cn->cap = cap;
        }
        memcpy(cn->body + cn->len, upload, n);
        cn->len += n;
        cn->body[cn->len] = 0;
        return MHD_YES;
    }
    return dispatch(sv, c, url, method, cn);
}

/* A request is over (answered, or the connection dropped): free its state. */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    (void)toe;
    serve_conn *cn = *con_cls;
    mhd_conn_leave();
    if (!cn) return;
    budget_give(cls, cn, SIZE_MAX);
    free(cn->body);
    free(cn);
    *con_cls = NULL;
}

/* ---- the server ------------------------------------------------------------------------------ */

/* The defaults of plume serve's settings (docs/SERVER.md). */
serve_config serve_config_default(void) {
    return (serve_config){.host = "127.0.0.1", .port = 8080, .parallel = 4, .draft = plume_spec_default_params().draft_max,
                          .queue = 64, .timeout = 60, .drain = 30, .max_body = 8u << 20,
                          .max_request_memory = (size_t)512 << 20};
}

/* ---- admission: the door hands connections over --------------------------------------------- */

#define SERVE_LIGHT_RESERVE 16   /* connections kept beyond the limit for /health, /metrics, ... */
#define SERVE_ADDR_SHORT 16      /* connections of one address beyond its slots and queue places */
#define SERVE_DOOR_PER_ADDR 32   /* heads awaited from one client address */
#define SERVE_DOOR_PENDING 512   /* heads awaited in all */

/* Connections the daemon serves at once, light requests aside: every slot and queue place,
 * and 64 for the short requests (/tokenize, refusals) beside them. */
static unsigned conn_limit(const serve_server *sv) { return (unsigned)(sv->o.parallel + sv->o.queue + 64); }

/* Connections one client address may hold in the daemon: every slot and queue place and
 * SERVE_ADDR_SHORT short requests beside them. conn_limit has 64 beyond the slots and queue,
 * so one client (slow bodies, a flood) always leaves the others 64 - SERVE_ADDR_SHORT. */
static int32_t addr_limit(const serve_server *sv) { return sv->o.parallel + sv->o.queue + SERVE_ADDR_SHORT; }

/* The key of a client address: its family and IP (a port is not a client). */
static void addr_key(const struct sockaddr *a, uint8_t key[17]) {
    memset(key, 0, 17);
    if (!a) return;
    key[0] = (uint8_t)a->sa_family;
    if (a->sa_family == AF_INET) memcpy(key + 1, &((const struct sockaddr_in *)a)->sin_addr, 4);
    else if (a->sa_family == AF_INET6) memcpy(key + 1, &((const struct sockaddr_in6 *)a)->sin6_addr, 16);
}

/* Count a connection of address a in (delta 1) or out (-1); with delta 1 and limit > 0, take
 * nothing and return -1 when a holds limit already. */
static int addr_count(serve_server *sv, const struct sockaddr *a, int32_t delta, int32_t limit) {
    uint8_t key[17];
    addr_key(a, key);
    int rc = 0;
    pthread_mutex_lock(&sv->addr_mu);
    int32_t i = 0;
    while (i < sv->n_addrs && memcmp(sv->addrs[i].key, key, 17)) i++;
    if (i == sv->n_addrs && delta > 0) {
        if (plume_grow(&sv->addrs, &sv->cap_addrs, i + 1, sizeof *sv->addrs) == 0) {
            memcpy(sv->addrs[i].key, key, 17);
            sv->addrs[i].n = 0;
            sv->n_addrs++;
        }
    }
    if (i < sv->n_addrs) {
        if (delta > 0 && limit > 0 && sv->addrs[i].n >= limit) rc = -1;
        else if ((sv->addrs[i].n += delta) <= 0) sv->addrs[i] = sv->addrs[--sv->n_addrs];
    }
    pthread_mutex_unlock(&sv->addr_mu);
    return rc;
}

/* The door's admit: a whole head came; the daemon takes the connection unless it serves
 * conn_limit already (a GET of a page that answers at once, /health or /metrics, still gets
 * one of the reserve: a probe is answered while every generation connection is busy) or the
 * client's address holds addr_limit of them (a 429: the others keep their places). */
static int door_admit(void *ctx, int fd, const struct sockaddr *addr, socklen_t alen, const serve_head *h, serve_error *e) {
    serve_server *sv = ctx;
    const route *r = route_of(h->path);
    int light = r && !r->post && (!strcmp(h->method, "GET") || !strcmp(h->method, "HEAD"));
    if ((unsigned)atomic_load(&sv->conns) >= conn_limit(sv) + (light ? SERVE_LIGHT_RESERVE : 0))
        return serve_error_set(e, 503, SERVE_ERR_SERVER, NULL, "too_many_connections",
                               "every connection of the server is taken; retry later");
    if (addr_count(sv, addr, 1, light ? 0 : addr_limit(sv)))
        return serve_error_set(e, 429, SERVE_ERR_BUSY, NULL, "too_many_connections",
                               "this client address holds %d connections, the most the server gives one; retry later",
                               addr_limit(sv));
    /* counted here, not when the daemon's thread gets to it (it takes them in asynchronously:
     * a burst would pass the limit), and uncounted when it closes (on_connection) */
    atomic_fetch_add(&sv->conns, 1);
    if (MHD_add_connection(sv->d, fd, addr, alen) != MHD_YES) { /* it closed the socket */
        atomic_fetch_sub(&sv->conns, 1);
        addr_count(sv, addr, -1, 0);
    }
    return 0;
}

/* libmicrohttpd's connection notices: a connection it served is closed. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    (void)socket_context;
    serve_server *sv = cls;
    if (toe != MHD_CONNECTION_NOTIFY_CLOSED) return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    addr_count(sv, ci ? ci->client_addr : NULL, -1, 0);
    atomic_fetch_sub(&sv->conns, 1);
}

/* The door's error bodies: in the dialect of the path's route (OpenAI's for others). */
static char *door_error_body(void *ctx, const char *path, const serve_error *e) {
    (void)ctx;
    const route *r = route_of(path);
    return (r && r->dialect ? r->dialect : &serve_openai_chat)->error(e);
}

/* The door answered a connection (status) or dropped it (0): counted for /metrics. */
static void door_refused(void *ctx, int32_t status) {
    serve_server *sv = ctx;
    if (!status) return;
    atomic_fetch_add(&sv->http_requests, 1);
    if (status / 100 < 6) atomic_fetch_add(&sv->http_status[status / 100], 1);
}

/* A socket bound to the host and port and listening; -1 with a message printed. */
static int listen_on(const serve_config *o, int *port) {
    struct sockaddr_storage ss;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    if (inet_pton(AF_INET, o->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)o->port);
        len = sizeof *a4;
    } else if (inet_pton(AF_INET6, o->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)o->port);
        len = sizeof *a6;
    } else {
        fprintf(stderr, "plume: serve: --host wants a numeric IPv4 or IPv6 address, got '%s'\n", o->host);
        return -1;
    }
    int one = 1, fd = socket(ss.ss_family, SOCK_STREAM, 0);
    if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 || bind(fd, (struct sockaddr *)&ss, len) != 0 ||
        listen(fd, SOMAXCONN) != 0 || getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        fprintf(stderr, "plume: serve: cannot listen on %s port %d: %s\n", o->host, o->port, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    *port = ntohs(ss.ss_family == AF_INET ? a4->sin_port : a6->sin6_port);
    return fd;
}

/* Listen, start libmicrohttpd (no socket of its own: connections come from the door) and the
 * door; prints the address. 0 or 1. */
static int start_http(serve_server *sv) {
    int port = 0, lfd = listen_on(&sv->o, &port);
    if (lfd < 0) return 1;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ERROR_LOG;
    sv->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, sv,
                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)sv->o.timeout,
                             MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(4 * SERVE_HEAD_MAX),
                             MHD_OPTION_CONNECTION_LIMIT, conn_limit(sv) + SERVE_LIGHT_RESERVE,
                             MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv,
                             MHD_OPTION_NOTIFY_CONNECTION, on_connection, sv,
                             MHD_OPTION_EXTERNAL_LOGGER, mhd_log, sv,
                             MHD_OPTION_END);
    serve_door_params dp = {.ctx = sv, .admit = door_admit, .error_body = door_error_body, .refused = door_refused,
                            .head_timeout = sv->o.timeout, .per_addr = SERVE_DOOR_PER_ADDR, .pending_max = SERVE_DOOR_PENDING};
    char *err = NULL;
    if (!sv->d || serve_door_start(&sv->door, lfd, &dp, &err)) {
        fprintf(stderr, "plume: serve: %s\n", err ? err : "cannot start the HTTP daemon");
        free(err);
        close(lfd);
        return 1;
    }
    int v6 = strchr(sv->o.host, ':') != NULL;
    fprintf(stderr, "plume serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", sv->o.host, v6 ? "]" : "", port);
    fflush(stderr);
    return 0;
}

/* Print a library error (freed) as the CLI does; return 1. */
static int fail_lib(char *err) {
    fprintf(stderr, "plume: %s\n", err ? err : "unknown error");
    free(err);
    return 1;
}

/* Add the sizes of the regular files under dir (depth <= 3) to *bytes, their newest mtime
 * to *newest. */
static void dir_size(const char *dir, int depth, uint64_t *bytes, int64_t *newest) {
    DIR *d = depth <= 3 ? opendir(dir) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char *path = plume_sprintf("%s/%s", dir, de->d_name);
        struct stat st;
        if (path && !stat(path, &st)) {
            if (S_ISDIR(st.st_mode)) dir_size(path, depth + 1, bytes, newest);
            else if (S_ISREG(st.st_mode)) {
                *bytes += (uint64_t)st.st_size;
                if ((int64_t)st.st_mtime > *newest) *newest = (int64_t)st.st_mtime;
            }
        }
        free(path);
    }
    if (d) closedir(d);
}

/* What the dialects' model endpoints tell: the bundle's size, date and digest (of its
 * manifest.sha256, which names every file's hash; else of its name and size). */
static void info_init(serve_server *sv) {
    serve_info *i = &sv->info;
    i->model = sv->model_name;
    i->weights = plume_model_weights(sv->m);
    i->n_ctx = sv->n_ctx;
    i->n_vocab = plume_model_n_vocab(sv->m);
    i->n_layers = plume_model_n_layers(sv->m);
    i->vision = plume_model_has_vision(sv->m);
    i->video = i->vision && plume_model_media_token(sv->m, "video") >= 0;
    i->audio = plume_model_has_audio(sv->m);
    i->n_slots = sv->o.parallel;
    dir_size(sv->o.bundle, 0, &i->bytes, &i->modified);
    sha256_ctx h;
    sha256_init(&h);
    char *path = plume_sprintf("%s/manifest.sha256", sv->o.bundle), buf[4096];
    int fd = path ? plume_open_regular(path, NULL) : -1; /* a FIFO there must not hang the start */
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (fd >= 0 && !f) close(fd);
    size_t k;
    if (f) {
        while ((k = fread(buf, 1, sizeof buf, f)) > 0) sha256_update(&h, buf, k);
        fclose(f);
    } else {
        snprintf(buf, sizeof buf, "%s %llu", sv->model_name, (unsigned long long)i->bytes);
        sha256_update(&h, buf, strlen(buf));
    }
    free(path);
    sha256_final_hex(&h, i->digest);
}

/* Open the model and the scheduler. 0 or 1 (message printed). */
static int open_model(serve_server *sv) {
    const char *path = sv->o.bundle;
    char *err = NULL;
    plume_model_params mp = plume_model_default_params();
    mp.isa = sv->o.isa;
    mp.n_threads = sv->o.n_threads;
    mp.exact = sv->o.exact;
    if (plume_model_open(&sv->m, path, &mp, &err)) return fail_lib(err);
    if (!(sv->tok = plume_model_tokenizer(sv->m))) {
        fprintf(stderr, "plume: %s: the bundle has no tokenizer (hf_model/tokenizer.json)\n", path);
        return 1;
    }
    const char *base = strrchr(path, '/');
    while (base && !base[1] && base > path) { /* a trailing slash: the name before it */
        const char *p = base - 1;
        while (p > path && *p != '/') p--;
        base = p;
    }
    snprintf(sv->model_name, sizeof sv->model_name, "%s", base && base[1] ? base + 1 : path);
    char *slash = strchr(sv->model_name, '/');
    if (slash) *slash = 0;
    int32_t bundle_ctx = plume_model_n_ctx(sv->m);
    sv->n_ctx = sv->o.n_ctx ? sv->o.n_ctx : bundle_ctx < 8192 ? bundle_ctx : 8192;
    if (sv->o.drafter && sv->o.no_drafter) {
        fprintf(stderr, "plume: serve: --drafter and --no-drafter contradict each other\n");
        return 1;
    }
    if (sv->o.no_lookup && (sv->o.no_drafter || sv->o.draft == 0)) {
        fprintf(stderr, "plume: serve: --no-lookup with %s contradict each other\n",
                sv->o.no_drafter ? "--no-drafter" : "--draft 0 (no speculative decoding)");
        return 1;
    }
    if (sv->o.drafter && sv->o.draft == 0) {
        fprintf(stderr, "plume: serve: --drafter with --draft 0 (no speculative decoding) contradict each other\n");
        return 1;
    }
    /* the MTP drafter: --drafter, else the bundle's own (BUNDLE/drafter), unless turned off */
    char *dpath = sv->o.draft > 0 && !sv->o.no_drafter ? (sv->o.drafter ? strdup(sv->o.drafter) : plume_drafter_find(sv->m)) : NULL;
    int drc = dpath ? plume_drafter_open(&sv->drafter, sv->m, dpath, &err) : 0;
    free(dpath);
    if (drc) return fail_lib(err);
    if (sv->o.no_lookup && !sv->drafter) {
        fprintf(stderr, "plume: serve: --no-lookup: there is no drafter to draft alone (the bundle has none; --drafter DIR "
                        "names one)\n");
        return 1;
    }
    serve_sched_params sp = {.n_slots = sv->o.parallel, .n_ctx = sv->n_ctx, .kv_bits = sv->o.kv_bits,
                             .snapshot_every = sv->o.snapshot_every, .draft = sv->o.draft, .drafter = sv->drafter,
                             .no_lookup = sv->o.no_lookup,
                             .queue_max = sv->o.queue, .slot_dir = sv->o.slot_dir,
                             .encode_threads = sv->o.encode_threads};
    if (serve_sched_new(&sv->sched, sv->m, &sp, &err)) return fail_lib(err);
    serve_prep_init(&sv->prep, sv->m);
    sv->prep.n_ctx = sv->n_ctx;
    sv->prep.model = sv->model_name;
    sv->prep.media = (serve_media_opts){sv->o.allow_remote_media, sv->o.max_body, SERVE_FETCH_SECONDS, &sv->mem_used,
                                        sv->o.max_request_memory, &sv->media_abandoned};
    info_init(sv);
    return 0;
}

/* The first SIGINT/SIGTERM with --drain S: /health answers 503 "draining" (a balancer or
 * Kubernetes takes the replica out of rotation), a new generation request gets a 503 (a
 * balancer retries it elsewhere), and the running and queued ones finish and send their last
 * bytes; for up to S seconds, or until a second signal. */
static void drain(serve_server *sv, const sigset_t *stop, const char *name) {
    atomic_store(&sv->draining, 1);
    fprintf(stderr, "plume serve: %s, draining: running requests finish (up to %d s; send it again to stop now)\n", name,
            sv->o.drain);
    double end = plume_now() + sv->o.drain;
    struct timespec tick = {0, 20 * 1000000L};
    for (;;) {
        serve_stats st;
        serve_sched_stats(sv->sched, &st);
        int left = atomic_load(&sv->in_flight);
        if (st.queued + st.busy == 0 && left == 0) {
            fprintf(stderr, "plume serve: drained\n");
            return;
        }
        sigset_t pending;
        int sig = 0;
        if (!sigpending(&pending) && (sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1)) {
            sigwait(stop, &sig);
            fprintf(stderr, "plume serve: %s again, %d requests cut\n", sig == SIGINT ? "SIGINT" : "SIGTERM", left);
            return;
        }
        if (plume_now() >= end) {
            fprintf(stderr, "plume serve: drain timed out after %d s, %d requests cut\n", sv->o.drain, left);
            return;
        }
        nanosleep(&tick, NULL);
    }
}

/* Serve: open the model, listen, wait for SIGINT/SIGTERM, drain, shut down in order. */
int serve_run(const serve_config *c) {
    serve_server *sv = calloc(1, sizeof *sv);
    if (!sv) {
        fprintf(stderr, "plume: out of memory\n");
        return 1;
    }
    sv->o = *c;
    pthread_mutex_init(&sv->addr_mu, NULL);
    /* Signals go to this thread only (sigwait below); the threads made from here inherit the mask. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    int rc = open_model(sv);
    if (!rc) rc = start_http(sv);
    if (!rc) {
        serve_stats st;
        serve_sched_stats(sv->sched, &st);
        char towers[64] = "";
        if (st.encode_threads) snprintf(towers, sizeof towers, ", %d for the towers", st.encode_threads);
        char draft[64] = ", no drafting";
        if (sv->o.draft > 0)
            snprintf(draft, sizeof draft, ", draft %d (%s)", sv->o.draft,
                     !sv->drafter ? "prompt lookup" : sv->o.no_lookup ? "mtp drafter" : "mtp drafter and prompt lookup");
        fprintf(stderr, "plume serve: %s, %d slots of %d tokens, %s kernels, %d threads%s%s\n", sv->model_name,
                sv->o.parallel, sv->n_ctx, plume_model_isa(sv->m), plume_model_n_threads(sv->m), towers, draft);
        int sig = 0;
        sigwait(&stop, &sig);
        if (sv->o.drain > 0) drain(sv, &stop, sig == SIGINT ? "SIGINT" : "SIGTERM");
        fprintf(stderr, "plume serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        atomic_store(&sv->stopping, 1);
        serve_door_stop(sv->door); /* no new connections */
        sv->door = NULL;
        serve_sched_stop(sv->sched); /* running and queued requests end */
        struct timespec tick = {0, 50 * 1000000L};
        for (int i = 0; i < 40 && atomic_load(&sv->in_flight) > 0; i++) /* their last bytes go out */
            nanosleep(&tick, NULL);
        nanosleep(&tick, NULL);
        MHD_stop_daemon(sv->d);
    }
    serve_door_stop(sv->door); /* when the server did not start */
    if (rc && sv->d) MHD_stop_daemon(sv->d);
    if (serve_sched_free(sv->sched)) rc = 1; /* a slot of --slot-save was lost */
    plume_drafter_free(sv->drafter);
    plume_model_free(sv->m);
    pthread_mutex_destroy(&sv->addr_mu);
    free(sv->addrs);
    free(sv);
    return rc;
}
