/* test_gguf.c -- GGUF import: `plume convert MODEL.gguf BUNDLE` of a GGUF written by
 * tests/make_gguf.py (llama.cpp's names and metadata, Q4_0 layers, F32 elsewhere) from the
 * QAT-like tiny-a checkpoint of t_qat.h gives the logits of that checkpoint's float model;
 * the reader's block formats against llama.cpp's own dequantization (tests/data/gguf/); and
 * every kind of broken file is refused with a message, never a crash. */
#include <stdint.h>
#include <unistd.h>

#include "gguf.h"
#include "npy.h"
#include "safetensors.h"
#include "t.h"
#include "t_qat.h"
#include "t_tiny.h"

#define LOGITS_REL_RMS 1e-4

static char *tmp;
static char hf[600], gg[600];

/* The dtype of a tensor of a bundle's chunk file, or -1. */
static int chunk_dtype(const char *bundle, int chunk, const char *name) {
    char path[700];
    snprintf(path, sizeof path, "%s/chunk_%d.safetensors", bundle, chunk);
    st_file f;
    char *err = NULL;
    if (st_open(&f, path, &err)) { free(err); return -1; }
    const st_tensor *t = st_find(&f, name);
    int dt = t ? (int)t->dtype : -1;
    st_close(&f);
    return dt;
}

/* The Q4_0 GGUF converts (its own precision: q4) to the float model's logits: Q4_0 blocks
 * of either sign of step kept exactly, the F32 per_layer_projection (input 8, not whole
 * blocks) kept F32 beside them; the tokenizer built from the GGUF's token list tokenizes
 * as the checkpoint's; --weights f32 of the GGUF equals the checkpoint's f32 bundle. */
static void test_gguf_q4_0_lossless(void) {
    char q4[700], f32[700], g32[700], out[8192];
    snprintf(q4, sizeof q4, "%s/gguf-q4", tmp);
    snprintf(f32, sizeof f32, "%s/hf-f32", tmp);
    snprintf(g32, sizeof g32, "%s/gguf-f32", tmp);
    int st = t_sh(out, sizeof out, "%s/plume convert %s %s", t_build(), gg, q4);
    CHECK(st == 0, "convert gguf: %s", out);
    CHECK(!strstr(out, "requantized"), "a Q4_0/F32 GGUF is requantized: %s", out);
    CHECK(t_sh(out, sizeof out, "%s/plume convert %s %s --weights f32 --quiet && %s/plume convert %s %s --weights f32 --quiet",
               t_build(), hf, f32, t_build(), gg, g32) == 0, "f32 conversions: %s", out);
    CHECK(t_sh(out, sizeof out, "grep -q '\"weights\":\t\"q4\"' %s/model_config.json", q4) == 0, "auto weights: not q4");
    CHECK(chunk_dtype(q4, 1, "layers.0.per_layer_projection.weight") == ST_F32 &&
              chunk_dtype(q4, 1, "layers.0.self_attn.q_proj.weight") == ST_U8,
          "mixed precision: per_layer_projection F32 beside q4 layers");
    int32_t ids[64];
    int32_t n = (int32_t)t_tiny_ids("tiny-a", ids, 64);
    int64_t cn = 0, cq = 0;
    float *ref = t_tiny_logits(f32, NULL, ids, n, &cn), *lg = st ? NULL : t_tiny_logits(q4, NULL, ids, n, &cq);
    double rr = ref && lg && cn == cq ? t_rel_rms(lg, ref, (size_t)cn) : 1;
    int64_t cg = 0;
    float *lg32 = t_tiny_logits(g32, NULL, ids, n, &cg); /* the same numbers (Q4_0 cannot hold a -0: zeros may flip sign) */
    CHECK(ref && lg32 && cg == cn && t_max_abs(lg32, ref, (size_t)cn) == 0, "the GGUF at f32: logits differ from the checkpoint's");
    free(lg32);
    printf("  GGUF Q4_0 -> q4 vs the float model: relative RMS %.3g\n", rr);
    CHECK(rr <= LOGITS_REL_RMS, "relative RMS %.3g", rr);
    free(ref);
    free(lg);
    /* the tokenizer: the cases whose pieces are not plain added tokens of tokenizer.json
     * (GGUF keeps only special and user-defined ones; docs/BUNDLE.md) tokenize the same */
    char a[8192], b[8192];
    CHECK(t_sh(a, sizeof a, "grep -v -e table -e '  two' %s/tiny-a/tokenizer_cases.jsonl | %s/plume tokenize -m %s",
               t_data(), t_build(), f32) == 0 &&
              t_sh(b, sizeof b, "grep -v -e table -e '  two' %s/tiny-a/tokenizer_cases.jsonl | %s/plume tokenize -m %s",
                   t_data(), t_build(), q4) == 0 && !strcmp(a, b) && strlen(a) > 100,
          "tokenizations differ:\n%s\n%s", a, b);
    CHECK(t_sh(out, sizeof out, "grep -q chat_template %s/hf_model/tokenizer_config.json", q4) == 0,
          "the chat template was not carried over");
    CHECK(t_sh(out, sizeof out, "%s/plume run -m %s -p 'Hello' -n 4 --temp 0 2>&1", t_build(), q4) == 0, "plume run: %s", out);
}

