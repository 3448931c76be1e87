/* hub.c -- the Hugging Face Hub client of `plume pull` (hub.h has the cache layout).
 *
 * Everything the server sends is untrusted: the commit, blob hashes and file names become
 * paths, so each is checked (hex of the right length; relative names without ".."), and a
 * snapshot path already in the cache must resolve inside the repo's folder. A download goes
 * to blobs/BLOB.incomplete, is hashed as it arrives (after the bytes already there, on a
 * resume), renamed to blobs/BLOB only when the hash matches, and only then linked from
 * snapshots/. Transient failures (connection errors, 5xx, 429) are retried with a doubling
 * wait, resuming with a Range request from the bytes already written. */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "digest.h"
#include "hub.h"

#define API_MAX_BYTES (64u << 20) /* a revision listing is a few KB; refuse absurd ones */
#define ERR_BODY_BYTES 512        /* the start of an error response kept for the message */
#define HUB_SIZE_MAX 1e15         /* bytes: a listed size at or past it is a lie (1 PB) */

/* ---- names and paths ---------------------------------------------------------------------- */

/* Whether s is n lowercase hex digits. */
static int is_hex(const char *s, size_t n) {
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* Whether one ORG or NAME part of a repo id is well formed. */
static int repo_part_ok(const char *s, size_t n) {
    if (n == 0 || n > 96 || s[0] == '.' || s[0] == '-') return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                 c == '.';
        if (!ok || (c == '.' && i + 1 < n && s[i + 1] == '.')) return 0;
    }
    return 1;
}

int hub_repo_valid(const char *s) {
    const char *slash = strchr(s, '/');
    return slash && strlen(s) <= HUB_REPO_MAX && repo_part_ok(s, (size_t)(slash - s)) &&
           repo_part_ok(slash + 1, strlen(slash + 1));
}

int hub_name_safe(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > 1000 || name[0] == '/') return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == '\\' || name[i] == 0x7f) return 0;
    for (const char *p = name;;) { /* each component: not empty, not "." or ".." */
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.')) return 0;
        if (!e) return 1;
        p = e + 1;
    }
}

/* Whether a revision name is safe as a path under refs/ (branch names may hold '/'). */
static int rev_safe(const char *rev) { return strlen(rev) < 100 && hub_name_safe(rev) && rev[0] != '-'; }

/* mkdir -p dir (mode 0755); 0 or -1 with errno. */
static int mkdirs(const char *dir) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) { errno = ENAMETOOLONG; return -1; }
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Whether path exists and resolves (through any links) inside dir: no link out of the cache. */
static int inside(const char *dir, const char *path) {
    char rd[PATH_MAX], rp[PATH_MAX];
    if (!realpath(dir, rd) || !realpath(path, rp)) return 0;
    size_t n = strlen(rd);
    return !strncmp(rd, rp, n) && rp[n] == '/';
}

/* mkdir -p dir, a folder under root (the repo's folder), that never makes a directory outside
 * root: root is made as it is, then each component under it that exists must resolve inside
 * root before anything is made in it (a snapshots/ or blobs/ that is a link out of the cache
 * is refused, not written through). 0; -1 with errno when a directory cannot be made; -2 when
 * a component leads out of root. */
static int mkdirs_under(const char *root, const char *dir) {
    size_t n = strlen(root);
    if (strncmp(dir, root, n) || (dir[n] && dir[n] != '/')) return -2;
    if (mkdirs(root)) return -1;
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) { errno = ENAMETOOLONG; return -1; }
    for (char *s = p + n; *s;) {
        char *e = strchr(s + 1, '/');
        if (e) *e = 0;
        struct stat st;
        if (lstat(p, &st) != 0) {
            if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        }
        if (!inside(root, p)) return -2; /* a link out of the cache, or not a directory we made */
        if (!e) break;
        *e = '/';
        s = e;
    }
    return 0;
}

/* ---- settings ------------------------------------------------------------------------------ */

/* An environment variable, or NULL when unset or empty. */
static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

char *hub_cache_root(void) {
    if (env("HF_HUB_CACHE")) return strdup(env("HF_HUB_CACHE"));
    if (env("HF_HOME")) return plume_sprintf("%s/hub", env("HF_HOME"));
    return plume_sprintf("%s/.cache/huggingface/hub", env("HOME") ? env("HOME") : ".");
}

/* The token: $HF_TOKEN, else the file the official client writes ($HF_TOKEN_PATH,
 * $HF_HOME/token, ~/.cache/huggingface/token); malloc'd and trimmed, or NULL. */
static char *read_token(void) {
    if (env("HF_TOKEN")) return strdup(env("HF_TOKEN"));
    char *path = env("HF_TOKEN_PATH") ? strdup(env("HF_TOKEN_PATH"))
                 : env("HF_HOME")     ? plume_sprintf("%s/token", env("HF_HOME"))
                                      : plume_sprintf("%s/.cache/huggingface/token", env("HOME") ? env("HOME") : ".");
    char *tok = NULL, *err = NULL;
    if (path && plume_file_exists(path) && plume_read_file(path, &tok, NULL, &err) == 0) {
        char *s = tok + strspn(tok, " \t\r\n");
        size_t n = strcspn(s, " \t\r\n");
        memmove(tok, s, n);
        tok[n] = 0;
        if (!*tok) { free(tok); tok = NULL; }
    }
    free(err);
    free(path);
    return tok;
}

