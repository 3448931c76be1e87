/* cmd_pull.c -- `plume pull`, `plume list`, `plume rm`: models by name (docs/PULL.md).
 *
 * A pull resolves ORG/NAME@REV on the Hub (tools/hub.c), fetches only what the converter reads
 * into the Hugging Face cache (config and tokenizer files, the safetensors index and the shards
 * it names), then converts the snapshot in-process into the bundle
 * ~/.cache/plume/ORG--NAME[@REV]-WEIGHTS, recording where it came from in pull.json. The
 * config is checked as soon as it arrives, before any shard: a checkpoint plume cannot run
 * costs one small request, not 10 GB. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cli.h"
#include "common.h"
#include "hub/hub.h"

/* Small files the converter or a chat front end reads; absent ones are skipped. */
static const char *const small_files[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                          "chat_template.jinja", "chat_template.json", "generation_config.json"};

/* ---- names ---------------------------------------------------------------------------------- */

/* Split SPEC = ORG/NAME[@REV] into repo and rev (default "main"); 0, or -1 if malformed. */
static int split_spec(const char *spec, char *repo, size_t rcap, char *rev, size_t vcap) {
    const char *at = strchr(spec, '@');
    size_t n = at ? (size_t)(at - spec) : strlen(spec);
    if (n >= rcap || (at && (!at[1] || strlen(at + 1) >= vcap))) return -1;
    memcpy(repo, spec, n);
    repo[n] = 0;
    snprintf(rev, vcap, "%s", at ? at + 1 : "main");
    return hub_repo_valid(repo) ? 0 : -1;
}

int cli_is_repo_spec(const char *s) {
    char repo[128], rev[128];
    return split_spec(s, repo, sizeof repo, rev, sizeof rev) == 0;
}

/* The bundle a pull of repo@rev with these weights makes: ~/.cache/plume/ORG--NAME[@REV]-W
 * ('/' in a branch name becomes '--'); malloc'd. */
static char *bundle_for(const char *repo, const char *rev, const char *weights) {
    char name[400] = "", *o = name;
    for (const char *p = repo; *p && o < name + 300; p++) {
        if (*p == '/') o += sprintf(o, "--");
        else *o++ = *p;
    }
    if (strcmp(rev, "main")) {
        *o++ = '@';
        for (const char *p = rev; *p && o < name + 380; p++) {
            if (*p == '/') o += sprintf(o, "--");
            else *o++ = *p;
        }
    }
    *o = 0;
    return plume_sprintf("%s/%s-%s", cli_plume_dir(), name, weights);
}

/* Whether dir is a bundle (holds model_config.json). */
static int is_bundle(const char *dir) {
    char *p = plume_path_join(dir, "model_config.json");
    int ok = p && plume_file_exists(p);
    free(p);
    return ok;
}

/* The "commit" recorded in BUNDLE/pull.json (malloc'd), or NULL when there is none. */
static char *recorded(const char *bundle, const char *key) {
    char *p = plume_path_join(bundle, "pull.json"), *text = NULL, *err = NULL, *v = NULL;
    if (p && plume_file_exists(p) && plume_read_file(p, &text, NULL, &err) == 0) {
        cJSON *root = cJSON_Parse(text);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, key);
        if (cJSON_IsString(c)) v = strdup(c->valuestring);
        cJSON_Delete(root);
    }
    free(err);
    free(text);
    free(p);
    return v;
}

/* ---- files and space ------------------------------------------------------------------------ */

/* nftw callback of rm_tree: remove one entry (links themselves, never what they point to). */
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

/* rm -r path without following links; 0 on success. */
static int rm_tree(const char *path) { return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* The bytes of the regular files under path, links not followed (a blob counts once). */
static uint64_t tree_bytes(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    if (S_ISREG(st.st_mode)) return (uint64_t)st.st_size;
    if (!S_ISDIR(st.st_mode)) return 0;
    uint64_t sum = 0;
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = plume_path_join(path, e->d_name);
        if (p) sum += tree_bytes(p);
        free(p);
    }
    if (d) closedir(d);
    return sum;
}

/* "1.2 GB" into buf. */
static const char *human(char *buf, size_t cap, uint64_t b) {
    const char *u[] = {"B", "KB", "MB", "GB", "TB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1000 && i < 4) v /= 1000, i++;
    snprintf(buf, cap, i ? "%.1f %s" : "%.0f %s", v, u[i]);
    return buf;
}

/* Free bytes and device of the file system that holds path (or its nearest existing parent). */
static int free_space(const char *path, uint64_t *avail, dev_t *dev) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    struct stat st;
    struct statvfs vfs;
    while (stat(p, &st) != 0) {
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) { snprintf(p, sizeof p, "%s", slash ? "/" : "."); break; }
        *slash = 0;
    }
    if (stat(p, &st) != 0 || statvfs(p, &vfs) != 0) return -1;
    *avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    *dev = st.st_dev;
    return 0;
}

