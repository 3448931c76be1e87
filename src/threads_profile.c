/* threads_profile.c -- the thread profile on the public API (plume.h's benchmarks section):
 * the pool records into a plume_prof (pool.c), profile.c prints it. Benchmarks only. */
#include <stdio.h>
#include <stdlib.h>

#include "model.h"
#include "plume.h"

/* Record m's threads into a new profile (plume.h). */
int plume_model_profile_start(plume_model *m, plume_prof **out, char **err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return plume_fail(err, PLUME_ENOMEM, "threads profile: out of memory");
    plume_pool_profile_start(m->pool, *out);
    return 0;
}

/* Stop the recording, report it, free it (plume.h). */
char *plume_model_profile_stop(plume_model *m, plume_prof *p, int64_t steps, const char *title) {
    char *text = NULL;
    size_t len = 0;
    plume_pool_profile_stop(m->pool);
    p->steps = steps;
    FILE *f = open_memstream(&text, &len);
    if (f) {
        plume_prof_print(f, p, title);
        if (fclose(f)) {
            free(text);
            text = NULL;
        }
    }
    free(p);
    return text;
}