int hub_open(hub *h, const char *repo, const char *rev, char **err) {
    memset(h, 0, sizeof *h);
    if (!hub_repo_valid(repo)) return plume_fail(err, PLUME_EINVAL, "'%s' is not a Hub model id (ORG/NAME)", repo);
    if (!rev_safe(rev)) return plume_fail(err, PLUME_EINVAL, "'%s' is not a usable revision name", rev);
    snprintf(h->repo, sizeof h->repo, "%s", repo);
    snprintf(h->rev, sizeof h->rev, "%s", rev);
    const char *ep = env("HF_ENDPOINT") ? env("HF_ENDPOINT") : "https://huggingface.co";
    h->endpoint = strdup(ep);
    for (size_t n = h->endpoint ? strlen(h->endpoint) : 0; n > 0 && h->endpoint[n - 1] == '/'; n--) h->endpoint[n - 1] = 0;
    h->token = read_token();
    h->cache = hub_cache_root();
    const char *off = env("HF_HUB_OFFLINE");
    h->offline = off && (!strcmp(off, "1") || !strcasecmp(off, "true") || !strcasecmp(off, "yes") || !strcasecmp(off, "on"));
    h->retries = env("PLUME_HUB_RETRIES") ? atoi(env("PLUME_HUB_RETRIES")) : 5;
    h->backoff_ms = env("PLUME_HUB_BACKOFF_MS") ? atol(env("PLUME_HUB_BACKOFF_MS")) : 1000;
    if (h->retries < 0) h->retries = 0;
    if (h->backoff_ms < 0) h->backoff_ms = 0;
    char org[128];
    snprintf(org, sizeof org, "%s", repo);
    *strchr(org, '/') = 0;
    h->dir = h->cache ? plume_sprintf("%s/models--%s--%s", h->cache, org, strchr(repo, '/') + 1) : NULL;
    if (!h->endpoint || !h->cache || !h->dir) {
        hub_close(h);
        return plume_fail(err, PLUME_ENOMEM, "out of memory");
    }
    return 0;
}

void hub_close(hub *h) {
    for (int32_t i = 0; i < h->n_files; i++) free(h->files[i].name);
    free(h->files);
    if (h->curl) {
        curl_easy_cleanup(h->curl);
        curl_global_cleanup();
    }
    free(h->endpoint);
    free(h->token);
    free(h->cache);
    free(h->dir);
    memset(h, 0, sizeof *h);
}

/* ---- one HTTP request ---------------------------------------------------------------------- */

/* What a request collects: the headers of every response in its redirect chain (the Hub's
 * X-Linked-* come on the redirect, the content on the last), and the body into a file or memory. */
typedef struct {
    hub_headers hd;             /* of the latest response (X-Linked-* kept across redirects) */
    /* body */
    int fd;                     /* file to append the 2xx body to, or -1 (memory) */
    char *mem;                  /* in-memory body (API JSON, error text) */
    size_t mem_len, mem_cap;
    int write_errno;            /* a failed write to fd */
    int too_long, bad_range;    /* more bytes than listed; a 206 not starting where we are */
    int mem_over;               /* an in-memory body (the listing) passed API_MAX_BYTES */
    int started;                /* the 2xx body has begun */
    /* file downloads: hashing and progress */
    const hub_file *file;
    sha256_ctx *sha256;
    sha1_ctx *sha1;
    uint64_t *have;             /* bytes of the file so far */
    uint64_t total, session;    /* expected size; bytes this run */
    const char *label;
    int progress;
    double t0, shown;
} req;

/* Copy a header value into dst (trimmed, quotes and a weak "W/" prefix removed). */
static void header_value(char *dst, size_t cap, const char *v, size_t n) {
    while (n && (*v == ' ' || *v == '\t')) v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' ')) n--;
    if (n >= 2 && v[0] == 'W' && v[1] == '/') v += 2, n -= 2;
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') v++, n -= 2;
    if (n >= cap) n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = 0;
}

/* Whether the header name buf[0..kn) is name, ignoring case. */
static int hdr_is(const char *buf, size_t kn, const char *name) { return kn == strlen(name) && !strncasecmp(buf, name, kn); }

void hub_header_line(hub_headers *hd, const char *buf, size_t n) {
    if (n > 5 && !strncmp(buf, "HTTP/", 5)) {
        const char *sp = memchr(buf, ' ', n), *end = buf + n; /* no strtol: buf need not end in NUL */
        long st = 0;
        for (const char *p = sp ? sp + 1 : end; p < end && *p >= '0' && *p <= '9' && st < 1000; p++) st = st * 10 + (*p - '0');
        hd->status = st;
        hd->etag[0] = 0;
        hd->has_range = 0;
        return;
    }
    const char *colon = memchr(buf, ':', n);
    if (!colon) return;
    size_t kn = (size_t)(colon - buf), vn = n - kn - 1;
    const char *v = colon + 1;
    char tmp[64];
    if (hdr_is(buf, kn, "ETag")) header_value(hd->etag, sizeof hd->etag, v, vn);
    else if (hdr_is(buf, kn, "X-Linked-Etag")) header_value(hd->linked_etag, sizeof hd->linked_etag, v, vn);
    else if (hdr_is(buf, kn, "X-Repo-Commit")) header_value(hd->repo_commit, sizeof hd->repo_commit, v, vn);
    else if (hdr_is(buf, kn, "X-Error-Code")) header_value(hd->error_code, sizeof hd->error_code, v, vn);
    else if (hdr_is(buf, kn, "X-Error-Message")) header_value(hd->error_message, sizeof hd->error_message, v, vn);
    else if (hdr_is(buf, kn, "X-Linked-Size")) {
        header_value(tmp, sizeof tmp, v, vn);
        hd->linked_size = strtoull(tmp, NULL, 10);
    } else if (hdr_is(buf, kn, "Content-Range")) {
        header_value(tmp, sizeof tmp, v, vn);
        unsigned long long a, b, t;
        if (sscanf(tmp, "bytes %llu-%llu/%llu", &a, &b, &t) == 3) {
            hd->range_start = a;
            hd->range_total = t;
            hd->has_range = 1;
        }
    }
}

