/* encoder.c -- plume_encoder: the towers on threads of their own (plume.h, "Encoders on threads
 * of their own"), so that a server encodes one request's media while the model's pool decodes
 * the others. Owns a pool and the abort callback; encode_image.c and encode_audio.c do the
 * encoding (encode.h). */
#include <stdlib.h>

#include "encode.h"
#include "model.h"

struct plume_encoder {
    plume_model *m;
    plume_pool *pool;      /* NULL: the calling thread alone (one thread) */
    int32_t n_threads;
    int (*abort)(void *ctx);
    void *abort_ctx;
};

int plume_encoder_new(plume_encoder **out, plume_model *m, int32_t n_threads, char **err) {
    *out = NULL;
    if (!m) return plume_fail(err, PLUME_EINVAL, "encoder: no model given");
    if (n_threads <= 0) n_threads = plume_model_n_threads(m);
    plume_encoder *e = calloc(1, sizeof *e);
    if (!e) return plume_fail(err, PLUME_ENOMEM, "encoder: out of memory");
    e->m = m;
    e->n_threads = n_threads;
    if (n_threads > 1 && !(e->pool = plume_pool_new(n_threads))) {
        free(e);
        return plume_fail(err, PLUME_ENOMEM, "encoder: cannot start %d threads", n_threads);
    }
    *out = e;
    return 0;
}

void plume_encoder_free(plume_encoder *e) {
    if (!e) return;
    plume_pool_free(e->pool);
    free(e);
}

int32_t plume_encoder_n_threads(const plume_encoder *e) { return e->n_threads; }

void plume_encoder_set_abort(plume_encoder *e, int (*fn)(void *ctx), void *ctx) {
    e->abort = fn;
    e->abort_ctx = ctx;
}

/* The run of e's encodes: the model's kernels on e's pool, e's abort callback. */
static enc_run encoder_run(const plume_encoder *e) {
    return (enc_run){.k = e->m->k, .pool = e->pool, .abort = e->abort, .abort_ctx = e->abort_ctx};
}

int plume_encoder_image(plume_encoder *e, plume_embd **out, const plume_image *img, const plume_image_params *p,
                        char **err) {
    if (!e) return plume_fail(err, PLUME_EINVAL, "encoder: none given");
    const enc_run run = encoder_run(e);
    return encode_image_run(out, e->m, &run, img, p, err);
}

int plume_encoder_audio(plume_encoder *e, plume_embd **out, const plume_audio *a, char **err) {
    if (!e) return plume_fail(err, PLUME_EINVAL, "encoder: none given");
    const enc_run run = encoder_run(e);
    return encode_audio_run(out, e->m, &run, a, err);
}
