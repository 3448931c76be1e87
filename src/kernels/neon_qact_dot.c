/* neon_qact_dot.c -- the NEON int8-activation matmul of neon_qact.h with sdot (vdotq_s32:
 * 16 s8 x s8 products into 4 int32 lanes), compiled with -march=armv8.2-a+dotprod and called
 * only after plume_qact_neon_dot_available(). The same bits as plume_qact_matmul_neon. */
#define QN_SDOT 1
#define QN_FN(name) qnd_##name
#include "neon_qact.h"

/* See qact.h. */
void plume_qact_matmul_neon_dot(float *y, int64_t ldy, const int8_t *xq, const float *xs, const int32_t *xcor,
                                int32_t T, const plume_weight *w, int32_t r0, int32_t r1) {
    (void)xcor; /* signed x signed: no correction */
    qnd_matmul(y, ldy, xq, xs, T, w, r0, r1);
}
