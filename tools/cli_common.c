/* cli_common.c -- helpers the subcommands share: errors, number parsing, finding a model. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "cli.h"

int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("plume: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_lib_error(char *err) {
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

int cli_float(const char *s, float *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

/* Whether dir holds a model_config.json. */
static int is_bundle(const char *dir) {
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%.4000s/model_config.json", dir);
    return stat(path, &st) == 0;
}

const char *cli_model_path(const char *flag) {
    static char home_path[4096];
    if (flag) return flag;
    const char *env = getenv("PLUME_MODEL");
    if (env && *env) return env;
    const char *home = getenv("HOME");
    snprintf(home_path, sizeof home_path, "%s/.cache/plume/gemma-4-e2b", home ? home : ".");
    if (is_bundle(home_path)) return home_path;
    cli_error("no model: pass -m BUNDLE, set PLUME_MODEL, or put a bundle at %s.\n"
              "  Make one from the Hugging Face checkpoint (google/gemma-4-E2B-it):\n"
              "    plume convert /path/to/gemma-4-E2B-it %s --weights q8\n"
              "  or try plume without it: make demo",
              home_path, home_path);
    return NULL;
}
