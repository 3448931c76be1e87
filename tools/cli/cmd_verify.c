/* cmd_verify.c -- `plume verify BUNDLE`: check every file of a bundle against the SHA-256
 * manifest convert and synth wrote (tools/manifest.c), with a progress bar on a terminal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "manifest.h"

static const char verify_usage[] =
    "usage: plume verify [BUNDLE] [--quiet]\n"
    "  Check the SHA-256 of every file of the bundle (default: -m's default bundle) against its\n"
    "  manifest.sha256; each corrupt, missing or unlisted file is named. Exit 0: all match.\n";

/* Draw the progress bar on stderr. */
static void verify_progress(uint64_t done, uint64_t total, void *arg) {
    (void)arg;
    int w = total ? (int)(40 * (double)done / (double)total) : 40;
    fprintf(stderr, "\rverifying [%-40.*s] %3d%%", w, "########################################",
            total ? (int)(100 * (double)done / (double)total) : 100);
}

/* One bad file: its own line on stderr. */
static void verify_report(const char *line, void *arg) {
    if (*(int *)arg) fputc('\n', stderr);
    *(int *)arg = 0;
    fprintf(stderr, "plume: %s\n", line);
}

int cmd_verify(int argc, char **argv) {
    const char *dir = NULL;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(verify_usage, stdout); return 0; }
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (argv[i][0] == '-') return cli_error("verify: unknown option '%s'", argv[i]);
        else if (!dir) dir = argv[i];
        else return cli_error("verify: too many arguments");
    }
    if (!dir && !(dir = cli_model_path(NULL))) return 1;
    int bar = !quiet && isatty(2);
    char *err = NULL;
    int rc = plume_manifest_verify(dir, bar ? verify_progress : NULL, &bar, verify_report, &err);
    if (bar) fputc('\n', stderr);
    if (rc == PLUME_EFORMAT && err) { /* the files were named one per line already */
        free(err);
        return 1;
    }
    if (rc) return cli_lib_error_free(err);
    if (!quiet) printf("%s: every file matches its manifest\n", dir);
    return 0;
}
