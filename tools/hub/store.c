/* store.c -- plume's model store: bundle names and places, the pull (store.h, docs/PULL.md).
 *
 * A pull resolves ORG/NAME@REV on the Hub (hub.c), fetches only what the converter reads into
 * the Hugging Face cache (config and tokenizer files, the safetensors index and the shards it
 * names), then converts the snapshot in-process into the bundle
 * ~/.cache/plume/ORG--NAME[@REV]-WEIGHTS, recording where it came from in pull.json. The
 * config is checked as soon as it arrives, before any shard: a checkpoint plume cannot run
 * costs one small request, not 10 GB.
 *
 * The MTP drafter (docs/SPECULATIVE.md): `--drafter` (STORE_PULL_DRAFTER) pulls ORG/NAME's
 * drafter, ORG/NAME-assistant (its main branch), after the model, and converts it at the same
 * weights into BUNDLE/drafter, where run, chat, serve and Python find it; pulling
 * ORG/NAME-assistant itself does the same into the bundle of ORG/NAME, which must be there.
 * BUNDLE/drafter/pull.json records its commit, so a pull again fetches it only when it moved;
 * a model's update keeps the drafter that was in its bundle. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "common.h"
#include "hub.h"
#include "plume.h"
#include "store.h"

/* Small files the converter or a chat front end reads; absent ones are skipped. */
static const char *const small_files[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                          "chat_template.jinja", "chat_template.json", "generation_config.json"};

/* ---- names and places ------------------------------------------------------------------- */

const char *store_dir(void) {
    static char dir[4096];
    const char *home = getenv("HOME");
    snprintf(dir, sizeof dir, "%s/.cache/plume", home && *home ? home : ".");
    return dir;
}

int store_is_bundle(const char *dir) {
    char *p = plume_path_join(dir, "model_config.json");
    int ok = p && plume_file_exists(p);
    free(p);
    return ok;
}

const char *store_default_bundle(void) {
    static char path[4200];
    const char *env = getenv("PLUME_MODEL");
    if (env && *env) return env;
    snprintf(path, sizeof path, "%s/" STORE_CONVERTED_NAME, store_dir());
    if (store_is_bundle(path)) return path;
    snprintf(path, sizeof path, "%s/" STORE_PULLED_NAME, store_dir());
    if (store_is_bundle(path)) return path;
    return NULL;
}

/* Whether q is a quant name (or a file name) a spec may carry: 1..63 of [A-Za-z0-9_.-]. */
static int quant_ok(const char *q, size_t n) {
    if (n == 0 || n > 63 || q[0] == '.' || q[0] == '-') return 0;
    for (size_t i = 0; i < n; i++)
        if (!(isalnum((unsigned char)q[i]) || q[i] == '_' || q[i] == '.' || q[i] == '-')) return 0;
    return 1;
}

/* Split SPEC = ORG/NAME[:QUANT][@REV] into repo, rev (default "main") and quant ("" when there
 * is none; a spec with one is refused when quant is NULL); 0, or -1 if malformed. */
int store_spec_split(const char *spec, char *repo, size_t rcap, char *rev, size_t vcap, char *quant, size_t qcap) {
    char rest[512];
    const char *colon = strchr(spec, ':');
    if (quant) quant[0] = 0;
    if (colon) { /* ":QUANT" runs to the '@' after it, or to the end */
        const char *end = strchr(colon, '@');
        size_t qn = end ? (size_t)(end - colon - 1) : strlen(colon + 1);
        if (!quant || qn >= qcap || !quant_ok(colon + 1, qn) ||
            snprintf(rest, sizeof rest, "%.*s%s", (int)(colon - spec), spec, end ? end : "") >= (int)sizeof rest)
            return -1;
        memcpy(quant, colon + 1, qn);
        quant[qn] = 0;
        spec = rest;
    }
    const char *at = strchr(spec, '@');
    size_t n = at ? (size_t)(at - spec) : strlen(spec);
    if (n >= rcap || (at && (!at[1] || strlen(at + 1) >= vcap))) return -1;
    memcpy(repo, spec, n);
    repo[n] = 0;
    snprintf(rev, vcap, "%s", at ? at + 1 : "main");
    return hub_repo_valid(repo) ? 0 : -1;
}

