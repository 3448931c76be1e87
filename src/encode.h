/* encode.h -- the glue of the multimodal path, its encode step: decoded media (src/media/) ->
 * the towers (src/encoders/) -> a plume_embd (embd.h), on a run the caller gives (kernel
 * table, pool, abort callback).
 *
 * Files: encode_image.c (plume_image_tokens, plume_image_encode), encode_audio.c
 * (plume_audio_tokens, plume_audio_encode): the public encode API of plume.h on the model's
 * pool; encoder.c's plume_encoder runs the same functions on a pool of its own.
 * May call: media/ (media.h), encoders/ (encoders.h), embd.h, model.h. Must not know: sessions,
 * prompts, the towers' internals. */
#ifndef PLUME_ENCODE_H
#define PLUME_ENCODE_H

#include "encoders/encoders.h"
#include "plume.h"

/* The vision tower on img with run: plume_image_encode's contract, PLUME_ECANCELED too. */
int encode_image_run(plume_embd **out, const plume_model *m, const enc_run *run, const plume_image *img,
                     const plume_image_params *p, char **err);
/* The audio tower on a with run: plume_audio_encode's contract, PLUME_ECANCELED too. */
int encode_audio_run(plume_embd **out, const plume_model *m, const enc_run *run, const plume_audio *a, char **err);

#endif