/* The block formats against llama.cpp's gguf-py dequantization of the same bytes
 * (tests/data/gguf/blocks.gguf and blocks_ref.npy, made by tests/data/gguf/README.md). */
static void test_gguf_blocks(void) {
    char path[700], ref[700];
    snprintf(path, sizeof path, "%s/gguf/blocks.gguf", t_data());
    snprintf(ref, sizeof ref, "gguf/blocks_ref.npy");
    gguf_file f;
    char *err = NULL;
    int rc = gguf_open(&f, path, &err);
    CHECK(rc == 0, "open: %s", err ? err : "");
    free(err);
    int64_t count = 0, shape[2];
    float *want = t_npy_floats(ref, &count, shape);
    static const char *const names[] = {"q4_0", "q8_0", "q4_k", "q5_k", "q6_k", "f16", "bf16",
                                             "q4_1", "q5_0", "q5_1"};
    const int nn = (int)(sizeof names / sizeof *names);
    CHECK(want && shape[0] == nn, "reference");
    for (int i = 0; !rc && want && shape[0] == nn && i < nn; i++) {
        const gguf_tensor *t = gguf_find(&f, names[i]);
        CHECK(t && t->rows * t->ne[0] == shape[1], "%s: missing or wrong size", names[i]);
        if (!t || t->rows * t->ne[0] != shape[1]) continue;
        float *got = malloc((size_t)shape[1] * sizeof *got);
        err = NULL;
        CHECK(gguf_read_rows(t, 0, t->rows, got, &err) == 0, "%s: read", names[i]);
        free(err);
        int bad = 0;
        for (int64_t k = 0; k < shape[1]; k++) bad += got[k] != want[i * shape[1] + k];
        CHECK(!bad, "%s (%s): %d of %lld values differ from llama.cpp's", names[i], gguf_type_name(t->type), bad,
              (long long)shape[1]);
        free(got);
    }
    free(want);
    if (!rc) gguf_close(&f);
}

/* A GGUF whose token embeddings are Q8_0 blocks: `plume convert` says they were requantized
 * (into the INT8 token sidecar, one step per row) and with how small an error. */