int store_is_repo_spec(const char *s) {
    char repo[128], rev[128], quant[64];
    return store_spec_split(s, repo, sizeof repo, rev, sizeof rev, quant, sizeof quant) == 0;
}

/* The bundle a pull of repo@rev with these weights makes: ~/.cache/plume/ORG--NAME[@REV]-W
 * ('/' in a branch name becomes '--'); of a GGUF repo's quant (upper-cased):
 * ORG--NAME[@REV]-QUANT, and -QUANT-W when weights other than the GGUF's own are asked for
 * (weights NULL or "auto"); malloc'd. */
static char *bundle_for(const char *repo, const char *rev, const char *quant, const char *weights) {
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
    if (!quant || !quant[0]) return plume_sprintf("%s/%s-%s", store_dir(), name, weights ? weights : "q8");
    char q[64];
    size_t i = 0;
    for (; quant[i] && i < sizeof q - 1; i++) q[i] = (char)toupper((unsigned char)quant[i]);
    q[i] = 0;
    if (!weights || !strcmp(weights, "auto")) return plume_sprintf("%s/%s-%s", store_dir(), name, q);
    return plume_sprintf("%s/%s-%s-%s", store_dir(), name, q, weights);
}

/* The "commit" recorded in BUNDLE/pull.json (malloc'd), or NULL when there is none. */
char *store_recorded(const char *bundle, const char *key) {
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

/* The bytes of the regular files under path, links not followed (a blob counts once). */
uint64_t store_tree_bytes(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    if (S_ISREG(st.st_mode)) return (uint64_t)st.st_size;
    if (!S_ISDIR(st.st_mode)) return 0;
    uint64_t sum = 0;
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *p = plume_path_join(path, e->d_name);
        if (p) sum += store_tree_bytes(p);
        free(p);
    }
    if (d) closedir(d);
    return sum;
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
static int check_space(const char *cache, uint64_t download, const char *bundle, uint64_t convert, char **err) {
    uint64_t a1, a2;
    dev_t d1, d2;
    if (free_space(cache, &a1, &d1) || free_space(bundle, &a2, &d2)) return 0; /* unknown: let writes tell */
    char n1[32], n2[32], n3[32];
    if (d1 == d2 && download + convert > a1)
        return plume_fail(err, PLUME_EIO, "pull: not enough disk space: %s to download and about %s for the bundle, %s free in %s",
                          hub_human(n1, sizeof n1, (double)download), hub_human(n2, sizeof n2, (double)convert),
                          hub_human(n3, sizeof n3, (double)a1), cache);
    if (download > a1)
        return plume_fail(err, PLUME_EIO, "pull: not enough disk space in %s: %s to download, %s free", cache,
                          hub_human(n1, sizeof n1, (double)download), hub_human(n2, sizeof n2, (double)a1));
    if (convert > a2)
        return plume_fail(err, PLUME_EIO, "pull: not enough disk space for the bundle %s: about %s needed, %s free", bundle,
                          hub_human(n1, sizeof n1, (double)convert), hub_human(n2, sizeof n2, (double)a2));
    return 0;
}

/* ---- pulling -------------------------------------------------------------------------------- */

/* Whether the config.json at path is a Gemma 4 drafter's (model_type gemma4_assistant). */
static int config_is_drafter(const char *path) {
    char *text = NULL, *err = NULL;
    int is = 0;
    if (!plume_read_file(path, &text, NULL, &err)) {
        cJSON *root = cJSON_Parse(text);
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "model_type");
        is = cJSON_IsString(mt) && !strcmp(mt->valuestring, "gemma4_assistant");
        cJSON_Delete(root);
    }
    free(err);
    free(text);
    return is;
}

/* Refuse a config that is not a Gemma 4 text model plume can run, or with drafter set not a
 * Gemma 4 drafter (before any shard is fetched). */
