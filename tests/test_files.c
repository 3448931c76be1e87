/* test_files.c -- every file plume writes is safe against links and devices, every file it
 * reads against FIFOs and devices (issue 28), through the CLI's real paths:
 *
 *   writer class (common.c plume_wfile)      through
 *   a whole buffer (plume_write_file)         logits -o (npy), convert (config, manifest, tokenizer.bin)
 *   a session state (plume_session_save)      run --save-state, run --cache, chat /save
 *   a safetensors stream (st_writer)          synth --hf
 *   a fresh directory (plume_mkdtemp_beside)  convert, synth --bundle
 *
 * For each: a link planted at the temporary name the writers used to take (PATH.tmp) does not
 * redirect the write; a destination that is a device (a private copy of /dev/null, made with
 * mknod when root) or a FIFO is written through, never replaced by a regular file; a FIFO
 * without a reader is refused at once, not waited on; a link at the destination is written
 * through (the user's link), a link at a name plume owns is replaced. Readers: plume verify
 * with a FIFO and a link to /dev/zero in a manifest, a malformed manifest (a path listed
 * twice, or spelled with "./"), a FIFO config. The
 * Hugging Face cache's entries and pull.json are tested in test_pull.c. Every command runs
 * under `timeout 20`: a hang is a failure (status 124), not a stuck suite. */
#include <sys/stat.h>
#include <unistd.h>

#include "t.h"

static char *tmp;
static char bundle[600];
static char victim[700]; /* a file no write may reach */
static int root;         /* mknod works: a private /dev/null copy */

/* Run a plume command line (timeout 20); its status, output in out. */
#define PLUME(out, ...) t_sh(out, sizeof out, "timeout 20 " __VA_ARGS__)

/* Whether the victim still holds exactly "victim\n". */
static int victim_intact(void) {
    char out[256];
    return t_sh(out, sizeof out, "cat %s", victim) == 0 && !strcmp(out, "victim\n");
}

/* Whether path is a character device (the private null still a device). */
static int is_chardev(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISCHR(st.st_mode);
}

/* Whether path is a FIFO. */
static int is_fifo(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISFIFO(st.st_mode);
}

