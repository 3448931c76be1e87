/* manifest.c -- the bundle manifest (manifest.h; SHA-256 from digest.c). A bundle is a directory of
 * files a user may have copied across machines or downloaded; the manifest lets plume verify
 * find a flipped byte in any of them (model open stays fast: it checks sizes and headers,
 * never hashes gigabytes). Files are hashed in 1 MB reads; memory stays flat. */
#include "manifest.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "digest.h"

/* ---- files --------------------------------------------------------------------------------- */

/* The hex SHA-256 of a file (hex[65]); bytes hashed are added to *done and reported. */
static int hash_file(const char *path, char hex[65], uint64_t *done, uint64_t total, plume_verify_progress progress,
                     void *arg, char **err) {
    /* a regular file only: a FIFO would block the check forever, /dev/zero never end */
    int fd = plume_open_regular(path, err);
    if (fd < 0) return PLUME_EIO;
    uint8_t *buf = malloc(1 << 20);
    if (!buf) { close(fd); return plume_fail(err, PLUME_ENOMEM, "out of memory"); }
    sha256_ctx c;
    sha256_init(&c);
    ssize_t r;
    while ((r = read(fd, buf, 1 << 20)) != 0) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        sha256_update(&c, buf, (size_t)r);
        *done += (uint64_t)r;
        if (progress) progress(*done, total, arg);
    }
    int bad = r < 0 ? errno : 0;
    close(fd);
    free(buf);
    if (bad) return plume_fail(err, PLUME_EIO, "%s: read error: %s", path, strerror(bad));
    sha256_final_hex(&c, hex);
    return 0;
}

/* A growing list of relative paths. */
typedef struct {
    char **p;
    size_t n, cap;
    uint64_t bytes;
} path_list;

/* Append a malloc'd path (freed on failure). */
static int list_add(path_list *l, char *s) {
    if (!s) return PLUME_ENOMEM;
    if (plume_grow(&l->p, &l->cap, l->n + 1, sizeof *l->p)) { free(s); return PLUME_ENOMEM; }
    l->p[l->n++] = s;
    return 0;
}

/* Free the list. */
static void list_free(path_list *l) {
    for (size_t i = 0; i < l->n; i++) free(l->p[i]);
    free(l->p);
}

/* Whether a name is a temporary file of an unfinished write: NAME.tmp (older plume) or
 * NAME.tmp-XXXXXX (common.h's safe writer). */
static int is_tmp_name(const char *n) {
    size_t len = strlen(n);
    const char *t = strstr(n, ".tmp-");
    return (len > 4 && !strcmp(n + len - 4, ".tmp")) || (t && strlen(t) == 11);
}

/* Collect the regular files below root/rel (rel "" for root itself), except the manifest and
 * temporary files of an unfinished write. Links are not followed (lstat): a bundle's files
 * are its own, and a link to a directory above could make the walk endless. */
static int walk(const char *root, const char *rel, path_list *l, char **err) {
    char *dir = *rel ? plume_sprintf("%s/%s", root, rel) : plume_sprintf("%s", root);
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) {
        int rc = plume_fail(err, PLUME_EIO, "%s: cannot list: %s", dir ? dir : root, strerror(errno));
        free(dir);
        return rc;
    }
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d)) != NULL;) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || (!*rel && !strcmp(n, MANIFEST_NAME)) || is_tmp_name(n)) continue;
        char *r = *rel ? plume_sprintf("%s/%s", rel, n) : plume_sprintf("%s", n);
        char *full = r ? plume_sprintf("%s/%s", root, r) : NULL;
        struct stat sb;
        if (!r || !full) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
        else if (lstat(full, &sb) != 0) rc = plume_fail(err, PLUME_EIO, "%s: %s", full, strerror(errno));
        else if (S_ISDIR(sb.st_mode)) rc = walk(root, r, l, err);
        else if (S_ISREG(sb.st_mode)) {
            l->bytes += (uint64_t)sb.st_size;
            rc = list_add(l, r) ? plume_fail(err, PLUME_ENOMEM, "out of memory") : 0;
            r = NULL;
        }
        free(r);
        free(full);
    }
    closedir(d);
    free(dir);
    return rc;
}

