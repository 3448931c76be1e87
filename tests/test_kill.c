/* test_kill.c -- crash safety: writers SIGKILLed at random moments never leave an output that
 * a later open accepts as complete, and the same command run again succeeds. Covered: plume
 * convert, plume synth --bundle (bundle directories: absent, or complete and matching their
 * manifest), plume run --cache (the prompt cache), and plume_session_save and
 * plume_tokenizer_save called in a loop by a child killed mid-write (the file is absent or
 * opens). Kill times are drawn uniformly over the shortest full run seen, from a fixed seed. */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "t.h"

#define KILLS 6 /* kills per writer: each a fresh random moment */

static char *tmp;
static char bundle[600]; /* a tiny q8 bundle with a tokenizer */
static uint64_t rng = 11;

/* Sleep for a number of seconds. */
static void nap(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Run cmd (sh -c) and SIGKILL it (its whole process group) after `after` seconds, unless it
 * ended before. Returns 1 if it was killed, 0 if it had finished. */
static int run_killed(const char *cmd, double after) {
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(126);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    nap(after);
    int st, killed = waitpid(pid, &st, WNOHANG) == 0;
    if (killed) kill(-pid, SIGKILL);
    if (killed) waitpid(pid, &st, 0);
    return killed;
}

/* Run cmd and kill it at a random moment of a full run, until KILLS runs were killed (at most
 * 4 KILLS tries), calling after(ctx, k) after each try. The moments are drawn uniformly over
 * the shortest run seen: a run that ends before its kill shortens it, so a first timed run
 * that was slow (a busy machine, a cold page cache) cannot leave every kill too late. Returns
 * the runs killed mid-way. */
static int kill_runs(const char *cmd, double full, void (*after)(void *ctx, int k), void *ctx) {
    int killed = 0;
    for (int k = 0; killed < KILLS && k < 4 * KILLS; k++) {
        double at = full * plume_rng_float(&rng);
        int hit = run_killed(cmd, at);
        if (!hit && at < full) full = at;
        killed += hit;
        after(ctx, k);
    }
    return killed;
}

/* Seconds a shell command takes to run to the end (its status must be 0). */
static double timed(const char *cmd) {
    char out[4096];
    double t0 = plume_now();
    int st = t_sh(out, sizeof out, "%s", cmd);
    CHECK(st == 0, "%s: %d %s", cmd, st, out);
    return plume_now() - t0;
}

/* A bundle directory after a kill: absent, or complete (plume verify passes and it opens). */
static void check_bundle(const char *dir, const char *what, int kill_no) {
    if (access(dir, F_OK) != 0) return;
    char out[8192];
    int st = t_sh(out, sizeof out, "%s/plume verify '%s' --quiet && %s/plume logits -m '%s' --ids 2,3 -o '%s.npy'",
                  t_build(), dir, t_build(), dir, dir);
    CHECK(st == 0, "%s, kill %d: a bundle that is there is incomplete: %s", what, kill_no, out);
}

typedef struct {
    const char *dir, *what;
} bundle_check;

/* After a kill: the bundle is absent or complete; then clear it for the next try. */
static void bundle_after(void *ctx, int k) {
    const bundle_check *b = ctx;
    char out[4096];
    check_bundle(b->dir, b->what, k);
    t_sh(out, sizeof out, "rm -rf '%s' '%s'.tmp-*", b->dir, b->dir);
}

/* Kill a bundle writer KILLS times; after each kill check the output, then finish a run. */
static void kill_bundle_writer(const char *what, const char *cmd_fmt) {
    char dir[700], cmd[2048], out[4096];
    snprintf(dir, sizeof dir, "%s/%s-out", tmp, what);
    snprintf(cmd, sizeof cmd, cmd_fmt, dir);
    double full = timed(cmd);
    t_sh(out, sizeof out, "rm -rf '%s' '%s'.tmp-*", dir, dir);
    bundle_check b = {dir, what};
    int killed = kill_runs(cmd, full, bundle_after, &b);
    printf("  %s: %d runs killed mid-way (first full run %.2f s)\n", what, killed, full);
    CHECK(killed > 0, "%s: no run was killed", what);
    t_sh(out, sizeof out, "rm -rf '%s'", dir);
    int st = t_sh(out, sizeof out, "%s", cmd);
    CHECK(st == 0, "%s: the run after the kills failed: %s", what, out);
    check_bundle(dir, what, KILLS);
    CHECK(access(dir, F_OK) == 0, "%s: no bundle after a complete run", what);
}

static void test_kill_convert(void) {
    char fmt[1200];
    snprintf(fmt, sizeof fmt, "%s/plume convert %s/tiny-a/hf '%%s' --weights q4 --quiet", t_build(), t_data());
    kill_bundle_writer("convert", fmt);
}

static void test_kill_synth_bundle(void) {
    char fmt[1200];
    snprintf(fmt, sizeof fmt, "%s/plume synth --config tiny --seed 3 --bundle '%%s' --weights bf16 --tokenizer %s/tiny-a/hf",
             t_build(), t_data());
    kill_bundle_writer("synth", fmt);
}

/* After a kill: the cache file is absent or loads; then remove it for the next try. */
static void cache_after(void *ctx, int k) {
    const char *cache = ctx;
    char out[8192];
    if (access(cache, F_OK) == 0) {
        int st = t_sh(out, sizeof out, "%s/plume logits -m '%s' --ids 5 --load-state '%s' -o '%s.npy'", t_build(), bundle,
                      cache, cache);
        CHECK(st == 0, "kill %d: a cache file that is there does not load: %s", k, out);
    }
    t_sh(out, sizeof out, "rm -f '%s' '%s.tmp'", cache, cache);
}

/* plume run --cache: the cache file after a kill is absent or loads (run reuses it without
 * "ignoring the cache"); a full run afterwards works. */
static void test_kill_run_cache(void) {
    char cache[700], cmd[2048], out[8192];
    snprintf(cache, sizeof cache, "%s/prompt.cache", tmp);
    snprintf(cmd, sizeof cmd, "%s/plume run -m '%s' -p 'Why is the sky blue? Tell me at length.' -n 6 --seed 1 --cache '%s' -t 1",
             t_build(), bundle, cache);
    double full = timed(cmd);
    t_sh(out, sizeof out, "rm -f '%s' '%s.tmp'", cache, cache);
    int killed = kill_runs(cmd, full, cache_after, cache);
    printf("  run --cache: %d runs killed mid-way (first full run %.2f s)\n", killed, full);
    CHECK(killed > 0, "no run was killed");
    int st = t_sh(out, sizeof out, "%s", cmd);
    CHECK(st == 0 && !strstr(out, "ignoring the cache"), "the run after the kills: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s", cmd); /* and the cache it left is reused */
    CHECK(st == 0 && strstr(out, "54 of 55 prompt tokens reused"), "the cache is not reused: %d %s", st, out);
}

/* A child that saves forever (save(path) in a loop) is killed at random moments; after each
 * kill, path is absent or open(path) succeeds. */
static void kill_saver(const char *what, const char *path, void (*save)(const char *), int (*open_ok)(const char *)) {
    char out[1024];
    double t0 = plume_now();
    save(path); /* one save: its duration scales the kill times */
    double one = plume_now() - t0;
    int bad = 0;
    for (int k = 0; k < 2 * KILLS; k++) {
        t_sh(out, sizeof out, "rm -f '%s' '%s.tmp'", path, path);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            for (;;) save(path);
        }
        nap(one * 3 * plume_rng_float(&rng));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (access(path, F_OK) == 0 && !open_ok(path)) bad++;
    }
    printf("  %s: one save %.1f ms, %d kills\n", what, one * 1e3, 2 * KILLS);
    CHECK(bad == 0, "%s: %d of %d kills left a file that does not open", what, bad, 2 * KILLS);
}

