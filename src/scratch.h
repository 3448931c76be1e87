/* scratch.h -- allocating the buffers of a forward step (scratch.c); the struct, plume_scratch,
 * is model.h's, beside the session that embeds one. */
#ifndef PLUME_SCRATCH_H
#define PLUME_SCRATCH_H

#include "model.h"

/* Allocate a step scratch of B rows whose attention spans up to span positions. 0 or
 * PLUME_ENOMEM (nothing left allocated). */
int plume_scratch_init(plume_scratch *x, const plume_model *m, int32_t B, int64_t span, char **err);
/* Free the buffers; the struct is zeroed. */
void plume_scratch_free(plume_scratch *x);
/* Set the span a scratch serves, growing its split-attention block states (x->part) to
 * match; -1 on out of memory (the scratch is unchanged then). */
int plume_scratch_grow_part(plume_scratch *x, const plume_model *m, int64_t span);

#endif
