/* test_convert.c -- plume_convert(), the library's converter, called directly: it writes
 * the same bundle as `plume convert`, and every failure is a code and a message with no
 * output left behind. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plume.h"
#include "t.h"

static char *tmp;

/* Whether a path exists. */
static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* The library's bundle equals the CLI's, file by file, and opens. */
static void test_same_as_cli(void) {
    char lib[600], cli[600], out[4096];
    snprintf(lib, sizeof lib, "%s/lib-q8", tmp);
    snprintf(cli, sizeof cli, "%s/cli-q8", tmp);
    char hf[600];
    snprintf(hf, sizeof hf, "%s/tiny-a/hf", t_data());
    char *err = NULL;
    plume_convert_params p = plume_convert_default_params();
    CHECK(!strcmp(p.weights, "q8") && p.n_ctx == 0 && p.progress == 0, "defaults");
    int rc = plume_convert(hf, lib, NULL, &err);
    CHECK(rc == 0, "convert: %s", err ? err : "");
    free(err);
    CHECK(t_sh(out, sizeof out, "%s/plume convert %s %s --quiet", t_build(), hf, cli) == 0, "cli: %s", out);
    CHECK(t_sh(out, sizeof out, "diff -r %s %s", lib, cli) == 0, "bundles differ: %s", out);
    plume_model *m = NULL;
    err = NULL;
    CHECK(plume_model_open(&m, lib, NULL, &err) == 0, "open: %s", err ? err : "");
    free(err);
    if (m) CHECK(!strcmp(plume_model_weights(m), "q8") && plume_model_n_vocab(m) == 512, "model");
    plume_model_free(m);
}

/* n_ctx and weights are honoured. */
static void test_params(void) {
    char dir[600], hf[600];
    snprintf(dir, sizeof dir, "%s/bf16-ctx", tmp);
    snprintf(hf, sizeof hf, "%s/tiny-a/hf", t_data());
    plume_convert_params p = plume_convert_default_params();
    p.weights = "bf16";
    p.n_ctx = 96;
    char *err = NULL;
    CHECK(plume_convert(hf, dir, &p, &err) == 0, "convert: %s", err ? err : "");
    free(err);
    plume_model *m = NULL;
    err = NULL;
    CHECK(plume_model_open(&m, dir, NULL, &err) == 0, "open: %s", err ? err : "");
    free(err);
    if (m) CHECK(!strcmp(plume_model_weights(m), "bf16") && plume_model_n_ctx(m) == 96, "%s %d",
                 plume_model_weights(m), plume_model_n_ctx(m));
    plume_model_free(m);
}

/* Bad arguments and inputs: a code, a message naming the fault, no output directory. */
static void test_errors(void) {
    char hf[600], dst[600], missing[600];
    snprintf(hf, sizeof hf, "%s/tiny-a/hf", t_data());
    snprintf(dst, sizeof dst, "%s/never", tmp);
    snprintf(missing, sizeof missing, "%s/no-checkpoint", tmp);
    plume_convert_params p = plume_convert_default_params();
    char *err = NULL;
    p.weights = "q7";
    CHECK(plume_convert(hf, dst, &p, &err) == PLUME_EINVAL && err && strstr(err, "q7"), "weights: %s",
          err ? err : "");
    free(err);
    err = NULL;
    p = plume_convert_default_params();
    p.layout = "columns";
    CHECK(plume_convert(hf, dst, &p, &err) == PLUME_EINVAL && err && strstr(err, "columns") && strstr(err, "auto"),
          "layout: %s",
          err ? err : "");
    free(err);
    err = NULL;
    p = plume_convert_default_params();
    p.n_ctx = -3;
    CHECK(plume_convert(hf, dst, &p, &err) == PLUME_EINVAL && err, "n_ctx");
    free(err);
    err = NULL;
    p.n_ctx = 1 << 30;
    CHECK(plume_convert(hf, dst, &p, &err) == PLUME_EINVAL && err && strstr(err, "max_position"), "n_ctx max: %s",
          err ? err : "");
    free(err);
    err = NULL;
    CHECK(plume_convert(NULL, dst, NULL, &err) == PLUME_EINVAL && err, "NULL dir");
    free(err);
    err = NULL;
    CHECK(plume_convert(missing, dst, NULL, &err) == PLUME_EIO && err && strstr(err, "no-checkpoint"), "missing: %s",
          err ? err : "");
    free(err);
    err = NULL;
    CHECK(plume_convert(hf, tmp, NULL, &err) == PLUME_EIO && err && strstr(err, "already exists"), "exists: %s",
          err ? err : "");
    free(err);
    CHECK(plume_convert(missing, dst, NULL, NULL) == PLUME_EIO, "err may be NULL");
    CHECK(!exists(dst), "%s was left behind", dst);
}

int main(void) {
    tmp = t_tmpdir("convert");
    RUN(test_same_as_cli);
    RUN(test_params);
    RUN(test_errors);
    char out[4096];
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