static plume_model *g_model;
static plume_session *g_session;
static plume_tokenizer *g_tok;

/* Save the test session. */
static void save_session(const char *path) {
    char *err = NULL;
    if (plume_session_save(g_session, path, &err)) { printf("  save: %s\n", err); free(err); }
}

/* Whether a state file loads. */
static int session_opens(const char *path) {
    plume_session *s = NULL;
    char *err = NULL;
    int rc = plume_session_load(&s, g_model, path, &err);
    if (rc) printf("  %s\n", err);
    free(err);
    plume_session_free(s);
    return rc == 0;
}

/* Save the test tokenizer. */
static void save_tokenizer(const char *path) {
    char *err = NULL;
    if (plume_tokenizer_save(g_tok, path, &err)) { printf("  save: %s\n", err); free(err); }
}

/* Whether a tokenizer.bin opens. */
static int tokenizer_opens(const char *path) {
    plume_tokenizer *t = NULL;
    char *err = NULL;
    int rc = plume_tokenizer_open(&t, path, &err);
    if (rc) printf("  %s\n", err);
    free(err);
    plume_tokenizer_free(t);
    return rc == 0;
}

static void test_kill_session_save(void) {
    plume_model_params mp = plume_model_default_params();
    mp.n_threads = 1;
    char *err = NULL, path[700];
    if (plume_model_open(&g_model, bundle, &mp, &err)) { CHECK(0, "open: %s", err); free(err); return; }
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = 2048;
    int32_t ids[300];
    for (int i = 0; i < 300; i++) ids[i] = 2 + i % 400;
    CHECK(plume_session_new(&g_session, g_model, &sp, &err) == 0 && plume_session_feed(g_session, ids, 300, NULL, 0, &err) == 0,
          "session: %s", err ? err : "");
    snprintf(path, sizeof path, "%s/kill.state", tmp);
    if (g_session) kill_saver("plume_session_save", path, save_session, session_opens);
    plume_session_free(g_session);
    plume_model_free(g_model);
    free(err);
}

static void test_kill_tokenizer_save(void) {
    char src[700], path[700], *err = NULL;
    /* the real vocabulary when fetched (16 MB: a save takes milliseconds), else the tiny one */
    snprintf(src, sizeof src, "tests/vocab/tokenizer.bin");
    int rc = access(src, F_OK) == 0 ? plume_tokenizer_open(&g_tok, src, &err) : -1;
    if (rc) {
        free(err);
        err = NULL;
        snprintf(src, sizeof src, "%s/tiny-a/hf/tokenizer.json", t_data());
        rc = plume_tokenizer_open_json(&g_tok, src, &err);
    }
    CHECK(rc == 0, "tokenizer: %s", err ? err : "");
    snprintf(path, sizeof path, "%s/kill-tokenizer.bin", tmp);
    if (!rc) kill_saver("plume_tokenizer_save", path, save_tokenizer, tokenizer_opens);
    plume_tokenizer_free(g_tok);
    free(err);
}

int main(void) {
    tmp = t_tmpdir("kill");
    snprintf(bundle, sizeof bundle, "%s/b", tmp);
    char out[4096];
    if (t_sh(out, sizeof out, "%s/plume synth --config tiny --seed 1 --bundle '%s' --weights q8 --tokenizer %s/tiny-a/hf",
             t_build(), bundle, t_data()))
        printf("  setup: %s\n", out);
    RUN(test_kill_convert);
    RUN(test_kill_synth_bundle);
    RUN(test_kill_run_cache);
    RUN(test_kill_session_save);
    RUN(test_kill_tokenizer_save);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
