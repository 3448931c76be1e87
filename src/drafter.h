/* drafter.h -- the MTP drafter inside libplume (drafter.c): one draft step over K/V given
 * either as a session's caches or as plain arrays (tests hold a step to the goldens with the
 * second). The public face is plume_drafter_* (plume.h). */
#ifndef PLUME_DRAFTER_H
#define PLUME_DRAFTER_H

#include "model.h"

/* The K/V one attention type hands the drafter: positions [lo, hi) of either a session's
 * cache (cache != NULL; ring slot pos % slots) or arrays k, v [Hkv, n, hd] holding positions
 * [0, n) (the goldens' layout). */
typedef struct {
    const plume_kv *cache;
    const float *k, *v;
    int32_t n;      /* arrays: positions they hold */
    int32_t lo, hi; /* the positions attended */
} drafter_kv;

/* One draft step: in [2 * Db] (the token's scaled embedding, then the hidden) at position pos
 * over kv[0] (sliding) and kv[1] (full): logits [V] (no softcap; NULL: none), proj [Db] (the
 * post_projection output; NULL: none), normed [D] (the final norm's output; NULL: none).
 * Returns the argmax of the logits (the first on ties). */
int32_t drafter_step(plume_drafter *d, const float *in, int32_t pos, const drafter_kv kv[2], float *logits,
                     float *proj, float *normed);
/* The drafter's step input of a token: the target's embedding row times sqrt(Db), into in[0, Db). */
void drafter_embed(const plume_drafter *d, int32_t token, float *in);
/* The K/V of session s a draft step at position n_past reads (spec §3, §2.2): 0, or 1 when
 * s holds no K/V. */
int drafter_session_kv(const plume_drafter *d, const plume_session *s, drafter_kv kv[2]);

#endif
