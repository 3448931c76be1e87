/* avxvnni.c -- the 256-bit int8-activation matmul (avx2_qact.h) with AVX-VNNI: vpdpbusd on
 * ymm (VEX encoded), for CPUs that have it (Alder Lake and later, Sapphire Rapids, Zen 5) when
 * the avx2 kernel table is in use. Compiled with -mavxvnni; called only after
 * plume_qact_avxvnni_available(). Its results are those of avx2_qact.c bit for bit. */
#define QA2_VNNI 1
#define QA2_FN(name) qav_##name
#include "avx2_qact.h"

/* plume_qact_matmul_avx2 with vpdpbusd: see avx2_qact.h. */
void plume_qact_matmul_avxvnni(float *y, int64_t ldy, const int8_t *xq, const float *xs,
                               const int32_t *xcor, int32_t T, const plume_weight *w, int32_t r0,
                               int32_t r1) {
    qav_matmul(y, ldy, xq, xs, xcor, T, w, r0, r1);
}
