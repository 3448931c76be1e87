/* session.c -- a conversation's state: the three chunk states (KV caches), the tokens so far,
 * snapshots of the sliding rings, and the scratch of a step, all allocated once at creation.
 *
 * Rewinding. A full-attention cache is linear: forgetting positions is free. A sliding ring
 * holds W + n_rewind slots, so after a rewind of up to n_rewind + 1 tokens the window of the
 * next token is still in it. For deeper rewinds the session keeps, every snapshot_every
 * tokens, a copy of the last W - 1 positions of every ring; a rewind restores the nearest
 * snapshot at or before the target and recomputes the tokens from there (they are known).
 * Every path gives the logits a fresh prefill gives. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "embd.h"
#include "session.h"

#include "forward.h"
#include "scratch.h"

#define STATE_MAGIC "PLMSTATE"
#define STATE_VERSION 1u       /* a session that has seen no media */
#define STATE_VERSION_MEDIA 2u /* one that has: the payload ends with its keys and media rows */

plume_session_params plume_session_default_params(void) {
    plume_session_params p = {.n_ctx = 0, .n_batch = 128, .n_rewind = -2, .snapshot_every = 0, .kv_bits = 32};
    return p;
}

/* ---- creation -------------------------------------------------------------------------- */

/* Allocate the caches of chunk ci's layers that own one. */
static int chunk_state_init(plume_session *s, int32_t ci, char **err) {
    const plume_config *c = &s->m->c;
    plume_chunk_state *cs = &s->chunk[ci];
    cs->first = c->chunk[ci];
    cs->end = c->chunk[ci + 1];
    for (int32_t l = cs->first; l < cs->end; l++) cs->n_kv += c->kv_src[l] == l;
    cs->kv = calloc((size_t)cs->n_kv + 1, sizeof *cs->kv);
    if (!cs->kv) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    int32_t i = 0;
    for (int32_t l = cs->first; l < cs->end; l++) {
        if (c->kv_src[l] != l) continue;
        plume_kv *kv = &cs->kv[i++];
        kv->layer = l;
        kv->ring = !c->is_full[l] && (int64_t)c->W + s->n_rewind < s->n_ctx;
        kv->slots = kv->ring ? c->W + s->n_rewind : s->n_ctx;
        kv->width = c->Hkv * c->hd[l];
        size_t cache = (size_t)kv->slots * (size_t)kv->width;
        if (!kv->ring && s->kv_bits == 8) {
            kv->k8 = plume_alloc(cache);
            kv->v8 = plume_alloc(cache);
            kv->ks = plume_alloc((size_t)kv->slots * (size_t)c->Hkv * 4);
            kv->vs = plume_alloc((size_t)kv->slots * (size_t)c->Hkv * 4);
        } else {
            kv->k = plume_alloc(cache * 4);
            kv->v = plume_alloc(cache * 4);
        }
        if (!(kv->k || kv->k8) || !(kv->v || kv->v8) || (kv->k8 && (!kv->ks || !kv->vs)))
            return plume_fail(err, PLUME_ENOMEM, "out of memory for the KV cache of layer %d (%zu MB)", l,
                              cache * 8 >> 20);
        if (kv->ring) { /* saved whole by plume_session_save: give unwritten slots a value */
            memset(kv->k, 0, cache * 4);
            memset(kv->v, 0, cache * 4);
            s->snap_stride += (size_t)2 * (size_t)(c->W - 1) * (size_t)kv->width;
            s->ring_slots = kv->slots;
        }
        s->kv_of[l] = kv;
    }
    return 0;
}

/* Allocate the tokens, the snapshots and the step scratch (sizes from the config and
 * n_batch). */
static int scratch_init(plume_session *s, char **err) {
    s->tokens = calloc((size_t)s->n_ctx, sizeof *s->tokens);
    if (!s->tokens) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (s->snap_every > 0 && s->n_snap > 0 && s->snap_stride > 0) {
        s->snap = plume_alloc((size_t)s->n_snap * s->snap_stride * 4);
        if (!s->snap) return plume_fail(err, PLUME_ENOMEM, "out of memory for the ring snapshots");
    }
    s->hid = plume_alloc((size_t)s->n_batch * (size_t)s->m->c.D * sizeof(float));
    if (!s->hid) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    return plume_scratch_init(&s->x, s->m, s->n_batch, (int64_t)s->n_ctx + s->n_batch, err);
}