static int check_config(const char *path, const char *repo, int drafter, char **err) {
    char *why = NULL;
    if (drafter != config_is_drafter(path))
        return plume_fail(err, PLUME_EFORMAT, drafter ? "pull: %s is not a Gemma 4 drafter (model_type gemma4_assistant)"
                                                      : "pull: %s is a drafter (gemma4_assistant): pull it with its model, "
                                                        "plume pull ORG/NAME --drafter",
                          repo);
    if (!plume_convert_check_config(path, &why)) return 0;
    int rc = plume_fail(err, PLUME_EFORMAT, "pull: %s: %s", repo, why);
    free(why);
    return rc;
}

/* The shard names of model.safetensors.index.json (at most cap), each a plain file name. */
static int index_shards(const char *path, char **names, int cap, int *n, char **err) {
    char *text = NULL;
    int rc = plume_read_file(path, &text, NULL, err);
    if (rc) return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) rc = plume_fail(err, PLUME_EFORMAT, "pull: %s: no weight_map", path);
    *n = 0;
    for (const cJSON *e = cJSON_IsObject(wm) ? wm->child : NULL; e && !rc; e = e->next) {
        if (!cJSON_IsString(e) || !hub_name_safe(e->valuestring) || strchr(e->valuestring, '/')) {
            rc = plume_fail(err, PLUME_EFORMAT, "pull: %s: unsafe shard name for %s", path, e->string);
        } else {
            int seen = 0;
            for (int i = 0; i < *n; i++) seen |= !strcmp(names[i], e->valuestring);
            if (seen) continue;
            if (*n == cap) rc = plume_fail(err, PLUME_EFORMAT, "pull: %s: more than %d shards", path, cap);
            else if (!(names[(*n)++] = strdup(e->valuestring))) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
        }
    }
    cJSON_Delete(root);
    return rc;
}

/* Fetch what the converter needs into the cache, in order: small files (a drafter needs no
 * tokenizer), index, shards. */
static int fetch_checkpoint(hub *h, const char *bundle, const char *weights, int drafter, char **err) {
    char *path = NULL;
    for (size_t i = 0; i < sizeof small_files / sizeof *small_files; i++) {
        int r = hub_get(h, small_files[i], i > (drafter ? 0u : 1u), &path, err);
        if (r < 0) return r;
        int bad = i == 0 ? check_config(path, h->repo, drafter, err) : 0;
        free(path);
        if (bad) return bad;
    }
    char *shards[256];
    int n = 0, rc = 0;
    int r = hub_get(h, "model.safetensors.index.json", 1, &path, err);
    if (r < 0) return r;
    if (r == 0) rc = index_shards(path, shards, 256, &n, err);
    else if (!(shards[n++] = strdup("model.safetensors"))) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    free(path);
    uint64_t download = 0, total = 0;
    for (int i = 0; !rc && i < n; i++) {
        const hub_file *f = hub_find(h, shards[i]);
        if (f) download += hub_missing_bytes(h, f), total += f->size;
    }
    double factor = !strcmp(weights, "f32") ? 2.0 : !strcmp(weights, "bf16") ? 1.0 : 0.6;
    if (!rc) rc = check_space(h->dir, download, bundle, (uint64_t)(factor * (double)total), err);
    for (int i = 0; !rc && i < n; i++) {
        r = hub_get(h, shards[i], 0, NULL, err);
        if (r < 0) rc = r;
    }
    for (int i = 0; i < n; i++) free(shards[i]);
    if (!rc) rc = hub_write_ref(h, err);
    return rc;
}

/* ---- GGUF repos ------------------------------------------------------------------------ */

/* Whether a listed name is a GGUF of a text model: it ends in ".gguf" and is no "mmproj" (the
 * towers' file). */
static int gguf_is_model(const char *name) {
    size_t n = strlen(name);
    if (n < 6 || strcasecmp(name + n - 5, ".gguf")) return 0;
    for (const char *p = name; *p; p++)
        if (!strncasecmp(p, "mmproj", 6)) return 0;
    return 1;
}

