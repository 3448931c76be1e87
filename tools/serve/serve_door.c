/* serve_door.c -- the front door of `plume serve` (serve.h): it owns the listening socket,
 * accepts each connection, holds it until its request head has arrived whole, checks the
 * head, and hands the connection to the HTTP daemon (serve_http.c) only then.
 *
 * Why a door before libmicrohttpd: the daemon gives a connection a thread and a slot as soon
 * as it is accepted, and its --timeout is an idle timeout, so a client that sends a header
 * line every few seconds (slowloris), or a hundred that send nothing, held every slot and
 * locked everyone out, /health included. Here a head costs one entry of a poll set, it has a
 * deadline for the whole of it (--timeout), one client address holds at most per_addr heads
 * (its oldest is dropped for a newer one) and all of them at most pending_max (the oldest
 * goes): a new client always gets in, and a client whose head has come is served at once. A
 * head the daemon would refuse with its own HTML page (a malformed request line, a version
 * other than HTTP/1.0 and 1.1, a missing Host, a bad Content-Length, a head past
 * SERVE_HEAD_MAX) is refused here in the route's JSON error instead.
 *
 * The door reads with MSG_PEEK: the bytes stay in the socket for the daemon to read. It runs
 * one thread and a poll set; it knows nothing of the daemon, the routes or JSON (the server
 * decides admission and spells errors through serve_door_params). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "serve.h"

#define DOOR_DRAIN_SECONDS 2.0 /* after an error reply, input is read and dropped this long */
#define DOOR_CLOSING_MAX 64    /* connections draining after an error reply */

/* A connection at the door: its head awaited, or an error answered and its input drained. */
typedef struct {
    int fd;
    struct sockaddr_storage addr;
    socklen_t alen;
    double t0;       /* accepted (or, closing: when the error was sent) */
    int closing;
} door_conn;

struct serve_door {
    serve_door_params p;
    int lfd;         /* the listening socket (ours) */
    int wake[2];     /* a pipe: a byte asks the thread to stop */
    pthread_t thread;
    door_conn *c;    /* [n] of cap */
    int32_t n, cap;
};

/* ---- the request head ------------------------------------------------------------------- */

/* Whether c may appear in an HTTP token (a method, a header name). */
static int is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* A head refused: the status, and e says why (in no dialect's words). */
static int head_bad(serve_error *e, int32_t status, const char *code, const char *msg) {
    return serve_error_set(e, status, status == 408 ? SERVE_ERR_TIMEOUT : SERVE_ERR_REQUEST, NULL, code, "%s", msg);
}

/* The end of the line starting at p (its '\n'), or NULL when it has not all arrived. */
static const char *line_end(const char *p, const char *end) { return memchr(p, '\n', (size_t)(end - p)); }

/* Check the request line [p, nl) and fill h's method, path and version; 0 or a status. */
static int request_line(const char *p, const char *nl, serve_head *h, serve_error *e) {
    const char *q = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
    const char *sp1 = memchr(p, ' ', (size_t)(q - p)), *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(q - sp1 - 1)) : NULL;
    if (!sp1 || !sp2 || sp1 == p || sp2 == sp1 + 1)
        return head_bad(e, 400, "bad_request", "malformed request line (want METHOD TARGET HTTP/1.1)");
    for (const char *m = p; m < sp1; m++)
        if (!is_tchar((unsigned char)*m)) return head_bad(e, 400, "bad_request", "malformed request line: bad method");
    size_t ml = (size_t)(sp1 - p), vl = (size_t)(q - sp2 - 1);
    const char *target = sp1 + 1, *ver = sp2 + 1;
    for (const char *t = target; t < sp2; t++)
        if ((unsigned char)*t <= 0x20 || *t == 0x7f)
            return head_bad(e, 400, "bad_request", "malformed request line: a control character in the target");
    if (vl != 8 || memcmp(ver, "HTTP/", 5) || ver[6] != '.' || ver[5] < '0' || ver[5] > '9' || ver[7] < '0' || ver[7] > '9')
        return head_bad(e, 400, "bad_request", "malformed request line: no HTTP version");
    if (ver[5] != '1' || (ver[7] != '0' && ver[7] != '1'))
        return head_bad(e, 505, "http_version_not_supported", "this server speaks HTTP/1.0 and HTTP/1.1");
    h->http11 = ver[7] == '1';
    if (ml >= sizeof h->method) return head_bad(e, 501, "not_implemented", "no such method");
    memcpy(h->method, p, ml);
    h->method[ml] = 0;
    /* origin form "/path?query", absolute form "http://host/path", or "*" (OPTIONS: no path) */
    const char *path = target, *pend = sp2;
    if (*target != '/' && sp2 - target == 1 && *target == '*') {
        pend = path;
    } else if (*target != '/') {
        const char *s = target;
        while (s + 3 <= sp2 && memcmp(s, "://", 3)) s++;
        if (s + 3 > sp2) return head_bad(e, 400, "bad_request", "malformed request line: the target is not a path");
        path = memchr(s + 3, '/', (size_t)(sp2 - s - 3));
        if (!path) path = "/", pend = path + 1;
    }
    const char *qm = memchr(path, '?', (size_t)(pend - path));
    if (qm) pend = qm;
    size_t pl = (size_t)(pend - path);
    h->path[0] = 0;
    if (pl < sizeof h->path) { /* a longer path is no route: "" */
        memcpy(h->path, path, pl);
        h->path[pl] = 0;
    }
    return 0;
}