int plume_session_new(plume_session **out, plume_model *m, const plume_session_params *pp, char **err) {
    *out = NULL;
    plume_session_params p = pp ? *pp : plume_session_default_params();
    const plume_config *c = &m->c;
    plume_session *s = calloc(1, sizeof *s);
    if (!s) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    s->m = m;
    s->n_ctx = p.n_ctx > 0 ? p.n_ctx : c->n_ctx;
    s->n_batch = p.n_batch > 0 ? p.n_batch : 128;
    s->n_rewind = p.n_rewind == -2 ? c->W : p.n_rewind < 0 ? 0 : p.n_rewind;
    s->kv_bits = p.kv_bits == 8 ? 8 : 32;
    if (s->n_batch > s->n_ctx) s->n_batch = s->n_ctx;
    s->snap_every = p.snapshot_every < 0 ? 0 : p.snapshot_every > 0 ? p.snapshot_every
                                              : (s->n_ctx / 8 > 1024 ? s->n_ctx / 8 : 1024);
    s->n_snap = s->snap_every ? s->n_ctx / s->snap_every : 0;
    int rc = 0;
    if (p.kv_bits != 0 && p.kv_bits != 8 && p.kv_bits != 32)
        return plume_session_free(s), plume_fail(err, PLUME_EINVAL, "kv_bits must be 8 or 32, not %d", p.kv_bits);
    if (s->n_ctx > c->max_pos)
        rc = plume_fail(err, PLUME_EINVAL, "context %d exceeds the model's max_position_embeddings %d", s->n_ctx,
                        c->max_pos);
    for (int32_t ci = 0; !rc && ci < PLUME_N_CHUNKS; ci++) rc = chunk_state_init(s, ci, err);
    for (int32_t l = 0; !rc && l < c->L; l++) s->kv_of[l] = s->kv_of[c->kv_src[l]];
    if (!rc) rc = scratch_init(s, err);
    if (rc) {
        plume_session_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void plume_session_free(plume_session *s) {
    if (!s) return;
    for (int32_t ci = 0; ci < PLUME_N_CHUNKS; ci++) {
        for (int32_t i = 0; i < s->chunk[ci].n_kv; i++) {
            plume_kv *kv = &s->chunk[ci].kv[i];
            plume_dealloc(kv->k);
            plume_dealloc(kv->v);
            plume_dealloc(kv->k8);
            plume_dealloc(kv->v8);
            plume_dealloc(kv->ks);
            plume_dealloc(kv->vs);
        }
        free(s->chunk[ci].kv);
    }
    free(s->tokens);
    free(s->keys);
    for (int32_t i = 0; i < s->n_spans; i++) free(s->spans[i].rows);
    free(s->spans);
    plume_scratch_free(&s->x);
    plume_dealloc(s->snap);
    plume_dealloc(s->hid);
    free(s);
}

/* ---- snapshots ------------------------------------------------------------------------- */

/* Copy the last W - 1 positions before p of every ring into (dir > 0) or out of (dir < 0)
 * snapshot buffer buf. */
static void snapshot_copy(plume_session *s, float *buf, int32_t p, int dir) {
    const int32_t W = s->m->c.W;
    for (int32_t ci = 0; ci < PLUME_N_CHUNKS; ci++)
        for (int32_t i = 0; i < s->chunk[ci].n_kv; i++) {
            plume_kv *kv = &s->chunk[ci].kv[i];
            if (!kv->ring) continue;
            for (int32_t kvv = 0; kvv < 2; kvv++) {
                float *cache = kvv ? kv->v : kv->k;
                for (int32_t j = 0; j < W - 1; j++, buf += kv->width) {
                    int32_t q = p - (W - 1) + j;
                    if (q < 0) continue;
                    float *slot = cache + (int64_t)(q % kv->slots) * kv->width;
                    if (dir > 0) memcpy(buf, slot, (size_t)kv->width * 4);
                    else memcpy(slot, buf, (size_t)kv->width * 4);
                }
            }
        }
}

void plume_session_stepped(plume_session *s) {
    if (!s->snap || s->n_past % s->snap_every) return;
    int32_t k = s->n_past / s->snap_every - 1;
    if (k < 0 || k >= s->n_snap) return;
    snapshot_copy(s, s->snap + (size_t)k * s->snap_stride, s->n_past, 1);
    s->snap_valid = k + 1;
}

/* ---- feeding --------------------------------------------------------------------------- */

/* Check that there are ids and that each is in the vocabulary. */
static int check_ids(const plume_session *s, const int32_t *ids, int32_t n, char **err) {
    if (n < 1) return plume_fail(err, PLUME_EINVAL, "feed: no tokens");
    return plume_model_check_ids(s->m, ids, n, err);
}

/* Check ids and room; no state changes. */
static int feed_check(const plume_session *s, const int32_t *ids, int32_t n, char **err) {
    if (n > s->n_ctx - s->n_past)
        return plume_fail(err, PLUME_ERANGE, "%d tokens do not fit: %d of the context's %d are used", n, s->n_past,
                          s->n_ctx);
    return check_ids(s, ids, n, err);
}

/* Feed validated rows (ids; emb and keys may be NULL: all tokens) in steps of at most n_batch
 * that also end at every snapshot position. */
static void feed_steps(plume_session *s, const int32_t *ids, const float *const *emb, const uint64_t *keys, int32_t n,
                       float *logits, int32_t all) {
    int64_t V = s->m->c.V;
    plume_model_prefault(s->m);
    for (int32_t i = 0; i < n;) {
        int32_t T = n - i < s->n_batch ? n - i : s->n_batch;
        if (s->snap) {
            int32_t to_snap = s->snap_every - s->n_past % s->snap_every;
            if (T > to_snap) T = to_snap;
        }
        int last = i + T == n;
        float *lg = !logits ? NULL : all ? logits + (int64_t)i * V : last ? logits : NULL;
        plume_forward_step(s, ids + i, emb ? emb + i : NULL, keys ? keys + i : NULL, T, lg, all);
        plume_session_stepped(s);
        i += T;
    }
}

int plume_session_feed(plume_session *s, const int32_t *ids, int32_t n, float *logits, int32_t all, char **err) {
    int rc = feed_check(s, ids, n, err);
    if (rc) return rc;
    feed_steps(s, ids, NULL, NULL, n, logits, all);
    return 0;
}

/* ---- media ----------------------------------------------------------------------------- */

/* Forget the media rows at positions n_keep and later. */
static void spans_trim(plume_session *s, int32_t n_keep) {
    while (s->n_spans > 0 && s->spans[s->n_spans - 1].pos >= n_keep) free(s->spans[--s->n_spans].rows);
    if (s->n_spans > 0) {
        plume_media_span *sp = &s->spans[s->n_spans - 1];
        if (sp->pos + sp->n > n_keep) sp->n = n_keep - sp->pos;
    }
}

/* Remember the media rows of n rows to be fed at position P (copies, one span per run of
 * consecutive rows), and make sure the session keeps keys. 0 or PLUME_ENOMEM (nothing kept). */
static int spans_add(plume_session *s, int32_t P, const float *const *emb, int32_t n, char **err) {
    const int32_t D = s->m->c.D;
    if (!s->keys && !(s->keys = calloc((size_t)s->n_ctx, sizeof *s->keys)))
        return plume_fail(err, PLUME_ENOMEM, "out of memory");
    const int32_t n0 = s->n_spans;
    for (int32_t i = 0; i < n;) {
        if (!emb[i]) { i++; continue; }
        int32_t j = i + 1;
        while (j < n && emb[j] && emb[j] == emb[j - 1] + D) j++;
        if (s->n_spans == s->cap_spans) {
            int32_t cap = s->cap_spans ? 2 * s->cap_spans : 8;
            plume_media_span *more = realloc(s->spans, sizeof *more * (size_t)cap);
            if (!more) goto oom;
            s->spans = more;
            s->cap_spans = cap;
        }
        float *rows = malloc((size_t)(j - i) * (size_t)D * sizeof *rows);
        if (!rows) goto oom;
        memcpy(rows, emb[i], (size_t)(j - i) * (size_t)D * sizeof *rows);
        s->spans[s->n_spans++] = (plume_media_span){P + i, j - i, rows};
        i = j;
    }
    return 0;
oom:
    while (s->n_spans > n0) free(s->spans[--s->n_spans].rows);
    return plume_fail(err, PLUME_ENOMEM, "out of memory for the media rows of a session");
}

int plume_session_keep_media(plume_session *s, int32_t P, const float *const *emb, int32_t n, char **err) {
    return spans_add(s, P, emb, n, err);
}

void plume_session_drop_media(plume_session *s, int32_t from) { spans_trim(s, from); }

/* The media rows of positions [from, from + n) as row pointers (NULL for tokens), from the
 * spans: what a rewind recomputes. */
static void spans_rows(const plume_session *s, int32_t from, int32_t n, const float **emb) {
    const int32_t D = s->m->c.D;
    for (int32_t i = 0; i < n; i++) emb[i] = NULL;
    for (int32_t k = 0; k < s->n_spans; k++) {
        const plume_media_span *sp = &s->spans[k];
        for (int32_t p = sp->pos; p < sp->pos + sp->n; p++)
            if (p >= from && p < from + n) emb[p - from] = sp->rows + (size_t)(p - sp->pos) * (size_t)D;
    }
}

/* The rows and keys of a prompt with media (embd_place), malloc'd into *emb and *keys. */
static int media_prepare(const plume_session *s, const int32_t *ids, int32_t n, const plume_embd *const *media,
                         int32_t n_media, const float ***emb, uint64_t **keys, char **err) {
    *emb = malloc(sizeof **emb * (size_t)(n > 0 ? n : 1));
    *keys = malloc(sizeof **keys * (size_t)(n > 0 ? n : 1));
    int rc = *emb && *keys ? embd_place(&s->m->c, ids, n, media, n_media, *emb, *keys, err)
                           : plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (rc) {
        free((void *)*emb);
        free(*keys);
        *emb = NULL;
        *keys = NULL;
    }
    return rc;
}

int plume_session_feed_media(plume_session *s, const int32_t *ids, int32_t n, const plume_embd *const *media,
                             int32_t n_media, float *logits, int32_t all, char **err) {
    int rc = feed_check(s, ids, n, err);
    const float **emb = NULL;
    uint64_t *keys = NULL;
    if (!rc) rc = media_prepare(s, ids, n, media, n_media, &emb, &keys, err);
    if (!rc && n_media) rc = spans_add(s, s->n_past, emb, n, err);
    if (!rc) feed_steps(s, ids, n_media ? emb : NULL, n_media ? keys : NULL, n, logits, all);
    free((void *)emb);
    free(keys);
    return rc;
}

/* ---- rewind ---------------------------------------------------------------------------- */

/* Whether the window of position n_keep, [n_keep - W + 1, n_keep), is still in every ring:
 * no position written since (up to ring_end, past n_past after a speculative step's rewind)
 * took the slot of one of them, and the last restore vouches for them all. */
static int ring_whole(const plume_session *s, int32_t n_keep) {
    if (s->ring_slots == 0) return 1;
    int64_t hi = s->ring_end > s->n_past ? s->ring_end : s->n_past;
    int32_t lo = n_keep - s->m->c.W + 1 > 0 ? n_keep - s->m->c.W + 1 : 0;
    return hi - n_keep <= (int64_t)s->ring_slots - s->m->c.W + 1 && lo >= s->ring_floor;
}

int32_t plume_session_rewind_point(const plume_session *s, int32_t n_keep) {
    if (n_keep < 0) return 0;
    if (n_keep > s->n_past) return s->n_past;
    /* the same cases, in the same order, as plume_session_rewind below */
    if (ring_whole(s, n_keep)) return n_keep;
    int32_t k = s->snap_valid;
    if (k > 0 && k * s->snap_every > n_keep) k = n_keep / s->snap_every;
    return k > 0 ? k * s->snap_every : 0;
}

int plume_session_rewind(plume_session *s, int32_t n_keep, char **err) {
    if (n_keep < 0 || n_keep > s->n_past)
        return plume_fail(err, PLUME_EINVAL, "rewind to %d: the session holds %d tokens", n_keep, s->n_past);
    const int32_t W = s->m->c.W;
    if (s->snap_valid > 0 && s->snap_valid * s->snap_every > n_keep) s->snap_valid = n_keep / s->snap_every;
    spans_trim(s, n_keep);
    /* The window of position n_keep is [n_keep - W + 1, n_keep): still in the ring unless a
     * later position overwrote its slot. */
    if (ring_whole(s, n_keep)) {
        s->n_past = n_keep;
        return 0;
    }
    int32_t k = s->snap_valid; /* snapshot k - 1 is at position k * snap_every <= n_keep */
    int32_t from = k > 0 ? k * s->snap_every : 0;
    if (k > 0) snapshot_copy(s, s->snap + (size_t)(k - 1) * s->snap_stride, from, -1);
    s->n_past = from;
    /* the restored window and what is fed from it are whole; the K/V later positions left in
     * other slots only took those of positions before the window */
    s->ring_end = from;
    s->ring_floor = from - (W - 1) > 0 ? from - (W - 1) : 0;
    if (n_keep > from) { /* the tokens and media rows of [from, n_keep) again */
        const int32_t n = n_keep - from;
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        const float **emb = s->keys ? malloc((size_t)n * sizeof *emb) : NULL;
        uint64_t *keys = s->keys ? malloc((size_t)n * sizeof *keys) : NULL;
        if (!ids || (s->keys && (!emb || !keys))) {
            free(ids), free((void *)emb), free(keys);
            return plume_fail(err, PLUME_ENOMEM, "out of memory");
        }
        memcpy(ids, s->tokens + from, (size_t)n * sizeof *ids);
        if (keys) {
            memcpy(keys, s->keys + from, (size_t)n * sizeof *keys);
            spans_rows(s, from, n, emb);
        }
        feed_steps(s, ids, emb, keys, n, NULL, 0);
        free(ids), free((void *)emb), free(keys);
    }
    return 0;
}

/* plume_session_feed_prompt with the prompt's rows (emb, keys: NULL for all tokens): the
 * prefix it shares with the history, ids and keys, is kept. */
static int feed_prompt(plume_session *s, const int32_t *ids, const float *const *emb, const uint64_t *keys, int32_t n,
                       float *logits, int32_t *n_reused, char **err) {
    int32_t common = 0;
    while (common < n && common < s->n_past && s->tokens[common] == ids[common] &&
           (s->keys ? s->keys[common] : 0) == (keys ? keys[common] : 0))
        common++;
    if (common == n) common = n - 1; /* the last token is fed again for its logits */
    int rc = plume_session_rewind(s, common, err);
    if (!rc && emb) rc = spans_add(s, common, emb + common, n - common, err);
    if (rc) return rc;
    if (n_reused) *n_reused = common;
    feed_steps(s, ids + common, emb ? emb + common : NULL, keys ? keys + common : NULL, n - common, logits, 0);
    return 0;
}

int plume_session_feed_prompt(plume_session *s, const int32_t *ids, int32_t n, float *logits, int32_t *n_reused,
                              char **err) {
    if (n > s->n_ctx)
        return plume_fail(err, PLUME_ERANGE, "the prompt has %d tokens, more than the context's %d", n, s->n_ctx);
    int rc = check_ids(s, ids, n, err);
    return rc ? rc : feed_prompt(s, ids, NULL, NULL, n, logits, n_reused, err);
}

int plume_session_feed_prompt_media(plume_session *s, const int32_t *ids, int32_t n, const plume_embd *const *media,
                                    int32_t n_media, float *logits, int32_t *n_reused, char **err) {
    if (n > s->n_ctx)
        return plume_fail(err, PLUME_ERANGE, "the prompt has %d tokens, more than the context's %d", n, s->n_ctx);
    int rc = check_ids(s, ids, n, err);
    const float **emb = NULL;
    uint64_t *keys = NULL;
    if (!rc) rc = media_prepare(s, ids, n, media, n_media, &emb, &keys, err);
    if (!rc) rc = feed_prompt(s, ids, n_media ? emb : NULL, n_media ? keys : NULL, n, logits, n_reused, err);
    free((void *)emb);
    free(keys);
    return rc;
}

/* ---- bench history --------------------------------------------------------------------- */

/* Fill n floats with pseudo-random values in [-1, 1). */
static void fill_floats(float *x, size_t n, uint64_t *rng) {
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * plume_rng_float(rng) - 1.0f;
}

/* Fill n int8 values with pseudo-random values in [-127, 127], 8 from each draw. */
static void fill_int8(int8_t *q, size_t n, uint64_t *rng) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t r = plume_rng_next(rng);
        for (size_t b = 0; b < 8 && i + b < n; b++) q[i + b] = (int8_t)((int)((r >> (8 * b)) & 255) % 255 - 127);
    }
}

