/* test_serve_limits.c -- `plume serve` against slow, greedy and careless clients (issue 28), on
 * the tiny-a bundle over 127.0.0.1: a head sent a line at a time (slowloris) and a body that
 * trickles are cut at --timeout; hundreds of idle connections and a full house of admitted
 * ones leave /health answered; the memory budget of requests in flight refuses a body too
 * costly to parse (413) and one that does not fit beside others (429) and keeps the peak
 * memory down; JSON with trailing bytes, raw control characters or \u0000 is refused; a
 * client that half-closes gets its answer (whole or streamed) and one that hangs up a whole
 * reply frees its slot;
 * 405 names the route's method; the bearer scheme is case-insensitive; malformed heads and
 * bodies get JSON errors, not libmicrohttpd's HTML; --slot-save must be a directory and a lost
 * slot makes the exit status 1. Short --timeout values keep it fast. */
#include "t_serve.h"

static server L; /* --timeout 1, one slot, scalar kernels on one thread (slow enough to hang up on) */
static server M; /* --max-request-memory 8, --max-body 2000000 */

static const char *chat_body = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 2}";

/* A request of method and path with body (may be NULL) and extra header lines, into buf. */
static size_t req_text(char *buf, size_t cap, const char *method, const char *path, const char *extra, const char *body,
                       size_t blen) {
    int n = snprintf(buf, cap, "%s %s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %zu\r\n\r\n", method, path, extra ? extra : "",
                     blen);
    if (body && (size_t)n + blen < cap) memcpy(buf + n, body, blen);
    return (size_t)n + (body ? blen : 0);
}

/* Whether text's final reply is an OpenAI error JSON with that code. */
static int raw_is_error(const char *text, const char *code) {
    const char *body;
    raw_reply(text, &body);
    return is_error(body, code);
}

/* A metric of sv (L's key sent), or -1. */
static double metric_k(const server *sv, const char *name) {
    char out[8192], key[128];
    if (http(sv, out, sizeof out, "/metrics", "%s", "-H 'Authorization: Bearer k'") != 200) return -1;
    snprintf(key, sizeof key, "\n%s ", name);
    char *p = strstr(out, key);
    return p ? atof(p + strlen(key)) : -1;
}

/* Wait up to ms for a metric of sv to be within [lo, hi]; whether it got there. The tests wait
 * on the server's own figures, not on naps: the machine may be loaded. */
static int metric_within(const server *sv, const char *name, double lo, double hi, int ms) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        double v = metric_k(sv, name);
        if (v >= lo && v <= hi) return 1;
        nap(20);
    } while (since(&t0) * 1000 < ms);
    return 0;
}

/* Read the replies of status the server sends on fds[0..n) (each read once) until want of
 * them came or ms passed, then 100 ms more for any beyond; how many came, *json of them the
 * JSON error with that code and Retry-After. */
static int replies(const int *fds, int n, int status, const char *code, int want, int ms, int *json) {
    char out[8192], *seen = calloc((size_t)n, 1);
    int got = 0, more = -1;
    *json = 0;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (seen && since(&t0) * 1000 < ms + (more >= 0 ? 100 : 0)) {
        for (int i = 0; i < n; i++) {
            struct pollfd pf = {.fd = fds[i], .events = POLLIN};
            if (seen[i] || poll(&pf, 1, 0) <= 0) continue;
            seen[i] = 1;
            if (raw_read_all(fds[i], out, sizeof out, 500) > 0 && raw_reply(out, NULL) == status) {
                got++;
                *json += raw_is_error(out, code) && strstr(out, "Retry-After: 1") != NULL;
            }
        }
        if (got >= want && more < 0) { /* then a little longer for any beyond */
            more = got;
            ms = (int)(since(&t0) * 1000);
        }
        nap(20);
    }
    free(seen);
    return got;
}

/* ---- slow clients ----------------------------------------------------------------------- */