/* curl's header callback: one line of a response's headers. */
static size_t on_header(char *buf, size_t size, size_t nitems, void *ud) {
    req *r = ud;
    hub_header_line(&r->hd, buf, size * nitems);
    return size * nitems;
}

const char *hub_human(char *buf, size_t cap, double b) {
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    int i = 0;
    while (b >= 1000 && i < 4) b /= 1000, i++;
    snprintf(buf, cap, i ? "%.1f %s" : "%.0f %s", b, u[i]);
    return buf;
}

/* The progress bar: file, bytes, rate, ETA; at most 5 times a second, on a terminal only. */
static void show_progress(req *r, int last) {
    double now = plume_now();
    if (r->progress != 1 || (!last && now - r->shown < 0.2)) return;
    r->shown = now;
    double dt = now - r->t0, rate = dt > 0 ? (double)r->session / dt : 0;
    double left = rate > 0 ? (double)(r->total - (*r->have < r->total ? *r->have : r->total)) / rate : 0;
    char a[32], b[32], c[32];
    int pct = r->total ? (int)(100.0 * (double)*r->have / (double)r->total) : 100;
    fprintf(stderr, "\r%-36.36s %3d%% %9s / %-9s %9s/s  ETA %d:%02d ", r->label, pct, hub_human(a, sizeof a, (double)*r->have),
            hub_human(b, sizeof b, (double)r->total), hub_human(c, sizeof c, rate), (int)(left / 60), (int)left % 60);
    if (last) fputc('\n', stderr);
}

/* Start the hashes of f's content over (git blob ids hash "blob SIZE\0" first). */
static void hash_reset(const hub_file *f, sha256_ctx *s256, sha1_ctx *s1) {
    if (s256) sha256_init(s256);
    if (!s1) return;
    sha1_init(s1);
    char head[40];
    int n = snprintf(head, sizeof head, "blob %llu", (unsigned long long)f->size);
    sha1_update(s1, head, (size_t)n + 1);
}

/* curl's write callback: a 2xx body goes to the file (hashed), anything else to memory. */
static size_t on_body(char *buf, size_t size, size_t nmemb, void *ud) {
    req *r = ud;
    size_t n = size * nmemb;
    if (r->fd >= 0 && r->hd.status >= 200 && r->hd.status < 300) {
        if (!r->started) { /* the first bytes of the body: where do they go? */
            r->started = 1;
            if (r->hd.status == 200 && *r->have > 0) { /* Range ignored: start over */
                if (ftruncate(r->fd, 0) != 0 || lseek(r->fd, 0, SEEK_SET) < 0) { r->write_errno = errno; return 0; }
                *r->have = 0;
                hash_reset(r->file, r->sha256, r->sha1);
            }
            if (r->hd.status == 206 && (!r->hd.has_range || r->hd.range_start != *r->have)) { r->bad_range = 1; return 0; }
        }
        if (*r->have + n > r->total) { r->too_long = 1; return 0; } /* more than the listing said */
        for (size_t done = 0; done < n;) {
            ssize_t w = write(r->fd, buf + done, n - done);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) { r->write_errno = w < 0 ? errno : EIO; return 0; }
            done += (size_t)w;
        }
        if (r->sha256) sha256_update(r->sha256, buf, n);
        if (r->sha1) sha1_update(r->sha1, buf, n);
        *r->have += n;
        r->session += n;
        show_progress(r, 0);
        return n;
    }
    size_t cap = r->fd >= 0 ? ERR_BODY_BYTES : API_MAX_BYTES;
    if (r->mem_len + n > cap) {
        if (r->fd >= 0) return n; /* only the start of an error text is kept */
        r->mem_over = 1;
        return 0;
    }
    if (r->mem_len + n + 1 > r->mem_cap) {
        size_t nc = (r->mem_len + n + 1) * 2;
        char *m = realloc(r->mem, nc);
        if (!m) return 0;
        r->mem = m;
        r->mem_cap = nc;
    }
    memcpy(r->mem + r->mem_len, buf, n);
    r->mem_len += n;
    r->mem[r->mem_len] = 0;
    return n;
}