int plume_session_fill_random(plume_session *s, int32_t n_past, uint64_t seed, char **err) {
    if (n_past < 0 || n_past >= s->n_ctx)
        return plume_fail(err, PLUME_EINVAL, "history of %d tokens: the context holds %d", n_past, s->n_ctx);
    const plume_config *c = &s->m->c;
    uint64_t rng = seed;
    for (int32_t ci = 0; ci < PLUME_N_CHUNKS; ci++)
        for (int32_t i = 0; i < s->chunk[ci].n_kv; i++) {
            plume_kv *kv = &s->chunk[ci].kv[i];
            size_t rows = (size_t)(kv->ring ? (n_past < kv->slots ? n_past : kv->slots) : n_past);
            size_t n = rows * (size_t)kv->width;
            if (kv->k8) {
                fill_int8(kv->k8, n, &rng);
                fill_int8(kv->v8, n, &rng);
                for (size_t r = 0; r < rows * (size_t)c->Hkv; r++) {
                    kv->ks[r] = 0.01f + 0.02f * plume_rng_float(&rng);
                    kv->vs[r] = 0.01f + 0.02f * plume_rng_float(&rng);
                }
            } else {
                fill_floats(kv->k, n, &rng);
                fill_floats(kv->v, n, &rng);
            }
        }
    for (int32_t i = 0; i < n_past; i++) s->tokens[i] = (int32_t)(plume_rng_next(&rng) % (uint64_t)c->V);
    spans_trim(s, 0);
    if (s->keys) memset(s->keys, 0, (size_t)s->n_ctx * sizeof *s->keys);
    s->n_past = n_past;
    s->snap_valid = 0; /* the tokens would not reproduce these rows */
    s->hid_n = 0;      /* nor give the drafter a handover */
    s->fwd_end = n_past;
    s->ring_end = n_past;
    s->ring_floor = 0;
    return 0;
}

