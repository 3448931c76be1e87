/* cli_common.c -- helpers the subcommands share: errors, number parsing, finding a model. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "common.h"

/* ---- errors and numbers ---------------------------------------------------------------- */

int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("plume: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_lib_error_free(char *err) {
    cli_error("%s", err ? err : "unknown error");
    free(err);
    return 1;
}

int cli_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int cli_int_list(const char *s, int64_t lo, int64_t hi, int32_t max, int32_t **out, int32_t *n) {
    *out = NULL;
    *n = 0;
    int32_t *v = NULL;
    size_t cap = 0;
    for (const char *p = s ? s : ""; ; p++) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || (*end && *end != ',') || x < lo || x > hi || (max > 0 && *n == max) ||
            plume_grow(&v, &cap, (size_t)*n + 1, sizeof *v)) {
            free(v);
            *n = 0;
            return -1;
        }
        v[(*n)++] = (int32_t)x;
        p = end;
        if (!*p) break;
    }
    *out = v;
    return 0;
}

int cli_float(const char *s, float *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* ---- output paths ---------------------------------------------------------------------- */

int cli_mkdir_parent(const char *path) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) return cli_error("%s: path too long", path);
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') p[--n] = 0; /* "out/" names the directory out */
    char *slash = strrchr(p, '/');
    if (!slash || slash == p) return 0;
    *slash = 0;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return cli_error("%s: cannot create: %s", p, strerror(errno));
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return cli_error("%s: cannot create: %s", p, strerror(errno));
    return 0;
}

/* ---- finding the model ----------------------------------------------------------------- */

/* Whether dir holds a model_config.json. */
static int is_bundle(const char *dir) {
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%.4000s/model_config.json", dir);
    return stat(path, &st) == 0;
}

const char *cli_plume_dir(void) {
    static char dir[4096];
    const char *home = getenv("HOME");
    snprintf(dir, sizeof dir, "%s/.cache/plume", home && *home ? home : ".");
    return dir;
}

const char *cli_default_model(void) {
    static char path[4200];
    const char *env = getenv("PLUME_MODEL");
    if (env && *env) return env;
    snprintf(path, sizeof path, "%s/gemma-4-e2b", cli_plume_dir());
    if (is_bundle(path)) return path;
    snprintf(path, sizeof path, "%s/google--gemma-4-E2B-it-q8", cli_plume_dir());
    if (is_bundle(path)) return path;
    return NULL;
}

const char *cli_model_path(const char *flag) {
    static char pulled[4200];
    struct stat st;
    if (flag && (stat(flag, &st) == 0 || !cli_is_repo_spec(flag))) return flag;
    if (flag) { /* ORG/NAME[@REV]: pulled on first use, then the bundle as it is */
        char *b;
        if (cli_pull(flag, "q8", CLI_PULL_REUSE, &b)) return NULL;
        snprintf(pulled, sizeof pulled, "%s", b);
        free(b);
        return pulled;
    }
    const char *def = cli_default_model();
    if (def) return def;
    cli_error("no model: pass -m BUNDLE or -m ORG/NAME, or set PLUME_MODEL. To get Gemma 4 E2B, run once:\n"
              "    plume pull\n"
              "  (it downloads " CLI_DEFAULT_REPO " and converts it; or convert a checkpoint you have:\n"
              "    plume convert /path/to/gemma-4-E2B-it %s/gemma-4-e2b --weights q8\n"
              "  or try plume without it: make demo)",
              cli_plume_dir());
    return NULL;
}
