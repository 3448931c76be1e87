/* test_pull.c -- `plume pull`, run by name, `plume list`, `plume rm`, against tests/mock_hub.py
 * on 127.0.0.1 (no internet): it serves tiny-a's checkpoint the way the Hub does, and logs
 * every request, so the tests count what went over the wire. A pulled bundle must be byte for
 * byte the bundle `plume convert` makes from tests/data/tiny-a/hf (test_forward checks that one
 * against the golden logits). Under google/gemma-4-E4B-it the mock serves tiny-e4b, a model of
 * E4B's structure. */
#include <time.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "t.h"

static char *tmp;
static char env[2048];   /* the environment prefix of every plume command */
static char logp[700];   /* the mock's request log */
static char direct[700]; /* tiny-a converted directly */
static char direct_e4b[700]; /* tiny-e4b converted directly */
static char direct_gguf[2][700]; /* tests/data/gguf's Q4_0 and Q4_K_M files converted directly */
static int port, mock_pid;

/* The whole request log (malloc'd, "" if none). */
static char *log_text(void) {
    FILE *f = fopen(logp, "rb");
    char *s = calloc(1, 1 << 20);
    if (f && s) {
        size_t n = fread(s, 1, (1 << 20) - 1, f);
        s[n] = 0;
    }
    if (f) fclose(f);
    return s;
}

/* The number of bytes in the log now: a mark to read what came after. */
static long log_mark(void) {
    struct stat st;
    return stat(logp, &st) == 0 ? (long)st.st_size : 0;
}

/* The log since a mark (malloc'd). */
static char *log_since(long mark) {
    char *s = log_text();
    long n = (long)strlen(s);
    if (mark > n) mark = n;
    memmove(s, s + mark, (size_t)(n - mark) + 1);
    return s;
}

/* How many lines of text contain all of a and b (b may be NULL). */
static int count_lines(const char *text, const char *a, const char *b) {
    int n = 0;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
        n += strstr(line, a) && (!b || strstr(line, b));
        p += len + (e != NULL);
    }
    return n;
}

/* The sum of sent=N over the lines containing a and b. */
static long sent_bytes(const char *text, const char *a, const char *b) {
    long sum = 0;
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
        const char *s = strstr(line, " sent=");
        if (strstr(line, a) && (!b || strstr(line, b)) && s) sum += atol(s + 6);
        p += len + (e != NULL);
    }
    return sum;
}

/* Whether the bundle equals the one converted directly (pull.json aside). */
static int same_as_direct(const char *bundle) {
    char out[4096];
    return t_sh(out, sizeof out, "diff -r -x pull.json '%s' '%s'", direct, bundle) == 0;
}

/* The commit the mock gives a repo: sha1 of its name. */
static void commit_of(const char *repo, char out[41]) {
    char buf[256];
    t_sh(buf, sizeof buf, "printf %%s '%s' | sha1sum | cut -c1-40", repo);
    memcpy(out, buf, 40);
    out[40] = 0;
}

static void test_clean_pull(void) {
    char out[16384], b[700];
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/tiny", env, t_build());
    snprintf(b, sizeof b, "%s/home/.cache/plume/test--tiny-q8", tmp);
    CHECK(st == 0 && strstr(out, b), "pull: %d %s", st, out);
    CHECK(same_as_direct(b), "the pulled bundle differs from plume convert's");
    char commit[41], path[1200], link[256] = "";
    commit_of("test/tiny", commit);
    snprintf(path, sizeof path, "%s/hf/models--test--tiny/refs/main", tmp);
    CHECK(t_sh(out, sizeof out, "cat '%s'", path) == 0 && !strcmp(out, commit), "refs/main: %s", out);
    snprintf(path, sizeof path, "%s/hf/models--test--tiny/snapshots/%s/model-00001-of-00002.safetensors", tmp, commit);
    ssize_t n = readlink(path, link, sizeof link - 1);
    CHECK(n > 0 && !strncmp(link, "../../blobs/", 12), "snapshot entry is a relative link to a blob: %s", link);
    char *log = log_text();
    CHECK(count_lines(log, "/resolve/", NULL) >= 6 && count_lines(log, "/lfs/test%2Ftiny/", "host=localhost") == 2,
          "API, resolve and the redirected content host: %s", log);
    CHECK(!count_lines(log, "/resolve/", "chat_template.jinja"), "a file the listing does not have was requested");
    free(log);
    st = t_sh(out, sizeof out, "%s %s/plume list", env, t_build());
    CHECK(st == 0 && strstr(out, "test--tiny-q8") && strstr(out, "test/tiny") && strstr(out, "MB"), "list: %s", out);
}

static void test_pull_again_is_up_to_date(void) {
    char out[16384];
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/tiny", env, t_build());
    char *log = log_since(m);
    CHECK(st == 0 && strstr(out, "up to date"), "%d %s", st, out);
    CHECK(count_lines(log, "GET", NULL) == 1 && count_lines(log, "/api/models/", NULL) == 1, "one API request only: %s", log);
    free(log);
}