int32_t plume_session_n_past(const plume_session *s) { return s->n_past; }
int32_t plume_session_n_ctx(const plume_session *s) { return s->n_ctx; }
const int32_t *plume_session_tokens(const plume_session *s) { return s->tokens; }
const uint64_t *plume_session_keys(const plume_session *s) { return s->keys; }

/* ---- save / load ----------------------------------------------------------------------- */
/*
 * State file, little-endian:
 *   "PLMSTATE" u32 version u32 kv_bits u64 model identity
 *   i32 n_ctx n_past n_rewind snap_every n_snap snap_valid n_batch W  u64 payload bytes
 *   payload: tokens [n_past] i32; for each cache in chunk order: K then V, ring caches their
 *   whole ring [slots, width], linear caches their first n_past rows (kv_bits 8: int8 rows
 *   then the [rows, Hkv] f32 scales, for K and for V); snapshots
 *   [snap_valid, snap_stride] f32;
 *   version 2 only (a session that has seen media): keys [n_past] u64, u32 spans, each span
 *   i32 pos, i32 n, rows [n, D] f32 (positions ascending, not overlapping, inside n_past)
 *   u64 FNV-1a of the payload
 */

typedef struct {
    uint64_t h;
    plume_wfile *f;
    int ok;
} state_writer;

