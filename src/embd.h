/* embd.h -- soft tokens: what an encoder hands the decoder (plume.h's plume_embd), and the
 * bookkeeping that places them in a prompt: which rows fill which placeholder positions, and
 * the key each such position carries in a session's history.
 *
 * An encoder (src/encoders/, through encode_image.c and encode_audio.c) makes one; session.c and forward.c read its rows
 * as given embeddings. Knows nothing of towers, pixels or sessions. */
#ifndef PLUME_EMBD_H
#define PLUME_EMBD_H

#include "common.h"
#include "config.h"

struct plume_embd {
    int32_t n, dim;        /* rows, each of the decoder's width D */
    int32_t placeholder;   /* the token id whose positions the rows fill */
    uint64_t key;          /* identity (never 0): a hash of the resized pixels, or of the rows */
    float *rows;           /* [n, dim] */
};

/* A new plume_embd of n rows (uninitialized) for placeholder, with key (0: set later). */
int embd_new(plume_embd **out, int32_t n, int32_t dim, int32_t placeholder, uint64_t key, char **err);

/* The first 64 bits of the SHA-256 of a byte string (never 0). */
uint64_t embd_hash(const void *a, size_t na, const void *b, size_t nb);

/* The key of row j of a media whose key is k: what a session's history holds at the
 * position that row filled (never 0; text positions hold 0). */
uint64_t embd_row_key(uint64_t k, int32_t j);

/* Pair a prompt's placeholder positions with media rows, HF's masked_scatter: the positions
 * whose id is a placeholder (the model's image, audio or video id, or a media's own) are
 * filled, in order, by the rows of the media with that placeholder, in order. Writes, per
 * position, the row it gets (rows[i], NULL for a token) and its key (keys[i], 0 for a token).
 * Every placeholder must get a row and every row a placeholder (PLUME_EINVAL otherwise), and
 * each media's width must be D. */
int embd_place(const plume_config *c, const int32_t *ids, int32_t n, const plume_embd *const *media, int32_t n_media,
               const float **rows, uint64_t *keys, char **err);
/* embd_place for a piece of a prompt: `skip` placeholder rows of these media were placed
 * before ids[0] (in the same order), and rows may be left for later pieces. */
int embd_place_from(const plume_config *c, const int32_t *ids, int32_t n, const plume_embd *const *media,
                    int32_t n_media, int32_t skip, const float **rows, uint64_t *keys, char **err);

#endif