/* A head sent one header line every 150 ms never completes: --timeout 1 ends it with a 408. */
static void test_slowloris(void) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int fd = raw_connect(&L);
    CHECK(fd >= 0, "connect");
    if (fd < 0) return;
    raw_send(fd, "GET /health HTTP/1.1\r\nHost: t\r\n", 31);
    char out[8192] = "";
    long got = -1;
    while (since(&t0) < 6 && got < 0) {
        raw_send(fd, "X-Slow: yes\r\n", 13);
        got = raw_read_all(fd, out, sizeof out, 150);
    }
    double secs = since(&t0);
    close(fd);
    CHECK(raw_reply(out, NULL) == 408 && raw_is_error(out, "timeout"), "slowloris: %s", out);
    CHECK(secs > 0.8 && secs < 3.5, "the head's deadline took %.1f s (--timeout 1)", secs);
}

/* A whole head, then a body a byte every 150 ms: the connection ends at --timeout 1. */
static void test_slow_body(void) {
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int fd = raw_connect(&L);
    char head[512];
    size_t n = req_text(head, sizeof head, "POST", "/tokenize", "Authorization: Bearer k\r\n", NULL, 60);
    raw_send(fd, head, n);
    int ended = 0;
    while (since(&t0) < 6 && !ended) {
        ended = raw_send(fd, "x", 1) != 0;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (!ended && poll(&pf, 1, 150) > 0) ended = 1; /* closed, or an error answered */
    }
    double secs = since(&t0);
    close(fd);
    CHECK(ended && secs > 0.8 && secs < 3.5, "a trickling body was cut after %.1f s (ended %d)", secs, ended);
}

/* 300 connections that send nothing and 20 that trickle a head: /health, /metrics and a chat
 * request from another connection are answered at once. */
static void test_idle_flood(void) {
    enum { IDLE = 300, SLOW = 20 };
    int fds[IDLE + SLOW], n = 0;
    for (int i = 0; i < IDLE + SLOW; i++)
        if ((fds[n] = raw_connect(&L)) >= 0) n++;
    for (int i = IDLE; i < n; i++) raw_send(fds[i], "GET /health HTTP/1.1\r\n", 22);
    char out[65536];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = http(&L, out, sizeof out, "/health", "%s", "-m 5");
    CHECK(st == 200 && strstr(out, "\"ok\""), "/health amid %d idle connections: %d %s", n, st, out);
    st = http(&L, out, sizeof out, "/metrics", "%s", "-m 5 -H 'Authorization: Bearer k'");
    CHECK(st == 200, "/metrics amid idle connections: %d", st);
    st = http(&L, out, sizeof out, "/v1/chat/completions", "-m 20 -H 'Authorization: Bearer k' -d '%s'", chat_body);
    CHECK(st == 200, "a chat request amid idle connections: %d %s", st, out);
    CHECK(since(&t0) < 15, "answers took %.1f s", since(&t0));
    for (int i = 0; i < n; i++) close(fds[i]);
}

/* Every connection of the daemon taken (heads whole, bodies awaited) by five clients: a POST
 * past the limit is a 503 from the door, /health still gets one of the connections kept for
 * it. */
static void test_health_when_full(void) {
    enum { ADDRS = 5, EACH = 16, LIMIT = 1 + 1 + 64 }; /* M: --parallel 1 --queue 1; 18 an address */
    int fds[ADDRS * EACH], n = 0, json = 0;
    char req[512], out[65536];
    CHECK(metric_within(&M, "plume_http_connections", 1, 1, 10000), "M's connections before: %.0f",
          metric(&M, "plume_http_connections"));
    size_t len = req_text(req, sizeof req, "POST", "/tokenize", NULL, NULL, 10);
    for (int i = 0; i < ADDRS * EACH; i++)
        if ((fds[n] = raw_connect_from(&M, 10 + i % ADDRS)) >= 0) raw_send(fds[n++], req, len);
    int refused = replies(fds, n, 503, "too_many_connections", n - LIMIT, 10000, &json);
    int st = http(&M, out, sizeof out, "/health", "%s", "-m 5");
    CHECK(st == 200, "/health with every connection taken: %d %s", st, out);
    /* one refusal more than the count is allowed: the count of 1 above was read on a connection
     * the server closes after its reply (one request per connection) and counts closed only a
     * moment later (libmicrohttpd's cleanup, after the close the client sees), so a burst sent
     * right then can find that place still taken; seen once in four parallel runs at load 16.
     * (Holding that connection instead is not possible: the server closes it.) */
    CHECK(n == ADDRS * EACH && refused >= n - LIMIT && refused <= n - LIMIT + 1 && json == refused,
          "%d connections, %d past the limit: %d refused, %d with a JSON 503", n, n - LIMIT, refused, json);
    for (int i = 0; i < n; i++) close(fds[i]);
}

