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
#include "hub/store.h"

/* ---- errors and numbers ---------------------------------------------------------------- */

/* Print text on stderr line by line, each line made printable (plume_str_printable): error
 * messages quote what servers and files said, and no escape sequence of theirs may reach the
 * terminal. */
static void print_printable(const char *text) {
    for (const char *p = text;;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char *line = strndup(p, n), *safe = line ? malloc(4 * n + 1) : NULL;
        if (safe) fputs(plume_str_printable(safe, 4 * n + 1, line), stderr);
        free(line);
        free(safe);
        if (!nl) break;
        fputc('\n', stderr);
        p = nl + 1;
    }
}

int cli_error(const char *fmt, ...) {
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    char *msg = n < 0 ? NULL : malloc((size_t)n + 1);
    if (msg) vsnprintf(msg, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    va_end(ap);
    fputs("plume: ", stderr);
    print_printable(msg ? msg : "out of memory");
    fputc('\n', stderr);
    free(msg);
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
    char *err = NULL;
    return plume_mkdir_parent(path, &err) ? cli_lib_error_free(err) : 0;
}

/* ---- finding the model ----------------------------------------------------------------- */

const char *cli_model_path(const char *flag) {
    static char pulled[4200];
    struct stat st;
    if (flag && (stat(flag, &st) == 0 || !store_is_repo_spec(flag))) return flag;
    if (flag) { /* ORG/NAME[:QUANT][@REV]: pulled on first use (q8; a GGUF at its own precision), then the bundle as it is */
        char *b, *err = NULL;
        if (store_pull(flag, NULL, STORE_PULL_REUSE, &b, &err)) {
            cli_lib_error_free(err);
            return NULL;
        }
        snprintf(pulled, sizeof pulled, "%s", b);
        free(b);
        return pulled;
    }
    const char *def = store_default_bundle();
    if (def) return def;
    cli_error("no model: pass -m BUNDLE or -m ORG/NAME, or set PLUME_MODEL. To get Gemma 4 E2B, run once:\n"
              "    plume pull\n"
              "  (it downloads " STORE_DEFAULT_REPO " and converts it; or convert a checkpoint you have:\n"
              "    plume convert /path/to/gemma-4-E2B-it %s/" STORE_CONVERTED_NAME " --weights q8\n"
              "  or try plume without it: make demo)",
              store_dir());
    return NULL;
}