/* Whether a part of a file name reads as a ggml type of a quantized file (Q4_K_M, IQ4_XS,
 * TQ2_0, F16, BF16, F32, MXFP4...). */
static int reads_as_quant(const char *s, size_t n) {
    char u[16];
    if (n == 0 || n >= sizeof u) return 0;
    for (size_t i = 0; i < n; i++) u[i] = (char)toupper((unsigned char)s[i]);
    u[n] = 0;
    if (u[0] == 'Q' && isdigit((unsigned char)u[1])) return 1;
    if ((u[0] == 'I' || u[0] == 'T') && u[1] == 'Q' && isdigit((unsigned char)u[2])) return 1;
    return !strcmp(u, "F16") || !strcmp(u, "BF16") || !strcmp(u, "F32") || !strncmp(u, "MXFP4", 5);
}

/* The quant of a GGUF file name into q (cap bytes): of its base name less ".gguf" (and less a
 * "-00001-of-00003" of a split file: *split set), the last '-' or '.' separated part that
 * reads as a ggml type, with a "UD-" before it kept (unsloth's dynamic quants); else the whole
 * base name. */
static void gguf_quant_of(const char *name, char *q, size_t cap, int *split) {
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    char b[256];
    size_t n = strlen(base) - 5; /* gguf_is_model: ends in ".gguf" */
    if (n >= sizeof b) n = sizeof b - 1;
    memcpy(b, base, n);
    b[n] = 0;
    *split = 0;
    if (n > 15 && b[n - 15] == '-' && !strncmp(b + n - 9, "-of-", 4)) {
        int digits = 1;
        for (size_t i = 0; i < 5; i++) digits &= isdigit((unsigned char)b[n - 14 + i]) && isdigit((unsigned char)b[n - 5 + i]);
        if (digits) *split = 1, n -= 15, b[n] = 0;
    }
    size_t start = n;
    while (start > 0 && b[start - 1] != '-' && b[start - 1] != '.') start--;
    if (!reads_as_quant(b + start, n - start)) {
        snprintf(q, cap, "%s", b);
        return;
    }
    if (start >= 4 && !strncasecmp(b + start - 4, "-UD-", 4)) start -= 3;
    else if (start == 3 && !strncasecmp(b, "UD-", 3)) start = 0;
    snprintf(q, cap, "%s", b + start);
}

/* The names of the repo's files: the listing, or offline the snapshot's top level (malloc'd
 * array of borrowed or owned names: *owned says which; free with free_names). */
static const char **repo_names(const hub *h, int32_t *n, int *owned) {
    *n = 0;
    *owned = h->n_files == 0;
    const char **names = NULL;
    if (!*owned) {
        if (!(names = malloc((size_t)h->n_files * sizeof *names))) return NULL;
        for (int32_t i = 0; i < h->n_files; i++) names[(*n)++] = h->files[i].name;
        return names;
    }
    char *snap = hub_snapshot_dir(h);
    DIR *d = snap ? opendir(snap) : NULL;
    int32_t cap = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (*n == cap) {
            const char **more = realloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *names);
            if (!more) break;
            names = more;
        }
        if (!(names[*n] = strdup(e->d_name))) break;
        (*n)++;
    }
    if (d) closedir(d);
    free(snap);
    return names;
}

/* Free what repo_names gave. */
static void free_names(const char **names, int32_t n, int owned) {
    for (int32_t i = 0; owned && i < n; i++) free((char *)names[i]);
    free((void *)names);
}

/* The quants of the repo's GGUFs, "Q4_0, Q4_K_M, Q8_0" (a split one marked), into buf. */
static const char *quant_list(const char **names, int32_t n, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        char q[256], item[300];
        int split, seen = 0;
        if (!gguf_is_model(names[i])) continue;
        gguf_quant_of(names[i], q, sizeof q, &split);
        snprintf(item, sizeof item, "%s%s", q, split ? " (split)" : "");
        for (int32_t j = 0; j < i && !seen; j++) { /* each once */
            char q2[256];
            int s2;
            if (!gguf_is_model(names[j])) continue;
            gguf_quant_of(names[j], q2, sizeof q2, &s2);
            seen = !strcmp(q, q2);
        }
        if (!seen && len + strlen(item) + 3 < cap) len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", item);
    }
    return buf;
}