/* Write bytes and fold them into the checksum. */
static void sw_put(state_writer *w, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) w->h = (w->h ^ b[i]) * 1099511628211ull;
    if (w->ok && n && plume_wfile_write(w->f, p, n, NULL)) w->ok = 0;
}

/* Rows of each cache a state file carries. */
static int64_t cache_rows(const plume_session *s, const plume_kv *kv) { return kv->ring ? kv->slots : s->n_past; }

/* Bytes of K (or V) of a cache a state file carries: float rows, or int8 rows and scales. */
static uint64_t cache_bytes(const plume_session *s, const plume_kv *kv) {
    uint64_t rows = (uint64_t)cache_rows(s, kv);
    if (kv->k8) return rows * (uint64_t)kv->width + rows * (uint64_t)s->m->c.Hkv * 4;
    return rows * (uint64_t)kv->width * 4;
}

/* Write one cache's K then V. */
static void save_cache(state_writer *w, const plume_session *s, const plume_kv *kv) {
    size_t rows = (size_t)cache_rows(s, kv), hkv = (size_t)s->m->c.Hkv;
    if (kv->k8) {
        sw_put(w, kv->k8, rows * (size_t)kv->width);
        sw_put(w, kv->ks, rows * hkv * 4);
        sw_put(w, kv->v8, rows * (size_t)kv->width);
        sw_put(w, kv->vs, rows * hkv * 4);
    } else {
        sw_put(w, kv->k, rows * (size_t)kv->width * 4);
        sw_put(w, kv->v, rows * (size_t)kv->width * 4);
    }
}

/* Read one cache's K then V from p; returns the bytes consumed. */
static size_t load_cache(const plume_session *s, plume_kv *kv, const uint8_t *p) {
    size_t rows = (size_t)cache_rows(s, kv), hkv = (size_t)s->m->c.Hkv, q = rows * (size_t)kv->width;
    if (kv->k8) {
        memcpy(kv->k8, p, q);
        memcpy(kv->ks, p + q, rows * hkv * 4);
        memcpy(kv->v8, p + q + rows * hkv * 4, q);
        memcpy(kv->vs, p + 2 * q + rows * hkv * 4, rows * hkv * 4);
        return 2 * (q + rows * hkv * 4);
    }
    memcpy(kv->k, p, q * 4);
    memcpy(kv->v, p + q * 4, q * 4);
    return 2 * q * 4;
}

/* Bytes of the payload of a state file with these shapes, computed from the model's config
 * alone (nothing allocated): what plume_session_save writes and plume_session_load expects.
 * *snap_stride gets the floats per ring snapshot. */
static uint64_t state_payload(const plume_config *c, int32_t n_ctx, int32_t n_past, int32_t n_rewind, int32_t kv_bits,
                              int32_t snap_valid, size_t *snap_stride) {
    uint64_t bytes = (uint64_t)n_past * 4, stride = 0;
    for (int32_t l = 0; l < c->L; l++) {
        if (c->kv_src[l] != l) continue;
        int ring = !c->is_full[l] && (int64_t)c->W + n_rewind < n_ctx;
        uint64_t rows = ring ? (uint64_t)c->W + (uint64_t)n_rewind : (uint64_t)n_past;
        uint64_t width = (uint64_t)c->Hkv * (uint64_t)c->hd[l];
        bytes += 2 * (!ring && kv_bits == 8 ? rows * width + rows * (uint64_t)c->Hkv * 4 : rows * width * 4);
        if (ring) stride += 2 * (uint64_t)(c->W - 1) * width;
    }
    *snap_stride = (size_t)stride;
    return bytes + (uint64_t)snap_valid * stride * 4;
}

/* Check the shapes a state header declares (f: n_ctx n_past n_rewind snap_every n_snap
 * snap_valid n_batch W) against the model and the payload size, before anything is sized
 * from them: a state file is untrusted, its checksum one anyone can recompute. */