static void test_gguf_requantized_reported(void) {
    char g8[700], b8[700], out[8192];
    snprintf(g8, sizeof g8, "%s/embd-q8_0.gguf", tmp);
    snprintf(b8, sizeof b8, "%s/embd-q8_0", tmp);
    CHECK(t_sh(out, sizeof out, "/usr/bin/python3 tests/make_gguf.py %s %s --embd-q8_0", hf, g8) == 0, "make: %s", out);
    CHECK(t_sh(out, sizeof out, "%s/plume convert %s %s", t_build(), g8, b8) == 0, "convert: %s", out);
    const char *r = strstr(out, "1 Q8_0 tensors dequantized and requantized, relative RMS error ");
    double e = r ? atof(r + strlen("1 Q8_0 tensors dequantized and requantized, relative RMS error ")) : -1;
    printf("  Q8_0 token embeddings -> the INT8 sidecar: relative RMS error %.3g\n", e);
    CHECK(r && e > 0 && e < 0.01, "the report: %s", out);
}

/* Write bytes to path. */
static void put(const char *path, const void *b, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (fp) { fwrite(b, 1, n, fp); fclose(fp); }
}

/* Broken GGUFs: truncated anywhere, a bad magic or version, absurd counts, lengths and
 * offsets, an unknown tensor type, overlapping tensors; each refused by the reader with a
 * message, and by `plume convert` with one and a non-zero exit, nothing left behind. */
static void test_gguf_bad_input(void) {
    plume_map m;
    char *err = NULL;
    CHECK(plume_map_open(&m, gg, &err) == 0, "map %s", gg);
    free(err);
    if (!m.data) return;
    char path[700], out[4096];
    snprintf(path, sizeof path, "%s/bad.gguf", tmp);
    /* truncated at many points: the header, the metadata, the tensor table, the data */
    int crashes = 0, accepted = 0;
    for (size_t cut = 0; cut < m.size; cut += cut < 4096 ? 7 : 4099) {
        put(path, m.data, cut);
        gguf_file f;
        err = NULL;
        int rc = gguf_open(&f, path, &err);
        if (rc == 0) { accepted++; gguf_close(&f); }
        else if (!err) crashes++;
        free(err);
    }
    CHECK(!accepted && !crashes, "truncated files: %d accepted, %d without a message", accepted, crashes);
    uint8_t *b = malloc(m.size);
    memcpy(b, m.data, m.size);
    struct { size_t off; uint64_t val; int width; const char *want; } cases[] = {
        {0, 0x46554746, 4, "bad magic"},                   /* "FGUF" */
        {4, 1, 4, "GGUF version 1"},
        {8, (uint64_t)1 << 40, 8, "cannot fit"},           /* tensor count */
        {16, (uint64_t)-1, 8, "cannot fit"},               /* metadata count */
        {24, (uint64_t)1 << 62, 8, "truncated"},           /* the first key's length */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        memcpy(b, m.data, m.size);
        for (int k = 0; k < cases[i].width; k++) b[cases[i].off + k] = (uint8_t)(cases[i].val >> (8 * k));
        put(path, b, m.size);
        gguf_file f;
        err = NULL;
        int rc = gguf_open(&f, path, &err);
        CHECK(rc != 0 && err && strstr(err, cases[i].want), "case %zu: %s", i, err ? err : "accepted");
        if (!rc) gguf_close(&f);
        free(err);
    }
    /* the last tensor's entry: its offset far past the end, misaligned, its type unknown */
    gguf_file f;
    err = NULL;
    if (gguf_open(&f, gg, &err) == 0) {
        const gguf_tensor *last = &f.t[f.n_tensors - 1];
        size_t name_at = (size_t)(t_memmem(m.data, m.size, last->name, strlen(last->name)) - m.data);
        size_t type_at = name_at + strlen(last->name) + 4 + 8 * (size_t)last->ndim, off_at = type_at + 4;
        struct { size_t at; uint64_t val; int width; const char *want; } t2[] = {
            {off_at, (uint64_t)1 << 50, 8, "runs past the end"},
            {off_at, 64 + 3, 8, "not a multiple of the alignment"},
            {off_at, 0, 8, "overlap"},
            {type_at, 99, 4, "does not read"},
            {type_at - 8, (uint64_t)1 << 41, 8, "dimension"},
        };
        for (size_t i = 0; i < sizeof t2 / sizeof *t2; i++) {
            memcpy(b, m.data, m.size);
            for (int k = 0; k < t2[i].width; k++) b[t2[i].at + k] = (uint8_t)(t2[i].val >> (8 * k));
            put(path, b, m.size);
            gguf_file g;
            char *e2 = NULL;
            int rc = gguf_open(&g, path, &e2);
            CHECK(rc != 0 && e2 && strstr(e2, t2[i].want), "tensor case %zu: %s", i, e2 ? e2 : "accepted");
            if (!rc) gguf_close(&g);
            free(e2);
        }
        gguf_close(&f);
    }
    free(err);
    /* the CLI: a clear message, a non-zero exit, no bundle */
    put(path, m.data, m.size / 2);
    int st = t_sh(out, sizeof out, "%s/plume convert %s %s/never", t_build(), path, tmp);
    CHECK(st != 0 && strstr(out, "bad.gguf: ") && strstr(out, "past the end of the file"), "convert of a truncated GGUF: %s", out);
    snprintf(path, sizeof path, "%s/never", tmp);
    CHECK(access(path, F_OK) != 0, "a failed conversion left %s", path);
    free(b);
    plume_map_free(&m);
}

