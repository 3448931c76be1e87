/* cmd_pull.c -- `plume pull`, `plume list`, `plume rm`: models by name (docs/PULL.md), over the
 * hub room's model store (tools/hub/store.h) and Hub client. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "common.h"
#include "hub/hub.h"
#include "hub/store.h"

/* ---- plume pull ----------------------------------------------------------------------------- */

static const char pull_usage[] =
    "usage: plume pull [ORG/NAME[:QUANT][@REVISION]] [--weights q8|q4|bf16|f32|auto] [--drafter] [--quiet]\n"
    "  Download a Gemma 4 checkpoint from the Hugging Face Hub (default " STORE_DEFAULT_REPO ") into\n"
    "  the Hugging Face cache, convert it into a bundle under ~/.cache/plume/ and print its path.\n"
    "  Again later: only what changed is fetched; an interrupted download resumes.\n"
    "  :QUANT      of a repo of GGUF files: the one of that quant (Q4_0, Q4_K_M, Q8_0..., or\n"
    "              its file name), e.g. unsloth/gemma-4-E2B-it-GGUF:Q4_K_M\n"
    "  --weights   precision of the bundle's layer weights (default q8; a GGUF: auto, its own)\n"
    "  --drafter   also the model's MTP drafter, ORG/NAME-assistant, into BUNDLE/drafter (run, chat,\n"
    "              serve and Python draft with it; docs/SPECULATIVE.md). Pulling ORG/NAME-assistant\n"
    "              itself puts it into the bundle of ORG/NAME, pulled before\n"
    "  --quiet     no progress\n"
    "  Environment: HF_TOKEN (gated models), HF_ENDPOINT (a mirror), HF_HUB_CACHE / HF_HOME,\n"
    "  HF_HUB_OFFLINE=1 (the cache only, no network).\n";

int cmd_pull(int argc, char **argv) {
    const char *spec = NULL, *weights = NULL;
    int quiet = 0, drafter = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(pull_usage, stdout); return 0; }
        else if (!strcmp(argv[i], "--weights") && i + 1 < argc) weights = argv[++i];
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (!strcmp(argv[i], "--drafter")) drafter = 1;
        else if (argv[i][0] == '-') return cli_error("pull: unknown option '%s' (see plume pull --help)", argv[i]);
        else if (!spec) spec = argv[i];
        else return cli_error("pull: too many arguments (see plume pull --help)");
    }
    if (weights && strcmp(weights, "f32") && strcmp(weights, "bf16") && strcmp(weights, "q8") && strcmp(weights, "q4") &&
        strcmp(weights, "auto"))
        return cli_error("pull: --weights must be f32, bf16, q8, q4 or auto (not '%s')", weights);
    char *bundle, *err = NULL;
    if (store_pull(spec ? spec : STORE_DEFAULT_REPO, weights, (quiet ? STORE_PULL_QUIET : 0) | (drafter ? STORE_PULL_DRAFTER : 0),
                   &bundle, &err))
        return cli_lib_error_free(err);
    printf("%s\n", bundle);
    free(bundle);
    return 0;
}

/* ---- plume list ------------------------------------------------------------------------------ */

/* List the bundles under the plume cache, marking the default. */
static void list_bundles(void) {
    const char *dir = store_dir(), *def = store_default_bundle();
    char defreal[PATH_MAX] = "";
    if (def && !realpath(def, defreal)) defreal[0] = 0;
    printf("bundles in %s:\n", dir);
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char *p = plume_path_join(dir, e->d_name), real[PATH_MAX], sz[32];
        if (e->d_name[0] != '.' && p && store_is_bundle(p)) {
            /* pull.json and the names are anyone's text: printed without their escape sequences */
            char *repo = store_recorded(p, "repo"), *commit = store_recorded(p, "commit"), name[1100], r[600], c[64];
            int is_def = realpath(p, real) && !strcmp(real, defreal);
            printf("  %c %-40s %9s  %s%s%.12s\n", is_def ? '*' : ' ', plume_str_printable(name, sizeof name, e->d_name),
                   hub_human(sz, sizeof sz, (double)store_tree_bytes(p)),
                   repo ? plume_str_printable(r, sizeof r, repo) : "(converted by hand)", commit ? " @ " : "",
                   commit ? plume_str_printable(c, sizeof c, commit) : "");
            free(repo);
            free(commit);
            n++;
        }
        free(p);
    }
    if (d) closedir(d);
    if (!n) printf("    (none: plume pull makes one)\n");
    char shown[4 * PATH_MAX];
    if (def && !defreal[0]) printf("    default: %s (does not exist)\n", plume_str_printable(shown, sizeof shown, def));
}