/* qsort order of paths. */
static int by_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int plume_manifest_write(const char *dir, char **err) {
    path_list l = {0};
    int rc = walk(dir, "", &l, err);
    if (!rc) qsort(l.p, l.n, sizeof *l.p, by_path);
    size_t cap = 1;
    for (size_t i = 0; i < l.n; i++) cap += strlen(l.p[i]) + 68;
    char *text = rc ? NULL : malloc(cap);
    if (!rc && !text) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    size_t at = 0;
    uint64_t done = 0;
    for (size_t i = 0; !rc && i < l.n; i++) {
        char hex[65], *full = plume_sprintf("%s/%s", dir, l.p[i]);
        rc = full ? hash_file(full, hex, &done, l.bytes, NULL, NULL, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
        /* the converter's files, just written and hashed in small page-cache folios, leave
         * the cache: the first open reads the weights back in huge ones (plume_map_open_dense) */
        if (!rc) plume_file_uncache(full);
        if (!rc) at += (size_t)snprintf(text + at, cap - at, "%s  %s\n", hex, l.p[i]);
        free(full);
    }
    if (!rc) {
        char *path = plume_sprintf("%s/%s", dir, MANIFEST_NAME);
        rc = path ? plume_write_file(path, text, at, PLUME_WRITE_REPLACE, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
        free(path);
    }
    free(text);
    list_free(&l);
    return rc;
}

/* Whether a manifest path is as the converter writes it: components that are neither empty nor
 * "." (so that no two lines name one file by two spellings). */
static int path_canonical(const char *p) {
    for (;;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.')) return 0;
        if (!e) return 1;
        p = e + 1;
    }
}

/* Report one problem: through report (when given) and as the first error message. */
static void problem(void (*report)(const char *, void *), void *arg, char **err, const char *line) {
    if (report) report(line, arg);
    plume_fail(err, PLUME_EFORMAT, "%s", line);
}

int plume_bundle_verify(const char *dir, plume_verify_progress progress, void *arg,
                        void (*report)(const char *line, void *arg), char **err) {
    char *mpath = plume_sprintf("%s/%s", dir, MANIFEST_NAME), *text = NULL;
    size_t len = 0;
    if (!mpath) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (plume_read_file(mpath, &text, &len, NULL)) {
        int rc = plume_fail(err, PLUME_EIO, "%s: no %s (written by plume convert and synth; this bundle predates it?)",
                            dir, MANIFEST_NAME);
        free(mpath);
        return rc;
    }
    /* first pass: parse every line and sum the sizes, for the progress total */
    path_list names = {0};
    char *line = text, *nl, msg[4400];
    int rc = 0, bad = 0;
    for (; !rc && *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) { rc = plume_fail(err, PLUME_EFORMAT, "%s: the last line is unterminated (truncated?)", mpath); break; }
        *nl = 0;
        if (nl - line < 67 || line[64] != ' ' || line[65] != ' ' || strspn(line, "0123456789abcdef") != 64 ||
            strstr(line + 66, "..") || line[66] == '/') {
            rc = plume_fail(err, PLUME_EFORMAT, "%s: malformed line '%.80s'", mpath, line);
            break;
        }
        if (!path_canonical(line + 66)) {
            rc = plume_fail(err, PLUME_EFORMAT, "%s: malformed path in line '%.80s' (an empty or \".\" component)", mpath,
                            line);
            break;
        }
        struct stat sb;
        char *full = plume_sprintf("%s/%s", dir, line + 66);
        if (full && stat(full, &sb) == 0) names.bytes += (uint64_t)sb.st_size;
        free(full);
        if (list_add(&names, strdup(line))) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    }
    /* a path listed twice is refused before anything is hashed (each line would hash its file
     * again: 20,000 copies of one line were 20,000 reads of it) */
    char **sorted = !rc && names.n ? malloc(names.n * sizeof *sorted) : NULL;
    if (!rc && names.n && !sorted) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (sorted) {
        for (size_t i = 0; i < names.n; i++) sorted[i] = names.p[i] + 66;
        qsort(sorted, names.n, sizeof *sorted, by_path);
        for (size_t i = 1; !rc && i < names.n; i++)
            if (!strcmp(sorted[i - 1], sorted[i]))
                rc = plume_fail(err, PLUME_EFORMAT, "%s: '%.200s' is listed more than once", mpath, sorted[i]);
    }
    uint64_t done = 0;
    for (size_t i = 0; !rc && i < names.n; i++) {
        const char *want = names.p[i], *rel = names.p[i] + 66;
        char hex[65], *full = plume_sprintf("%s/%s", dir, rel), *ferr = NULL;
        if (!full) { rc = plume_fail(err, PLUME_ENOMEM, "out of memory"); break; }
        if (hash_file(full, hex, &done, names.bytes, progress, arg, &ferr)) {
            snprintf(msg, sizeof msg, "%s", ferr ? ferr : full);
            problem(report, arg, err, msg), bad++;
        } else if (memcmp(hex, want, 64)) {
            snprintf(msg, sizeof msg, "%s: sha256 mismatch (the file is corrupt or was changed)", full);
            problem(report, arg, err, msg), bad++;
        }
        free(ferr);
        free(full);
    }
    /* files the manifest does not list */
    path_list now = {0};
    char *werr = NULL;
    if (!rc && walk(dir, "", &now, &werr) == 0)
        for (size_t i = 0; i < now.n; i++) {
            if (!bsearch(&now.p[i], sorted, names.n, sizeof *sorted, by_path)) {
                snprintf(msg, sizeof msg, "%s/%s: not in the manifest", dir, now.p[i]);
                problem(report, arg, err, msg), bad++;
            }
        }
    free(werr);
    free(sorted);
    list_free(&now);
    list_free(&names);
    free(text);
    free(mpath);
    return rc ? rc : bad ? PLUME_EFORMAT : 0;
}