/* The ggml types of a GGUF's tensors, as a set of bits (1 << type, types below 32). */
static uint32_t gguf_types(const char *path) {
    gguf_file f;
    char *err = NULL;
    uint32_t set = 0;
    if (gguf_open(&f, path, &err) == 0) {
        for (int64_t i = 0; i < f.n_tensors; i++) set |= f.t[i].type < 32 ? 1u << f.t[i].type : 0;
        gguf_close(&f);
    }
    free(err);
    return set;
}

/* GGUFs written by llama.cpp's own quantizer (tests/data/gguf/tiny-k-q4_0.gguf and
 * tiny-k-q4_k_m.gguf, of the random checkpoint `plume synth --config
 * tests/data/gguf/tiny-k-config.json --seed 7 --hf` writes: tests/data/gguf/README.md) convert
 * and run. Q4_0 comes with its default Q6_K token embeddings and a Q8_0 per-layer table;
 * Q4_K_M mixes Q4_K and Q6_K with the fallbacks llama-quantize takes for rows that are not a
 * multiple of 256 (Q5_0 for Q4_K, Q8_0 for Q6_K). Each file's logits against (a) the same file
 * converted --weights f32 (its weights dequantized exactly, the head a float copy of the token
 * table): the Q4_0 one within OWN_Q4_0 (its Q4_0 blocks are kept exactly; what differs is the
 * head, which a q4 bundle reads from the INT8 token sidecar: the Q6_K table requantized at
 * 0.0038 relative RMS; measured 0.0043), the Q4_K_M one within OWN_Q4_K_M (its K-quants
 * requantized onto q4's grid: measured 0.24, as large as the file's own error); (b) the float
 * model of the checkpoint (plume's reading of the bf16 weights the GGUFs were quantized
 * from): llama.cpp's own 4-bit error, within LLAMA_Q4 (measured 0.28 for Q4_0, 0.20 for
 * Q4_K_M on these random weights, which amplify weight error; a misread block gives logits
 * unrelated to the model's, near 1.4). */