/* A bundle from an older commit is replaced, and only once the new one is complete. */
static void test_new_commit_replaces_bundle(void) {
    char out[16384], b[700], commit[41];
    snprintf(b, sizeof b, "%s/home/.cache/plume/test--tiny-q8", tmp);
    commit_of("test/tiny", commit);
    int st = t_sh(out, sizeof out, "sed -i 's/%s/%040d/' %s/pull.json && grep -c 0000000000 %s/pull.json", commit, 0, b, b);
    CHECK(st == 0, "setup: %s", out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/tiny", env, t_build());
    CHECK(st == 0 && strstr(out, "updating") && same_as_direct(b), "update: %d %s", st, out);
    st = t_sh(out, sizeof out, "grep -c %s %s/pull.json && ls %s/home/.cache/plume | grep -c -e new- -e old- -e tmp-", commit, b, tmp);
    CHECK(st != 0 && atoi(out) == 1, "pull.json has the new commit, no leftovers: %s", out);
}

static void test_populated_cache_needs_no_content(void) {
    char out[16384], b[700];
    snprintf(b, sizeof b, "%s/home/.cache/plume/test--tiny-q8", tmp);
    int st = t_sh(out, sizeof out, "%s %s/plume rm test--tiny-q8", env, t_build());
    CHECK(st == 0 && strstr(out, "removed"), "rm: %s", out);
    long m = log_mark();
    st = t_sh(out, sizeof out, "%s %s/plume pull test/tiny", env, t_build());
    char *log = log_since(m);
    CHECK(st == 0 && same_as_direct(b), "pull from the cache: %s", out);
    CHECK(!count_lines(log, "/resolve/", NULL) && !count_lines(log, "/lfs/", NULL), "content requested again: %s", log);
    free(log);
}

static void test_offline(void) {
    char out[16384], b[700];
    snprintf(b, sizeof b, "%s/home/.cache/plume/test--tiny-q8", tmp);
    t_sh(out, sizeof out, "%s %s/plume rm test--tiny-q8", env, t_build());
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s HF_HUB_OFFLINE=1 %s/plume pull test/tiny", env, t_build());
    CHECK(st == 0 && same_as_direct(b), "offline pull from the cache: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s HF_HUB_OFFLINE=1 %s/plume pull test/tiny-never", env, t_build());
    CHECK(st != 0 && strstr(out, "HF_HUB_OFFLINE") && strchr(out, '\n') == out + strlen(out) - 1,
          "offline, not cached: one line: %d %s", st, out);
    char *log = log_since(m);
    CHECK(!strcmp(log, ""), "offline mode made requests: %s", log);
    free(log);
}

static void test_run_by_name(void) {
    char out[16384];
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s %s/plume run -m test/tiny-run -p hi -n 2 --temp 0", env, t_build());
    CHECK(st == 0 && strstr(out, "generated"), "first run pulls: %d %s", st, out);
    char *log = log_since(m);
    CHECK(count_lines(log, "/lfs/", NULL) == 2, "first run downloads: %s", log);
    free(log);
    m = log_mark();
    st = t_sh(out, sizeof out, "%s %s/plume run -m test/tiny-run -p hi -n 2 --temp 0", env, t_build());
    log = log_since(m);
    CHECK(st == 0 && !strcmp(log, ""), "second run is offline: %d %s / %s", st, out, log);
    free(log);
    st = t_sh(out, sizeof out, "%s %s/plume logits -m test/nothing-here --ids 2 -o %s/x.npy", env, t_build(), tmp);
    CHECK(st != 0 && strstr(out, "no model test/nothing-here") && strstr(out, "404"), "unknown name: %d %s", st, out);
}

static void test_cut_then_resume(void) {
    char out[16384], commit[41], part[1200];
    commit_of("test/cut", commit);
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s PLUME_HUB_RETRIES=0 %s/plume pull test/cut", env, t_build());
    CHECK(st != 0 && strstr(out, "run the same command again to resume"), "cut: %d %s", st, out);
    t_sh(part, sizeof part, "ls %s/hf/models--test--cut/blobs/ | grep -c incomplete", tmp);
    CHECK(atoi(part) == 1, "one .incomplete blob kept for the resume: %s", part);
    snprintf(part, sizeof part, "%s/hf/models--test--cut/snapshots/%s/model-00001-of-00002.safetensors", tmp, commit);
    struct stat sb;
    CHECK(lstat(part, &sb) != 0, "an incomplete file appeared under snapshots/");
    st = t_sh(out, sizeof out, "%s %s/plume pull test/cut", env, t_build());
    char b[700];
    snprintf(b, sizeof b, "%s/home/.cache/plume/test--cut-q8", tmp);
    CHECK(st == 0 && same_as_direct(b), "resume: %d %s", st, out);
    char *log = log_since(m);
    const char *shard = "/lfs/test%2Fcut/model-00001-of-00002.safetensors";
    CHECK(count_lines(log, shard, "range=bytes=") == 1, "no Range request: %s", log);
    long sent = sent_bytes(log, shard, NULL);
    CHECK(sent == 548642, "sent %ld bytes of the 548642-byte shard in all", sent);
    free(log);
}

static void test_cut_retried_within_one_pull(void) {
    char out[16384], b[700];
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/cut-2", env, t_build());
    snprintf(b, sizeof b, "%s/home/.cache/plume/test--cut-2-q8", tmp);
    char *log = log_since(m);
    CHECK(st == 0 && same_as_direct(b), "pull: %d %s", st, out);
    CHECK(count_lines(log, "/lfs/test%2Fcut-2/model-00001", "range=bytes=") == 1, "no Range retry: %s", log);
    free(log);
}

static void test_gated(void) {
    char out[16384], url[200];
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/gated", env, t_build());
    snprintf(url, sizeof url, "http://127.0.0.1:%d/", port);
    CHECK(st != 0 && strstr(out, "401") && strstr(out, url) && strstr(out, "HF_TOKEN") && strstr(out, "test/gated"),
          "401: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s HF_TOKEN=wrong %s/plume pull test/gated", env, t_build());
    CHECK(st != 0 && strstr(out, "403") && strstr(out, "license"), "403: %d %s", st, out);
    long m = log_mark();
    st = t_sh(out, sizeof out, "%s HF_TOKEN=hf_test_token %s/plume pull test/gated", env, t_build());
    CHECK(st == 0, "with the token: %d %s", st, out);
    char *log = log_since(m);
    CHECK(count_lines(log, "/api/models/", "auth=yes") == 1, "token sent to the API: %s", log);
    CHECK(count_lines(log, "/lfs/", "auth=no") == 2 && !count_lines(log, "/lfs/", "auth=yes"),
          "the token went to the content host: %s", log);
    free(log);
    /* the listing is public, the files are not: the 401 comes with the first file */
    st = t_sh(out, sizeof out, "%s %s/plume pull test/gated-files", env, t_build());
    CHECK(st != 0 && strstr(out, "401") && strstr(out, "/test/gated-files/resolve/") && strstr(out, "HF_TOKEN"),
          "401 on a file: %d %s", st, out);
    t_sh(out, sizeof out, "ls -A %s/hf/models--test--gated-files/snapshots/* 2>/dev/null | wc -l", tmp);
    CHECK(atoi(out) == 0, "something appeared under snapshots/: %s", out);
    /* the token file of the official client */
    st = t_sh(out, sizeof out, "mkdir -p %s/hfhome && printf 'hf_test_token\\n' > %s/hfhome/token && %s HF_HOME=%s/hfhome "
              "%s/plume pull test/gated-2", tmp, tmp, env, tmp, t_build());
    CHECK(st == 0, "token from $HF_HOME/token: %d %s", st, out);
}

static void test_not_found(void) {
    char out[16384];
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/nope", env, t_build());
    CHECK(st != 0 && strstr(out, "no model test/nope") && strstr(out, "404"), "404: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/tiny@v9", env, t_build());
    CHECK(st != 0 && strstr(out, "no revision 'v9'"), "revision: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull 'not a repo'", env, t_build());
    CHECK(st != 0 && strstr(out, "not a Hub model id"), "bad id: %d %s", st, out);
}

static void test_500_then_success(void) {
    char out[16384], b[700];
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/flaky", env, t_build());
    snprintf(b, sizeof b, "%s/home/.cache/plume/test--flaky-q8", tmp);
    char *log = log_since(m);
    CHECK(st == 0 && same_as_direct(b), "pull: %d %s", st, out);
    CHECK(count_lines(log, "status=500", NULL) == 2, "two 500s, each retried: %s", log);
    free(log);
}

static void test_corrupt_byte(void) {
    char out[16384], commit[41], path[1200];
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/corrupt", env, t_build());
    CHECK(st != 0 && strstr(out, "sha256 mismatch") && strstr(out, "model-00002"), "corrupt: %d %s", st, out);
    commit_of("test/corrupt", commit);
    snprintf(path, sizeof path, "%s/hf/models--test--corrupt/snapshots/%s/model-00002-of-00002.safetensors", tmp, commit);
    struct stat sb;
    CHECK(lstat(path, &sb) != 0, "the corrupt file is under snapshots/");
    t_sh(out, sizeof out, "ls %s/hf/models--test--corrupt/blobs/ | grep -c -e incomplete -e 3b93e08b79bb", tmp);
    CHECK(atoi(out) == 0, "the corrupt download was left in blobs/: %s", out);
    snprintf(path, sizeof path, "%s/home/.cache/plume/test--corrupt-q8", tmp);
    CHECK(lstat(path, &sb) != 0, "a bundle was made from a corrupt download");
}

static void test_hostile_listing(void) {
    char out[16384];
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/evil", env, t_build());
    CHECK(st != 0 && strstr(out, "unsafe file name '../evil'"), "../evil: %d %s", st, out);
    t_sh(out, sizeof out, "find %s -name evil | wc -l", tmp);
    CHECK(atoi(out) == 0, "a file named evil was written");
    /* a snapshot entry that links out of the cache is never read: it is replaced by a link
     * into blobs/ (the file outside is left alone) */
    char commit[41];
    commit_of("test/tiny-link", commit);
    st = t_sh(out, sizeof out, "(d=%s/hf/models--test--tiny-link/snapshots/%s && mkdir -p $d %s/outside && "
              "echo mine > %s/outside/config.json && ln -s %s/outside/config.json $d/config.json && "
              "%s %s/plume pull test/tiny-link && readlink $d/config.json && cat %s/outside/config.json)",
              tmp, commit, tmp, tmp, tmp, env, t_build(), tmp);
    CHECK(st == 0 && strstr(out, "../../blobs/") && strstr(out, "mine"), "link out of the cache: %d %s", st, out);
    /* a snapshot directory that is a link out of the cache is refused, nothing written there */
    commit_of("test/tiny-dirlink", commit);
    st = t_sh(out, sizeof out, "mkdir -p %s/hf/models--test--tiny-dirlink/snapshots %s/outdir && "
              "ln -s %s/outdir %s/hf/models--test--tiny-dirlink/snapshots/%s && %s %s/plume pull test/tiny-dirlink",
              tmp, tmp, tmp, tmp, commit, env, t_build());
    CHECK(st != 0 && strstr(out, "leads out of the cache"), "snapshot dir out of the cache: %d %s", st, out);
    t_sh(out, sizeof out, "ls -A %s/outdir | wc -l", tmp);
    CHECK(atoi(out) == 0, "something was written out of the cache: %s", out);
    /* snapshots/ itself a link out of the cache: refused before any directory is made there
     * (the commit's folder was made outside, then refused) */
    st = t_sh(out, sizeof out, "mkdir -p %s/hf/models--test--tiny-snaplink %s/outdir2 && "
              "ln -s %s/outdir2 %s/hf/models--test--tiny-snaplink/snapshots && %s %s/plume pull test/tiny-snaplink",
              tmp, tmp, tmp, tmp, env, t_build());
    CHECK(st != 0 && strstr(out, "leads out of the cache"), "snapshots/ out of the cache: %d %s", st, out);
    t_sh(out, sizeof out, "ls -A %s/outdir2 | wc -l", tmp);
    CHECK(atoi(out) == 0, "a directory was made out of the cache: %s", out);
    /* blobs/ a link out of the cache: the same */
    st = t_sh(out, sizeof out, "mkdir -p %s/hf/models--test--tiny-bloblink %s/outdir3 && "
              "ln -s %s/outdir3 %s/hf/models--test--tiny-bloblink/blobs && %s %s/plume pull test/tiny-bloblink",
              tmp, tmp, tmp, tmp, env, t_build());
    CHECK(st != 0 && strstr(out, "leads out of the cache"), "blobs/ out of the cache: %d %s", st, out);
    t_sh(out, sizeof out, "ls -A %s/outdir3 | wc -l", tmp);
    CHECK(atoi(out) == 0, "a file was written out of the cache: %s", out);
}

/* A Hub that lies: a size of 2e15 or none, a listing over 64 MB, more bytes than listed, a
 * whole answer shorter than listed: each a clear refusal, and nothing left in the cache that
 * spoils the next pull (the lying answers come once per repo: the second pull succeeds). */
static void test_lying_hub(void) {
    char out[16384];
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/hugesize", env, t_build());
    CHECK(st != 0 && strstr(out, "no usable size") && strstr(out, "out of range"), "size 2e15: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/nosize", env, t_build());
    CHECK(st != 0 && strstr(out, "no usable size") && strstr(out, "missing"), "no size: %d %s", st, out);
    char *log = log_since(m);
    CHECK(!count_lines(log, "/lfs/", NULL), "content fetched from a listing that lies: %s", log);
    free(log);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/biglist", env, t_build());
    CHECK(st != 0 && strstr(out, "larger than 64 MB"), "a 65 MB listing: %d %s", st, out);
    const char *liars[] = {"test/long", "test/short"}, *said[] = {"more bytes than the listed", "the listing says"};
    for (int i = 0; i < 2; i++) {
        st = t_sh(out, sizeof out, "%s %s/plume pull %s", env, t_build(), liars[i]);
        CHECK(st != 0 && strstr(out, said[i]) && strstr(out, "removed"), "%s: %d %s", liars[i], st, out);
        t_sh(out, sizeof out, "ls %s/hf/models--test--%s/blobs/ | grep -c incomplete", tmp, liars[i] + 5);
        CHECK(atoi(out) == 0, "%s: a partial download was kept: %s", liars[i], out);
        st = t_sh(out, sizeof out, "%s %s/plume pull %s", env, t_build(), liars[i]);
        CHECK(st == 0, "%s, the next pull: %d %s", liars[i], st, out);
    }
}

/* Escape sequences from the Hub (X-Error-Message) and from pull.json never reach the
 * terminal: they are printed as \xNN. */
static void test_escapes_not_printed(void) {
    char out[16384];
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/escape", env, t_build());
    CHECK(st != 0 && !strchr(out, 0x1b) && !strchr(out, 0x07) && strstr(out, "\\x1b[31mred"), "X-Error-Message: %d %s", st,
          out);
    st = t_sh(out, sizeof out, "b=%s/home/.cache/plume/evil-q8 && mkdir -p $b && echo '{}' > $b/model_config.json && "
              "printf '{\"repo\": \"a\\u001b[2Jb\\u009bc\", \"commit\": \"\\u001b]0;x\\u0007\"}' > $b/pull.json && "
              "%s %s/plume list",
              tmp, env, t_build());
    CHECK(st == 0 && strstr(out, "evil-q8") && !strchr(out, 0x1b) && !strchr(out, 0x07) && !strstr(out, "\xc2\x9b") &&
              strstr(out, "a\\x1b[2Jb"),
          "plume list of a pull.json with escapes: %d %s", st, out);
    t_sh(out, sizeof out, "rm -rf %s/home/.cache/plume/evil-q8", tmp);
}

/* A directory at the bundle's path that plume did not make (no model_config.json) is left
 * alone, by pull and by run -m ORG/NAME, with a message that says what to do. */
static void test_foreign_directory_kept(void) {
    char out[16384], b[700];
    snprintf(b, sizeof b, "%s/home/.cache/plume/test--tiny-mine-q8", tmp);
    t_sh(out, sizeof out, "mkdir -p %s && echo precious > %s/notes.txt", b, b);
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/tiny-mine", env, t_build());
    CHECK(st != 0 && strstr(out, "not a bundle") && strstr(out, "move it away"), "pull: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume run -m test/tiny-mine -p hi -n 1", env, t_build());
    CHECK(st != 0 && strstr(out, "not a bundle"), "run -m: %d %s", st, out);
    CHECK(t_sh(out, sizeof out, "cat %s/notes.txt", b) == 0 && !strcmp(out, "precious\n"), "the directory was touched: %s", out);
}

/* Links and FIFOs planted in the Hugging Face cache: refs/main a link to a file outside, a
 * blob's .incomplete a link and a FIFO, a blob a link out of the cache. None is followed or
 * read; each is replaced by what the pull makes. A FIFO pull.json does not hang plume list. */
static void test_planted_cache_entries(void) {
    char out[16384], sha[80], d[800];
    t_sh(sha, sizeof sha, "sha256sum %s/tiny-a/hf/model-00001-of-00002.safetensors | cut -c1-64", t_data());
    char sha2[80];
    t_sh(sha2, sizeof sha2, "sha256sum %s/tiny-a/hf/model-00002-of-00002.safetensors | cut -c1-64", t_data());
    sha[strcspn(sha, "\n")] = sha2[strcspn(sha2, "\n")] = 0;
    snprintf(d, sizeof d, "%s/hf/models--test--tiny-planted", tmp);
    int st = t_sh(out, sizeof out, "(mkdir -p %s/refs %s/blobs && echo victim > %s/victim && ln -s %s/victim %s/refs/main && "
                  "ln -s %s/victim %s/blobs/%s.incomplete && mkfifo %s/blobs/%s.incomplete && "
                  "timeout 60 sh -c '%s %s/plume pull test/tiny-planted')",
                  d, d, tmp, tmp, d, tmp, d, sha, d, sha2, env, t_build());
    CHECK(st == 0, "pull with planted entries: %d %s", st, out);
    st = t_sh(out, sizeof out, "cat %s/victim && test -f %s/refs/main -a ! -L %s/refs/main && test -f %s/blobs/%s -a ! -L %s/blobs/%s "
              "&& test -f %s/blobs/%s",
              tmp, d, d, d, sha, d, sha, d, sha2);
    CHECK(st == 0 && !strcmp(out, "victim\n"), "the planted entries were followed: %d %s", st, out);
    /* a blob that links out of the cache: removed, fetched again */
    st = t_sh(out, sizeof out, "(%s %s/plume rm test--tiny-planted-q8 && rm -f %s/blobs/%s && ln -s %s/victim %s/blobs/%s && "
              "rm -rf %s/snapshots && timeout 60 sh -c '%s %s/plume pull test/tiny-planted' && test ! -L %s/blobs/%s && cat %s/victim)",
              env, t_build(), d, sha, tmp, d, sha, d, env, t_build(), d, sha, tmp);
    CHECK(st == 0 && strstr(out, "victim"), "a blob linked out of the cache: %d %s", st, out);
    /* a FIFO pull.json */
    st = t_sh(out, sizeof out, "rm %s/home/.cache/plume/test--tiny-planted-q8/pull.json && "
              "mkfifo %s/home/.cache/plume/test--tiny-planted-q8/pull.json && timeout 20 sh -c '%s %s/plume list'",
              tmp, tmp, env, t_build());
    CHECK(st == 0 && strstr(out, "test--tiny-planted-q8"), "plume list with a FIFO pull.json: %d %s", st, out);
}

static void test_not_gemma(void) {
    char out[16384];
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/llama", env, t_build());
    CHECK(st != 0 && strstr(out, "not a Gemma 4 text model") && strstr(out, "llama"), "llama: %d %s", st, out);
    char *log = log_since(m);
    CHECK(!count_lines(log, "/lfs/", NULL), "shards downloaded for a model that cannot run: %s", log);
    free(log);
}

static void test_list_rm_and_default(void) {
    char out[16384];
    int st = t_sh(out, sizeof out, "%s %s/plume run -p hi -n 1", env, t_build());
    CHECK(st != 0 && strstr(out, "plume pull"), "no model: the one command to run: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume rm test/cut", env, t_build());
    CHECK(st == 0 && strstr(out, "models--test--cut") && strstr(out, "test--cut-q8"), "rm repo: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume list", env, t_build());
    CHECK(st == 0 && !strstr(out, "test/cut ") && !strstr(out, "test--cut-q8") && strstr(out, "test--cut-2-q8"), "list: %s", out);
    st = t_sh(out, sizeof out, "%s %s/plume rm test/cut-2@main", env, t_build());
    CHECK(st != 0 && strstr(out, "without @REVISION"), "rm with a revision: %s", out);
    st = t_sh(out, sizeof out, "%s %s/plume rm ../../etc", env, t_build());
    CHECK(st != 0, "rm ../../etc: %s", out);
    st = t_sh(out, sizeof out, "%s %s/plume rm no-such-bundle", env, t_build());
    CHECK(st != 0 && strstr(out, "no bundle"), "rm missing: %s", out);
    st = t_sh(out, sizeof out, "%s PLUME_MODEL=%s %s/plume list", env, direct, t_build());
    CHECK(st == 0 && strstr(out, "(does not exist)") == NULL, "list: %s", out);
    const char *cmds[] = {"pull", "list", "rm"};
    for (int i = 0; i < 3; i++) {
        st = t_sh(out, sizeof out, "%s/plume %s --help", t_build(), cmds[i]);
        CHECK(st == 0 && strstr(out, "usage: plume"), "%s --help: %d %s", cmds[i], st, out);
    }
    st = t_sh(out, sizeof out, "%s %s/plume pull test/tiny --weights q5", env, t_build());
    CHECK(st != 0 && strstr(out, "--weights"), "bad weights: %s", out);
}

/* The newcomer's path, in miniature: run -m the default name, then plain run uses it. */
static void test_default_model(void) {
    char out[16384];
    int st = t_sh(out, sizeof out, "%s %s/plume run -m google/gemma-4-E2B-it -p Hi -n 2", env, t_build());
    CHECK(st == 0 && strstr(out, "generated"), "run -m google/gemma-4-E2B-it: %d %s", st, out);
    long m = log_mark();
    st = t_sh(out, sizeof out, "%s %s/plume run -p Hi -n 2", env, t_build());
    CHECK(st == 0 && strstr(out, "generated"), "run without -m: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull --quiet", env, t_build());
    char *log = log_since(m);
    CHECK(st == 0 && strstr(out, "google--gemma-4-E2B-it-q8") && count_lines(log, "GET", NULL) == 1, "pull: %s / %s", out, log);
    free(log);
    st = t_sh(out, sizeof out, "%s %s/plume list", env, t_build());
    CHECK(st == 0 && strstr(out, "* google--gemma-4-E2B-it-q8"), "the default is marked: %s", out);
}

/* E4B by name: run -m pulls it on first use (q8), plume pull then finds it up to date, and the
 * bundle is the one plume convert makes from the same checkpoint (E4B's structure: 2 KV heads,
 * its chunk split). */
static void test_e4b_by_name(void) {
    char out[16384], b[700];
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s %s/plume run -m google/gemma-4-E4B-it -p Hi -n 2 --temp 0", env, t_build());
    CHECK(st == 0 && strstr(out, "generated"), "run -m google/gemma-4-E4B-it: %d %s", st, out);
    char *log = log_since(m);
    CHECK(count_lines(log, "/lfs/google%2Fgemma-4-E4B-it/model.safetensors", "status=200") == 1, "one shard: %s", log);
    free(log);
    snprintf(b, sizeof b, "%s/home/.cache/plume/google--gemma-4-E4B-it-q8", tmp);
    st = t_sh(out, sizeof out, "diff -r -x pull.json '%s' '%s'", direct_e4b, b);
    CHECK(st == 0, "the pulled E4B bundle differs from plume convert's: %s", out);
    st = t_sh(out, sizeof out, "grep -c '\"num_key_value_heads\":.2,' %s/model_config.json", b);
    CHECK(st == 0, "not E4B's structure: %s", out);
    m = log_mark();
    st = t_sh(out, sizeof out, "%s %s/plume pull google/gemma-4-E4B-it", env, t_build());
    log = log_since(m);
    CHECK(st == 0 && strstr(out, "up to date") && strstr(out, b) && count_lines(log, "GET", NULL) == 1, "pull: %s / %s",
          out, log);
    free(log);
    st = t_sh(out, sizeof out, "%s %s/plume list", env, t_build());
    CHECK(st == 0 && strstr(out, "google--gemma-4-E4B-it-q8") && strstr(out, "google/gemma-4-E4B-it"), "list: %s", out);
}

/* A repo of GGUF files (test/gguf-tiny: tests/data/gguf's llama-quantize-written Q4_0 and
 * Q4_K_M files, an mmproj and a split file beside them, no config.json): NAME:QUANT fetches
 * that one file (the quant in any case) and converts it at its own precision into the bundle
 * plume convert makes of the file; again it is up to date; an unknown quant, a bare NAME, a
 * split file and a quant of a safetensors repo are refused naming what there is, with nothing
 * downloaded; --weights makes a second bundle from the same download; run -m NAME:QUANT pulls
 * on first use and runs. */
static void test_gguf_repo(void) {
    char out[16384], b[700], b0[700];
    snprintf(b, sizeof b, "%s/home/.cache/plume/test--gguf-tiny-Q4_K_M", tmp);
    snprintf(b0, sizeof b0, "%s/home/.cache/plume/test--gguf-tiny-Q4_0", tmp);
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/gguf-tiny:Q4_K_M", env, t_build());
    CHECK(st == 0 && strstr(out, b) && strstr(out, "tiny-it-Q4_K_M.gguf"), "pull :Q4_K_M: %d %s", st, out);
    CHECK(t_sh(out, sizeof out, "diff -r -x pull.json '%s' '%s'", direct_gguf[1], b) == 0,
          "the pulled GGUF's bundle differs from plume convert's of the file: %s", out);
    CHECK(t_sh(out, sizeof out, "grep -q '\"file\":.*\"tiny-it-Q4_K_M.gguf\"' %s/pull.json && grep -q '\"weights\":.*\"auto\"' "
               "%s/pull.json", b, b) == 0, "pull.json names the file and the weights");
    char *log = log_since(m);
    CHECK(count_lines(log, "/lfs/test%2Fgguf-tiny/tiny-it-Q4_K_M.gguf", "status=200") == 1 &&
              count_lines(log, "/lfs/", NULL) == 1 && count_lines(log, "/resolve/", NULL) == 1 &&
              !count_lines(log, "config.json", NULL),
          "exactly the one GGUF fetched: %s", log);
    free(log);
    m = log_mark();
    st = t_sh(out, sizeof out, "%s %s/plume pull test/gguf-tiny:q4_k_m", env, t_build());
    CHECK(st == 0 && strstr(out, "up to date") && strstr(out, b), "again, lower case: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/gguf-tiny:Q3_K_S", env, t_build());
    CHECK(st != 0 && strstr(out, "no GGUF of quant 'Q3_K_S'") && strstr(out, "Q2_K (split), Q4_0, Q4_K_M") &&
              !strstr(out, "mmproj"), "unknown quant: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/gguf-tiny", env, t_build());
    CHECK(st != 0 && strstr(out, "holds GGUF files") && strstr(out, "test/gguf-tiny:QUANT") && strstr(out, "Q4_K_M"),
          "no quant: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/gguf-tiny:Q2_K", env, t_build());
    CHECK(st != 0 && strstr(out, "split in several files") && strstr(out, "llama-gguf-split --merge"), "split: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/tiny:Q4_0", env, t_build());
    CHECK(st != 0 && strstr(out, "has no GGUF file"), "a safetensors repo with a quant: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull 'test/gguf-tiny:Q4 0' 2>&1", env, t_build());
    CHECK(st != 0 && strstr(out, "is not a Hub model id"), "a quant with a space: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/gguf-tiny:", env, t_build());
    CHECK(st != 0 && strstr(out, "is not a Hub model id"), "an empty quant: %d %s", st, out);
    log = log_since(m);
    CHECK(count_lines(log, "/lfs/", NULL) == 0, "refused pulls downloaded: %s", log);
    free(log);
    m = log_mark();
    st = t_sh(out, sizeof out, "%s %s/plume pull test/gguf-tiny:Q4_K_M --weights q8", env, t_build());
    CHECK(st == 0 && strstr(out, "test--gguf-tiny-Q4_K_M-q8"), "--weights q8: %d %s", st, out);
    st = t_sh(out, sizeof out, "grep -q '\"weights\":.\"q8\"' %s-q8/model_config.json", b);
    CHECK(st == 0, "--weights q8 gave no q8 bundle");
    log = log_since(m);
    CHECK(count_lines(log, "/lfs/", NULL) == 0, "the file was downloaded again: %s", log);
    free(log);
    m = log_mark();
    st = t_sh(out, sizeof out, "%s %s/plume run -m test/gguf-tiny:Q4_0 -p Hi -n 2 --temp 0", env, t_build());
    CHECK(st == 0 && strstr(out, "generated"), "run -m test/gguf-tiny:Q4_0: %d %s", st, out);
    CHECK(t_sh(out, sizeof out, "diff -r -x pull.json '%s' '%s'", direct_gguf[0], b0) == 0, "the Q4_0 bundle: %s", out);
    log = log_since(m);
    CHECK(count_lines(log, "/lfs/test%2Fgguf-tiny/tiny-it-Q4_0.gguf", "status=200") == 1 && count_lines(log, "/lfs/", NULL) == 1,
          "run -m fetched: %s", log);
    free(log);
    st = t_sh(out, sizeof out, "%s %s/plume list", env, t_build());
    CHECK(st == 0 && strstr(out, "test--gguf-tiny-Q4_0") && strstr(out, "test--gguf-tiny-Q4_K_M"), "list: %s", out);
}

/* With a 700 KB file system (tmpfs; needs the right to mount), the pull stops before any shard. */
static char small[700]; /* the mount point */

static void test_disk_full(void) {
    char out[16384];
    long m = log_mark();
    int st = t_sh(out, sizeof out, "%s HF_HUB_CACHE=%s/hf %s/plume pull test/tiny-small", env, small, t_build());
    CHECK(st != 0 && strstr(out, "not enough disk space") && strstr(out, "free"), "cache: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s HOME=%s/home %s/plume pull test/tiny-small", env, small, t_build());
    CHECK(st != 0 && strstr(out, "not enough disk space for the bundle"), "bundle: %d %s", st, out);
    char *log = log_since(m);
    CHECK(count_lines(log, "/lfs/test%2Ftiny-small/", NULL) == 0, "shards fetched without room: %s", log);
    free(log);
}

/* plume pull --drafter: the model and its drafter (ORG/NAME-assistant, the tiny-mtp-a tracking
 * drafter) into BUNDLE/drafter, as plume convert makes it, which run then drafts with; again:
 * both up to date, no content fetched; a model's update keeps the drafter; pulling the
 * drafter's name puts it into its model's bundle (refused without one); a drafter repo that
 * holds no drafter, or a model's name given for the drafter, are refused by name. */
/* Whether the bundle's model equals the one converted directly (pull.json and drafter/ aside). */
static int same_model(const char *bundle) {
    char out[4096];
    return t_sh(out, sizeof out, "diff -r -x pull.json -x drafter '%s' '%s'", direct, bundle) == 0;
}

static void test_drafter(void) {
    char out[16384], b[700], d[720], conv[700];
    snprintf(b, sizeof b, "%s/home/.cache/plume/test--tinyd-q8", tmp);
    snprintf(d, sizeof d, "%s/drafter", b);
    snprintf(conv, sizeof conv, "%s/track-q8", tmp);
    t_sh(out, sizeof out, "%s/plume convert %s/tiny-mtp-a/hf_track %s --weights q8 --quiet", t_build(), t_data(), conv);
    int st = t_sh(out, sizeof out, "%s %s/plume pull test/tinyd --drafter", env, t_build());
    CHECK(st == 0 && strstr(out, b) && same_model(b), "pull --drafter: %d %s", st, out);
    CHECK(t_sh(out, sizeof out, "diff -r -x pull.json %s %s", conv, d) == 0, "the drafter differs from plume convert's: %s", out);
    st = t_sh(out, sizeof out, "grep -c test/tinyd-assistant %s/pull.json", d);
    CHECK(st == 0, "drafter/pull.json: %s", out);
    st = t_sh(out, sizeof out, "%s %s/plume run -m %s -p 'la la' -n 6 --temp 0", env, t_build(), b);
    CHECK(st == 0 && strstr(out, "draft 3 (mtp)"), "run drafts with it: %d %s", st, out);
    long m = log_mark();
    st = t_sh(out, sizeof out, "%s %s/plume pull test/tinyd --drafter", env, t_build());
    char *log = log_since(m);
    CHECK(st == 0 && strstr(out, "test--tinyd-q8 is up to date") && strstr(out, "drafter is up to date"), "again: %d %s", st, out);
    CHECK(!count_lines(log, "/resolve/", NULL) && !count_lines(log, "/lfs/", NULL), "content requested again: %s", log);
    free(log);
    char commit[41];
    commit_of("test/tinyd", commit);
    t_sh(out, sizeof out, "sed -i 's/%s/%040d/' %s/pull.json", commit, 0, b);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/tinyd", env, t_build());
    CHECK(st == 0 && strstr(out, "updating") && same_model(b), "update: %d %s", st, out);
    CHECK(t_sh(out, sizeof out, "diff -r %s %s && ls %s/home/.cache/plume | grep -c -e new- -e old- -e tmp-", conv, d, tmp) != 0,
          "the update did not keep the drafter, or left things: %s", out);
    t_sh(out, sizeof out, "rm -rf %s", d);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/tinyd-assistant", env, t_build());
    CHECK(st == 0 && strstr(out, d) && t_sh(out, sizeof out, "diff -r -x pull.json %s %s", conv, d) == 0,
          "pull the drafter by its name: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/nothing-assistant", env, t_build());
    CHECK(st != 0 && strstr(out, "--drafter pulls both"), "a drafter without its model: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/tiny --drafter", env, t_build());
    CHECK(st != 0 && strstr(out, "not a Gemma 4 drafter"), "a drafter repo holding a model: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s %s/plume pull test/tinyd-assistant@v1", env, t_build());
    CHECK(st != 0 && strstr(out, "main branch"), "a drafter at a revision: %d %s", st, out);
}

/* Start the mock Hub on a free port; 0 on success. */
static int mock_start(void) {
    char out[256], portf[700];
    snprintf(portf, sizeof portf, "%s/port", tmp);
    snprintf(logp, sizeof logp, "%s/mock.log", tmp);
    t_sh(out, sizeof out, "python3 tests/mock_hub.py --data %s/tiny-a/hf --repo google/gemma-4-E4B-it=%s/tiny-e4b/hf "
         "--repo test/gguf-tiny=%s/gguf-repo --repo test/tinyd-assistant=%s/tiny-mtp-a/hf_track --port-file %s --log %s "
         "--timeout 300 >%s/mock.out 2>&1 & echo $!", t_data(), t_data(), tmp, t_data(), portf, logp, tmp);
    mock_pid = atoi(out);
    for (int i = 0; i < 200 && mock_pid > 0; i++) { /* up to 10 s */
        FILE *f = fopen(portf, "r");
        if (f) {
            int ok = fscanf(f, "%d", &port) == 1;
            fclose(f);
            if (ok) return 0;
        }
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    return -1;
}

int main(void) {
    tmp = t_tmpdir("pull");
    char out[4096];
    snprintf(direct, sizeof direct, "%s/direct", tmp);
    snprintf(direct_e4b, sizeof direct_e4b, "%s/direct-e4b", tmp);
    if (t_sh(out, sizeof out, "%s/plume convert %s/tiny-a/hf %s --weights q8 --quiet && %s/plume convert %s/tiny-e4b/hf "
             "%s --weights q8 --quiet", t_build(), t_data(), direct, t_build(), t_data(), direct_e4b))
        printf("  setup: %s\n", out);
    /* a GGUF repo: the two quants, an mmproj and a split file beside them (never fetched) */
    static const char *const quants[2] = {"q4_0", "q4_k_m"};
    for (int i = 0; i < 2; i++) {
        snprintf(direct_gguf[i], sizeof direct_gguf[i], "%s/direct-gguf-%s", tmp, quants[i]);
        if (t_sh(out, sizeof out, "%s/plume convert %s/gguf/tiny-k-%s.gguf %s --quiet", t_build(), t_data(), quants[i],
                 direct_gguf[i]))
            printf("  setup: %s\n", out);
    }
    if (t_sh(out, sizeof out, "d=%s/gguf-repo && mkdir -p $d && cp %s/gguf/tiny-k-q4_0.gguf $d/tiny-it-Q4_0.gguf && "
             "cp %s/gguf/tiny-k-q4_k_m.gguf $d/tiny-it-Q4_K_M.gguf && echo mmproj > $d/mmproj-tiny-it-F16.gguf && "
             "echo part > $d/tiny-it-Q2_K-00001-of-00002.gguf && echo part > $d/tiny-it-Q2_K-00002-of-00002.gguf && "
             "echo '# tiny GGUFs' > $d/README.md", tmp, t_data(), t_data()))
        printf("  setup: %s\n", out);
    if (mock_start()) {
        printf("FAIL mock_hub: did not start (python3 tests/mock_hub.py)\n");
        return 1;
    }
    snprintf(env, sizeof env, "HOME=%s/home HF_HUB_CACHE=%s/hf HF_ENDPOINT=http://127.0.0.1:%d HF_HOME= HF_TOKEN= "
             "HF_TOKEN_PATH= HF_HUB_OFFLINE= PLUME_MODEL= PLUME_HUB_BACKOFF_MS=10",
             tmp, tmp, port);
    RUN(test_clean_pull);
    RUN(test_pull_again_is_up_to_date);
    RUN(test_new_commit_replaces_bundle);
    RUN(test_populated_cache_needs_no_content);
    RUN(test_offline);
    RUN(test_run_by_name);
    RUN(test_cut_then_resume);
    RUN(test_cut_retried_within_one_pull);
    RUN(test_gated);
    RUN(test_not_found);
    RUN(test_500_then_success);
    RUN(test_corrupt_byte);
    RUN(test_hostile_listing);
    RUN(test_not_gemma);
    RUN(test_lying_hub);
    RUN(test_escapes_not_printed);
    RUN(test_foreign_directory_kept);
    RUN(test_planted_cache_entries);
    RUN(test_list_rm_and_default);
    RUN(test_default_model);
    RUN(test_e4b_by_name);
    RUN(test_gguf_repo);
    RUN(test_drafter);
    snprintf(small, sizeof small, "%s/small", tmp);
    if (t_sh(out, sizeof out, "mkdir -p %s && mount -t tmpfs -o size=700k plume-test %s", small, small) == 0) {
        RUN(test_disk_full);
        t_sh(out, sizeof out, "umount %s", small);
    } else {
        printf("SKIP test_disk_full: cannot mount a small tmpfs here\n");
    }
    kill(mock_pid, SIGTERM);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