/* Perform one GET of url (with "Range: bytes=from-" when from > 0) into r. */
static CURLcode perform(hub *h, const char *url, uint64_t from, req *r) {
    if (!h->curl) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0) return CURLE_FAILED_INIT;
        h->curl = curl_easy_init();
        if (!h->curl) { curl_global_cleanup(); return CURLE_FAILED_INIT; }
    }
    CURL *c = h->curl;
    curl_easy_reset(c);
    struct curl_slist *hdr = NULL;
    char line[4200];
    if (h->token) {
        /* curl drops this header when a redirect leads to another host (the LFS CDN) */
        snprintf(line, sizeof line, "Authorization: Bearer %.4000s", h->token);
        hdr = curl_slist_append(hdr, line);
    }
    hdr = curl_slist_append(hdr, "User-Agent: plume/" PLUME_VERSION);
    char range[64];
    if (from > 0) {
        snprintf(range, sizeof range, "%llu-", (unsigned long long)from);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L); /* a stalled connection ends (and is retried) */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    CURLcode rc = curl_easy_perform(c);
    curl_slist_free_all(hdr);
    return rc;
}

/* Whether a failed request is worth retrying: the network or a 5xx / 429. */
static int transient(CURLcode rc, long status) {
    if (rc == CURLE_OK) return status >= 500 || status == 429;
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR ||
           rc == CURLE_SEND_ERROR || rc == CURLE_GOT_NOTHING || rc == CURLE_OPERATION_TIMEDOUT ||
           rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_HTTP2 || rc == CURLE_HTTP2_STREAM;
}

/* Sleep before retry number `attempt` (0-based): backoff_ms * 2^attempt, at most 30 s. */
static void backoff(const hub *h, int attempt) {
    long ms = h->backoff_ms;
    for (int i = 0; i < attempt && ms < 30000; i++) ms *= 2;
    if (ms > 30000) ms = 30000;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* The one-line error for a request that failed with a curl error or an HTTP status. */
static int request_error(const hub *h, const char *url, CURLcode rc, const req *r, const char *what, char **err) {
    if (rc != CURLE_OK && rc != CURLE_WRITE_ERROR)
        return plume_fail(err, PLUME_EIO, "%s: %s%s", url, curl_easy_strerror(rc),
                          rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_COULDNT_CONNECT
                              ? " (no network? HF_HUB_OFFLINE=1 uses only the cache)" : "");
    if (r->hd.status == 401 && h->token)
        return plume_fail(err, PLUME_EIO, "%s: 401 Unauthorized: the token (HF_TOKEN or the token file) was refused; make a "
                          "new one at %s/settings/tokens, and accept the license at %s/%s",
                          url, h->endpoint, h->endpoint, h->repo);
    if (r->hd.status == 401)
        return plume_fail(err, PLUME_EIO, "%s: 401 Unauthorized: %s is gated, private or missing; set HF_TOKEN to a token "
                          "from %s/settings/tokens and accept the license at %s/%s",
                          url, h->repo, h->endpoint, h->endpoint, h->repo);
    if (r->hd.status == 403)
        return plume_fail(err, PLUME_EIO, "%s: 403 Forbidden: %s: accept the license at %s/%s with the account of your "
                          "HF_TOKEN", url, h->repo, h->endpoint, h->repo);
    if (r->hd.status == 404) {
        if (!strcmp(r->hd.error_code, "RevisionNotFound"))
            return plume_fail(err, PLUME_EIO, "%s has no revision '%s' (404 from %s)", h->repo, h->rev, url);
        if (!strcmp(r->hd.error_code, "EntryNotFound"))
            return plume_fail(err, PLUME_EIO, "%s has no file %s at %s (404 from %s)", h->repo, what, h->commit, url);
        return plume_fail(err, PLUME_EIO, "no model %s on the Hub (404 from %s)", h->repo, url);
    }
    char said[4 * sizeof r->hd.error_message]; /* the server's words, never its escape sequences */
    plume_str_printable(said, sizeof said, r->hd.error_message);
    return plume_fail(err, PLUME_EIO, "%s: HTTP %ld%s%s", url, r->hd.status, said[0] ? ": " : "", said);
}

/* ---- the revision listing ------------------------------------------------------------------- */

/* Percent-encode s for a URL path (keeping '/' when keep_slash); malloc'd. */
static char *url_escape(const char *s, int keep_slash) {
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
            c == '.' || c == '~' || (keep_slash && c == '/'))
            *o++ = (char)c;
        else o += sprintf(o, "%%%02X", c);
    }
    *o = 0;
    return out;
}

/* Fill h->files from the API's "siblings"; refuses the whole listing on one unsafe name. */
static int parse_siblings(hub *h, const cJSON *sib, const char *url, char **err) {
    int n = cJSON_GetArraySize(sib);
    h->files = calloc((size_t)n + 1, sizeof *h->files);
    if (!h->files) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    for (const cJSON *e = sib->child; e; e = e->next) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "rfilename");
        if (!cJSON_IsString(name)) return plume_fail(err, PLUME_EFORMAT, "%s: a sibling without rfilename", url);
        if (!hub_name_safe(name->valuestring)) {
            char shown[804];
            return plume_fail(err, PLUME_EFORMAT, "%s: refusing the listing: unsafe file name '%s'", url,
                              plume_str_printable(shown, sizeof shown, name->valuestring));
        }
        hub_file *f = &h->files[h->n_files++];
        f->name = strdup(name->valuestring);
        if (!f->name) return plume_fail(err, PLUME_ENOMEM, "out of memory");
        const cJSON *lfs = cJSON_GetObjectItemCaseSensitive(e, "lfs");
        const cJSON *sha = cJSON_GetObjectItemCaseSensitive(lfs, "sha256");
        const cJSON *blob = cJSON_GetObjectItemCaseSensitive(e, "blobId");
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(lfs ? lfs : e, "size");
        if (cJSON_IsString(sha)) {
            if (!is_hex(sha->valuestring, 64)) return plume_fail(err, PLUME_EFORMAT, "%s: bad lfs.sha256 for %s", url, f->name);
            snprintf(f->blob, sizeof f->blob, "%s", sha->valuestring);
            f->lfs = 1;
        } else if (cJSON_IsString(blob)) {
            if (!is_hex(blob->valuestring, 40)) return plume_fail(err, PLUME_EFORMAT, "%s: bad blobId for %s", url, f->name);
            snprintf(f->blob, sizeof f->blob, "%s", blob->valuestring);
        }
        /* a file of 1 PB or more, or one of no size, is a listing that lies: every download of
         * it would end in a misleading error, and the size is what a download stops at */
        if (!cJSON_IsNumber(size) || !(size->valuedouble >= 0 && size->valuedouble < HUB_SIZE_MAX) ||
            size->valuedouble != (double)(uint64_t)size->valuedouble)
            return plume_fail(err, PLUME_EFORMAT, "%s: refusing the listing: no usable size for %s (%s)", url, f->name,
                              cJSON_IsNumber(size) ? "out of range" : "missing");
        f->size = (uint64_t)size->valuedouble;
    }
    return 0;
}

