/* session.h -- what the library's other files call in session.c (the session struct is
 * model.h's, where forward.c reads it). */
#ifndef PLUME_SESSION_H
#define PLUME_SESSION_H

#include "model.h"

/* After a step of a session ended at n_past: take the ring snapshot due there, if any. */
void plume_session_stepped(plume_session *s);

/* Keep copies of the given embeddings among n rows to be fed at position P (one span per run
 * of consecutive rows), for rewinds and state files; the session keeps keys from now on.
 * 0 or PLUME_ENOMEM (nothing kept). plume_batch_run calls it. */
int plume_session_keep_media(plume_session *s, int32_t P, const float *const *emb, int32_t n, char **err);
/* Forget the media rows kept at positions from and later (a step that did not run). */
void plume_session_drop_media(plume_session *s, int32_t from);

#endif