/* Refuse to start when the download (into the HF cache) plus the bundle will not fit. */
static int check_space(const char *cache, uint64_t download, const char *bundle, uint64_t convert) {
    uint64_t a1, a2;
    dev_t d1, d2;
    if (free_space(cache, &a1, &d1) || free_space(bundle, &a2, &d2)) return 0; /* unknown: let writes tell */
    char n1[32], n2[32];
    if (d1 == d2 && download + convert > a1)
        return cli_error("pull: not enough disk space: %s to download and about %s for the bundle, %s free in %s",
                         human(n1, sizeof n1, download), human(n2, sizeof n2, convert), human(n2, sizeof n2, a1), cache);
    if (download > a1)
        return cli_error("pull: not enough disk space in %s: %s to download, %s free", cache, human(n1, sizeof n1, download),
                         human(n2, sizeof n2, a1));
    if (convert > a2)
        return cli_error("pull: not enough disk space for the bundle %s: about %s needed, %s free", bundle,
                         human(n1, sizeof n1, convert), human(n2, sizeof n2, a2));
    return 0;
}

/* ---- pulling -------------------------------------------------------------------------------- */

/* Refuse a config that is not a Gemma 4 text model plume can run (before any shard is fetched). */
static int check_config(const char *path, const char *repo) {
    char *err = NULL;
    if (!plume_convert_check_config(path, &err)) return 0;
    int rc = cli_error("pull: %s: %s", repo, err);
    free(err);
    return rc;
}

/* The shard names of model.safetensors.index.json (at most cap), each a plain file name. */
static int index_shards(const char *path, char **names, int cap, int *n) {
    char *text = NULL, *err = NULL;
    if (plume_read_file(path, &text, NULL, &err)) return cli_lib_error(err);
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    int rc = cJSON_IsObject(wm) ? 0 : cli_error("pull: %s: no weight_map", path);
    *n = 0;
    for (const cJSON *e = cJSON_IsObject(wm) ? wm->child : NULL; e && !rc; e = e->next) {
        if (!cJSON_IsString(e) || !hub_name_safe(e->valuestring) || strchr(e->valuestring, '/'))
            rc = cli_error("pull: %s: unsafe shard name for %s", path, e->string);
        int k = 0;
        while (!rc && k < *n && strcmp(names[k], e->valuestring)) k++;
        if (!rc && k == *n) {
            if (*n == cap) rc = cli_error("pull: %s: more than %d shards", path, cap);
            else if (!(names[(*n)++] = strdup(e->valuestring))) rc = cli_error("out of memory");
        }
    }
    cJSON_Delete(root);
    return rc;
}

/* Fetch what the converter needs into the cache, in order: small files, index, shards. */
static int fetch_checkpoint(hub *h, const char *bundle, const char *weights) {
    char *err = NULL, *path = NULL;
    for (size_t i = 0; i < sizeof small_files / sizeof *small_files; i++) {
        int r = hub_get(h, small_files[i], i > 1, &path, &err);
        if (r < 0) return cli_lib_error(err);
        if (i == 0 && check_config(path, h->repo)) { free(path); return 1; }
        free(path);
    }
    char *shards[256];
    int n = 0, rc = 0;
    int r = hub_get(h, "model.safetensors.index.json", 1, &path, &err);
    if (r < 0) return cli_lib_error(err);
    if (r == 0) rc = index_shards(path, shards, 256, &n);
    else if (!(shards[n++] = strdup("model.safetensors"))) rc = cli_error("out of memory");
    free(path);
    uint64_t download = 0, total = 0;
    for (int i = 0; !rc && i < n; i++) {
        const hub_file *f = hub_find(h, shards[i]);
        if (f) download += hub_missing_bytes(h, f), total += f->size;
    }
    double factor = !strcmp(weights, "f32") ? 2.0 : !strcmp(weights, "bf16") ? 1.0 : 0.6;
    if (!rc) rc = check_space(h->dir, download, bundle, (uint64_t)(factor * (double)total));
    for (int i = 0; !rc && i < n; i++) {
        if (hub_get(h, shards[i], 0, NULL, &err) < 0) rc = cli_lib_error(err);
    }
    for (int i = 0; i < n; i++) free(shards[i]);
    if (!rc && hub_write_ref(h, &err)) rc = cli_lib_error(err);
    return rc;
}

