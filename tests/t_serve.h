/* t_serve.h -- what the tests of `plume serve` share: a server started in the background on
 * port 0, curl against it, the OpenAI error shape, /metrics figures, and raw sockets for the
 * requests curl cannot make (slow, half-closed, malformed). */
#ifndef PLUME_T_SERVE_H
#define PLUME_T_SERVE_H

#include "t.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static char *tmp;
static char bundle[600];

/* A server started in the background. */
typedef struct {
    pid_t pid;
    int port;
    char log[700];
} server;

/* Start `sh -c cmd` in the background; its pid (the shell execs the last command). */
static pid_t spawn_sh(const char *cmd) {
    pid_t pid;
    char *argv[] = {"sh", "-c", (char *)cmd, NULL};
    return posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ) ? -1 : pid;
}

/* Sleep ms milliseconds. */
static void nap(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Start plume serve on bundle dir with flags on a free port; 0 when it listens (port parsed
 * from its log). */
static int server_start_on(server *sv, const char *tag, const char *dir, const char *flags) {
    char cmd[2048];
    snprintf(sv->log, sizeof sv->log, "%s/%s.log", tmp, tag);
    snprintf(cmd, sizeof cmd, "exec %s/plume serve -m %s --port 0 %s >%s 2>&1", t_build(), dir, flags, sv->log);
    sv->port = 0;
    if ((sv->pid = spawn_sh(cmd)) < 0) return -1;
    for (int i = 0; i < 600 && !sv->port; i++) { /* up to 30 s (a sanitized build opens slowly) */
        nap(50);
        FILE *f = fopen(sv->log, "r");
        char line[512];
        while (f && fgets(line, sizeof line, f)) {
            char *p = strstr(line, "listening on http://127.0.0.1:");
            if (p) sv->port = atoi(p + strlen("listening on http://127.0.0.1:"));
        }
        if (f) fclose(f);
        int st;
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) return -1;
    }
    return sv->port ? 0 : -1;
}

/* Start plume serve on the test's bundle with flags on a free port; 0 when it listens. */
static int server_start(server *sv, const char *tag, const char *flags) { return server_start_on(sv, tag, bundle, flags); }

/* SIGTERM the server and wait up to 10 s; its exit status (-1: still running, killed, or
 * not a normal exit). *secs receives the time it took. */
static int server_stop(server *sv, double *secs) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kill(sv->pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 200; i++) {
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) {
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if (secs) *secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
            return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        nap(50);
    }
    kill(sv->pid, SIGKILL);
    waitpid(sv->pid, &st, 0);
    return -1;
}

/* curl the server with extra arguments (fmt); the HTTP status (0: no answer), the body in
 * out, the response headers in tmp/headers. */
static int http(const server *sv, char *out, size_t cap, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int http(const server *sv, char *out, size_t cap, const char *path, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "curl -s -m 60 -D %s/headers -w '\\n%%{http_code}' %s http://127.0.0.1:%d%s", tmp, args,
             sv->port, path);
    t_sh(out, cap, "%s", cmd);
    char *nl = strrchr(out, '\n');
    if (!nl) return 0;
    int status = atoi(nl + 1);
    *nl = 0;
    return status;
}

/* POST a JSON body (no single quotes in it) to path; the status. */
static int post(const server *sv, char *out, size_t cap, const char *path, const char *json) {
    return http(sv, out, cap, path, "-H 'Content-Type: application/json' -d '%s'", json);
}

/* Whether the response headers (tmp/headers) contain s. */
static int header_has(const char *s) {
    char path[800], buf[4096] = {0};
    snprintf(path, sizeof path, "%s/headers", tmp);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return strstr(buf, s) != NULL;
}

/* Whether body is an OpenAI error {"error": {"message", "type", "param", "code"}} whose code
 * (when want_code is given) is want_code. */
static int is_error(const char *body, const char *want_code) {
    cJSON *root = cJSON_Parse(body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message"), *code = cJSON_GetObjectItemCaseSensitive(e, "code");
    int ok = cJSON_IsString(msg) && *msg->valuestring && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "type")) &&
             cJSON_GetObjectItemCaseSensitive(e, "param") && code &&
             (!want_code || (cJSON_IsString(code) && !strcmp(code->valuestring, want_code)));
    cJSON_Delete(root);
    return ok;
}

/* The value of a metric line "name value" in the /metrics text, or -1. */
static double metric(const server *sv, const char *name) {
    char out[8192];
    if (http(sv, out, sizeof out, "/metrics", "%s", "") != 200) return -1;
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    char *p = strstr(out, key);
    return p ? atof(p + strlen(key)) : -1;
}

/* Poll /metrics until name == want (up to ms); whether it got there. */
static int metric_reaches(const server *sv, const char *name, double want, int ms) {
    for (int t = 0; t < ms; t += 20) {
        if (metric(sv, name) == want) return 1;
        nap(20);
    }
    return 0;
}

/* A TCP connection to the server's port from the loopback address 127.0.0.from (another
 * client to the server, on Linux's 127/8), or -1. */
static int raw_connect_from(const server *sv, int from) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sv->port)};
    struct sockaddr_in src = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    src.sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)from);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && ((from != 1 && bind(fd, (struct sockaddr *)&src, sizeof src) != 0) ||
                    connect(fd, (struct sockaddr *)&a, sizeof a) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* A TCP connection to the server's port, or -1. */
static int raw_connect(const server *sv) { return raw_connect_from(sv, 1); }

/* Send n bytes (0, or -1 when the server closed or reset the connection). */
static int raw_send(int fd, const void *p, size_t n) {
    return send(fd, p, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -1;
}

/* Read what the server sends until it closes (or ms pass) into out (cap, NUL-terminated);
 * the bytes read, or -1 when nothing came before the time ran out. */
static long raw_read_all(int fd, char *out, size_t cap, int ms) {
    size_t n = 0;
    out[0] = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        int left = ms - (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pf, 1, left) <= 0) return n ? (long)n : -1;
        char buf[4096];
        ssize_t r = recv(fd, buf, sizeof buf, 0);
        if (r <= 0) return (long)n;
        size_t k = (size_t)r < cap - 1 - n ? (size_t)r : cap - 1 - n;
        memcpy(out + n, buf, k);
        n += k;
        out[n] = 0;
    }
}

/* The status of the final HTTP reply in text (interim 1xx replies skipped), or 0; *body
 * (when given) points at its body. */
static int raw_reply(const char *text, const char **body) {
    if (body) *body = "";
    for (const char *p = text; (p = strstr(p, "HTTP/1."));) {
        const char *end = strstr(p, "\r\n\r\n");
        int st = atoi(p + 9);
        if (!end) return st >= 200 ? st : 0;
        if (st >= 200) {
            if (body) *body = end + 4;
            return st;
        }
        p = end + 4;
    }
    return 0;
}

/* Send one whole request on a fresh connection and read the reply (ms at most): its status
 * (0: none), the reply in out. half: shut the sending side after the request. */
static int raw_request(const server *sv, const void *req, size_t n, int half, char *out, size_t cap, int ms) {
    int fd = raw_connect(sv);
    if (fd < 0) return 0;
    raw_send(fd, req, n);
    if (half) shutdown(fd, SHUT_WR);
    raw_read_all(fd, out, cap, ms);
    close(fd);
    return raw_reply(out, NULL);
}

/* Seconds since t0 (CLOCK_MONOTONIC). */
static double since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) * 1e-9;
}

#endif