static int state_check_header(const plume_model *m, const int32_t *f, uint32_t bits, uint64_t payload, int media,
                              const char *path, char **err) {
    const plume_config *c = &m->c;
    if (bits != 8 && bits != 32) return plume_fail(err, PLUME_EFORMAT, "%s: kv_bits %u is neither 8 nor 32", path, bits);
    if (f[0] < 1 || f[0] > c->max_pos)
        return plume_fail(err, PLUME_EFORMAT, "%s: context %d is outside [1, %d] (max_position_embeddings)", path, f[0],
                          c->max_pos);
    int32_t n_snap = f[3] > 0 ? f[0] / f[3] : 0;
    if (f[7] != c->W || f[1] < 0 || f[1] > f[0] || f[2] < 0 || f[3] < 0 || f[4] != n_snap || f[5] < 0 ||
        f[5] > f[4] || f[6] < 1 || f[6] > f[0])
        return plume_fail(err, PLUME_EFORMAT, "%s: inconsistent state header", path);
    size_t stride;
    uint64_t want = state_payload(c, f[0], f[1], f[2], (int32_t)bits, f[5], &stride);
    if (stride == 0 && f[5] != 0) return plume_fail(err, PLUME_EFORMAT, "%s: snapshots of no ring", path);
    if (media ? payload < want + (uint64_t)f[1] * 8 + 4 : want != payload)
        return plume_fail(err, PLUME_EFORMAT, "%s: the payload (%llu bytes) does not match the header's shapes (%llu)",
                          path, (unsigned long long)payload, (unsigned long long)want);
    return 0;
}

/* Whether x[0..n) are all finite (and, when nonneg, >= 0): what a cache may hold. */
static int all_finite(const float *x, size_t n, int nonneg) {
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= isfinite(x[i]) && (!nonneg || x[i] >= 0.0f);
    return ok;
}

/* Whether a loaded cache holds only values a step can have written: finite floats, finite
 * non-negative int8 scales (the int8 values themselves are all harmless). */
static int cache_sane(const plume_session *s, const plume_kv *kv) {
    size_t rows = (size_t)cache_rows(s, kv), hkv = (size_t)s->m->c.Hkv;
    if (kv->k8) return all_finite(kv->ks, rows * hkv, 1) && all_finite(kv->vs, rows * hkv, 1);
    return all_finite(kv->k, rows * (size_t)kv->width, 0) && all_finite(kv->v, rows * (size_t)kv->width, 0);
}

/* The 48-byte header of a state file. */
static void state_header(const plume_session *s, uint8_t *hdr, uint64_t payload) {
    memset(hdr, 0, 56);
    memcpy(hdr, STATE_MAGIC, 8);
    uint32_t v = s->keys ? STATE_VERSION_MEDIA : STATE_VERSION;
    memcpy(hdr + 8, &v, 4);
    uint32_t bits = (uint32_t)s->kv_bits;
    memcpy(hdr + 12, &bits, 4);
    memcpy(hdr + 16, &s->m->identity, 8);
    int32_t f[8] = {s->n_ctx, s->n_past, s->n_rewind, s->snap_every, s->n_snap, s->snap_valid, s->n_batch, s->m->c.W};
    memcpy(hdr + 24, f, 32);
    (void)payload;
}

int plume_session_save(const plume_session *s, const char *path, char **err) {
    plume_wfile f; /* common.h: a fresh temporary file beside path, or path itself when it is a device or link */
    int rc = plume_wfile_open(&f, path, 0, err);
    if (rc) return rc;
    size_t stride;
    uint64_t payload = state_payload(&s->m->c, s->n_ctx, s->n_past, s->n_rewind, s->kv_bits, s->snap_valid, &stride);
    if (s->keys) { /* version 2: keys and media rows */
        payload += (uint64_t)s->n_past * 8 + 4;
        for (int32_t i = 0; i < s->n_spans; i++) payload += 8 + (uint64_t)s->spans[i].n * (uint64_t)s->m->c.D * 4;
    }
    uint8_t hdr[64];
    state_header(s, hdr, payload);
    memcpy(hdr + 56, &payload, 8);
    state_writer w = {1469598103934665603ull, &f, 1};
    w.ok = plume_wfile_write(&f, hdr, 64, NULL) == 0;
    sw_put(&w, s->tokens, (size_t)s->n_past * 4);
    for (int32_t ci = 0; ci < PLUME_N_CHUNKS; ci++)
        for (int32_t i = 0; i < s->chunk[ci].n_kv; i++) {
            save_cache(&w, s, &s->chunk[ci].kv[i]);
        }
    if (s->snap) sw_put(&w, s->snap, (size_t)s->snap_valid * s->snap_stride * 4);
    if (s->keys) {
        sw_put(&w, s->keys, (size_t)s->n_past * 8);
        uint32_t ns = (uint32_t)s->n_spans;
        sw_put(&w, &ns, 4);
        for (int32_t i = 0; i < s->n_spans; i++) {
            sw_put(&w, &s->spans[i].pos, 4);
            sw_put(&w, &s->spans[i].n, 4);
            sw_put(&w, s->spans[i].rows, (size_t)s->spans[i].n * (size_t)s->m->c.D * 4);
        }
    }
    if (w.ok && plume_wfile_write(&f, &w.h, 8, err) == 0) return plume_wfile_commit(&f, err);
    rc = plume_fail(err, PLUME_EIO, "%s: write failed: %s", path, f.failed ? strerror(f.failed) : "out of memory");
    plume_wfile_abort(&f);
    return rc;
}

/* Read version 2's media section [p, end): the keys of the n_past positions and the spans'
 * rows, every count and position checked against what is left and against n_past. */
