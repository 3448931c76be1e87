/* embd.c -- soft tokens (plume_embd) and their placement in a prompt: the public plume_embd_*
 * functions, plume_prompt_expand(), and the pairing of placeholder positions with rows that
 * session.c feeds (embd.h). */
#include <stdio.h>
#include <stdlib.h>

#include "digest.h"
#include "embd.h"
#include "model.h"

int embd_new(plume_embd **out, int32_t n, int32_t dim, int32_t placeholder, uint64_t key, char **err) {
    *out = NULL;
    if (n < 1 || dim < 1 || (int64_t)n * dim > (int64_t)1 << 32)
        return plume_fail(err, PLUME_EINVAL, "embeddings: %d rows of %d is not a shape", n, dim);
    plume_embd *e = calloc(1, sizeof *e);
    float *rows = e ? malloc((size_t)n * (size_t)dim * 4) : NULL;
    if (!rows) {
        free(e);
        return plume_fail(err, PLUME_ENOMEM, "out of memory for %d x %d embeddings", n, dim);
    }
    *e = (plume_embd){n, dim, placeholder, key, rows, NULL, 0};
    *out = e;
    return 0;
}

uint64_t embd_hash(const void *a, size_t na, const void *b, size_t nb) {
    sha256_ctx c;
    char hex[65];
    sha256_init(&c);
    sha256_update(&c, a, na);
    if (b) sha256_update(&c, b, nb);
    sha256_final_hex(&c, hex);
    uint64_t k = 0;
    for (int i = 0; i < 16; i++) k = k << 4 | (uint64_t)(hex[i] <= '9' ? hex[i] - '0' : hex[i] - 'a' + 10);
    return k ? k : 1;
}

uint64_t embd_row_key(uint64_t k, int32_t j) {
    uint64_t s = k ^ ((uint64_t)(uint32_t)j * 0x9e3779b97f4a7c15ull);
    uint64_t r = plume_rng_next(&s);
    return r ? r : 1;
}

/* ---- the public API ------------------------------------------------------------------- */

int plume_embd_from_data(plume_embd **out, const float *rows, int32_t n, int32_t dim, int32_t placeholder, uint64_t key,
                         char **err) {
    if (!out) return plume_fail(err, PLUME_EINVAL, "embeddings: no output given");
    *out = NULL;
    if (!rows) return plume_fail(err, PLUME_EINVAL, "embeddings: no rows given");
    if (placeholder < 0) return plume_fail(err, PLUME_EINVAL, "embeddings: placeholder id %d", placeholder);
    int rc = embd_new(out, n, dim, placeholder, key, err);
    if (rc) return rc;
    memcpy((*out)->rows, rows, (size_t)n * (size_t)dim * 4);
    if (!key) {
        const int32_t shape[3] = {n, dim, placeholder};
        (*out)->key = embd_hash(shape, sizeof shape, rows, (size_t)n * (size_t)dim * 4);
    }
    return 0;
}

void plume_embd_free(plume_embd *e) {
    if (!e) return;
    free(e->rows);
    free(e->run);
    free(e);
}

int32_t plume_embd_n_tokens(const plume_embd *e) { return e->n; }
int32_t plume_embd_dim(const plume_embd *e) { return e->dim; }
const float *plume_embd_data(const plume_embd *e) { return e->rows; }
int32_t plume_embd_placeholder(const plume_embd *e) { return e->placeholder; }
uint64_t plume_embd_key(const plume_embd *e) { return e->key; }
uint64_t plume_embd_row_key(uint64_t key, int32_t row) { return embd_row_key(key, row); }

/* ---- placement ------------------------------------------------------------------------ */

/* Whether id is a placeholder of the model or of one of the media. */
static int is_placeholder(const plume_config *c, int32_t id, const plume_embd *const *media, int32_t n_media) {
    if (id >= 0 && (id == c->media_id[PLUME_MEDIA_IMAGE] || id == c->media_id[PLUME_MEDIA_AUDIO] ||
                    id == c->media_id[PLUME_MEDIA_VIDEO]))
        return 1;
    for (int32_t j = 0; j < n_media; j++)
        if (media[j] && id == media[j]->placeholder) return 1;
    return 0;
}

/* embd_place's work: skip placeholder rows are taken first (strict == 0 for a piece); strict:
 * every row must be placed. */