int hub_parse_revision(hub *h, const char *body, size_t len, const char *url, char **err) {
    cJSON *root = body ? cJSON_ParseWithLength(body, len) : NULL;
    if (!root) return plume_fail(err, PLUME_EFORMAT, "%s: invalid JSON", url);
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(root, "sha");
    const cJSON *sib = cJSON_GetObjectItemCaseSensitive(root, "siblings");
    int rc;
    if (!cJSON_IsString(sha) || !is_hex(sha->valuestring, 40) || !cJSON_IsArray(sib))
        rc = plume_fail(err, PLUME_EFORMAT, "%s: no commit sha or siblings in the answer", url);
    else {
        snprintf(h->commit, sizeof h->commit, "%s", sha->valuestring);
        rc = parse_siblings(h, sib, url, err);
    }
    cJSON_Delete(root);
    return rc;
}

/* Offline: the commit from refs/REV (or REV itself when it is a commit in the cache). */
static int resolve_offline(hub *h, char **err) {
    char *ref = plume_sprintf("%s/refs/%s", h->dir, h->rev), *text = NULL;
    int rc = 0;
    if (is_hex(h->rev, 40)) memcpy(h->commit, h->rev, 41);
    else if (ref && plume_file_exists(ref) && plume_read_file(ref, &text, NULL, err) == 0) {
        text[strcspn(text, " \r\n")] = 0;
        if (is_hex(text, 40)) snprintf(h->commit, sizeof h->commit, "%s", text);
        else rc = plume_fail(err, PLUME_EFORMAT, "%s: not a commit hash", ref);
    }
    if (!rc && !h->commit[0])
        rc = plume_fail(err, PLUME_EIO, "%s@%s is not in the cache %s, and HF_HUB_OFFLINE is set (no network)", h->repo,
                        h->rev, h->cache);
    free(ref);
    free(text);
    return rc;
}

int hub_resolve(hub *h, char **err) {
    if (h->offline) return resolve_offline(h, err);
    char *rev = url_escape(h->rev, 0);
    char *url = rev ? plume_sprintf("%s/api/models/%s/revision/%s?blobs=true", h->endpoint, h->repo, rev) : NULL;
    free(rev);
    if (!url) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    req r = {.fd = -1};
    CURLcode cc = CURLE_OK;
    for (int attempt = 0;; attempt++) {
        free(r.mem);
        memset(&r, 0, sizeof r);
        r.fd = -1; /* the body to memory */
        cc = perform(h, url, 0, &r);
        if (!transient(cc, r.hd.status) || attempt >= h->retries) break;
        backoff(h, attempt);
    }
    int rc = r.mem_over ? plume_fail(err, PLUME_EFORMAT, "%s: the revision listing is larger than %u MB: refused (a listing "
                                     "is a few KB; is HF_ENDPOINT a Hub?)", url, API_MAX_BYTES >> 20)
             : cc != CURLE_OK || r.hd.status != 200 ? request_error(h, url, cc, &r, NULL, err)
                                                    : hub_parse_revision(h, r.mem, r.mem_len, url, err);
    free(r.mem);
    free(url);
    return rc;
}

const hub_file *hub_find(const hub *h, const char *name) {
    for (int32_t i = 0; i < h->n_files; i++)
        if (!strcmp(h->files[i].name, name)) return &h->files[i];
    return NULL;
}

char *hub_snapshot_dir(const hub *h) { return plume_sprintf("%s/snapshots/%s", h->dir, h->commit); }

uint64_t hub_missing_bytes(const hub *h, const hub_file *f) {
    char *snap = plume_sprintf("%s/snapshots/%s/%s", h->dir, h->commit, f->name);
    char *blob = plume_sprintf("%s/blobs/%s", h->dir, f->blob), *part = plume_sprintf("%s/blobs/%s.incomplete", h->dir, f->blob);
    struct stat st;
    uint64_t need = f->size;
    if ((snap && stat(snap, &st) == 0) || (blob && f->blob[0] && stat(blob, &st) == 0)) need = 0;
    else if (part && f->blob[0] && stat(part, &st) == 0 && (uint64_t)st.st_size <= f->size) need -= (uint64_t)st.st_size;
    free(snap);
    free(blob);
    free(part);
    return need;
}