static int load_media(plume_session *s, const uint8_t *p, const uint8_t *end, const char *path, char **err) {
    const int32_t D = s->m->c.D;
    if ((size_t)(end - p) < (size_t)s->n_past * 8 + 4) return plume_fail(err, PLUME_EFORMAT, "%s: truncated media section", path);
    if (!(s->keys = calloc((size_t)s->n_ctx, sizeof *s->keys))) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    memcpy(s->keys, p, (size_t)s->n_past * 8);
    p += (size_t)s->n_past * 8;
    uint32_t ns;
    memcpy(&ns, p, 4);
    p += 4;
    if (ns > (uint32_t)s->n_past) return plume_fail(err, PLUME_EFORMAT, "%s: more media spans than positions", path);
    int32_t at = 0;
    for (uint32_t i = 0; i < ns; i++) {
        int32_t pos, n;
        if ((size_t)(end - p) < 8) return plume_fail(err, PLUME_EFORMAT, "%s: truncated media section", path);
        memcpy(&pos, p, 4);
        memcpy(&n, p + 4, 4);
        p += 8;
        if (pos < at || n < 1 || n > s->n_past - pos)
            return plume_fail(err, PLUME_EFORMAT, "%s: a media span outside the history or out of order", path);
        const size_t bytes = (size_t)n * (size_t)D * 4;
        if ((size_t)(end - p) < bytes) return plume_fail(err, PLUME_EFORMAT, "%s: truncated media rows", path);
        if (s->n_spans == s->cap_spans) {
            plume_media_span *more = realloc(s->spans, sizeof *more * (size_t)(s->cap_spans + 8));
            if (!more) return plume_fail(err, PLUME_ENOMEM, "out of memory");
            s->spans = more;
            s->cap_spans += 8;
        }
        float *rows = malloc(bytes);
        if (!rows) return plume_fail(err, PLUME_ENOMEM, "out of memory");
        memcpy(rows, p, bytes);
        p += bytes;
        s->spans[s->n_spans++] = (plume_media_span){pos, n, rows};
        if (!all_finite(rows, (size_t)n * (size_t)D, 0)) return plume_fail(err, PLUME_EFORMAT, "%s: media rows hold non-finite values", path);
        for (int32_t j = pos; j < pos + n; j++)
            if (!s->keys[j]) return plume_fail(err, PLUME_EFORMAT, "%s: a media position without a key", path);
        at = pos + n;
    }
    if (p != end) return plume_fail(err, PLUME_EFORMAT, "%s: bytes after the media section", path);
    return 0;
}

/* Check a mapped state file before anything is sized from it: magic, version (*ver), bundle
 * identity, length, checksum, and the shapes its header declares (f: n_ctx n_past n_rewind
 * snap_every n_snap snap_valid n_batch W; *bits: kv_bits). */
static int state_check(const plume_model *m, const plume_map *map, const char *path, int32_t f[8], uint32_t *bits,
                       uint32_t *ver, char **err) {
    const uint8_t *b = map->data;
    uint64_t id, payload;
    if (map->size < 72 || memcmp(b, STATE_MAGIC, 8))
        return plume_fail(err, PLUME_EFORMAT, "%s: not a plume state file", path);
    memcpy(ver, b + 8, 4);
    memcpy(bits, b + 12, 4);
    memcpy(&id, b + 16, 8);
    memcpy(f, b + 24, 32);
    memcpy(&payload, b + 56, 8);
    if (*ver != STATE_VERSION && *ver != STATE_VERSION_MEDIA)
        return plume_fail(err, PLUME_EFORMAT, "%s: state format version %u, want %u or %u", path, *ver, STATE_VERSION,
                          STATE_VERSION_MEDIA);
    if (id != m->identity)
        return plume_fail(err, PLUME_EMISMATCH, "%s: the state belongs to another bundle (model identity differs)", path);
    if (payload != map->size - 72)
        return plume_fail(err, PLUME_EFORMAT, "%s: %zu bytes, the header promises %llu (truncated?)", path, map->size,
                          (unsigned long long)(payload + 72));
    uint64_t h = 1469598103934665603ull, want;
    for (uint64_t i = 0; i < payload; i++) h = (h ^ b[64 + i]) * 1099511628211ull;
    memcpy(&want, b + 64 + payload, 8);
    if (h != want) return plume_fail(err, PLUME_EFORMAT, "%s: checksum mismatch (corrupt state file)", path);
    return state_check_header(m, f, *bits, payload, *ver == STATE_VERSION_MEDIA, path, err);
}

/* Fill a new session s, made with the file's shapes, from the payload at p (payload bytes):
 * tokens, caches, snapshots, each checked for values no step can have written, then (version
 * 2) the media section. */
static int state_fill(plume_session *s, const uint8_t *p, uint64_t payload, const int32_t f[8], uint32_t ver,
                      const char *path, char **err) {
    const uint8_t *end = p + payload;
    s->n_past = f[1];
    s->snap_valid = s->snap ? f[5] : 0;
    uint64_t need = (uint64_t)s->n_past * 4 + (uint64_t)s->snap_valid * s->snap_stride * 4;
    for (int32_t ci = 0; ci < PLUME_N_CHUNKS; ci++)
        for (int32_t i = 0; i < s->chunk[ci].n_kv; i++)
            need += 2 * cache_bytes(s, &s->chunk[ci].kv[i]);
    if ((ver == STATE_VERSION ? need != payload : need > payload) || s->n_snap != f[4])
        return plume_fail(err, PLUME_EFORMAT, "%s: the payload does not match the session's shapes", path);
    memcpy(s->tokens, p, (size_t)s->n_past * 4);
    p += (size_t)s->n_past * 4;
    for (int32_t i = 0; i < s->n_past; i++)
        if (s->tokens[i] < 0 || s->tokens[i] >= s->m->c.V)
            return plume_fail(err, PLUME_EFORMAT, "%s: a token id is outside the vocabulary", path);
    for (int32_t ci = 0; ci < PLUME_N_CHUNKS; ci++)
        for (int32_t i = 0; i < s->chunk[ci].n_kv; i++) {
            p += load_cache(s, &s->chunk[ci].kv[i], p);
            if (!cache_sane(s, &s->chunk[ci].kv[i]))
                return plume_fail(err, PLUME_EFORMAT, "%s: the cache of layer %d holds non-finite values", path,
                                  s->chunk[ci].kv[i].layer);
        }
    if (s->snap_valid) memcpy(s->snap, p, (size_t)s->snap_valid * s->snap_stride * 4);
    if (s->snap_valid && !all_finite(s->snap, (size_t)s->snap_valid * s->snap_stride, 0))
        return plume_fail(err, PLUME_EFORMAT, "%s: a ring snapshot holds non-finite values", path);
    p += (size_t)s->snap_valid * s->snap_stride * 4;
    return ver == STATE_VERSION_MEDIA ? load_media(s, p, end, path, err) : 0;
}