#define OWN_Q4_0 0.01
#define OWN_Q4_K_M 0.3
#define LLAMA_Q4 0.35
static void test_gguf_llama_quantize(void) {
    char khf[700], kf32[700], out[8192];
    snprintf(khf, sizeof khf, "%s/tiny-k-hf", tmp);
    snprintf(kf32, sizeof kf32, "%s/tiny-k-f32", tmp);
    CHECK(t_sh(out, sizeof out, "%s/plume synth --config %s/gguf/tiny-k-config.json --seed 7 --hf %s --tokenizer %s/tiny-a/hf "
               "&& %s/plume convert %s %s --weights f32 --quiet", t_build(), t_data(), khf, t_data(), t_build(), khf, kf32) == 0,
          "the float model: %s", out);
    int32_t ids[64];
    int32_t n = (int32_t)t_tiny_ids("tiny-a", ids, 64);
    int64_t cn = 0;
    float *ref = t_tiny_logits(kf32, NULL, ids, n, &cn);
    static const char *const files[2] = {"q4_0", "q4_k_m"};
    /* the types each file must hold for the test to cover what it says */
    const uint32_t want[2] = {1u << GGML_Q4_0 | 1u << GGML_Q6_K | 1u << GGML_Q8_0 | 1u << GGML_F32,
                              1u << GGML_Q4_K | 1u << GGML_Q6_K | 1u << GGML_Q5_0 | 1u << GGML_Q8_0 | 1u << GGML_F32};
    for (int i = 0; i < 2; i++) {
        char g[700], b[700], b32[700];
        snprintf(g, sizeof g, "%s/gguf/tiny-k-%s.gguf", t_data(), files[i]);
        snprintf(b, sizeof b, "%s/tiny-k-%s", tmp, files[i]);
        snprintf(b32, sizeof b32, "%s/tiny-k-%s-f32", tmp, files[i]);
        uint32_t have = gguf_types(g);
        CHECK((have & want[i]) == want[i], "%s: types %#x, not all of %#x", files[i], have, want[i]);
        int st = t_sh(out, sizeof out, "%s/plume convert %s %s", t_build(), g, b);
        CHECK(st == 0 && strstr(out, "Q6_K tensors dequantized and requantized"), "convert %s: %s", files[i], out);
        CHECK(t_sh(out, sizeof out, "%s/plume convert %s %s --weights f32 --quiet", t_build(), g, b32) == 0, "f32: %s", out);
        CHECK(t_sh(out, sizeof out, "grep -q '\"weights\":\t\"q4\"' %s/model_config.json", b) == 0,
              "%s: auto weights", files[i]);
        int64_t c1 = 0, c2 = 0;
        float *lg = t_tiny_logits(b, NULL, ids, n, &c1), *lg32 = t_tiny_logits(b32, NULL, ids, n, &c2);
        double own = lg && lg32 && c1 == c2 ? t_rel_rms(lg, lg32, (size_t)c1) : 1;
        double vs = lg32 && ref && c2 == cn ? t_rel_rms(lg32, ref, (size_t)cn) : 1;
        printf("  llama-quantize %s: plume's bundle vs the file's exact weights %.3g, the file vs the float model %.3g "
               "(relative RMS of logits)\n", files[i], own, vs);
        CHECK(own <= (i ? OWN_Q4_K_M : OWN_Q4_0), "%s: bundle vs the file's weights %.3g", files[i], own);
        CHECK(vs <= LLAMA_Q4 && vs > 0, "%s: the file vs the float model %.3g", files[i], vs);
        CHECK(t_sh(out, sizeof out, "%s/plume run -m %s -p 'Hello' -n 4 --temp 0 2>&1", t_build(), b) == 0, "plume run: %s", out);
        free(lg);
        free(lg32);
    }
    free(ref);
}

int main(void) {
    tmp = t_tmpdir("gguf");
    snprintf(hf, sizeof hf, "%s/hf", tmp);
    snprintf(gg, sizeof gg, "%s/tiny-a-q4_0.gguf", tmp);
    char out[4096];
    if (t_qat_checkpoint("tiny-a", hf) ||
        t_sh(out, sizeof out, "/usr/bin/python3 tests/make_gguf.py %s %s --q4-rule grid", hf, gg))
        printf("  setup failed: %s\n", out);
    RUN(test_gguf_q4_0_lossless);
    RUN(test_gguf_blocks);
    RUN(test_gguf_requantized_reported);
    RUN(test_gguf_bad_input);
    RUN(test_gguf_llama_quantize);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
