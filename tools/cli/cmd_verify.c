/* cmd_verify.c -- `plume verify BUNDLE`: check every file of a bundle against the SHA-256
 * manifest convert and synth wrote (plume_bundle_verify), with a progress bar on a terminal. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char verify_usage[] =
    "usage: plume verify [BUNDLE] [--quiet]\n"
    "  Check the SHA-256 of every file of the bundle (default: -m's default bundle) against its\n"
    "  manifest.sha256; each corrupt, missing or unlisted file is named. Exit 0: all match.\n";

/* What the progress bar and the reports share: whether a bar is drawn (a report starts a new
 * line then), and how many bad files were reported. */
typedef struct {
    int bar;
    int reported;
} verify_state;

/* Draw the progress bar on stderr. */
static void verify_progress(uint64_t done, uint64_t total, void *arg) {
    (void)arg;
    int w = total ? (int)(40 * (double)done / (double)total) : 40;
    fprintf(stderr, "\rverifying [%-40.*s] %3d%%", w, "########################################",
            total ? (int)(100 * (double)done / (double)total) : 100);
}

/* One bad file: its own line on stderr. */
static void verify_report(const char *line, void *arg) {
    verify_state *vs = arg;
    if (vs->bar) fputc('\n', stderr);
    vs->bar = 0;
    vs->reported++;
    cli_error("%s", line);
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
    verify_state vs = {!quiet && isatty(2), 0};
    char *err = NULL;
    int rc = plume_bundle_verify(dir, vs.bar ? verify_progress : NULL, &vs, verify_report, &err);
    if (vs.bar) fputc('\n', stderr);
    if (rc && vs.reported) { /* the files were named one per line already */
        free(err);
        return 1;
    }
    if (rc) return cli_lib_error_free(err);
    if (!quiet) printf("%s: every file matches its manifest\n", dir);
    return 0;
}