/* One client address holds at most --parallel + --queue + 16 connections (18 on M): past
 * them a 429 for it, while another address is served and its own /health answered. */
static void test_per_address(void) {
    enum { N = 24, LIMIT = 18 };
    int fds[N], n = 0, json = 0;
    char req[512], out[65536];
    CHECK(metric_within(&M, "plume_http_connections", 1, 1, 10000), "M's connections before: %.0f",
          metric(&M, "plume_http_connections"));
    size_t len = req_text(req, sizeof req, "POST", "/tokenize", NULL, NULL, 10);
    for (int i = 0; i < N; i++)
        if ((fds[n] = raw_connect_from(&M, 2)) >= 0) raw_send(fds[n++], req, len);
    int refused = replies(fds, n, 429, "too_many_connections", N - LIMIT, 10000, &json);
    CHECK(n == N && refused == N - LIMIT && json == refused, "%d connections of one address: %d refused (429 JSON: %d)", n,
          refused, json);
    const char *body = "{\"content\": \"hi\"}";
    size_t k = req_text(req, sizeof req, "POST", "/tokenize", NULL, body, strlen(body));
    int fd = raw_connect_from(&M, 3);
    raw_send(fd, req, k);
    raw_read_all(fd, out, sizeof out, 5000);
    close(fd);
    CHECK(raw_reply(out, NULL) == 200, "another address meanwhile: %s", out);
    k = (size_t)snprintf(req, sizeof req, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
    fd = raw_connect_from(&M, 2);
    raw_send(fd, req, k);
    raw_read_all(fd, out, sizeof out, 5000);
    close(fd);
    CHECK(raw_reply(out, NULL) == 200, "/health from the full address: %s", out);
    for (int i = 0; i < n; i++) close(fds[i]);
    CHECK(metric_within(&M, "plume_http_connections", 1, 1, 10000), "M's connections after: %.0f",
          metric(&M, "plume_http_connections"));
    fd = raw_connect_from(&M, 2);
    k = req_text(req, sizeof req, "POST", "/tokenize", NULL, body, strlen(body));
    raw_send(fd, req, k);
    raw_read_all(fd, out, sizeof out, 5000);
    close(fd);
    CHECK(raw_reply(out, NULL) == 200, "the address's places came back: %s", out);
}

/* ---- greedy clients: the memory budget -------------------------------------------------- */

/* A file of a /detokenize body "[1,1,...]" of about bytes bytes; its path in path. */
static void big_list(char *path, size_t cap, const char *name, size_t bytes) {
    snprintf(path, cap, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    fputs("{\"tokens\": [1", f);
    for (size_t i = 14; i + 4 < bytes; i += 2) fputs(",1", f);
    fputs("]}", f);
    fclose(f);
}

/* The peak resident memory of a process in kB (VmHWM), or -1. */
static long peak_kb(pid_t pid) {
    char out[256];
    if (t_sh(out, sizeof out, "grep VmHWM /proc/%d/status | tr -dc 0-9", (int)pid)) return -1;
    return atol(out);
}

/* One body whose parse alone would pass the budget: 413 before it is parsed. Bodies that do
 * not fit beside others in flight: 429, until those are gone. Six costly bodies at once leave
 * the peak memory far below what parsing them would take (~100 MB each). */
static void test_memory_budget(void) {
    char path[700], out[65536];
    big_list(path, sizeof path, "list.json", 1500000);
    int st = http(&M, out, sizeof out, "/detokenize", "-m 20 --data-binary @%s", path);
    CHECK(st == 413 && is_error(out, "request_too_large") && strstr(out, "max-request-memory"), "a list of 750k ids: %d %.300s",
          st, out);
    /* every route that parses a body takes its share first: a token count, Ollama's show */
    static const char *const routes[] = {"/v1/messages/count_tokens", "/api/show", "/v1/chat/completions", "/api/chat"};
    for (size_t i = 0; i < sizeof routes / sizeof *routes; i++) {
        st = http(&M, out, sizeof out, routes[i], "-m 20 --data-binary @%s", path);
        CHECK(st == 413 && strstr(out, "max-request-memory"), "%s, 750k values: %d %.300s", routes[i], st, out);
    }
    /* the refused bodies above give their share back when their connections end, which a
     * loaded host may see late: start from an empty budget */
    CHECK(metric_within(&M, "plume_request_memory_bytes", 0, 0, 30000), "the budget before: %.0f",
          metric(&M, "plume_request_memory_bytes"));
    /* four bodies of 1.9 MB declared and held (7.6 of the 8 MB), a fifth is turned away */
    int fds[4];
    char req[512];
    size_t len = req_text(req, sizeof req, "POST", "/tokenize", NULL, NULL, 1900000);
    for (int i = 0; i < 4; i++) {
        fds[i] = raw_connect(&M);
        raw_send(fds[i], req, len);
        raw_send(fds[i], "{\"content\": \"", 13);
    }
    CHECK(metric_within(&M, "plume_request_memory_bytes", 4 * 1900000, 8 << 20, 10000), "the four bodies' share: %.0f",
          metric(&M, "plume_request_memory_bytes"));
    st = raw_request(&M, req, len, 0, out, sizeof out, 5000);
    CHECK(st == 429 && raw_is_error(out, "server_busy") && strstr(out, "Retry-After: 1"), "a fifth body: %d %s", st, out);
    for (int i = 0; i < 4; i++) close(fds[i]);
    CHECK(metric_within(&M, "plume_request_memory_bytes", 0, 0, 10000), "the budget after: %.0f",
          metric(&M, "plume_request_memory_bytes"));
    st = post(&M, out, sizeof out, "/tokenize", "{\"content\": \"hello\"}");
    CHECK(st == 200, "the budget came back: %d %s", st, out);
    /* six costly bodies at once */
    big_list(path, sizeof path, "list2.json", 1900000);
    long before = peak_kb(M.pid);
    st = t_sh(out, sizeof out, "for i in 1 2 3 4 5 6; do curl -s -m 30 -o /dev/null -w '%%{http_code} ' --data-binary @%s "
              "http://127.0.0.1:%d/detokenize & done; wait", path, M.port);
    long after = peak_kb(M.pid);
    CHECK(!strstr(out, "200") && strstr(out, "413"), "six lists of 950k ids: %s", out);
    CHECK(before > 0 && after - before < 64 * 1024, "peak memory grew by %ld MB (from %ld MB)", (after - before) >> 10,
          before >> 10);
}

/* ---- careless clients ------------------------------------------------------------------- */

/* Bodies the JSON parser would take but plume must not: trailing bytes, a second object, a
 * raw NUL or control character in a string (it cut the text there), an escaped \u0000. */
static void test_json_edges(void) {
    static const struct {
        const char *body;
        size_t len;
        const char *want;
    } cases[] = {
        {"{\"content\": \"a\"} xx", 19, "bytes follow"},
        {"{\"content\": \"a\"}{\"content\": \"b\"}", 32, "bytes follow"},
        {"{\"content\": \"a\0b\"}", 18, "control character"},
        {"{\"content\": \"a\x01" "b\"}", 18, "control character"},
        {"{\"content\": \"a\\u0000b\"}", 23, "u0000"},
        {"{\"content\": \"a\"}\0", 17, "bytes follow"},
    };
    char req[512], out[8192];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t n = req_text(req, sizeof req, "POST", "/tokenize", "Authorization: Bearer k\r\n", cases[i].body, cases[i].len);
        int st = raw_request(&L, req, n, 0, out, sizeof out, 5000);
        CHECK(st == 400 && strstr(out, cases[i].want) && raw_is_error(out, NULL), "case %zu: %d %s", i, st, out);
    }
    /* white space after the object is fine */
    size_t n = req_text(req, sizeof req, "POST", "/tokenize", "Authorization: Bearer k\r\n", "{\"content\": \"a\"} \r\n", 19);
    CHECK(raw_request(&L, req, n, 0, out, sizeof out, 5000) == 200, "trailing white space: %s", out);
    int st = http(&L, out, sizeof out, "/v1/chat/completions", "-H 'Authorization: Bearer k' -d '%s {}'", chat_body);
    CHECK(st == 400 && is_error(out, "invalid_json"), "chat with a second object: %d %s", st, out);
}

/* Take L's one slot for a while (a long completion whose client hangs up), so that a
 * request sent next waits in the queue and its client's end of input is seen meanwhile. */
static pid_t blocker(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "exec curl -s -m 1.5 -o /dev/null -H 'Authorization: Bearer k' http://127.0.0.1:%d/v1/completions "
             "-d '{\"prompt\": \"block\", \"max_tokens\": 4000, \"ignore_eos\": true}'", L.port);
    pid_t pid = spawn_sh(cmd);
    metric_within(&L, "plume_slots_busy", 1, 1, 1500);
    return pid;
}

