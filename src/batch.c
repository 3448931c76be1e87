/* batch.c -- plume_batch: one forward step of several sessions.
 *
 * Continuous batching. A server with N conversations in flight queues, at every step, one
 * token of each decoding session and a chunk of each prefilling one, then runs them as one
 * step (forward.c): the weights stream from memory once for all of them. A session's logits
 * do not depend on what else is in the step, so its output is what it would be alone. */
#include <stdlib.h>

#include "embd.h"
#include "forward.h"
#include "scratch.h"
#include "session.h"

/* ---- plume_batch ----------------------------------------------------------------------- */

struct plume_batch {
    plume_model *m;
    plume_scratch x;      /* [cap] rows */
    int32_t cap;
    plume_step_entry *e;  /* [cap] queued entries */
    int32_t n;            /* entries queued */
    int32_t T;            /* tokens queued */
    float *logits;        /* [logit_rows, V] the head's output when several entries want logits */
    int32_t logit_rows;
    const float **emb;    /* [cap] the queued rows' given embeddings (plume_batch_add_media), */
    uint64_t *keys;       /* [cap] and their keys; an entry without media points at none */
};

int plume_batch_new(plume_batch **out, plume_model *m, int32_t n_tokens_max, char **err) {
    *out = NULL;
    plume_batch *b = calloc(1, sizeof *b);
    if (!b) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    b->m = m;
    b->cap = n_tokens_max > 0 ? n_tokens_max : 256;
    b->e = calloc((size_t)b->cap, sizeof *b->e);
    b->emb = calloc((size_t)b->cap, sizeof *b->emb);
    b->keys = calloc((size_t)b->cap, sizeof *b->keys);
    int rc = b->e && b->emb && b->keys ? plume_scratch_init(&b->x, m, b->cap, (int64_t)m->c.W + b->cap, err)
                                       : plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (rc) {
        free(b->e);
        free(b->emb);
        free(b->keys);
        free(b);
        return rc;
    }
    *out = b;
    return 0;
}

void plume_batch_free(plume_batch *b) {
    if (!b) return;
    plume_scratch_free(&b->x);
    plume_dealloc(b->logits);
    free(b->e);
    free((void *)b->emb);
    free(b->keys);
    free(b);
}

int32_t plume_batch_n_tokens(const plume_batch *b) { return b->T; }

void plume_batch_clear(plume_batch *b) {
    b->n = 0;
    b->T = 0;
}

/* plume_batch_add, with media when n_media > 0 (plume_batch_add_media). */
static int32_t batch_add(plume_batch *b, plume_session *s, const int32_t *ids, int32_t n, const plume_embd *const *media,
                         int32_t n_media, int32_t skip, float *logits, int32_t all, char **err) {
    if (s->m != b->m) return plume_fail(err, PLUME_EINVAL, "batch: the session belongs to another model");
    if (n < 1) return plume_fail(err, PLUME_EINVAL, "batch: no tokens");
    for (int32_t i = 0; i < b->n; i++)
        if (b->e[i].s == s) return plume_fail(err, PLUME_EINVAL, "batch: the session is already in this step");
    if (b->T >= b->cap) return plume_fail(err, PLUME_EINVAL, "batch: full (%d tokens)", b->cap);
    if (s->n_past >= s->n_ctx)
        return plume_fail(err, PLUME_ERANGE, "batch: the session's context of %d tokens is full", s->n_ctx);
    int32_t take = n;
    if (take > b->cap - b->T) take = b->cap - b->T;
    if (take > s->n_ctx - s->n_past) take = s->n_ctx - s->n_past;
    if (s->snap) {
        int32_t to_snap = s->snap_every - s->n_past % s->snap_every;
        if (take > to_snap) take = to_snap;
    }
    int rc = plume_model_check_ids(s->m, ids, take, err);
    if (rc) return rc;
    int with_media = n_media > 0;
    if (with_media && (rc = embd_place_from(&s->m->c, ids, take, media, n_media, skip, b->emb + b->T, b->keys + b->T, err)))
        return rc;
    b->e[b->n++] = (plume_step_entry){s, ids, take, s->n_past, b->T, logits, all, with_media ? b->emb + b->T : NULL,
                                      with_media ? b->keys + b->T : NULL};
    b->T += take;
    return take;
}

int32_t plume_batch_add(plume_batch *b, plume_session *s, const int32_t *ids, int32_t n, float *logits, int32_t all,
                        char **err) {
    return batch_add(b, s, ids, n, NULL, 0, 0, logits, all, err);
}

int32_t plume_batch_add_media(plume_batch *b, plume_session *s, const int32_t *ids, int32_t n,
                              const plume_embd *const *media, int32_t n_media, int32_t skip, float *logits, int32_t all,
                              char **err) {
    return batch_add(b, s, ids, n, media, n_media, skip, logits, all, err);
}

int plume_batch_run(plume_batch *b, char **err) {
    if (b->n == 0) return 0;
    const plume_config *c = &b->m->c;
    int64_t span = b->x.span;
    int32_t rows = 0;
    for (int32_t i = 0; i < b->n; i++) {
        if (b->e[i].P + b->e[i].T > span) span = b->e[i].P + b->e[i].T;
        if (b->e[i].logits) rows += b->e[i].all ? b->e[i].T : 1;
    }
    if (span > b->x.span && plume_scratch_grow_part(&b->x, b->m, span + span / 2)) /* a longer conversation */
        return plume_fail(err, PLUME_ENOMEM, "out of memory for attention block states");
    if (b->n > 1 && rows > b->logit_rows) {
        float *lg = plume_alloc((size_t)rows * (size_t)c->V * 4);
        if (!lg) return plume_fail(err, PLUME_ENOMEM, "out of memory for %d rows of logits", rows);
        plume_dealloc(b->logits);
        b->logits = lg;
        b->logit_rows = rows;
    }
    for (int32_t i = 0; i < b->n; i++) /* the sessions keep the media rows they are fed */
        if (b->e[i].emb && plume_session_keep_media(b->e[i].s, b->e[i].P, b->e[i].emb, b->e[i].T, err)) {
            while (i-- > 0) plume_session_drop_media(b->e[i].s, b->e[i].P);
            return PLUME_ENOMEM;
        }
    plume_model_prefault(b->m);
    plume_forward(b->m, &b->x, b->e, b->n, b->logits);
    for (int32_t i = 0; i < b->n; i++) plume_session_stepped(b->e[i].s);
    plume_batch_clear(b);
    return 0;
}