static int place(const plume_config *c, const int32_t *ids, int32_t n, const plume_embd *const *media, int32_t n_media,
                 int32_t skip, int strict, const float **rows, uint64_t *keys, char **err) {
    if (n_media < 0 || (n_media && !media) || skip < 0) return plume_fail(err, PLUME_EINVAL, "media: a bad list");
    for (int32_t j = 0; j < n_media; j++) {
        if (!media[j]) return plume_fail(err, PLUME_EINVAL, "media %d is NULL", j);
        if (media[j]->dim != c->D)
            return plume_fail(err, PLUME_EINVAL, "media %d: rows of %d, the model's width is %d", j, media[j]->dim, c->D);
    }
    int32_t cur = 0; /* per placeholder id, the media in use is the first of its kind not yet used up */
    int32_t *taken = calloc((size_t)n_media + 1, sizeof *taken);
    if (!taken) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    int rc = 0;
    for (int32_t j = 0; j < n_media && skip > 0; j++) { /* rows placed by earlier pieces, media in order */
        taken[j] = skip < media[j]->n ? skip : media[j]->n;
        skip -= taken[j];
    }
    if (skip > 0) rc = plume_fail(err, PLUME_EINVAL, "media: more rows skipped than the media hold");
    for (int32_t i = 0; i < n && !rc; i++) {
        rows[i] = NULL;
        keys[i] = 0;
        if (!is_placeholder(c, ids[i], media, n_media)) continue;
        for (cur = 0; cur < n_media; cur++)
            if (media[cur]->placeholder == ids[i] && taken[cur] < media[cur]->n) break;
        if (cur == n_media) {
            int32_t given = 0, want = 0;
            for (int32_t j = 0; j < n_media; j++) given += media[j]->placeholder == ids[i] ? media[j]->n : 0;
            for (int32_t k = 0; k < n; k++) want += ids[k] == ids[i];
            rc = plume_fail(err, PLUME_EINVAL,
                            "the prompt has %d placeholders of id %d but the media given fill %d of them (the first "
                            "left over at position %d)", want, ids[i], given, i);
            break;
        }
        rows[i] = media[cur]->rows + (size_t)taken[cur] * (size_t)c->D;
        keys[i] = embd_row_key(media[cur]->key, taken[cur]);
        taken[cur]++;
    }
    for (int32_t j = 0; j < n_media && !rc && strict; j++)
        if (taken[j] != media[j]->n)
            rc = plume_fail(err, PLUME_EINVAL, "media %d has %d rows but the prompt has %d placeholders (id %d) for it", j,
                            media[j]->n, taken[j], media[j]->placeholder);
    free(taken);
    return rc;
}

int embd_place(const plume_config *c, const int32_t *ids, int32_t n, const plume_embd *const *media, int32_t n_media,
               const float **rows, uint64_t *keys, char **err) {
    return place(c, ids, n, media, n_media, 0, 1, rows, keys, err);
}

int embd_place_from(const plume_config *c, const int32_t *ids, int32_t n, const plume_embd *const *media,
                    int32_t n_media, int32_t skip, const float **rows, uint64_t *keys, char **err) {
    return place(c, ids, n, media, n_media, skip, 0, rows, keys, err);
}

int32_t plume_prompt_expand(const plume_model *m, const int32_t *ids, int32_t n, const plume_embd *const *media,
                            int32_t n_media, int32_t *out, int32_t cap, char **err) {
    const plume_config *c = &m->c;
    if (n < 0 || n_media < 0 || (n && !ids) || (n_media && !media))
        return plume_fail(err, PLUME_EINVAL, "expand: a bad argument");
    int64_t k = 0;
    int32_t j = 0;
    if (cap < 0) cap = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!is_placeholder(c, ids[i], media, n_media)) {
            if (k < cap) out[k] = ids[i];
            k++;
            continue;
        }
        if (j == n_media || !media[j] || media[j]->placeholder != ids[i])
            return plume_fail(err, PLUME_EINVAL, "expand: placeholder %d (id %d) has no media of its kind (media given: %d)",
                              j, ids[i], n_media);
        if (media[j]->run) { /* a video: its frames' blocks, made when it was encoded */
            for (int32_t r = 0; r < media[j]->n_run; r++, k++)
                if (k < cap) out[k] = media[j]->run[r];
            j++;
            if (k > INT32_MAX) return plume_fail(err, PLUME_EINVAL, "expand: the prompt is too long");
            continue;
        }
        const int audio = ids[i] == c->media_id[PLUME_MEDIA_AUDIO];
        const int32_t open = c->media_id[audio ? PLUME_MEDIA_BOA : PLUME_MEDIA_BOI];
        const int32_t close = c->media_id[audio ? PLUME_MEDIA_EOA : PLUME_MEDIA_EOI];
        if (open < 0 || close < 0) return plume_fail(err, PLUME_EINVAL, "expand: the model has no begin/end ids for id %d", ids[i]);
        if (k < cap) out[k] = open;
        k++;
        for (int32_t r = 0; r < media[j]->n; r++, k++)
            if (k < cap) out[k] = ids[i];
        if (k < cap) out[k] = close;
        k++;
        j++;
        if (k > INT32_MAX) return plume_fail(err, PLUME_EINVAL, "expand: the prompt is too long");
    }
    if (j != n_media) return plume_fail(err, PLUME_EINVAL, "expand: %d media given, the prompt has %d placeholders", n_media, j);
    return (int32_t)k;
}