/* Write BUNDLE/pull.json: where the bundle came from. */
static int write_record(const char *bundle, const hub *h, const char *weights) {
    char *p = plume_path_join(bundle, "pull.json"), *text = NULL, *err = NULL;
    cJSON *o = cJSON_CreateObject();
    int rc = !p || !o ? cli_error("out of memory") : 0;
    if (!rc && (!cJSON_AddStringToObject(o, "repo", h->repo) || !cJSON_AddStringToObject(o, "revision", h->rev) ||
                !cJSON_AddStringToObject(o, "commit", h->commit) || !cJSON_AddStringToObject(o, "weights", weights) ||
                !(text = cJSON_Print(o))))
        rc = cli_error("out of memory");
    if (!rc && plume_write_file_atomic(p, text, strlen(text), &err)) rc = cli_lib_error(err);
    cJSON_free(text);
    cJSON_Delete(o);
    free(p);
    return rc;
}

/* Convert the snapshot into bundle (replacing an older one only once the new one is complete). */
static int convert_snapshot(const hub *h, const char *bundle, const char *weights, int quiet) {
    char *snap = hub_snapshot_dir(h), *fresh = NULL, *old = NULL, *err = NULL;
    int replace = plume_file_exists(bundle);
    if (!snap || !(fresh = plume_sprintf("%s.new-%d", bundle, (int)getpid())) || !(old = plume_sprintf("%s.old-%d", bundle, (int)getpid()))) {
        free(snap);
        return cli_error("out of memory");
    }
    const char *out = replace ? fresh : bundle;
    int rc = cli_mkdir_parent(bundle);
    if (!rc) {
        if (!quiet) fprintf(stderr, "pull: converting %s@%s into %s (%s)\n", h->repo, h->commit, bundle, weights);
        plume_convert_params cp = plume_convert_default_params();
        cp.weights = weights;
        cp.progress = !quiet && isatty(2);
        if (plume_convert(snap, out, &cp, &err)) rc = cli_lib_error(err);
        if (!rc) rc = write_record(out, h, weights);
        if (rc && replace) rm_tree(fresh);
    }
    if (!rc && replace) {
        if (rename(bundle, old) != 0 || rename(fresh, bundle) != 0) rc = cli_error("pull: cannot replace %s: %s", bundle, strerror(errno));
        else rm_tree(old);
    }
    free(snap);
    free(fresh);
    free(old);
    return rc;
}

int cli_pull(const char *spec, const char *weights, int flags, char **bundle_out) {
    char repo[128], rev[128], *err = NULL;
    *bundle_out = NULL;
    if (split_spec(spec, repo, sizeof repo, rev, sizeof rev))
        return cli_error("pull: '%s' is not a Hub model id (ORG/NAME or ORG/NAME@REVISION)", spec);
    char *bundle = bundle_for(repo, rev, weights);
    if (!bundle) return cli_error("out of memory");
    int quiet = flags & CLI_PULL_QUIET;
    if ((flags & CLI_PULL_REUSE) && is_bundle(bundle)) { *bundle_out = bundle; return 0; }
    hub h;
    if (hub_open(&h, repo, rev, &err)) { free(bundle); return cli_lib_error(err); }
    if (h.offline && is_bundle(bundle)) { /* nothing to compare it with */
        if (!quiet) fprintf(stderr, "pull: HF_HUB_OFFLINE is set: %s is used as it is\n", bundle);
        hub_close(&h);
        *bundle_out = bundle;
        return 0;
    }
    h.progress = quiet ? -1 : isatty(2);
    int rc = 0;
    if (hub_resolve(&h, &err)) rc = cli_lib_error(err);
    char *had = !rc && is_bundle(bundle) ? recorded(bundle, "commit") : NULL;
    if (!rc && is_bundle(bundle) && !had) {
        if (!quiet) fprintf(stderr, "pull: %s exists and was not made by plume pull: used as it is (plume rm it to pull)\n", bundle);
    } else if (!rc && is_bundle(bundle) && !strcmp(had, h.commit)) {
        if (!quiet) fprintf(stderr, "pull: %s is up to date (%s@%s)\n", bundle, repo, h.commit);
    } else if (!rc) {
        if (!quiet && had) fprintf(stderr, "pull: %s@%s moved from %.12s to %.12s; updating\n", repo, rev, had, h.commit);
        rc = fetch_checkpoint(&h, bundle, weights);
        if (!rc) rc = convert_snapshot(&h, bundle, weights, quiet);
    }
    free(had);
    hub_close(&h);
    if (rc) free(bundle);
    else *bundle_out = bundle;
    return rc;
}

/* ---- plume pull ----------------------------------------------------------------------------- */

