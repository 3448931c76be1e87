/* dispatch.c -- choose a kernel table from what the CPU reports. Preference order, best
 * first: avx512, avx2, scalar on x86-64; neon, scalar on aarch64. $PLUME_ISA overrides. */
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "qact.h"

#if defined(__x86_64__)
#include <cpuid.h>

/* F16C from CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports lacks "f16c"). */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif

/* Whether this CPU can run the named table. */
static int cpu_has(const char *isa) {
    if (!strcmp(isa, "scalar")) return 1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               has_f16c();
    if (!strcmp(isa, "avx2")) return avx2;
    if (!strcmp(isa, "avx512"))
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl");
#endif
#if defined(__aarch64__)
    if (!strcmp(isa, "neon")) return 1;
#endif
    return 0;
}

/* The table of a name, ignoring what the CPU has. */
static const plume_kernels *table_of(const char *isa) {
    if (!strcmp(isa, "scalar")) return &plume_kernels_scalar;
#if defined(__x86_64__)
    if (!strcmp(isa, "avx2")) return &plume_kernels_avx2;
    if (!strcmp(isa, "avx512")) return &plume_kernels_avx512;
#endif
#if defined(__aarch64__)
    if (!strcmp(isa, "neon")) return &plume_kernels_neon;
#endif
    return NULL;
}

static const char *const preference[] = {"avx512", "avx2", "neon", "scalar"};

const plume_kernels *plume_kernels_get(const char *isa) {
    if (!isa || !*isa) isa = getenv("PLUME_ISA");
    if (isa && *isa) return cpu_has(isa) ? table_of(isa) : NULL;
    for (size_t i = 0; i < sizeof preference / sizeof *preference; i++)
        if (cpu_has(preference[i]) && table_of(preference[i])) return table_of(preference[i]);
    return &plume_kernels_scalar;
}

int plume_kernels_available(const char **names, int cap) {
    int n = 0;
    for (int i = (int)(sizeof preference / sizeof *preference) - 1; i >= 0; i--)
        if (n < cap && cpu_has(preference[i]) && table_of(preference[i])) names[n++] = preference[i];
    return n;
}

int plume_qact_kernels(const plume_kernels *k, plume_qact_quantize_fn *quantize, plume_qact_matmul_fn *matmul) {
    *quantize = NULL;
    *matmul = NULL;
    if (!k) return 0;
#if defined(__x86_64__)
    /* preference: AVX-512 VNNI, then AVX-VNNI, then AVX2, each only under a table of that
     * width or wider (PLUME_ISA=avx2 keeps to 256-bit code) */
    int wide = !strcmp(k->name, "avx512"), avx2 = wide || !strcmp(k->name, "avx2");
    if (wide && plume_qact_vnni_available()) {
        *quantize = plume_qact_quantize_vnni;
        *matmul = plume_qact_matmul_vnni;
    } else if (avx2 && plume_qact_avx2_available()) {
        *quantize = plume_qact_quantize_avx2;
        *matmul = plume_qact_avxvnni_available() ? plume_qact_matmul_avxvnni : plume_qact_matmul_avx2;
    }
#endif
#if defined(__aarch64__)
    if (!strcmp(k->name, "neon")) {
        *quantize = plume_qact_quantize_neon;
        *matmul = plume_qact_neon_dot_available() ? plume_qact_matmul_neon_dot : plume_qact_matmul_neon;
    }
#endif
    return *matmul != NULL;
}

/* The reference and AVX-512 VNNI read tiled weights; the other matmuls read rows. */
int plume_qact_reads_tiles(plume_qact_matmul_fn matmul) {
#if defined(__x86_64__)
    if (matmul == plume_qact_matmul_vnni) return 1;
#endif
    return matmul == plume_qact_matmul_ref;
}

/* The best table reads tiles, and so does its int8 matmul if it has one. */
int plume_tiles_native(void) {
    const plume_kernels *k = plume_kernels_get(NULL);
    plume_qact_quantize_fn q;
    plume_qact_matmul_fn mm;
    return k && k->reads_tiles && (!plume_qact_kernels(k, &q, &mm) || plume_qact_reads_tiles(mm));
}