/* A header's value [v, q) trimmed of spaces and tabs. */
static void trim(const char **v, const char **q) {
    while (*v < *q && (**v == ' ' || **v == '\t')) (*v)++;
    while (*q > *v && ((*q)[-1] == ' ' || (*q)[-1] == '\t')) (*q)--;
}

/* Check one header line [p, q) (no line end): a token name, a colon, a value; Host,
 * Content-Length and Transfer-Encoding remembered in the counters. 0 or a status. */
static int header_line(const char *p, const char *q, int *hosts, int64_t *clen, int *chunked, serve_error *e) {
    if (*p == ' ' || *p == '\t') return head_bad(e, 400, "bad_request", "folded header lines are not supported");
    const char *colon = memchr(p, ':', (size_t)(q - p));
    if (!colon || colon == p) return head_bad(e, 400, "bad_request", "a header line without a name and a colon");
    for (const char *c = p; c < colon; c++)
        if (!is_tchar((unsigned char)*c)) return head_bad(e, 400, "bad_request", "a header name with a bad character");
    for (const char *c = colon + 1; c < q; c++)
        if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
            return head_bad(e, 400, "bad_request", "a header value with a control character");
    size_t nl = (size_t)(colon - p);
    const char *v = colon + 1, *ve = q;
    trim(&v, &ve);
    if (nl == 4 && !strncasecmp(p, "host", 4)) (*hosts)++;
    else if (nl == 14 && !strncasecmp(p, "content-length", 14)) {
        int64_t x = 0;
        if (v == ve) return head_bad(e, 400, "bad_request", "an empty Content-Length");
        for (const char *d = v; d < ve; d++) {
            if (*d < '0' || *d > '9') return head_bad(e, 400, "bad_request", "a Content-Length that is not a number");
            if (x > (INT64_MAX - 9) / 10) return head_bad(e, 413, "request_too_large", "the Content-Length is too large");
            x = x * 10 + (*d - '0');
        }
        if (*clen >= 0 && *clen != x) return head_bad(e, 400, "bad_request", "two different Content-Length headers");
        *clen = x;
    } else if (nl == 17 && !strncasecmp(p, "transfer-encoding", 17)) {
        if (ve - v != 7 || strncasecmp(v, "chunked", 7))
            return head_bad(e, 501, "not_implemented", "only Transfer-Encoding: chunked is supported");
        *chunked = 1;
    }
    return 0;
}

