/* fuzz_hub.c -- what `plume pull` reads from the Hugging Face Hub (tools/hub/hub.c): the revision
 * API's JSON (commit, siblings with names, sizes, blob ids, lfs.sha256) through
 * hub_parse_revision, response header lines (status, ETag, X-Linked-*, X-Repo-Commit,
 * Content-Range) through hub_header_line and hub_check_headers, and, for some inputs, the
 * repo id and revision given to hub_open. Then the listing is materialized in a scratch
 * cache as a pull would: each small listed file gets its blob (written here, so no download
 * is ever attempted), hub_get links it into snapshots/, hub_write_ref writes refs/REV.
 * Input: flags | [repo 0xFF rev 0xFF, when flags & 1] | header lines (split by '\n') 0xFF |
 * the API body (the rest).
 * Invariants: a refusal has a message; an accepted listing has a 40-hex commit, names that
 * stay under the snapshot (relative, no "." or ".." components, no backslash or control
 * byte) and blob ids of 64 hex (LFS) or 40 hex; and nothing is ever created outside the
 * repo's folder of the cache, nor does any link created point out of it. */
#include "fuzz.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <sys/stat.h>

#include "hub/hub.h"

#define MAX_FILES 8     /* files of a listing materialized */
#define MAX_BLOB 4096   /* bytes of a blob written here; a larger file is not materialized */

static char fence[PATH_MAX]; /* a directory holding only cache/ */
static char cache[PATH_MAX + 8];

/* Remove the scratch directory at exit (it is empty between inputs). */
static void remove_fence(void) { rmdir(fence); }

/* A scratch cache no other process uses; the Hub settings point nowhere (a download, were
 * one attempted, fails at once: connection refused, no retry). */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *p = fuzz_path(0, "hub");
    if ((mkdir(p, 0755) != 0 && errno != EEXIST) || !realpath(p, fence)) {
        fprintf(stderr, "fuzz: cannot create %s\n", p);
        exit(2);
    }
    snprintf(cache, sizeof cache, "%s/cache", fence);
    atexit(remove_fence);
    setenv("HF_HUB_CACHE", cache, 1);
    setenv("HF_ENDPOINT", "http://127.0.0.1:9", 1);
    setenv("HF_TOKEN_PATH", "/nonexistent/token", 1);
    setenv("PLUME_HUB_RETRIES", "0", 1);
    setenv("PLUME_HUB_BACKOFF_MS", "0", 1);
    unsetenv("HF_TOKEN");
    unsetenv("HF_HUB_OFFLINE");
    return 0;
}

/* Whether s is n lowercase hex digits. */
static int hex(const char *s, size_t n) {
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* Whether a listed name stays under the directory it is joined to: relative, components
 * neither empty nor "." nor "..", no backslash or control byte. */
static int name_stays(const char *name) {
    if (!*name || name[0] == '/') return 0;
    for (const char *p = name; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '\\' || *p == 0x7f) return 0;
    for (const char *p = name;;) {
        size_t len = strcspn(p, "/");
        if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.')) return 0;
        if (!p[len]) return 1;
        p += len + 1;
    }
}

/* path with "." and ".." components resolved lexically (no links followed), into out. */
static void normalize(const char *path, char *out, size_t cap) {
    size_t n = 0;
    out[0] = 0;
    for (const char *p = path; *p;) {
        while (*p == '/') p++;
        size_t len = strcspn(p, "/");
        if (len == 0) break;
        if (len == 1 && p[0] == '.') {
        } else if (len == 2 && p[0] == '.' && p[1] == '.') {
            while (n > 0 && out[n - 1] != '/') n--;
            if (n > 0) n--;
            out[n] = 0;
        } else if (n + 1 + len < cap) {
            out[n++] = '/';
            memcpy(out + n, p, len);
            n += len;
            out[n] = 0;
        }
        p += len;
    }
    if (!n) snprintf(out, cap, "/");
}

/* Whether path is dir or lies under it. */
static int under(const char *path, const char *dir) {
    size_t n = strlen(dir);
    return !strncmp(path, dir, n) && (path[n] == 0 || path[n] == '/');
}

static const char *repo_dir; /* the repo's folder, for the walk */

/* nftw visitor: every entry is the fence, the cache, or in the repo's folder; every link
 * points into the repo's folder. */
static int visit(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (!strcmp(path, fence) || !strcmp(path, cache)) return 0;
    if (!under(path, repo_dir)) {
        fprintf(stderr, "fuzz_hub: %s was created outside %s\n", path, repo_dir);
        abort();
    }
    if (type == FTW_SL || type == FTW_SLN) {
        char target[PATH_MAX], joined[2 * PATH_MAX + 2], norm[2 * PATH_MAX + 2];
        ssize_t k = readlink(path, target, sizeof target - 1);
        if (k < 0) abort();
        target[k] = 0;
        if (target[0] == '/') snprintf(joined, sizeof joined, "%s", target);
        else snprintf(joined, sizeof joined, "%.*s/%s", (int)(strrchr(path, '/') - path), path, target);
        normalize(joined, norm, sizeof norm);
        if (!under(norm, repo_dir)) {
            fprintf(stderr, "fuzz_hub: link %s -> %s leads out of %s\n", path, target, repo_dir);
            abort();
        }
    }
    return 0;
}

/* rm -rf visitor. */
static int rm_one(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (type == FTW_DP) rmdir(path);
    else unlink(path);
    return 0;
}

/* mkdir -p of the repo's blobs/ (the cache root may not exist yet). */
static void make_blobs_dir(const hub *h) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/blobs", h->dir);
    for (char *s = p + strlen(fence) + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        mkdir(p, 0755);
        *s = '/';
    }
    mkdir(p, 0755);
}