static const char pull_usage[] =
    "usage: plume pull [ORG/NAME[@REVISION]] [--weights q8|q4|bf16|f32] [--quiet]\n"
    "  Download a Gemma 4 checkpoint from the Hugging Face Hub (default " CLI_DEFAULT_REPO ") into\n"
    "  the Hugging Face cache, convert it into a bundle under ~/.cache/plume/ and print its path.\n"
    "  Again later: only what changed is fetched; an interrupted download resumes.\n"
    "  --weights   precision of the bundle's layer weights (default q8)\n"
    "  --quiet     no progress\n"
    "  Environment: HF_TOKEN (gated models), HF_ENDPOINT (a mirror), HF_HUB_CACHE / HF_HOME,\n"
    "  HF_HUB_OFFLINE=1 (the cache only, no network).\n";

int cmd_pull(int argc, char **argv) {
    const char *spec = NULL, *weights = "q8";
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { fputs(pull_usage, stdout); return 0; }
        else if (!strcmp(argv[i], "--weights") && i + 1 < argc) weights = argv[++i];
        else if (!strcmp(argv[i], "--quiet")) quiet = 1;
        else if (argv[i][0] == '-') return cli_error("pull: unknown option '%s' (see plume pull --help)", argv[i]);
        else if (!spec) spec = argv[i];
        else return cli_error("pull: too many arguments (see plume pull --help)");
    }
    if (strcmp(weights, "f32") && strcmp(weights, "bf16") && strcmp(weights, "q8") && strcmp(weights, "q4"))
        return cli_error("pull: --weights must be f32, bf16, q8 or q4 (not '%s')", weights);
    char *bundle;
    if (cli_pull(spec ? spec : CLI_DEFAULT_REPO, weights, quiet ? CLI_PULL_QUIET : 0, &bundle)) return 1;
    printf("%s\n", bundle);
    free(bundle);
    return 0;
}

/* ---- plume list ------------------------------------------------------------------------------ */

/* List the bundles under the plume cache, marking the default. */
static void list_bundles(void) {
    const char *dir = cli_plume_dir(), *def = cli_default_model();
    char defreal[PATH_MAX] = "";
    if (def && !realpath(def, defreal)) defreal[0] = 0;
    printf("bundles in %s:\n", dir);
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        char *p = plume_path_join(dir, e->d_name), real[PATH_MAX], sz[32];
        if (e->d_name[0] != '.' && p && is_bundle(p)) {
            char *repo = recorded(p, "repo"), *commit = recorded(p, "commit");
            int is_def = realpath(p, real) && !strcmp(real, defreal);
            printf("  %c %-40s %9s  %s%s%.12s\n", is_def ? '*' : ' ', e->d_name, human(sz, sizeof sz, tree_bytes(p)),
                   repo ? repo : "(converted by hand)", commit ? " @ " : "", commit ? commit : "");
            free(repo);
            free(commit);
            n++;
        }
        free(p);
    }
    if (d) closedir(d);
    if (!n) printf("    (none: plume pull makes one)\n");
    if (def && !defreal[0]) printf("    default: %s (does not exist)\n", def);
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
        printf("    %-40s %9s  %s%.12s\n", name, human(sz, sizeof sz, p ? tree_bytes(p) : 0), c ? "main @ " : "", c ? c : "");
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
    uint64_t b = tree_bytes(path);
    if (rm_tree(path) != 0) return cli_error("rm: cannot remove %s: %s", path, strerror(errno));
    printf("removed %s (%s)\n", path, human(sz, sizeof sz, b));
    return 0;
}

/* plume rm ORG/NAME: the checkpoint in the HF cache and every bundle pulled from it. */
static int rm_repo(const char *spec) {
    char repo[128], rev[128];
    if (split_spec(spec, repo, sizeof repo, rev, sizeof rev)) return cli_error("rm: '%s' is not a bundle name or ORG/NAME", spec);
    if (strchr(spec, '@'))
        return cli_error("rm: %s: the download of a repo is removed whole; give ORG/NAME without @REVISION", spec);
    hub h;
    char *err = NULL;
    if (hub_open(&h, repo, "main", &err)) return cli_lib_error(err);
    int rc = 0, n = 0;
    const char *dir = cli_plume_dir();
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char *p = e->d_name[0] != '.' ? plume_path_join(dir, e->d_name) : NULL, *from = p ? recorded(p, "repo") : NULL;
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
    char *p = plume_path_join(cli_plume_dir(), name);
    int rc = !p ? cli_error("out of memory")
             : !is_bundle(p) ? cli_error("rm: no bundle %s (plume list shows them)", p)
                             : rm_say(p);
    free(p);
    return rc;
}
