/* replay.c -- a main() for a harness without libFuzzer: run LLVMFuzzerTestOneInput once per
 * file named on the command line (a directory: every file in it). Exits non-zero on the
 * first file it cannot read; a finding crashes or aborts, as under libFuzzer. */
#include <dirent.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Run the harness on the bytes of one file; 0, or -1 if it cannot be read. */
static int replay_file(const char *path) {
    char *buf = NULL, *err = NULL;
    size_t n = 0;
    if (plume_read_file(path, &buf, &n, &err)) {
        fprintf(stderr, "replay: %s\n", err ? err : path);
        free(err);
        return -1;
    }
    LLVMFuzzerTestOneInput((const uint8_t *)buf, n);
    free(buf);
    return 0;
}

/* Run the harness on a file, or on every regular file of a directory. Returns the count run,
 * or -1. */
static int replay_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) return replay_file(path) ? -1 : 1;
    DIR *d = opendir(path);
    if (!d) return -1;
    int count = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        char *p = plume_path_join(path, e->d_name);
        int r = p ? replay_file(p) : -1;
        free(p);
        if (r) { count = -1; break; }
        count++;
    }
    closedir(d);
    return count;
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    int total = 0;
    for (int i = 1; i < argc; i++) {
        int r = replay_path(argv[i]);
        if (r < 0) { fprintf(stderr, "replay: cannot read %s\n", argv[i]); return 1; }
        total += r;
    }
    printf("replayed %d inputs\n", total);
    return 0;
}
