/* encoder.h -- the towers on a run the caller gives (kernel table, pool, abort callback):
 * image.c and audio.c implement them over the rooms, and both the public plume_image_encode /
 * plume_audio_encode (the model's pool) and encoder.c's plume_encoder (a pool of its own) call
 * them. Knows nothing of sessions or prompts. */
#ifndef PLUME_ENCODER_H
#define PLUME_ENCODER_H

#include "encoders/encoders.h"
#include "plume.h"

/* The vision tower on img with run: plume_image_encode's contract, PLUME_ECANCELED too. */
int image_encode_run(plume_embd **out, const plume_model *m, const enc_run *run, const plume_image *img,
                     const plume_image_params *p, char **err);
/* The audio tower on a with run: plume_audio_encode's contract, PLUME_ECANCELED too. */
int audio_encode_run(plume_embd **out, const plume_model *m, const enc_run *run, const plume_audio *a, char **err);

/* The vision tower on each sampled frame of v with run: plume_video_encode's contract, and
 * PLUME_ECANCELED (checked between frames and layers). */
int video_encode_run(plume_embd **out, const plume_model *m, const enc_run *run, const plume_video *v, char **err);

#endif