int serve_head_parse(const char *buf, size_t n, serve_head *h, serve_error *e) {
    memset(h, 0, sizeof *h);
    const char *p = buf, *end = buf + n;
    for (int k = 0; k < 4 && p < end && (*p == '\r' || *p == '\n'); k++) p++; /* empty lines before it are allowed */
    const char *nl = line_end(p, end);
    if (!nl) { /* the request line so far: a method of token characters, then a space */
        for (const char *c = p; c < end && *c != ' '; c++)
            if (!is_tchar((unsigned char)*c) || c - p > 15) return head_bad(e, 400, "bad_request", "this is not an HTTP request");
        return n > SERVE_HEAD_MAX ? head_bad(e, 414, "uri_too_long", "the request line is too long") : 1;
    }
    int rc = request_line(p, nl, h, e);
    if (rc) return rc;
    int hosts = 0, chunked = 0;
    int64_t clen = -1;
    for (p = nl + 1;; p = nl + 1) {
        if (!(nl = line_end(p, end)))
            return n > SERVE_HEAD_MAX ? head_bad(e, 431, "headers_too_large", "the request head is too large") : 1;
        const char *q = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        if (q == p) break; /* the empty line: the head is whole */
        if ((rc = header_line(p, q, &hosts, &clen, &chunked, e))) return rc;
    }
    h->head_len = (size_t)(nl + 1 - buf);
    if (h->head_len > SERVE_HEAD_MAX) return head_bad(e, 431, "headers_too_large", "the request head is too large");
    if (h->http11 && hosts != 1)
        return head_bad(e, 400, "bad_request", hosts ? "more than one Host header" : "an HTTP/1.1 request needs a Host header");
    if (chunked && clen >= 0) return head_bad(e, 400, "bad_request", "both Content-Length and Transfer-Encoding");
    h->content_length = clen;
    h->chunked = chunked;
    return 0;
}

/* ---- connections at the door ------------------------------------------------------------ */

/* Whether two addresses are the same client (the IP, not the port). */
static int same_client(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
    return 1;
}

/* Forget connection i (closing its socket when close_fd). */
static void conn_drop(serve_door *d, int32_t i, int close_fd) {
    if (close_fd) close(d->c[i].fd);
    d->c[i] = d->c[--d->n];
}

/* The oldest connection that matches (awaiting its head, or closing; of addr when given), or -1. */
static int32_t oldest(const serve_door *d, int closing, const struct sockaddr_storage *addr) {
    int32_t best = -1;
    for (int32_t i = 0; i < d->n; i++)
        if (d->c[i].closing == closing && (!addr || same_client(&d->c[i].addr, addr)) &&
            (best < 0 || d->c[i].t0 < d->c[best].t0))
            best = i;
    return best;
}

/* How many connections match (as oldest). */
static int32_t count(const serve_door *d, int closing, const struct sockaddr_storage *addr) {
    int32_t k = 0;
    for (int32_t i = 0; i < d->n; i++) k += d->c[i].closing == closing && (!addr || same_client(&d->c[i].addr, addr));
    return k;
}

/* Answer connection i with an error and start draining it: the head bytes seen are read (so
 * that closing does not reset the connection before the client has read the answer), the
 * reply is sent, the writing side shut. */