/* The GGUF of quant (a quant name, or the file's name, any case) among the repo's files: 0 with
 * *name (malloc'd), or a refusal that lists the quants the repo has. Of several files of one
 * quant, the one nearest the top of the repo. */
static int gguf_pick(const hub *h, const char *quant, char **name, char **err) {
    int32_t n = 0;
    int owned = 0, rc = 0;
    const char **names = repo_names(h, &n, &owned), *best = NULL;
    int best_split = 0, ggufs = 0;
    for (int32_t i = 0; names && i < n; i++) {
        char q[256];
        int split;
        if (!gguf_is_model(names[i])) continue;
        ggufs++;
        gguf_quant_of(names[i], q, sizeof q, &split);
        const char *base = strrchr(names[i], '/') ? strrchr(names[i], '/') + 1 : names[i];
        size_t bn = strlen(base);
        int match = !strcasecmp(q, quant) || !strcasecmp(base, quant) ||
                    (strlen(quant) == bn - 5 && !strncasecmp(base, quant, bn - 5));
        int depth = 0, best_depth = 0;
        for (const char *p = names[i]; *p; p++) depth += *p == '/';
        for (const char *p = best ? best : ""; *p; p++) best_depth += *p == '/';
        if (match && (!best || depth < best_depth)) best = names[i], best_split = split;
    }
    char list[2048];
    if (!names && !owned) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    else if (!ggufs)
        rc = plume_fail(err, PLUME_EFORMAT, "pull: %s@%.12s has no GGUF file (ORG/NAME:QUANT picks a file of a GGUF repo; "
                        "without :QUANT a repo is pulled as a safetensors checkpoint)", h->repo, h->commit);
    else if (!best)
        rc = plume_fail(err, PLUME_EFORMAT, "pull: %s has no GGUF of quant '%s'; it has: %s", h->repo, quant,
                        quant_list(names, n, list, sizeof list));
    else if (best_split)
        rc = plume_fail(err, PLUME_EFORMAT, "pull: %s: %s is split in several files; plume reads a GGUF of one file (join them "
                        "with llama.cpp's llama-gguf-split --merge, then plume convert the result)", h->repo, best);
    else if (!(*name = strdup(best))) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    free_names(names, n, owned);
    return rc;
}

/* A pull of a repo without :QUANT whose listing has no config.json but GGUF files: refused,
 * naming the quants to choose from; 0 when it is not such a repo. */
static int gguf_only_refused(const hub *h, char **err) {
    if (h->n_files == 0 || hub_find(h, "config.json")) return 0;
    int32_t n = 0;
    int owned = 0, any = 0;
    const char **names = repo_names(h, &n, &owned);
    for (int32_t i = 0; names && i < n; i++) any |= gguf_is_model(names[i]);
    char list[2048];
    int rc = !any ? 0
                  : plume_fail(err, PLUME_EINVAL, "pull: %s holds GGUF files, not a checkpoint: name one by its quant, as "
                               "%s:QUANT; it has: %s", h->repo, h->repo, quant_list(names, n, list, sizeof list));
    free_names(names, n, owned);
    return rc;
}

/* Fetch the GGUF name into the cache (after checking the space for it and the bundle). */
static int fetch_gguf(hub *h, const char *bundle, const char *weights, const char *name, char **path, char **err) {
    const hub_file *f = hub_find(h, name);
    /* the bundle beside the file: about its size at the GGUF's own precision or q4, twice it at
     * q8, more for bf16/f32 (a 4-bit file's weights at 2 and 4 bytes) */
    double factor = !weights || !strcmp(weights, "auto") || !strcmp(weights, "q4") ? 1.1
                    : !strcmp(weights, "q8")                                         ? 2.0
                    : !strcmp(weights, "bf16")                                       ? 3.6
                                                                                     : 7.2;
    int rc = f ? check_space(h->dir, hub_missing_bytes(h, f), bundle, (uint64_t)(factor * (double)f->size), err) : 0;
    if (!rc) rc = hub_get(h, name, 0, path, err);
    if (!rc) rc = hub_write_ref(h, err);
    return rc;
}