/* ---- downloading one file -------------------------------------------------------------------- */

/* Hash the first n bytes already in fd (a resumed download) into the contexts. */
static int hash_existing(int fd, uint64_t n, sha256_ctx *s256, sha1_ctx *s1) {
    static uint8_t buf[1 << 16];
    for (uint64_t off = 0; off < n;) {
        size_t want = n - off < sizeof buf ? (size_t)(n - off) : sizeof buf;
        ssize_t got = pread(fd, buf, want, (off_t)off);
        if (got <= 0) return -1;
        if (s256) sha256_update(s256, buf, (size_t)got);
        if (s1) sha1_update(s1, buf, (size_t)got);
        off += (uint64_t)got;
    }
    return 0;
}

int hub_check_headers(const hub *h, const hub_file *f, const hub_headers *hd, const char *url, char **err) {
    const char *said = f->lfs ? hd->linked_etag : hd->etag;
    char shown[4 * sizeof hd->etag];
    if (said[0] && strcmp(said, f->blob))
        return plume_fail(err, PLUME_EFORMAT, "%s: the server's ETag %s differs from the listed hash %s", url,
                          plume_str_printable(shown, sizeof shown, said), f->blob);
    if (hd->repo_commit[0] && strcmp(hd->repo_commit, h->commit))
        return plume_fail(err, PLUME_EFORMAT, "%s: X-Repo-Commit %s is not the resolved commit %s", url,
                          plume_str_printable(shown, sizeof shown, hd->repo_commit), h->commit);
    if (hd->has_range && hd->range_total != f->size)
        return plume_fail(err, PLUME_EFORMAT, "%s: Content-Range says the file has %llu bytes, the listing %llu", url,
                          (unsigned long long)hd->range_total, (unsigned long long)f->size);
    if (f->lfs && hd->linked_size && hd->linked_size != f->size)
        return plume_fail(err, PLUME_EFORMAT, "%s: X-Linked-Size %llu differs from the listed size %llu", url,
                          (unsigned long long)hd->linked_size, (unsigned long long)f->size);
    return 0;
}

/* Remove a cache entry that is not a regular file (a link, a FIFO, a device: planted, or left
 * by another tool), so that it is made again; 0, or -1 when it cannot be (a directory is never
 * removed: it may hold someone's files). */
static int clear_odd_entry(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode)) return 0;
    if (S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        return -1;
    }
    return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* Open blobs/BLOB.incomplete to resume or start a download: a regular file of ours, never
 * through a link (O_NOFOLLOW) nor a FIFO (O_NONBLOCK, then checked); an odd entry is removed
 * first. The descriptor, or -1 with *rc and *err. */
