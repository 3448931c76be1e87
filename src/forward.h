/* forward.h -- one forward step of a session (forward.c). */
#ifndef PLUME_FORWARD_H
#define PLUME_FORWARD_H

#include "model.h"

/* Run T (1 <= T <= n_batch) validated ids at the session's position, commit their K/V and
 * advance. logits: NULL, [V] of the last token (all == 0) or [T, V] (all != 0). */
void plume_forward_step(plume_session *s, const int32_t *ids, int32_t T, float *logits, int32_t all);

#endif