/* Write BUNDLE/pull.json: where the bundle came from. */
static int write_record(const char *bundle, const hub *h, const char *weights, const char *file, char **err) {
    char *p = plume_path_join(bundle, "pull.json"), *text = NULL;
    cJSON *o = cJSON_CreateObject();
    int rc = !p || !o ? plume_fail(err, PLUME_ENOMEM, "out of memory") : 0;
    if (!rc && (!cJSON_AddStringToObject(o, "repo", h->repo) || !cJSON_AddStringToObject(o, "revision", h->rev) ||
                !cJSON_AddStringToObject(o, "commit", h->commit) || !cJSON_AddStringToObject(o, "weights", weights) ||
                (file && !cJSON_AddStringToObject(o, "file", file)) || !(text = cJSON_Print(o))))
        rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (!rc) rc = plume_write_file(p, text, strlen(text), PLUME_WRITE_REPLACE, err);
    cJSON_free(text);
    cJSON_Delete(o);
    free(p);
    return rc;
}

/* A model's update keeps its drafter: from/drafter (the bundle being replaced) moves into
 * to/drafter, unless there is one. 0, or -1 (errno) when it was there and did not move. */
static int keep_drafter(const char *from, const char *to) {
    char *a = plume_path_join(from, "drafter"), *b = plume_path_join(to, "drafter");
    struct stat st;
    int rc = !a || !b ? (errno = ENOMEM, -1)
             : lstat(a, &st) == 0 && S_ISDIR(st.st_mode) && lstat(b, &st) != 0 ? rename(a, b) : 0;
    free(a);
    free(b);
    return rc;
}

/* Convert the snapshot into bundle; an older bundle (a directory plume pull made: pull_into
 * checked) is replaced only once the new one is complete. The new one is made under a fresh
 * name beside it, and the old one moves to another before it is removed, so that a failure at
 * any step leaves one whole bundle at the name. */
static int convert_snapshot(const hub *h, const char *gguf, const char *bundle, const char *weights, int quiet, char **err) {
    struct stat st;
    int replace = lstat(bundle, &st) == 0;
    char *snap = gguf ? strdup(gguf) : hub_snapshot_dir(h), *fresh = NULL, *old = NULL;
    int rc = snap ? plume_mkdir_parent(bundle, err) : plume_fail(err, PLUME_ENOMEM, "out of memory");
    /* fresh: a name no one has (made, then removed, so that the converter can make it) */
    if (!rc && replace && (!(fresh = plume_mkdtemp_beside(bundle, err)) || rmdir(fresh) != 0)) rc = PLUME_EIO;
    if (!rc) {
        const char *file = gguf ? strrchr(gguf, '/') + 1 : NULL;
        if (!quiet)
            fprintf(stderr, "pull: converting %s@%s%s%s into %s (%s)\n", h->repo, h->commit, file ? " " : "", file ? file : "",
                    bundle, gguf && !strcmp(weights, "auto") ? "the GGUF's own precision" : weights);
        plume_convert_params cp = plume_convert_default_params();
        cp.weights = weights;
        cp.progress = !quiet && isatty(2);
        const char *out = replace ? fresh : bundle;
        rc = plume_convert(snap, out, &cp, err);
        if (!rc && (rc = write_record(out, h, weights, file, err))) plume_rm_tree(out); /* ours: the converter made it */
    }
    if (!rc && replace) {
        if (!(old = plume_mkdtemp_beside(bundle, err)) || rename(bundle, old) != 0) {
            rc = old ? plume_fail(err, PLUME_EIO, "pull: cannot replace %s: %s", bundle, strerror(errno)) : PLUME_EIO;
            if (old) rmdir(old);
        } else if (keep_drafter(old, fresh) || rename(fresh, bundle) != 0) {
            rc = plume_fail(err, PLUME_EIO, "pull: cannot replace %s: %s", bundle, strerror(errno));
            keep_drafter(fresh, old);
            rename(old, bundle); /* the old one back, with its drafter */
        } else {
            plume_rm_tree(old);
        }
        if (rc) plume_rm_tree(fresh);
    }
    free(snap);
    free(fresh);
    free(old);
    return rc;
}