static void conn_refuse(serve_door *d, int32_t i, size_t seen, const char *path, const serve_error *e) {
    door_conn *c = &d->c[i];
    char sink[4096];
    for (size_t k = 0; k < seen;) {
        ssize_t r = recv(c->fd, sink, seen - k < sizeof sink ? seen - k : sizeof sink, MSG_DONTWAIT);
        if (r <= 0) break;
        k += (size_t)r;
    }
    char *body = d->p.error_body(d->p.ctx, path, e);
    const char *b = body ? body : "{}";
    static const char *const reasons[][2] = {{"400", "Bad Request"}, {"408", "Request Timeout"}, {"413", "Content Too Large"},
                                             {"414", "URI Too Long"}, {"429", "Too Many Requests"},
                                             {"431", "Request Header Fields Too Large"}, {"501", "Not Implemented"},
                                             {"503", "Service Unavailable"}, {"505", "HTTP Version Not Supported"}};
    char code[8];
    const char *reason = "Error";
    snprintf(code, sizeof code, "%d", e->status);
    for (size_t k = 0; k < sizeof reasons / sizeof *reasons; k++)
        if (!strcmp(reasons[k][0], code)) reason = reasons[k][1];
    char *msg = plume_sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n%s"
                              "Connection: close\r\n\r\n%s",
                              e->status, reason, strlen(b), e->status == 429 || e->status == 503 ? "Retry-After: 1\r\n" : "", b);
    if (msg) (void)!send(c->fd, msg, strlen(msg), MSG_NOSIGNAL | MSG_DONTWAIT); /* small: fits the socket's buffer */
    free(msg);
    free(body);
    shutdown(c->fd, SHUT_WR);
    if (d->p.refused) d->p.refused(d->p.ctx, e->status);
    int32_t k = count(d, 1, NULL), old = k >= DOOR_CLOSING_MAX ? oldest(d, 1, NULL) : -1;
    c->closing = 1;
    c->t0 = plume_now();
    if (old >= 0) conn_drop(d, old, 1);
}