/* List the model repos of the Hugging Face cache with their size and refs. */
static void list_checkpoints(void) {
    char *cache = hub_cache_root();
    if (!cache) return;
    printf("checkpoints in %s:\n", cache);
    DIR *d = opendir(cache);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strncmp(e->d_name, "models--", 8)) continue;
        char name[300], *sep, sz[32];
        snprintf(name, sizeof name, "%s", e->d_name + 8);
        if (!(sep = strstr(name, "--"))) continue;
        *sep = '/';
        memmove(sep + 1, sep + 2, strlen(sep + 2) + 1);
        char *p = plume_path_join(cache, e->d_name), *refs = p ? plume_path_join(p, "refs/main") : NULL, *c = NULL, *err = NULL;
        if (refs && plume_file_exists(refs) && plume_read_file(refs, &c, NULL, &err) == 0) c[strcspn(c, "\r\n")] = 0;
        char shown[1300], cs[64];
        printf("    %-40s %9s  %s%.12s\n", plume_str_printable(shown, sizeof shown, name),
               hub_human(sz, sizeof sz, p ? (double)store_tree_bytes(p) : 0), c ? "main @ " : "",
               c ? plume_str_printable(cs, sizeof cs, c) : "");
        free(c);
        free(err);
        free(refs);
        free(p);
        n++;
    }
    if (d) closedir(d);
    if (!n) printf("    (none)\n");
    free(cache);
}

int cmd_list(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: plume list\n  The bundles under ~/.cache/plume (* marks the one used without -m) and the\n"
               "  checkpoints in the Hugging Face cache, with their sizes.\n");
        return 0;
    }
    if (argc > 1) return cli_error("list: no arguments expected (see plume list --help)");
    list_bundles();
    list_checkpoints();
    return 0;
}

/* ---- plume rm ------------------------------------------------------------------------------- */

/* Remove one directory tree, saying so; 0 or 1. */
static int rm_say(const char *path) {
    char sz[32];
    uint64_t b = store_tree_bytes(path);
    if (plume_rm_tree(path) != 0) return cli_error("rm: cannot remove %s: %s", path, strerror(errno));
    printf("removed %s (%s)\n", path, hub_human(sz, sizeof sz, (double)b));
    return 0;
}

/* plume rm ORG/NAME: the checkpoint in the HF cache and every bundle pulled from it. */
static int rm_repo(const char *spec) {
    char repo[128], rev[128], quant[64];
    if (store_spec_split(spec, repo, sizeof repo, rev, sizeof rev, quant, sizeof quant))
        return cli_error("rm: '%s' is not a bundle name or ORG/NAME", spec);
    if (strchr(spec, '@') || quant[0])
        return cli_error("rm: %s: the download of a repo is removed whole; give ORG/NAME without @REVISION or :QUANT", spec);
    hub h;
    char *err = NULL;
    if (hub_open(&h, repo, "main", &err)) return cli_lib_error_free(err);
    int rc = 0, n = 0;
    const char *dir = store_dir();
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char *p = e->d_name[0] != '.' ? plume_path_join(dir, e->d_name) : NULL, *from = p ? store_recorded(p, "repo") : NULL;
        if (from && !strcmp(from, repo)) rc |= rm_say(p), n++;
        free(from);
        free(p);
    }
    if (d) closedir(d);
    struct stat st;
    if (lstat(h.dir, &st) == 0) rc |= rm_say(h.dir), n++;
    if (!n) rc = cli_error("rm: nothing of %s in %s or %s (plume list shows what there is)", repo, dir, h.cache);
    hub_close(&h);
    return rc;
}

int cmd_rm(int argc, char **argv) {
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("usage: plume rm NAME\n  NAME a bundle as plume list shows it: remove ~/.cache/plume/NAME.\n"
               "  NAME = ORG/NAME: remove that checkpoint from the Hugging Face cache and the bundles\n"
               "  pulled from it.\n");
        return argc == 2 ? 0 : 2;
    }
    const char *name = argv[1];
    if (strchr(name, '/')) return rm_repo(name);
    if (!hub_name_safe(name) || name[0] == '.') return cli_error("rm: '%s' is not a bundle name", name);
    char *p = plume_path_join(store_dir(), name);
    int rc = !p ? cli_error("out of memory")
             : !store_is_bundle(p) ? cli_error("rm: no bundle %s (plume list shows them)", p)
                             : rm_say(p);
    free(p);
    return rc;
}