/* Whether a pull may make or replace the bundle at path: 1 when nothing is there, 2 when it is
 * a directory plume pull made (its pull.json says so: replaced when the commit moved), 0 when
 * it is a bundle made otherwise (used as it is), or a refusal in *err when something else is
 * there (a directory the user keeps things in, a file): never removed. */
static int bundle_state(const char *path, char **err) {
    struct stat st;
    if (lstat(path, &st) != 0) return 1;
    if (store_is_bundle(path)) {
        char *had = S_ISDIR(st.st_mode) ? store_recorded(path, "commit") : NULL;
        int ours = had != NULL;
        free(had);
        return ours ? 2 : 0;
    }
    return plume_fail(err, PLUME_EIO, "pull: %s exists but is not a bundle (no model_config.json); plume did not make it, "
                      "so it is left as it is: move it away (or remove it) and pull again", path);
}

/* Resolve, compare with what the bundle was made from, fetch and convert when it moved: the
 * checkpoint, or with a quant ("" for none) the GGUF of that quant. */
static int pull_into(hub *h, const char *bundle, const char *quant, const char *weights, int quiet, char **err) {
    int state = bundle_state(bundle, err);
    if (state < 0) return state;
    if (h->offline && state != 1) { /* nothing to compare it with */
        if (!quiet) fprintf(stderr, "pull: HF_HUB_OFFLINE is set: %s is used as it is\n", bundle);
        return 0;
    }
    h->progress = quiet ? -1 : isatty(2);
    int rc = hub_resolve(h, err);
    if (!rc && !quant[0]) rc = gguf_only_refused(h, err);
    char *had = !rc && state == 2 ? store_recorded(bundle, "commit") : NULL;
    char c1[64], c2[64];
    if (!rc && state == 0) {
        if (!quiet) fprintf(stderr, "pull: %s exists and was not made by plume pull: used as it is (plume rm it to pull)\n", bundle);
    } else if (!rc && had && !strcmp(had, h->commit)) {
        if (!quiet) fprintf(stderr, "pull: %s is up to date (%s@%s)\n", bundle, h->repo, h->commit);
    } else if (!rc) {
        if (!quiet && had)
            fprintf(stderr, "pull: %s@%s moved from %.12s to %.12s; updating\n", h->repo, h->rev,
                    plume_str_printable(c1, sizeof c1, had), plume_str_printable(c2, sizeof c2, h->commit));
        char *file = NULL, *path = NULL;
        if (quant[0]) {
            rc = gguf_pick(h, quant, &file, err);
            if (!rc) rc = fetch_gguf(h, bundle, weights, file, &path, err);
        } else {
            rc = fetch_checkpoint(h, bundle, weights, 0, err);
        }
        if (!rc) rc = convert_snapshot(h, path, bundle, weights, quiet, err);
        free(file);
        free(path);
    }
    free(had);
    return rc;
}

/* Pull the drafter repo (main) into bundle/drafter: fetched and converted when its commit is
 * not the one bundle/drafter/pull.json records (or offline: the cache's, unless there is one). */
static int pull_drafter(const char *repo, const char *bundle, const char *weights, int quiet, char **err) {
    char *dir = plume_path_join(bundle, "drafter");
    if (!dir) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    hub h;
    int rc = hub_open(&h, repo, "main", err);
    if (rc) {
        free(dir);
        return rc;
    }
    struct stat st;
    int there = lstat(dir, &st) == 0;
    char *had = there ? store_recorded(dir, "commit") : NULL;
    if (there && !had) {
        if (!quiet) fprintf(stderr, "pull: %s was not made by plume pull: used as it is\n", dir);
    } else if (h.offline && there) {
        if (!quiet) fprintf(stderr, "pull: HF_HUB_OFFLINE is set: %s is used as it is\n", dir);
    } else {
        h.progress = quiet ? -1 : isatty(2);
        rc = hub_resolve(&h, err);
        if (!rc && had && !strcmp(had, h.commit)) {
            if (!quiet) fprintf(stderr, "pull: %s is up to date (%s@%s)\n", dir, h.repo, h.commit);
        } else if (!rc) {
            rc = fetch_checkpoint(&h, dir, weights, 1, err);
            if (!rc) rc = convert_snapshot(&h, NULL, dir, weights, quiet, err);
        }
    }
    free(had);
    hub_close(&h);
    free(dir);
    return rc;
}