/* Whether path is a link. */
static int is_link(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* Make a fresh FIFO at tmp/name; its path in out. */
static void fifo(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", tmp, name);
    unlink(out);
    mkfifo(out, 0644);
}

/* ---- writers ----------------------------------------------------------------------------- */

/* The npy writer (logits -o): the old temporary name planted as a link, /dev/stdout, a
 * private null device, a FIFO with and without a reader, a link to a regular file. */
static void test_npy_writer(void) {
    char out[16384], dst[800], path[800];
    snprintf(dst, sizeof dst, "%s/l.npy", tmp);
    t_sh(out, sizeof out, "ln -sf %s %s.tmp", victim, dst);
    int st = PLUME(out, "%s/plume logits -m %s --ids 2,17 -o %s", t_build(), bundle, dst);
    CHECK(st == 0 && victim_intact() && !is_link(dst), "a link planted at OUT.tmp: %d %s", st, out);
    st = PLUME(out, "%s/plume logits -m %s --ids 2,17 -o /dev/stdout 2>/dev/null | head -c 6 | od -c | head -1", t_build(), bundle);
    CHECK(st == 0 && strstr(out, "N   U   M   P   Y"), "-o /dev/stdout: %d %s", st, out);
    if (root) {
        snprintf(path, sizeof path, "%s/null", tmp);
        st = PLUME(out, "%s/plume logits -m %s --ids 2,17 -o %s", t_build(), bundle, path);
        CHECK(st == 0 && is_chardev(path), "-o a null device: %d %s (still a device: %d)", st, out, is_chardev(path));
    }
    fifo(path, sizeof path, "f.npy");
    st = PLUME(out, "%s/plume logits -m %s --ids 2,17 -o %s", t_build(), bundle, path);
    CHECK(st == 1 && strstr(out, "FIFO") && is_fifo(path), "-o a FIFO nobody reads: %d %s", st, out);
    st = PLUME(out, "sh -c 'cat %s > %s/fifo.out & %s/plume logits -m %s --ids 2,17 -o %s; s=$?; wait; "
               "head -c 6 %s/fifo.out | od -c | head -1; exit $s'", path, tmp, t_build(), bundle, path, tmp);
    CHECK(st == 0 && strstr(out, "N   U   M   P   Y") && is_fifo(path), "-o a FIFO with a reader: %d %s", st, out);
    /* a link the user made at the destination: written through, the link stays */
    t_sh(out, sizeof out, "rm -f %s.tmp; echo old > %s/target.npy; ln -sf %s/target.npy %s/link.npy", dst, tmp, tmp, tmp);
    st = PLUME(out, "%s/plume logits -m %s --ids 2,17 -o %s/link.npy && head -c 6 %s/target.npy | od -c | head -1", t_build(),
               bundle, tmp, tmp);
    snprintf(path, sizeof path, "%s/link.npy", tmp);
    CHECK(st == 0 && is_link(path) && strstr(out, "N   U   M   P   Y"), "-o a link: %d %s", st, out);
    snprintf(path, sizeof path, "%s", tmp);
    st = PLUME(out, "%s/plume logits -m %s --ids 2,17 -o %s", t_build(), bundle, path);
    CHECK(st != 0 && strstr(out, "directory"), "-o a directory: %d %s", st, out);
}

/* The session writer: --save-state, --cache and chat's /save. */
static void test_session_writer(void) {
    char out[16384], path[800];
    snprintf(path, sizeof path, "%s/s.state", tmp);
    t_sh(out, sizeof out, "ln -sf %s %s.tmp", victim, path);
    int st = PLUME(out, "%s/plume logits -m %s --ids 2,17 -o %s/x.npy --save-state %s", t_build(), bundle, tmp, path);
    CHECK(st == 0 && victim_intact() && !is_link(path), "--save-state with a link at .tmp: %d %s", st, out);
    snprintf(path, sizeof path, "%s/c.cache", tmp);
    t_sh(out, sizeof out, "ln -sf %s %s.tmp", victim, path);
    st = PLUME(out, "%s/plume run -m %s -p hi -n 2 --cache %s", t_build(), bundle, path);
    CHECK(st == 0 && victim_intact() && !is_link(path), "--cache with a link at .tmp: %d %s", st, out);
    if (root) {
        snprintf(path, sizeof path, "%s/null", tmp);
        st = PLUME(out, "%s/plume run -m %s -p hi -n 2 --cache %s", t_build(), bundle, path);
        CHECK(st == 0 && is_chardev(path) && strstr(out, "ignoring the cache"), "--cache a null device: %d %s", st, out);
        st = PLUME(out, "%s/plume logits -m %s --ids 2 -o %s/x.npy --save-state %s", t_build(), bundle, tmp, path);
        CHECK(st == 0 && is_chardev(path), "--save-state a null device: %d %s", st, out);
    }
    fifo(path, sizeof path, "s.fifo");
    st = PLUME(out, "%s/plume run -m %s -p hi -n 2 --cache %s", t_build(), bundle, path);
    CHECK(st == 1 && strstr(out, "FIFO") && is_fifo(path), "--cache a FIFO nobody reads: %d %s", st, out);
    st = PLUME(out, "printf 'hi\\n/save %s\\n/save %s/chat.state\\n' | %s/plume chat -m %s -n 2", path, tmp, t_build(), bundle);
    CHECK(st == 0 && strstr(out, "FIFO") && is_fifo(path), "chat /save to a FIFO: %d %s", st, out);
    snprintf(path, sizeof path, "%s/chat.state", tmp);
    CHECK(access(path, F_OK) == 0 && !is_link(path), "chat /save to a file after the refusal");
}

/* The safetensors writer and plume_write_file through synth --hf: the old temporary names
 * planted as links; a link at a name synth owns is replaced, never followed. */
static void test_safetensors_writer(void) {
    char out[16384], dir[800], path[900];
    snprintf(dir, sizeof dir, "%s/hf", tmp);
    t_sh(out, sizeof out, "mkdir -p %s && for f in config.json model-00001-of-00002.safetensors model.safetensors.index.json; "
         "do ln -sf %s %s/$f.tmp; done && ln -sf %s %s/model-00002-of-00002.safetensors", dir, victim, dir, victim, dir);
    int st = PLUME(out, "%s/plume synth --config tiny --hf %s", t_build(), dir);
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    CHECK(st == 0 && victim_intact() && !is_link(path), "synth --hf with planted links: %d %s", st, out);
    st = PLUME(out, "ls %s | grep -c 'tmp-'", dir);
    CHECK(atoi(out) == 0, "temporary files left: %s", out);
}

/* The converter's directory: a fresh random name, so nothing planted can be in it; an output
 * that is a link or a device is refused, not followed or replaced. */
static void test_converter_dir(void) {
    char out[16384], path[800];
    snprintf(path, sizeof path, "%s/linked-bundle", tmp);
    t_sh(out, sizeof out, "mkdir -p %s/elsewhere && ln -sfn %s/elsewhere %s", tmp, tmp, path);
    int st = PLUME(out, "%s/plume convert %s/tiny-a/hf %s --quiet", t_build(), t_data(), path);
    CHECK(st != 0 && strstr(out, "already exists") && is_link(path), "convert into a link: %d %s", st, out);
    t_sh(out, sizeof out, "ls -A %s/elsewhere | wc -l", tmp);
    CHECK(atoi(out) == 0, "convert wrote through a link: %s", out);
    if (root) {
        snprintf(path, sizeof path, "%s/null", tmp);
        st = PLUME(out, "%s/plume synth --config tiny --bundle %s --quiet", t_build(), path);
        CHECK(st != 0 && is_chardev(path), "synth --bundle a device: %d %s", st, out);
    }
    st = PLUME(out, "%s/plume convert %s/tiny-a/hf %s/b2 --quiet && ls %s | grep -c 'tmp-'", t_build(), t_data(), tmp, tmp);
    CHECK(atoi(out) == 0, "a temporary directory left: %s", out);
}

/* ---- readers ----------------------------------------------------------------------------- */

/* plume verify: a FIFO, a link to /dev/zero and a missing file in the manifest are named,
 * without hanging; a malformed manifest says so. A FIFO where a config belongs is refused. */
static void test_readers(void) {
    char out[16384], b[800];
    snprintf(b, sizeof b, "%s/vb", tmp);
    t_sh(out, sizeof out, "rm -rf %s && cp -r %s %s", b, bundle, b);
    t_sh(out, sizeof out, "cd %s && rm per_layer_norm_weight.bin && mkfifo per_layer_norm_weight.bin && "
         "rm sin_full.npy && ln -s /dev/zero sin_full.npy && rm cos_full.npy", b);
    int st = PLUME(out, "%s/plume verify %s --quiet", t_build(), b);
    CHECK(st == 1 && strstr(out, "per_layer_norm_weight.bin: not a regular file") && strstr(out, "sin_full.npy: not a regular file") &&
              strstr(out, "cos_full.npy"),
          "verify with a FIFO, /dev/zero and a missing file: %d %s", st, out);
    t_sh(out, sizeof out, "cp -r %s %s/vb2 && echo 'not a manifest line' >> %s/vb2/manifest.sha256", bundle, tmp, tmp);
    st = PLUME(out, "%s/plume verify %s/vb2 --quiet", t_build(), tmp);
    CHECK(st == 1 && strstr(out, "malformed line"), "a malformed manifest: %d %s", st, out);
    /* a line repeated 20,000 times is refused before any file is hashed (each copy was hashed
     * again: 17 s), and so is a second spelling of one path */
    t_sh(out, sizeof out, "cp -r %s %s/vb4 && yes \"$(head -1 %s/vb4/manifest.sha256)\" | head -20000 >> %s/vb4/manifest.sha256",
         bundle, tmp, tmp, tmp);
    st = PLUME(out, "%s/plume verify %s/vb4 --quiet", t_build(), tmp);
    CHECK(st == 1 && strstr(out, "listed more than once"), "a manifest with 20,000 duplicate lines: %d %s", st, out);
    t_sh(out, sizeof out, "cp -r %s %s/vb5 && sed -n '1s/  /  .\\//p' %s/vb5/manifest.sha256 >> %s/vb5/manifest.sha256",
         bundle, tmp, tmp, tmp);
    st = PLUME(out, "%s/plume verify %s/vb5 --quiet", t_build(), tmp);
    CHECK(st == 1 && strstr(out, "malformed path"), "a path spelled ./NAME: %d %s", st, out);
    t_sh(out, sizeof out, "cp -r %s %s/vb3 && rm %s/vb3/model_config.json && mkfifo %s/vb3/model_config.json", bundle, tmp, tmp, tmp);
    st = PLUME(out, "%s/plume run -m %s/vb3 -p hi -n 1", t_build(), tmp);
    CHECK(st == 1 && strstr(out, "not a regular file"), "a FIFO model_config.json: %d %s", st, out);
}

int main(void) {
    tmp = t_tmpdir("files");
    char out[4096];
    snprintf(bundle, sizeof bundle, "%s/tiny", tmp);
    snprintf(victim, sizeof victim, "%s/victim", tmp);
    if (t_sh(out, sizeof out, "%s/plume convert %s/tiny-a/hf %s --weights q8 --quiet && echo victim > %s", t_build(), t_data(),
             bundle, victim))
        printf("  setup: %s\n", out);
    root = t_sh(out, sizeof out, "mknod %s/null c 1 3 && chmod 666 %s/null", tmp, tmp) == 0;
    if (!root) printf("SKIP the device-node cases: mknod needs root (FIFOs still tested)\n");
    RUN(test_npy_writer);
    RUN(test_session_writer);
    RUN(test_safetensors_writer);
    RUN(test_converter_dir);
    RUN(test_readers);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
