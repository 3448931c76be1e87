/* t_qat.h -- a QAT-like checkpoint made from a golden tiny model: every layer linear whose
 * input is a multiple of 32 snapped onto a 4-bit grid of fp16 steps (blocks of 32 along the
 * input, levels -8..7), stored as F32, as Google's QAT checkpoints hold their Q4_0-trained
 * weights; the other linears and the token embeddings snapped onto plume's INT8 row grid, so
 * that a q4 bundle (q8 for those, the INT8 token sidecar as its head) holds exactly the
 * float model's numbers. The grid of a block is computed here, independently of plume's
 * quantizers: even blocks take llama.cpp's Q4_0 step (signed max / -8, either sign), odd
 * blocks absmax / 7 (a grid Q4_0's rule misses). */
#ifndef PLUME_T_QAT_H
#define PLUME_T_QAT_H

#include <math.h>

#include "safetensors.h"
#include "source.h"
#include "t.h"

/* Whether a checkpoint tensor is a layer linear plume quantizes (golden README's list). */
static int t_qat_linear(const char *name) {
    static const char *const tails[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                        "self_attn.o_proj.weight", "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                        "mlp.down_proj.weight",    "per_layer_input_gate.weight",
                                        "per_layer_projection.weight"};
    if (!strstr(name, "language_model.layers.")) return 0;
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof tails / sizeof *tails; i++) {
        size_t k = strlen(tails[i]);
        if (n > k && !strcmp(name + n - k, tails[i]) && name[n - k - 1] == '.') return 1;
    }
    return 0;
}

/* Snap a block of 32 onto a 4-bit grid: step d (fp16) by Q4_0's rule (q40) or absmax / 7. */
static void t_qat_snap_q4(float *x, int q40) {
    float amax = 0, m = 0;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); m = x[i]; }
    float d = plume_f16_to_f32(plume_f32_to_f16(q40 ? m / -8.0f : amax / 7.0f));
    for (int i = 0; i < 32; i++) {
        float q = d != 0 ? nearbyintf(x[i] / d) : 0;
        q = q > 7 ? 7 : q < -8 ? -8 : q;
        x[i] = q * d;
    }
}

/* Snap a row onto plume's INT8 grid: q * s / 127 with s = fp16(absmax). */
static void t_qat_snap_q8(float *x, int64_t n) {
    float amax = 0;
    for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    float s = plume_f16_to_f32(plume_f32_to_f16(amax));
    for (int64_t i = 0; i < n; i++) {
        float q = s > 0 ? nearbyintf(x[i] * 127.0f / s) : 0;
        x[i] = q * s / 127.0f;
    }
}

/* Write the snapped checkpoint of tests/data/MODEL/hf into dir (created): model.safetensors
 * (F32) and links to its config and tokenizer files. 0 on success (errors printed). */
static int t_qat_checkpoint(const char *model, const char *dir) {
    char hf[600], rel[3][2][300];
    snprintf(hf, sizeof hf, "%s/%s/hf", t_data(), model);
    const char *files[3] = {"config.json", "tokenizer.json", "tokenizer_config.json"};
    const char *links[3][2];
    for (int i = 0; i < 3; i++) {
        snprintf(rel[i][0], sizeof rel[i][0], "%s/hf/%s", model, files[i]);
        links[i][0] = rel[i][0];
        links[i][1] = files[i];
    }
    if (t_link_fixtures(dir, links, 3)) { printf("  cannot link fixtures into %s\n", dir); return -1; }
    conv_source src;
    char *err = NULL, path[700];
    if (source_hf_open(&src, hf, &err)) { printf("  %s\n", err); free(err); return -1; }
    st_writer w;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int rc = st_writer_init(&w, path, 1, &err);
    const char *name;
    for (int32_t i = 0; !rc && (name = src.name_at(src.ctx, i)); i++) {
        int32_t nd;
        int64_t sh[8];
        rc = src.shape(src.ctx, name, &nd, sh) || st_writer_add(&w, name, ST_F32, nd, sh, &err);
    }
    if (!rc) rc = st_writer_begin(&w, &err);
    for (int32_t i = 0; !rc && (name = src.name_at(src.ctx, i)); i++) {
        int32_t nd;
        int64_t sh[8], rows = 1, cols = 1;
        src.shape(src.ctx, name, &nd, sh);
        if (nd >= 1) cols = sh[nd - 1];
        for (int32_t k = 0; k + 1 < nd; k++) rows *= sh[k];
        float *x = malloc((size_t)(rows * cols) * sizeof *x);
        rc = !x || src.read(src.ctx, name, 0, rows, x, &err);
        int q4 = t_qat_linear(name) && cols % 32 == 0, q8 = (t_qat_linear(name) && !q4) ||
                                                           strstr(name, "language_model.embed_tokens.weight");
        for (int64_t r = 0; !rc && r < rows; r++) {
            if (q4)
                for (int64_t g = 0; g < cols / 32; g++) t_qat_snap_q4(x + r * cols + 32 * g, (int)((r + g) % 2 == 0));
            else if (q8) t_qat_snap_q8(x + r * cols, cols);
        }
        if (!rc) rc = st_writer_write(&w, x, (size_t)(rows * cols) * 4, &err);
        free(x);
    }
    if (!rc) rc = st_writer_finish(&w, &err);
    st_writer_free(&w);
    source_hf_close(&src);
    if (rc) printf("  qat checkpoint: %s\n", err ? err : "read failed");
    free(err);
    return rc ? -1 : 0;
}

#endif
