/* test_fuzz_replay.c -- every fuzz harness of fuzz/, built without libFuzzer (fuzz/replay.c)
 * by this build's compiler and sanitizers, run over its committed seed corpus and over
 * fuzz/regressions/NAME: the inputs that once crashed plume or broke an invariant. One test
 * line per harness; a harness that crashes, aborts or cannot run fails it. */
#include <dirent.h>
#include <unistd.h>

#include "t.h"

static char *tmp;

/* Replay the seeds and regressions of one harness. */
static void replay(const char *name) {
    char out[8192], reg[300];
    snprintf(reg, sizeof reg, "fuzz/regressions/%s", name);
    int st = t_sh(out, sizeof out,
                  "PLUME_FUZZ_BUNDLE='%s/fixture' PLUME_FUZZ_TOKENIZER='%s/fixture/tokenizer.bin' TMPDIR='%s' "
                  "%s/fuzz/%s fuzz/corpus/%s %s",
                  tmp, tmp, tmp, t_build(), name, name, access(reg, F_OK) == 0 ? reg : "");
    int n = -1;
    const char *r = strstr(out, "replayed ");
    if (r) n = atoi(r + 9);
    t_failed_now = 0;
    CHECK(st == 0 && n > 0, "exit %d, %d inputs: %.2000s", st, n, out);
    printf("%s fuzz replay %s (%d inputs)\n", t_failed_now ? "FAIL" : "PASS", name, n);
    t_total_failed += t_failed_now != 0;
}

int main(void) {
    tmp = t_tmpdir("fuzz-replay");
    char out[4096];
    if (t_sh(out, sizeof out, "sh fuzz/fixture.sh %s/plume '%s/fixture'", t_build(), tmp))
        printf("  setup: %s\n", out);
    DIR *d = opendir("fuzz");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "fuzz_", 5) || len < 3 || strcmp(e->d_name + len - 2, ".c")) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(len - 2), e->d_name);
        replay(name);
        n++;
    }
    if (d) closedir(d);
    if (n == 0) printf("FAIL fuzz replay: no harness found in fuzz/\n"), t_total_failed++;
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