/* Bytes have come on a connection awaiting its head: hand it over, refuse it, or wait on. */
static void conn_read(serve_door *d, int32_t i) {
    door_conn *c = &d->c[i];
    char buf[SERVE_HEAD_MAX + 8];
    ssize_t r = recv(c->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (r <= 0) { /* gone before its head was whole */
        conn_drop(d, i, 1);
        return;
    }
    serve_head h;
    serve_error e;
    int rc = serve_head_parse(buf, (size_t)r, &h, &e);
    if (rc == 1) return;
    if (rc == 0 && !(rc = d->p.admit(d->p.ctx, c->fd, (const struct sockaddr *)&c->addr, c->alen, &h, &e))) {
        conn_drop(d, i, 0); /* the daemon's now */
        return;
    }
    conn_refuse(d, i, rc == 0 || rc == 429 || rc == 503 ? h.head_len : (size_t)r, h.path, &e);
}

/* Make room at the door by connection i: served when its head has come whole meanwhile (a
 * burst of connections is accepted before their heads are read), else dropped. */
static void make_room(serve_door *d, int32_t i) {
    int32_t n0 = d->n;
    int fd = d->c[i].fd;
    conn_read(d, i);
    if (d->n == n0 && d->c[i].fd == fd && !d->c[i].closing) {
        if (d->p.refused) d->p.refused(d->p.ctx, 0);
        conn_drop(d, i, 1);
    }
}

/* Accept every connection waiting on the listening socket, making room at the door. */
static void door_accept(serve_door *d) {
    for (;;) {
        door_conn c = {.alen = sizeof c.addr};
        c.fd = accept(d->lfd, (struct sockaddr *)&c.addr, &c.alen);
        if (c.fd < 0) return; /* EAGAIN: all taken; other errors (EMFILE): the next round */
        fcntl(c.fd, F_SETFD, FD_CLOEXEC);
        fcntl(c.fd, F_SETFL, fcntl(c.fd, F_GETFL) | O_NONBLOCK);
        c.t0 = plume_now();
        /* the newest head is likelier to be a client that will send it than the oldest one */
        int32_t old = count(d, 0, &c.addr) >= d->p.per_addr ? oldest(d, 0, &c.addr)
                      : count(d, 0, NULL) >= d->p.pending_max ? oldest(d, 0, NULL) : -1;
        if (old >= 0) make_room(d, old);
        if (d->n == d->cap) {
            int32_t cap = d->cap ? 2 * d->cap : 64;
            door_conn *nc = realloc(d->c, (size_t)cap * sizeof *nc);
            if (!nc) {
                close(c.fd);
                continue;
            }
            d->c = nc;
            d->cap = cap;
        }
        d->c[d->n++] = c;
    }
}

/* Close connections past their deadline: a head not whole within head_timeout gets a 408, a
 * drained one is closed. */
static void door_expire(serve_door *d, double now) {
    for (int32_t i = d->n - 1; i >= 0; i--) {
        if (d->c[i].closing && now - d->c[i].t0 >= DOOR_DRAIN_SECONDS) conn_drop(d, i, 1);
        else if (!d->c[i].closing && now - d->c[i].t0 >= d->p.head_timeout) {
            serve_error e;
            char msg[128];
            snprintf(msg, sizeof msg, "the request head did not arrive within %.0f s (--timeout)", d->p.head_timeout);
            head_bad(&e, 408, "timeout", msg);
            conn_refuse(d, i, 0, "", &e);
        }
    }
}

/* Read and drop what a closing connection sends; closed at its end. */
static void conn_drain(serve_door *d, int32_t i) {
    char sink[4096];
    ssize_t r = recv(d->c[i].fd, sink, sizeof sink, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) conn_drop(d, i, 1);
}

/* The door's thread: poll the listening socket, the wake pipe and every connection held. */
static void *door_main(void *arg) {
    serve_door *d = arg;
    struct pollfd *pf = NULL;
    int32_t pcap = 0;
    for (;;) {
        if (d->n + 2 > pcap) {
            struct pollfd *np = realloc(pf, (size_t)(d->n + 66) * sizeof *np);
            if (np) pf = np, pcap = d->n + 66;
        }
        int32_t m = d->n + 2 <= pcap ? d->n : pcap - 2; /* out of memory: the oldest part only */
        pf[0] = (struct pollfd){.fd = d->wake[0], .events = POLLIN};
        pf[1] = (struct pollfd){.fd = d->lfd, .events = POLLIN};
        double now = plume_now(), next = now + 1.0;
        for (int32_t i = 0; i < m; i++) {
            pf[2 + i] = (struct pollfd){.fd = d->c[i].fd, .events = POLLIN};
            double dl = d->c[i].t0 + (d->c[i].closing ? DOOR_DRAIN_SECONDS : d->p.head_timeout);
            if (dl < next) next = dl;
        }
        int ms = next > now ? (int)((next - now) * 1000) + 1 : 0;
        if (poll(pf, (nfds_t)(m + 2), ms) < 0 && errno != EINTR) break;
        if (pf[0].revents) break;
        /* the connections first (their indices move as they leave), from the last */
        for (int32_t i = m - 1; i >= 0; i--) {
            if (!pf[2 + i].revents || i >= d->n || d->c[i].fd != pf[2 + i].fd) continue;
            if (d->c[i].closing) conn_drain(d, i);
            else conn_read(d, i);
        }
        if (pf[1].revents) door_accept(d);
        door_expire(d, plume_now());
    }
    free(pf);
    return NULL;
}

/* ---- the door ---------------------------------------------------------------------------- */

int serve_door_start(serve_door **out, int listen_fd, const serve_door_params *p, char **err) {
    *out = NULL;
    serve_door *d = calloc(1, sizeof *d);
    if (!d) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    d->p = *p;
    d->lfd = listen_fd;
    if (pipe(d->wake) != 0) {
        free(d);
        return plume_fail(err, PLUME_EIO, "serve: pipe: %s", strerror(errno));
    }
    fcntl(d->lfd, F_SETFL, fcntl(d->lfd, F_GETFL) | O_NONBLOCK);
    if (pthread_create(&d->thread, NULL, door_main, d) != 0) {
        close(d->wake[0]);
        close(d->wake[1]);
        free(d);
        return plume_fail(err, PLUME_EIO, "serve: cannot start a thread");
    }
    *out = d;
    return 0;
}

void serve_door_stop(serve_door *d) {
    if (!d) return;
    (void)!write(d->wake[1], "x", 1);
    pthread_join(d->thread, NULL);
    for (int32_t i = 0; i < d->n; i++) close(d->c[i].fd);
    close(d->wake[0]);
    close(d->wake[1]);
    close(d->lfd);
    free(d->c);
    free(d);
}