/* Materialize file f of the listing as a pull would, its blob written here. */
static void materialize(hub *h, const hub_file *f) {
    char blob[PATH_MAX];
    struct stat st;
    if (f->blob[0]) {
        if (f->size > MAX_BLOB) return; /* it would be downloaded */
        if (!(hex(f->blob, 40) || hex(f->blob, 64))) abort(); /* checked before it names a file */
        snprintf(blob, sizeof blob, "%s/blobs/%s", h->dir, f->blob);
        if (stat(blob, &st) == 0) {
            if ((uint64_t)st.st_size != f->size) return; /* another listed size: it would be downloaded */
        } else {
            make_blobs_dir(h);
            static const char zeros[MAX_BLOB];
            if (fuzz_write(blob, zeros, (size_t)f->size)) return;
        }
    }
    char *path = NULL, *err = NULL;
    int rc = hub_get(h, f->name, 0, &path, &err);
    if (rc == 0) {
        char real[PATH_MAX];
        if (!path || !realpath(path, real) || !under(real, h->dir)) {
            fprintf(stderr, "fuzz_hub: %s resolves out of %s\n", path ? path : "(null)", h->dir);
            abort();
        }
    } else if (!err) {
        abort();
    }
    fuzz_note(err);
    free(path);
    free(err);
}

/* One listing (and headers, repo, revision) through the client. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    uint8_t flags = fuzz_byte(&in);
    char *repo = NULL, *rev = NULL;
    if (flags & 1) {
        repo = fuzz_field(&in, NULL);
        rev = fuzz_field(&in, NULL);
    }
    size_t hlen = 0;
    char *headers = fuzz_field(&in, &hlen);
    char *body = malloc(in.n ? in.n : 1); /* exactly the body's bytes, no NUL */
    if (!body) abort();
    memcpy(body, in.p, in.n);
    size_t blen = in.n;

    hub h;
    char *err = NULL;
    if (hub_open(&h, repo ? repo : "fuzz/repo", rev ? rev : "main", &err)) {
        if (!err) abort();
        goto done;
    }
    char org[128], dir[PATH_MAX + 512];
    snprintf(org, sizeof org, "%s", h.repo);
    *strchr(org, '/') = 0;
    snprintf(dir, sizeof dir, "%s/models--%s--%s", cache, org, strchr(h.repo, '/') + 1);
    char norm[PATH_MAX + 512];
    normalize(dir, norm, sizeof norm);
    if (strcmp(h.dir, dir) || strcmp(norm, dir) || !name_stays(h.rev) || strchr(h.dir + strlen(cache) + 1, '/'))
        abort(); /* the repo's folder is one plain directory of the cache; the revision a plain name */
    repo_dir = h.dir;
    if (hub_parse_revision(&h, body, blen, "api", &err)) {
        if (!err) abort();
    } else {
        if (!hex(h.commit, 40) || h.n_files < 0) abort();
        for (int32_t i = 0; i < h.n_files; i++) {
            const hub_file *f = &h.files[i];
            if (!f->name || !name_stays(f->name)) abort();
            if (f->blob[0] && !(f->lfs ? hex(f->blob, 64) : hex(f->blob, 40))) abort();
            if (f->lfs && !f->blob[0]) abort();
        }
        hub_headers hd = {0};
        for (char *line = headers, *end; line && *line; line = end ? end + 1 : NULL) {
            end = strchr(line, '\n');
            size_t n = end ? (size_t)(end - line) : strlen(line);
            char *copy = malloc(n ? n : 1); /* exactly the line, as curl hands it: no NUL */
            if (!copy) abort();
            memcpy(copy, line, n);
            hub_header_line(&hd, copy, n);
            free(copy);
        }
        if (hd.etag[sizeof hd.etag - 1] || hd.linked_etag[sizeof hd.linked_etag - 1] ||
            hd.repo_commit[sizeof hd.repo_commit - 1] || hd.error_code[sizeof hd.error_code - 1] ||
            hd.error_message[sizeof hd.error_message - 1])
            abort(); /* every value is terminated inside its field */
        for (int32_t i = 0; i < h.n_files && i < MAX_FILES; i++) {
            const hub_file *f = &h.files[i];
            int rc = hub_check_headers(&h, f, &hd, "file", &err);
            if (rc && !err) abort();
            fuzz_note(err);
            free(err);
            err = NULL;
            if (hub_missing_bytes(&h, f) > f->size) abort();
        }
        if (flags & 2) {
            for (int32_t i = 0; i < h.n_files && i < MAX_FILES; i++)
                if (hub_find(&h, h.files[i].name) == &h.files[i]) materialize(&h, &h.files[i]);
        }
        if (flags & 4) {
            if (hub_write_ref(&h, &err) && !err) abort();
        }
        nftw(fence, visit, 16, FTW_PHYS);
        nftw(cache, rm_one, 16, FTW_PHYS | FTW_DEPTH);
    }
    fuzz_note(err);
    hub_close(&h);
done:
    free(err);
    free(repo);
    free(rev);
    free(headers);
    free(body);
    return 0;
}