static int open_partial(const char *part, int *rc, char **err) {
    int fd = -1;
    struct stat st;
    if (clear_odd_entry(part) == 0)
        fd = open(part, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) { /* replaced between the two calls */
        close(fd);
        fd = -1;
        errno = EEXIST;
    }
    if (fd < 0) *rc = plume_fail(err, PLUME_EIO, "%s: cannot create: %s", part, strerror(errno));
    else fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

/* Take the partial download fd (part) for this pull: locked against another pull, cut to at
 * most the listed size, what it holds hashed and *have its length, positioned at its end. */
static int partial_resume(int fd, const hub_file *f, const char *part, uint64_t *have, sha256_ctx *s256, sha1_ctx *s1,
                          char **err) {
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) /* released by close */
        return plume_fail(err, PLUME_EIO, "%s: another plume pull is downloading it; wait for that one", part);
    struct stat sb;
    *have = fstat(fd, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    if (*have > f->size) *have = 0;
    hash_reset(f, s256, s1);
    if (ftruncate(fd, (off_t)*have) != 0 || hash_existing(fd, *have, s256, s1) != 0)
        return plume_fail(err, PLUME_EIO, "%s: cannot read: %s", part, strerror(errno));
    if (lseek(fd, (off_t)*have, SEEK_SET) < 0) return plume_fail(err, PLUME_EIO, "%s: seek failed", part);
    return 0;
}

/* Fetch the rest of f from url into fd (part), resuming at *have, retrying transient failures
 * (h->retries, with backoff); r is the last request (its progress). *drop set when the partial
 * file is wrong, not merely short (to be removed). 0 or a PLUME_E* with the message. */
static int fetch_rest(hub *h, const hub_file *f, const char *url, const char *part, int fd, uint64_t *have,
                      sha256_ctx *s256, sha1_ctx *s1, req *r, int *drop, char **err) {
    const double t0 = plume_now();
    const uint64_t first_have = *have;
    for (int attempt = 0;; attempt++) {
        memset(r, 0, sizeof *r);
        r->fd = fd;
        r->have = have;
        r->file = f;
        r->total = f->size;
        r->sha256 = f->lfs ? s256 : NULL;
        r->sha1 = f->lfs ? NULL : s1;
        r->label = f->name;
        r->progress = h->progress;
        r->t0 = t0;
        r->session = *have - first_have;
        uint64_t from = *have;
        CURLcode cc = *have < f->size ? perform(h, url, from, r) : CURLE_OK;
        if (*have == f->size && from == f->size) r->hd.status = 206; /* nothing was missing */
        free(r->mem);
        r->mem = NULL;
        if (r->write_errno) return plume_fail(err, PLUME_EIO, "%s: write failed: %s", part, strerror(r->write_errno));
        if (r->bad_range ||
            (cc == CURLE_OK && r->hd.status == 206 && from < f->size && (!r->hd.has_range || r->hd.range_start != from)))
            return plume_fail(err, PLUME_EFORMAT, "%s: a partial answer that does not start at byte %llu", url,
                              (unsigned long long)from);
        if (cc == CURLE_OK && (r->hd.status == 200 || r->hd.status == 206)) {
            int rc = hub_check_headers(h, f, &r->hd, url, err);
            if (rc || *have == f->size) return rc;
            *drop = 1; /* a whole answer of another size: the server and the listing disagree */
            return plume_fail(err, PLUME_EFORMAT, "%s: got %llu bytes, the listing says %llu (the download was removed)",
                              url, (unsigned long long)*have, (unsigned long long)f->size);
        }
        if (r->too_long) { /* what came is not the listed file: nothing of it is kept for a resume */
            *drop = 1;
            return plume_fail(err, PLUME_EFORMAT, "%s: more bytes than the listed %llu (the download was removed)", url,
                              (unsigned long long)f->size);
        }
        if (!transient(cc, r->hd.status) || attempt >= h->retries) {
            if (h->progress == 1) fputc('\n', stderr);
            if (transient(cc, r->hd.status) && *have > 0)
                return plume_fail(err, PLUME_EIO, "%s: %s after %llu of %llu bytes; run the same command again to resume",
                                  url, cc != CURLE_OK ? curl_easy_strerror(cc) : "server error", (unsigned long long)*have,
                                  (unsigned long long)f->size);
            return request_error(h, url, cc, r, f->name, err);
        }
        backoff(h, attempt);
    }
}

/* Check the whole content's hash against the listing (a mismatch removes part). */
static int verify_content(const hub_file *f, const char *part, sha256_ctx *s256, sha1_ctx *s1, char **err) {
    char got[65];
    if (f->lfs) sha256_final_hex(s256, got);
    else sha1_final_hex(s1, got);
    if (!strcmp(got, f->blob)) return 0;
    unlink(part);
    return plume_fail(err, PLUME_EFORMAT, "%s: %s mismatch: got %s, the Hub lists %s (corrupt download, removed)", f->name,
                      f->lfs ? "sha256" : "git blob sha1", got, f->blob);
}

/* Download f into blobs/BLOB.incomplete (resuming what is there), verify, rename to blobs/BLOB. */
static int download(hub *h, const hub_file *f, const char *blob_path, char **err) {
    char *part = plume_sprintf("%s.incomplete", blob_path), *ename = url_escape(f->name, 1);
    char *url = ename ? plume_sprintf("%s/%s/resolve/%s/%s", h->endpoint, h->repo, h->commit, ename) : NULL;
    free(ename);
    int rc = !part || !url ? plume_fail(err, PLUME_ENOMEM, "out of memory") : 0;
    int fd = rc ? -1 : open_partial(part, &rc, err);
    sha256_ctx s256;
    sha1_ctx s1;
    uint64_t have = 0;
    if (!rc) rc = partial_resume(fd, f, part, &have, &s256, &s1, err);
    char sz[32];
    if (!rc && h->progress == 0)
        fprintf(stderr, "pull: %s (%s)%s\n", f->name, hub_human(sz, sizeof sz, (double)f->size), have ? ", resuming" : "");
    req r;
    memset(&r, 0, sizeof r);
    const double t0 = plume_now();
    const uint64_t first_have = have;
    int drop = 0; /* the partial file is wrong, not merely short: remove it */
    if (!rc) rc = fetch_rest(h, f, url, part, fd, &have, &s256, &s1, &r, &drop, err);
    if (drop) unlink(part);
    if (fd >= 0 && close(fd) != 0 && !rc) rc = plume_fail(err, PLUME_EIO, "%s: close failed: %s", part, strerror(errno));
    if (!rc) rc = verify_content(f, part, &s256, &s1, err);
    if (!rc && rename(part, blob_path) != 0) rc = plume_fail(err, PLUME_EIO, "%s: cannot rename: %s", part, strerror(errno));
    if (!rc) {
        show_progress(&r, 1);
        double dt = plume_now() - t0;
        char a[32], b[32];
        if (h->progress == 0)
            fprintf(stderr, "pull: %s done, %s in %.1f s (%s/s), %s verified\n", f->name,
                    hub_human(a, sizeof a, (double)(have - first_have)), dt,
                    hub_human(b, sizeof b, dt > 0 ? (double)(have - first_have) / dt : 0), f->lfs ? "sha256" : "sha1");
    }
    free(part);
    free(url);
    return rc;
}

/* Link snapshots/COMMIT/name -> ../../blobs/BLOB (one more ../ per directory in name). */
static int link_snapshot(const hub *h, const hub_file *f, const char *snap, char **err) {
    char target[PATH_MAX] = "";
    for (const char *p = f->name; (p = strchr(p, '/')); p++) strncat(target, "../", sizeof target - strlen(target) - 1);
    snprintf(target + strlen(target), sizeof target - strlen(target), "../../blobs/%s", f->blob);
    char *dir = strdup(snap);
    if (!dir) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    *strrchr(dir, '/') = 0;
    int made = mkdirs_under(h->dir, dir);
    int rc = made == -1   ? plume_fail(err, PLUME_EIO, "%s: cannot create: %s", dir, strerror(errno))
             : made == -2 ? plume_fail(err, PLUME_EIO, "%s: leads out of the cache %s", dir, h->dir)
                          : 0;
    if (!rc) unlink(snap); /* a stale or broken link */
    if (!rc && symlink(target, snap) != 0) rc = plume_fail(err, PLUME_EIO, "%s: cannot link: %s", snap, strerror(errno));
    if (!rc && !inside(h->dir, snap)) {
        unlink(snap);
        rc = plume_fail(err, PLUME_EIO, "%s: leads out of the cache %s", snap, h->dir);
    }
    free(dir);
    return rc;
}

/* Whether the snapshot entry of f is usable: 1 when it is a regular file of the listed size
 * (through a link into this repo's folder, as the official client makes, or a plain copy), 0
 * when there is none, -1 when something else is there (a link out of the cache or to nothing,
 * a FIFO, a device, the wrong size): to be removed and made again. */
static int snapshot_ok(const hub *h, const hub_file *f, const char *snap) {
    struct stat st;
    if (lstat(snap, &st) != 0) return 0;
    if (!inside(h->dir, snap)) return -1; /* resolves out of the cache, or to nothing */
    if (stat(snap, &st) != 0 || !S_ISREG(st.st_mode) || (f && (uint64_t)st.st_size != f->size)) return -1;
    return 1;
}

/* Whether the directory that holds path, when it exists, lies inside the repo's folder (a
 * snapshot directory that is a link out of the cache is never written in or cleaned). */
static int parent_inside(const hub *h, const char *path) {
    char *dir = strdup(path);
    struct stat st;
    if (!dir) return 0;
    *strrchr(dir, '/') = 0;
    int ok = lstat(dir, &st) != 0 || inside(h->dir, dir);
    free(dir);
    return ok;
}

int hub_get(hub *h, const char *name, int optional, char **path, char **err) {
    if (path) *path = NULL;
    if (!hub_name_safe(name)) return plume_fail(err, PLUME_EINVAL, "unsafe file name '%s'", name);
    char *snap = plume_sprintf("%s/snapshots/%s/%s", h->dir, h->commit, name);
    if (!snap) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    const hub_file *f = hub_find(h, name);
    int rc = 0;
    struct stat st;
    int have = parent_inside(h, snap) ? snapshot_ok(h, f, snap) : 0;
    if (!parent_inside(h, snap)) rc = plume_fail(err, PLUME_EIO, "%s: leads out of the cache %s", snap, h->dir);
    else if (have < 0 && clear_odd_entry(snap) != 0) /* a bad entry goes, and is made again below */
        rc = plume_fail(err, PLUME_EIO, "%s: a bad cache entry that cannot be removed: %s", snap, strerror(errno));
    if (rc || have > 0) {
        /* already there (downloaded by us, huggingface-cli or transformers) */
    } else if (h->offline) {
        rc = optional ? 1 : plume_fail(err, PLUME_EIO, "%s: not in the cache, and HF_HUB_OFFLINE is set (no network)", snap);
    } else if (!f) {
        rc = optional ? 1 : plume_fail(err, PLUME_EFORMAT, "%s@%s has no file %s", h->repo, h->commit, name);
    } else if (!f->blob[0]) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: the Hub's listing gives no hash for %s, so it cannot be verified", h->repo, name);
    } else {
        char *blobs = plume_sprintf("%s/blobs", h->dir), *blob = plume_sprintf("%s/blobs/%s", h->dir, f->blob);
        int made = 0;
        if (!blobs || !blob) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
        else if ((made = mkdirs_under(h->dir, blobs)) == -1)
            rc = plume_fail(err, PLUME_EIO, "%s: cannot create: %s", blobs, strerror(errno));
        else if (made == -2) rc = plume_fail(err, PLUME_EIO, "%s: leads out of the cache %s", blobs, h->dir);
        else if (clear_odd_entry(blob) != 0)
            rc = plume_fail(err, PLUME_EIO, "%s: a bad cache entry that cannot be removed: %s", blob, strerror(errno));
        else if (!(lstat(blob, &st) == 0 && (uint64_t)st.st_size == f->size)) rc = download(h, f, blob, err);
        if (!rc) rc = link_snapshot(h, f, snap, err);
        free(blobs);
        free(blob);
    }
    if (rc == 0 && path) *path = snap;
    else free(snap);
    return rc;
}

int hub_write_ref(hub *h, char **err) {
    if (is_hex(h->rev, 40)) return 0; /* a commit needs no ref */
    char *ref = plume_sprintf("%s/refs/%s", h->dir, h->rev);
    if (!ref) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    char *dir = strdup(ref);
    if (!dir) { free(ref); return plume_fail(err, PLUME_ENOMEM, "out of memory"); }
    *strrchr(dir, '/') = 0;
    int rc = 0;
    int made = mkdirs_under(h->dir, dir);
    if (made == -1) rc = plume_fail(err, PLUME_EIO, "%s: cannot create: %s", dir, strerror(errno));
    if (made == -2) rc = plume_fail(err, PLUME_EIO, "%s: leads out of the cache %s", dir, h->dir);
    if (!rc) rc = plume_write_file(ref, h->commit, strlen(h->commit), PLUME_WRITE_REPLACE, err);
    free(dir);
    free(ref);
    return rc;
}