/* Whether repo names a drafter (ends with -assistant); its model's repo into model[cap]. */
static int drafter_repo(const char *repo, char *model, size_t cap) {
    size_t n = strlen(repo), k = strlen(STORE_DRAFTER_SUFFIX);
    if (n <= k || strcmp(repo + n - k, STORE_DRAFTER_SUFFIX) || n - k >= cap) return 0;
    memcpy(model, repo, n - k);
    model[n - k] = 0;
    return 1;
}

int store_pull(const char *spec, const char *weights, int flags, char **bundle_out, char **err) {
    char repo[128], rev[128], quant[64], model[128];
    *bundle_out = NULL;
    if (store_spec_split(spec, repo, sizeof repo, rev, sizeof rev, quant, sizeof quant))
        return plume_fail(err, PLUME_EINVAL, "pull: '%s' is not a Hub model id (ORG/NAME, ORG/NAME:QUANT for a GGUF repo, "
                          "with @REVISION)", spec);
    if (!weights) weights = quant[0] ? "auto" : "q8";
    if (!quant[0] && !strcmp(weights, "auto")) weights = "q8";
    if (drafter_repo(repo, model, sizeof model)) { /* ORG/NAME-assistant: into ORG/NAME's bundle */
        if (strcmp(rev, "main") || quant[0])
            return plume_fail(err, PLUME_EINVAL, "pull: a drafter is pulled from its main branch, as a checkpoint (not %s)",
                              spec);
        char *bundle = bundle_for(model, "main", "", weights);
        if (!bundle) return plume_fail(err, PLUME_ENOMEM, "out of memory");
        int rc = store_is_bundle(bundle) ? 0
                 : plume_fail(err, PLUME_EINVAL, "pull: %s is the drafter of %s, whose bundle %s is not there: "
                                                 "plume pull %s --drafter pulls both", repo, model, bundle, model);
        if (!rc) rc = pull_drafter(repo, bundle, weights, flags & STORE_PULL_QUIET, err);
        char *dir = !rc ? plume_path_join(bundle, "drafter") : NULL;
        free(bundle);
        if (!rc && !dir) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
        *bundle_out = dir;
        return rc;
    }
    if ((flags & STORE_PULL_DRAFTER) && strlen(repo) + strlen(STORE_DRAFTER_SUFFIX) >= sizeof repo)
        return plume_fail(err, PLUME_EINVAL, "pull: %s: its drafter's name is too long", repo);
    char *bundle = bundle_for(repo, rev, quant, weights);
    if (!bundle) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    if ((flags & STORE_PULL_REUSE) && store_is_bundle(bundle)) {
        *bundle_out = bundle;
        return 0;
    }
    hub h;
    int rc = hub_open(&h, repo, rev, err);
    if (!rc) {
        rc = pull_into(&h, bundle, quant, weights, flags & STORE_PULL_QUIET, err);
        hub_close(&h);
    }
    if (!rc && (flags & STORE_PULL_DRAFTER)) {
        char drepo[160];
        snprintf(drepo, sizeof drepo, "%s" STORE_DRAFTER_SUFFIX, repo);
        /* a GGUF's own precision means nothing to the drafter's checkpoint: q8 (it is small) */
        rc = pull_drafter(drepo, bundle, strcmp(weights, "auto") ? weights : "q8", flags & STORE_PULL_QUIET, err);
    }
    if (rc) free(bundle);
    else *bundle_out = bundle;
    return rc;
}