/* A request sent behind a blocker (its sending side closed when half): its status, the whole
 * text in out. */
static int behind(const char *req, size_t n, int half, char *out, size_t cap) {
    pid_t b = blocker();
    int st = raw_request(&L, req, n, half, out, cap, 20000);
    waitpid(b, NULL, 0);
    return st;
}

/* A client that sends a whole request and closes its sending side still gets the answer
 * (HTTP/1.1: after an interim 100 the probe sent; HTTP/1.0: none; a stream: the dialect's
 * idle bytes), each waiting behind another request first so that the server sees the end of
 * its input before the answer is ready. */
static void test_half_close(void) {
    const char *body = "{\"prompt\": \"hi\", \"max_tokens\": 3}";
    char req[512], out[65536];
    size_t n = req_text(req, sizeof req, "POST", "/v1/completions", "Authorization: Bearer k\r\n", body, strlen(body));
    const char *b;
    int st = behind(req, n, 1, out, sizeof out);
    raw_reply(out, &b);
    CHECK(st == 200 && strstr(b, "\"text_completion\"") && strstr(out, " 100 Continue"), "HTTP/1.1, half-closed: %d %s", st, out);
    n = (size_t)snprintf(req, sizeof req, "POST /v1/completions HTTP/1.0\r\nAuthorization: Bearer k\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
    st = behind(req, n, 1, out, sizeof out);
    raw_reply(out, &b);
    CHECK(st == 200 && strstr(b, "\"text_completion\"") && !strstr(out, " 100 "), "HTTP/1.0, half-closed: %d %s", st, out);
    /* every dialect's stream: SSE comment lines (OpenAI, Responses, Anthropic), a space before
     * a JSON line (Ollama) */
    static const struct {
        const char *path, *body, *end, *end2;
    } streams[] = {
        {"/v1/completions", "{\"prompt\": \"hi\", \"max_tokens\": 3, \"stream\": true}", "data: [DONE]", NULL},
        /* sampled: the tiny model may end before its 3 tokens, so either closing event */
        {"/v1/responses", "{\"input\": \"hi\", \"max_output_tokens\": 3, \"stream\": true}", "event: response.incomplete",
         "event: response.completed"},
        {"/v1/messages", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 3, \"stream\": true}",
         "message_stop", NULL},
        {"/api/generate", "{\"prompt\": \"hi\", \"options\": {\"num_predict\": 3}}", "\"done\":true", NULL},
    };
    for (size_t i = 0; i < sizeof streams / sizeof *streams; i++) {
        n = req_text(req, sizeof req, "POST", streams[i].path, "Authorization: Bearer k\r\n", streams[i].body,
                     strlen(streams[i].body));
        st = behind(req, n, 1, out, sizeof out);
        int ended = strstr(out, streams[i].end) || (streams[i].end2 && strstr(out, streams[i].end2));
        CHECK(st == 200 && ended, "%s streamed, half-closed: %d %s", streams[i].path, st, out);
    }
}

/* A stream that waits longer than --timeout (in the queue behind another) gets its answer:
 * libmicrohttpd ends a connection that sent nothing for --timeout even while the reader waits,
 * so the reader sends the dialect's idle bytes meanwhile (it ended empty). */
static void test_stream_waits(void) {
    const char *body = "{\"prompt\": \"hi\", \"max_tokens\": 3, \"stream\": true}";
    char req[512], out[65536];
    size_t n = req_text(req, sizeof req, "POST", "/v1/completions", "Authorization: Bearer k\r\n", body, strlen(body));
    int st = behind(req, n, 0, out, sizeof out);
    CHECK(st == 200 && strstr(out, "data: [DONE]") && strstr(out, "\r\n:\n\n"), "a stream queued past --timeout: %d %s", st, out);
}

/* A client that hangs up on a long whole (non-streamed) answer: its generation stops and the
 * slot is free (scalar kernels on one thread: 4000 tokens take seconds). */
static void test_hangup_whole_reply(void) {
    char out[8192], m[8192];
    http(&L, m, sizeof m, "/metrics", "%s", "-H 'Authorization: Bearer k'");
    char *g0 = strstr(m, "\nplume_generated_tokens_total ");
    double gen0 = g0 ? atof(g0 + strlen("\nplume_generated_tokens_total ")) : -1;
    t_sh(out, sizeof out, "curl -s -m 0.7 -H 'Authorization: Bearer k' http://127.0.0.1:%d/v1/completions "
         "-d '{\"prompt\": \"long\", \"max_tokens\": 4000, \"ignore_eos\": true}'", L.port);
    int freed = 0;
    double gen = -1;
    for (int i = 0; i < 60 && !freed; i++) {
        http(&L, m, sizeof m, "/metrics", "%s", "-H 'Authorization: Bearer k'");
        freed = strstr(m, "\nplume_slots_busy 0") != NULL;
        char *g = strstr(m, "\nplume_generated_tokens_total ");
        if (g) gen = atof(g + strlen("\nplume_generated_tokens_total ")) - gen0;
        if (!freed) nap(50);
    }
    CHECK(freed && gen0 >= 0 && gen > 0 && gen < 4000, "the slot after the hang-up: freed %d, %.0f tokens generated", freed, gen);
}

/* 405 names the route's own methods; the bearer scheme is case-insensitive. */
static void test_405_and_bearer(void) {
    char out[8192];
    int st = http(&L, out, sizeof out, "/v1/chat/completions", "%s", "-H 'Authorization: Bearer k'");
    CHECK(st == 405 && header_has("Allow: POST\r"), "GET on a POST route: %d", st);
    st = http(&L, out, sizeof out, "/health", "%s", "-X DELETE");
    CHECK(st == 405 && header_has("Allow: GET, HEAD\r"), "DELETE on a GET route: %d", st);
    st = http(&L, out, sizeof out, "/v1/models", "%s", "-H 'authorization: bearer k'");
    CHECK(st == 200, "lower-case bearer: %d %s", st, out);
    st = http(&L, out, sizeof out, "/v1/models", "%s", "-H 'Authorization: BEARER   k'");
    CHECK(st == 200, "upper-case BEARER and spaces: %d %s", st, out);
    st = http(&L, out, sizeof out, "/v1/models", "%s", "-H 'Authorization: Basic k'");
    CHECK(st == 401 && is_error(out, "invalid_api_key"), "another scheme: %d %s", st, out);
}

/* Heads and bodies libmicrohttpd refused with its own HTML page get the JSON error shape. */
static void test_errors_are_json(void) {
    static const struct {
        const char *req;
        int status;
    } cases[] = {
        {"GET /health HTTP/2.0\r\nHost: t\r\n\r\n", 505},
        {"GARBAGE\x01\r\n\r\n", 400},
        {"GET /health HTTP/1.1\r\n\r\n", 400},                                   /* no Host */
        {"GET /health HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n", 400},          /* no colon */
        {"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n", 400},
        {"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
        {"POST /tokenize HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
        {"POST /tokenize HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer k\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n", 400},
    };
    char out[8192];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int st = raw_request(&L, cases[i].req, strlen(cases[i].req), 0, out, sizeof out, 5000);
        CHECK(st == cases[i].status && raw_is_error(out, NULL) && strstr(out, "application/json"), "case %zu: %d %s", i, st, out);
    }
    /* a head past SERVE_HEAD_MAX */
    size_t n = 60000;
    char *big = malloc(n + 64);
    int k = snprintf(big, n + 64, "GET /health HTTP/1.1\r\nHost: t\r\nX-Big: ");
    memset(big + k, 'a', n - (size_t)k);
    memcpy(big + n, "\r\n\r\n", 4);
    int st = raw_request(&L, big, n + 4, 0, out, sizeof out, 5000);
    free(big);
    CHECK(st == 431 && raw_is_error(out, NULL), "a 60 KB head: %d %s", st, out);
    CHECK(http(&L, out, sizeof out, "/health", "%s", "") == 200, "alive after the bad requests");
}

/* --slot-save must name a directory (checked at start); a slot that cannot be saved at exit
 * makes the exit status 1. */
static void test_slot_save(void) {
    char out[8192], flags[800];
    int st = t_sh(out, sizeof out, "touch %s/afile && %s/plume serve -m %s --port 0 --slot-save %s/afile", tmp, t_build(),
                  bundle, tmp);
    CHECK(st == 1 && strstr(out, "not a directory"), "--slot-save FILE: %d %s", st, out);
    server S;
    snprintf(flags, sizeof flags, "--parallel 1 --slot-save %s/slots", tmp);
    CHECK(server_start(&S, "s", flags) == 0, "server S did not start");
    if (!S.port) return;
    st = post(&S, out, sizeof out, "/v1/completions", "{\"prompt\": \"keep me\", \"max_tokens\": 2}");
    CHECK(st == 200, "a request: %d %s", st, out);
    t_sh(out, sizeof out, "rm -rf %s/slots && touch %s/slots", tmp, tmp); /* the directory is gone */
    st = server_stop(&S, NULL);
    t_sh(out, sizeof out, "cat %s", S.log);
    CHECK(st == 1 && strstr(out, "not saved"), "a slot lost at exit: status %d, %s", st, out);
    /* planted at the slots' names: a FIFO (not waited on at start) and a link to a file (not
     * written through at exit): both replaced by the slots' own files */
    t_sh(out, sizeof out, "rm -rf %s/slots %s/victim && mkdir %s/slots && mkfifo %s/slots/slot-0.state && "
         "echo victim > %s/victim && ln -s %s/victim %s/slots/slot-1.state", tmp, tmp, tmp, tmp, tmp, tmp, tmp);
    snprintf(flags, sizeof flags, "--parallel 2 --slot-save %s/slots", tmp);
    CHECK(server_start(&S, "s2", flags) == 0, "server S2 did not start (a FIFO slot file)");
    if (!S.port) return;
    pid_t others[2];
    for (int i = 0; i < 2; i++) { /* both slots used */
        char cmd[512];
        snprintf(cmd, sizeof cmd, "exec curl -s -m 20 -o /dev/null http://127.0.0.1:%d/v1/completions -d "
                 "'{\"prompt\": \"slot %d\", \"max_tokens\": 200, \"ignore_eos\": true}'", S.port, i);
        others[i] = spawn_sh(cmd);
    }
    for (int i = 0; i < 2; i++) waitpid(others[i], NULL, 0);
    st = server_stop(&S, NULL);
    t_sh(out, sizeof out, "cat %s/victim; for f in %s/slots/slot-0.state %s/slots/slot-1.state; do "
         "test -f $f -a ! -L $f && echo regular; done", tmp, tmp, tmp);
    CHECK(st == 0 && !strcmp(out, "victim\nregular\nregular\n"), "slot files planted as a FIFO and a link: %d %s", st, out);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    tmp = t_tmpdir("serve-limits");
    snprintf(bundle, sizeof bundle, "%s/tiny", tmp);
    char out[4096];
    if (t_sh(out, sizeof out, "%s/plume convert %s/tiny-a/hf %s --weights q8 --quiet", t_build(), t_data(), bundle))
        printf("  setup: %s\n", out);
    if (server_start(&L, "l", "--parallel 1 --queue 1 --timeout 1 --api-key k --isa scalar -t 1") ||
        server_start(&M, "m", "--parallel 1 --queue 1 --timeout 5 --max-body 2000000 --max-request-memory 8 -t 1")) {
        printf("FAIL test_serve_limits: a server did not start (logs in %s)\n", tmp);
        return 1;
    }
    RUN(test_slowloris);
    RUN(test_slow_body);
    RUN(test_idle_flood);
    RUN(test_json_edges);
    RUN(test_half_close);
    RUN(test_stream_waits);
    RUN(test_hangup_whole_reply);
    RUN(test_405_and_bearer);
    RUN(test_errors_are_json);
    RUN(test_health_when_full);
    RUN(test_per_address);
    RUN(test_memory_budget);
    int st = server_stop(&L, NULL), st2 = server_stop(&M, NULL);
    if (st || st2) printf("  server exit status %d %d\n", st, st2);
    RUN(test_slot_save);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0 || st != 0 || st2 != 0;
}