int plume_session_load(plume_session **out, plume_model *m, const char *path, char **err) {
    *out = NULL;
    plume_map map;
    int rc = plume_map_open(&map, path, err);
    if (rc) return rc;
    plume_session *s = NULL;
    int32_t f[8];
    uint32_t bits = 0, ver = 0;
    if (!(rc = state_check(m, &map, path, f, &bits, &ver, err))) {
        plume_session_params p = plume_session_default_params();
        p.n_ctx = f[0];
        p.n_rewind = f[2];
        p.snapshot_every = f[3] > 0 ? f[3] : -1;
        p.n_batch = f[6];
        p.kv_bits = (int32_t)bits;
        rc = plume_session_new(&s, m, &p, err);
    }
    if (!rc) rc = state_fill(s, map.data + 64, map.size - 72, f, ver, path, err);
    plume_map_free(&map);
    if (rc) {
        plume_session_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- copy ------------------------------------------------------------------------------ */

/* Copy the first rows of one cache (K, V and, for int8 caches, their scales). */
static void copy_cache(plume_kv *d, const plume_kv *s, size_t rows, size_t hkv) {
    size_t q = rows * (size_t)s->width;
    if (s->k8) {
        memcpy(d->k8, s->k8, q);
        memcpy(d->v8, s->v8, q);
        memcpy(d->ks, s->ks, rows * hkv * 4);
        memcpy(d->vs, s->vs, rows * hkv * 4);
    } else {
        memcpy(d->k, s->k, q * 4);
        memcpy(d->v, s->v, q * 4);
    }
}

/* Make dst's media keys and rows a copy of src's (a session that has seen images or audio):
 * built aside first, so on PLUME_ENOMEM dst is unchanged. */
static int media_copy(plume_session *dst, const plume_session *src, char **err) {
    uint64_t *keys = NULL;
    plume_media_span *spans = NULL;
    int32_t n = 0;
    const size_t D = (size_t)src->m->c.D;
    if (src->keys) {
        keys = malloc((size_t)src->n_ctx * sizeof *keys);
        spans = malloc(sizeof *spans * (size_t)(src->n_spans ? src->n_spans : 1));
        if (keys && spans) memcpy(keys, src->keys, (size_t)src->n_ctx * sizeof *keys);
        for (; keys && spans && n < src->n_spans; n++) {
            spans[n] = src->spans[n];
            if (!(spans[n].rows = malloc((size_t)spans[n].n * D * sizeof(float)))) break;
            memcpy(spans[n].rows, src->spans[n].rows, (size_t)spans[n].n * D * sizeof(float));
        }
        if (!keys || !spans || n < src->n_spans) {
            while (spans && n-- > 0) free(spans[n].rows);
            free(keys);
            free(spans);
            return plume_fail(err, PLUME_ENOMEM, "session copy: out of memory");
        }
    }
    free(dst->keys);
    for (int32_t i = 0; i < dst->n_spans; i++) free(dst->spans[i].rows);
    free(dst->spans);
    dst->keys = keys;
    dst->spans = spans;
    dst->n_spans = dst->cap_spans = src->keys ? src->n_spans : 0;
    return 0;
}

int plume_session_copy(plume_session *dst, const plume_session *src, char **err) {
    if (!dst || !src) return plume_fail(err, PLUME_EINVAL, "session copy: NULL session");
    if (dst == src) return 0;
    if (dst->m != src->m || dst->n_ctx != src->n_ctx || dst->n_rewind != src->n_rewind ||
        dst->kv_bits != src->kv_bits || dst->snap_every != src->snap_every || dst->n_snap != src->n_snap)
        return plume_fail(err, PLUME_EINVAL,
                          "session copy: the sessions differ (model, context, n_rewind, kv_bits or snapshots)");
    if (media_copy(dst, src, err)) return PLUME_ENOMEM;
    for (int32_t ci = 0; ci < PLUME_N_CHUNKS; ci++)
        for (int32_t i = 0; i < src->chunk[ci].n_kv; i++) {
            const plume_kv *kv = &src->chunk[ci].kv[i];
            copy_cache(&dst->chunk[ci].kv[i], kv, (size_t)cache_rows(src, kv), (size_t)src->m->c.Hkv);
        }
    memcpy(dst->tokens, src->tokens, (size_t)src->n_past * sizeof *src->tokens);
    if (src->snap_valid) memcpy(dst->snap, src->snap, (size_t)src->snap_valid * src->snap_stride * 4);
    dst->n_past = src->n_past;
    dst->snap_valid = src->snap_valid;
    dst->hid_n = 0; /* no drafter handover: the next step gives one */
    dst->fwd_end = src->n_past;
    dst->ring_end = src->ring_end; /* the rings are copied whole, with what they lost */
    dst->ring_floor = src->ring_floor;
    return 0;
}
