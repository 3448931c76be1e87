/* test_tokenizer.c -- the Gemma 4 tokenizer: goldens made by transformers.js with the real
 * vocabulary (tests/data/tokenizer, tests/data/chat), the small tiny-a vocabulary, a
 * handmade mini vocabulary checked against a naive twin of the spec, the streaming decoder,
 * and tokenizer.json / tokenizer.bin files that are broken on purpose.
 *
 * The real vocabulary is not in the repository: `make vocab` derives it into tests/vocab/
 * ($PLUME_VOCAB overrides the path). Without it the real-vocabulary tests FAIL, or print
 * SKIP lines when PLUME_OFFLINE=1. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plume.h"
#include "t.h"

/* splitmix64, for the random cases. */
static uint64_t rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- JSON lines -------------------------------------------------------------------------- */

/* Parse one JSON line. cJSON strings end at the first NUL, so each escaped \u0000 becomes
 * the byte 0xFF first (valid UTF-8 never holds it) and jl_string() turns it back. */
static cJSON *jl_parse(const char *line) {
    size_t n = strlen(line), o = 0;
    char *s = malloc(n + 1);
    if (!s) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (line[i] == '\\' && i + 6 <= n && !memcmp(line + i, "\\u0000", 6)) {
            s[o++] = (char)0xff;
            i += 5;
        } else {
            s[o++] = line[i];
            if (line[i] == '\\' && i + 1 < n) s[o++] = line[++i];
        }
    }
    s[o] = 0;
    cJSON *j = cJSON_Parse(s);
    free(s);
    return j;
}

/* The string under key (NUL bytes restored) and its length; NULL if absent. */
static char *jl_string(const cJSON *obj, const char *key, size_t *len) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v)) return NULL;
    char *s = v->valuestring;
    *len = strlen(s);
    for (size_t i = 0; i < *len; i++)
        if ((unsigned char)s[i] == 0xff) s[i] = 0;
    return s;
}

/* The int array under key, malloc'd into *ids; its length, or -1. */
static int32_t jl_ids(const cJSON *obj, const char *key, int32_t **ids) {
    cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key), *x;
    if (!cJSON_IsArray(a)) return -1;
    int32_t n = cJSON_GetArraySize(a), i = 0;
    *ids = malloc(sizeof **ids * (size_t)(n + 1));
    cJSON_ArrayForEach(x, a) (*ids)[i++] = (int32_t)x->valuedouble;
    return n;
}

/* Read every line of a JSON-lines file into cJSON objects (NULL-terminated array). */
static cJSON **jl_read(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t cap = 16, n = 0;
    cJSON **v = malloc(cap * sizeof *v);
    char *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) > 0) {
        if (n + 2 > cap) v = realloc(v, (cap *= 2) * sizeof *v);
        v[n] = jl_parse(line);
        if (v[n]) n++;
    }
    v[n] = NULL;
    free(line);
    fclose(f);
    return v;
}

/* Free what jl_read() returned. */
static void jl_free(cJSON **v) {
    for (size_t i = 0; v && v[i]; i++) cJSON_Delete(v[i]);
    free(v);
}

/* A path under the test data folder (static buffer: use at once). */
static const char *data_path(const char *rel) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", t_data(), rel);
    return buf;
}

/* ---- fixtures ---------------------------------------------------------------------------- */

static char *g_tmp; /* scratch directory of this run */

/* Open tokenizer.json at path and a twin through tokenizer.bin (saved under g_tmp). */
static int open_pair(const char *path, const char *tag, plume_tokenizer **json,
                     plume_tokenizer **bin) {
    char *err = NULL, bpath[4200];
    *json = *bin = NULL;
    int rc = plume_tokenizer_open_json(json, path, &err);
    if (!rc) {
        snprintf(bpath, sizeof bpath, "%s/%s.bin", g_tmp, tag);
        rc = plume_tokenizer_save(*json, bpath, &err);
        if (!rc) rc = plume_tokenizer_open(bin, bpath, &err);
    }
    if (rc) {
        printf("  %s: %s\n", path, err ? err : "?");
        free(err);
    }
    return rc;
}

static plume_tokenizer *g_tiny_json, *g_tiny_bin, *g_real_json, *g_real_bin;
static int g_real_state; /* 0 not tried, 1 loaded, -1 missing, -2 broken */
static char g_real_path[4096];

/* Load the real vocabulary once; its state. */
static int real_load(void) {
    if (g_real_state) return g_real_state;
    const char *p = getenv("PLUME_VOCAB");
    snprintf(g_real_path, sizeof g_real_path, "%s", p && *p ? p : "tests/vocab/tokenizer.json");
    if (access(g_real_path, R_OK) != 0) return g_real_state = -1;
    g_real_state = open_pair(g_real_path, "real", &g_real_json, &g_real_bin) ? -2 : 1;
    return g_real_state;
}

/* Whether the real-vocabulary test may go on; a CHECK fails when the vocabulary is missing. */
static int real_ok(void) {
    int st = real_load();
    CHECK(st != -1,
          "real vocabulary missing at %s: run `make vocab` (or set PLUME_OFFLINE=1 to skip)",
          g_real_path);
    CHECK(st != -2, "real vocabulary at %s does not load", g_real_path);
    return st == 1;
}

/* Run a real-vocabulary test, or print SKIP when it is missing and PLUME_OFFLINE=1. */
#define RUN_REAL(fn)                                                                           \
    do {                                                                                       \
        const char *off = getenv("PLUME_OFFLINE");                                           \
        if (real_load() == -1 && off && !strcmp(off, "1")) printf("SKIP %s\n", #fn);          \
        else RUN(fn);                                                                          \
    } while (0)

/* Encode text whole into a malloc'd array; count in *n (negative: the error). */
static int32_t *encode(const plume_tokenizer *t, const char *s, size_t len, int32_t *n) {
    *n = plume_tokenize(t, s, len, NULL, 0);
    if (*n < 0) return NULL;
    int32_t *ids = malloc(sizeof *ids * (size_t)(*n + 1));
    int32_t m = plume_tokenize(t, s, len, ids, *n);
    if (m != *n) *n = -100;
    return ids;
}

/* Decode ids into a malloc'd string; length in *len (negative: the error). */
static char *decode(const plume_tokenizer *t, const int32_t *ids, int32_t n, int skip,
                    int64_t *len) {
    *len = plume_detokenize(t, ids, n, skip, NULL, 0);
    if (*len < 0) return NULL;
    char *s = malloc((size_t)*len + 1);
    int64_t m = plume_detokenize(t, ids, n, skip, s, (size_t)*len + 1);
    if (m != *len) *len = -100;
    return s;
}

/* Whether two id lists are equal. */
static int ids_eq(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    return na == nb && (na == 0 || !memcmp(a, b, sizeof *a * (size_t)na));
}

/* Print an id list (for failures). */
static void print_ids(const char *what, const int32_t *ids, int32_t n) {
    printf("    %s (%d):", what, n);
    for (int32_t i = 0; i < n && i < 40; i++) printf(" %d", ids[i]);
    printf("%s\n", n > 40 ? " ..." : "");
}

/* Check that text encodes to want with tokenizer t; tag names the case on failure. */
static void check_encode(const plume_tokenizer *t, const char *tag, const char *text, size_t len,
                         const int32_t *want, int32_t nwant) {
    int32_t n;
    int32_t *got = encode(t, text, len, &n);
    CHECK(got && ids_eq(got, n, want, nwant), "%s: ids differ for \"%.60s\"", tag, text);
    if (!got || !ids_eq(got, n, want, nwant)) {
        print_ids("want", want, nwant);
        if (got) print_ids("got", got, n);
    }
    free(got);
}

/* Check that ids decode to want (bytes). */
static void check_decode(const plume_tokenizer *t, const char *tag, const int32_t *ids, int32_t n,
                         int skip, const char *want, size_t wlen) {
    int64_t len;
    char *got = decode(t, ids, n, skip, &len);
    CHECK(got && len == (int64_t)wlen && !memcmp(got, want, wlen),
          "%s: decode%s gives \"%s\", want \"%s\"", tag, skip ? " (skip special)" : "",
          got ? got : "(error)", want);
    free(got);
}

/* Decode ids through the streaming decoder one id at a time, then flush; malloc'd. */
static char *stream_decode(const plume_tokenizer *t, const int32_t *ids, int32_t n, int skip,
                           size_t *len) {
    plume_detok_stream st;
    plume_detok_stream_init(&st, t, skip);
    size_t cap = 64 * (size_t)n + 64, at = 0;
    char *s = malloc(cap), piece[64];
    for (int32_t i = 0; i <= n; i++) {
        int32_t r = i < n ? plume_detok_stream_put(&st, ids[i], piece, sizeof piece)
                          : plume_detok_stream_flush(&st, piece, sizeof piece);
        if (r < 0 || r >= (int32_t)sizeof piece || strlen(piece) > (size_t)r) {
            free(s);
            return NULL;
        }
        memcpy(s + at, piece, (size_t)r);
        at += (size_t)r;
    }
    s[at] = 0;
    *len = at;
    return s;
}

/* ---- tiny-a: the 512-piece vocabulary, always available ---------------------------------- */

/* tiny-a goldens: ids and decoded text, through JSON and binary. */
static void test_tiny_cases(void) {
    CHECK(g_tiny_json && g_tiny_bin, "tiny-a tokenizer did not load");
    if (!g_tiny_json || !g_tiny_bin) return;
    CHECK(plume_tokenizer_n_vocab(g_tiny_json) == 512, "n_vocab %d",
          plume_tokenizer_n_vocab(g_tiny_json));
    cJSON **cases = jl_read(data_path("tiny-a/tokenizer_cases.jsonl"));
    CHECK(cases && cases[0], "no tiny-a tokenizer cases");
    int n_cases = 0;
    for (int i = 0; cases && cases[i]; i++, n_cases++) {
        size_t len, dlen;
        const char *text = jl_string(cases[i], "text", &len);
        const char *dec = jl_string(cases[i], "decoded", &dlen);
        int32_t *want = NULL, nw = jl_ids(cases[i], "ids", &want);
        CHECK(text && dec && nw >= 0, "case %d malformed", i);
        if (!text || !dec || nw < 0) { free(want); continue; }
        const plume_tokenizer *ts[2] = {g_tiny_json, g_tiny_bin};
        for (int k = 0; k < 2; k++) {
            check_encode(ts[k], k ? "bin" : "json", text, len, want, nw);
            check_decode(ts[k], k ? "bin" : "json", want, nw, 0, dec, dlen);
        }
        free(want);
    }
    CHECK(n_cases == 10, "%d tiny-a cases, want 10", n_cases);
    jl_free(cases);
}

/* Saving the binary-loaded tokenizer gives the same bytes again. */
static void test_binary_resave(void) {
    CHECK(g_tiny_bin != NULL, "tiny-a tokenizer did not load");
    if (!g_tiny_bin) return;
    char a[4200], b[4200], *err = NULL, *da = NULL, *db = NULL;
    snprintf(a, sizeof a, "%s/tiny.bin", g_tmp);
    snprintf(b, sizeof b, "%s/tiny2.bin", g_tmp);
    CHECK(plume_tokenizer_save(g_tiny_bin, b, &err) == 0, "save: %s", err);
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    CHECK(fa && fb, "cannot reopen saved files");
    if (fa && fb) {
        da = malloc(1 << 20), db = malloc(1 << 20);
        size_t na = fread(da, 1, 1 << 20, fa), nb = fread(db, 1, 1 << 20, fb);
        CHECK(na > 256 && na == nb && !memcmp(da, db, na),
              "resaved file differs (%zu vs %zu bytes)", na, nb);
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    free(da);
    free(db);
    free(err);
}

/* Invalid UTF-8 input is PLUME_EINVAL; the edges of the valid range encode. */
static void test_invalid_utf8(void) {
    static const char *bad[] = {
        "\x80",             /* lone continuation */
        "a\xff",            /* never valid */
        "\xc0\xaf",         /* overlong '/' */
        "\xe0\x80\xaf",     /* overlong */
        "\xed\xa0\x80",     /* surrogate U+D800 */
        "\xf4\x90\x80\x80", /* above U+10FFFF */
        "\xf5\x80\x80\x80", /* bad lead */
        "ok\xe6\x97",       /* truncated at the end */
        "\xe6\x97x",        /* truncated in the middle */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t ids[16];
        int32_t r = plume_tokenize(g_tiny_json, bad[i], strlen(bad[i]), ids, 16);
        CHECK(r == PLUME_EINVAL, "case %zu: got %d, want PLUME_EINVAL", i, r);
    }
    /* The edges of the valid range encode (by byte fallback here). */
    int32_t ids[16];
    CHECK(plume_tokenize(g_tiny_json, "\xf4\x8f\xbf\xbf", 4, ids, 16) == 4, "U+10FFFF");
    CHECK(plume_tokenize(g_tiny_json, "\xed\x9f\xbf", 3, ids, 16) > 0, "U+D7FF");
    CHECK(plume_tokenize(g_tiny_json, "a\0b", 3, ids, 16) == 3, "embedded NUL is text");
    CHECK(ids[1] == 238, "NUL is byte token <0x00> = 238, got %d", ids[1]);
}

/* Buffers too small: counts still come back, nothing is written past cap. */
static void test_capacity(void) {
    const plume_tokenizer *t = g_tiny_json;
    int32_t ids[16];
    for (int i = 0; i < 16; i++) ids[i] = -7;
    CHECK(plume_tokenize(t, "Hello world", 11, NULL, 0) == 11, "count with no buffer");
    CHECK(plume_tokenize(t, "Hello world", 11, ids, 3) == 11, "count with a small buffer");
    CHECK(ids[0] == 310 && ids[2] == 506 && ids[3] == -7, "small buffer: wrote %d %d %d", ids[0],
          ids[2], ids[3]);
    CHECK(plume_tokenize(t, "", 0, ids, 16) == 0, "empty text");
    CHECK(plume_tokenize(t, NULL, 0, NULL, 0) == 0, "NULL empty text");
    CHECK(plume_tokenize(t, "x", 1, NULL, 5) == PLUME_EINVAL, "NULL ids with cap");
    CHECK(plume_tokenize(t, "x", 1, ids, -1) == PLUME_EINVAL, "negative cap");

    int32_t hw[] = {310, 495, 506, 506, 496, 494, 357, 496, 498, 506, 505};
    char out[8];
    memset(out, 'z', sizeof out);
    CHECK(plume_detokenize(t, hw, 11, 0, out, 5) == 11, "detokenize count");
    CHECK(!memcmp(out, "Hell\0zzz", 8), "detokenize truncation: '%.8s'", out);
    CHECK(plume_detokenize(t, hw, 11, 0, NULL, 0) == 11, "detokenize count only");
    int32_t bad[] = {310, 512};
    CHECK(plume_detokenize(t, bad, 2, 0, out, 8) == PLUME_EINVAL, "id == n_vocab");
    bad[1] = -1;
    CHECK(plume_detokenize(t, bad, 2, 0, out, 8) == PLUME_EINVAL, "id -1");
    CHECK(plume_token_is_special(t, 2) && plume_token_is_special(t, 106), "<bos>, <turn|> special");
    CHECK(!plume_token_is_special(t, 4) && !plume_token_is_special(t, 107),
          "<mask>, \\n not special");
    CHECK(!plume_token_is_special(t, -1) && !plume_token_is_special(t, 512), "out of range");
    CHECK(plume_token_find(t, "<bos>") == 2 && plume_token_find(t, "<turn|>") == 106 && plume_token_find(t, "\n") == 107,
          "found by text: <bos> %d, <turn|> %d, \\n %d", plume_token_find(t, "<bos>"), plume_token_find(t, "<turn|>"),
          plume_token_find(t, "\n"));
    CHECK(plume_token_find(t, "<no such token>") == -1 && plume_token_find(t, "") == -1 &&
              plume_token_find(t, NULL) == -1 && plume_token_find(NULL, "<bos>") == -1,
          "not found: -1");
    plume_tokenizer_free(NULL);
}

/* The streaming decoder: characters split over byte tokens come out whole. */
static void test_stream_bytes(void) {
    const plume_tokenizer *t = g_tiny_bin;
    plume_detok_stream st;
    char out[64];
    plume_detok_stream_init(&st, t, 0);
    /* é = C3 A9 as two byte tokens (238 + byte) */
    CHECK(plume_detok_stream_put(&st, 238 + 0xc3, out, 64) == 0 && out[0] == 0, "first half of é");
    CHECK(plume_detok_stream_put(&st, 238 + 0xa9, out, 64) == 2 && !strcmp(out, "\xc3\xa9"), "é");
    /* 🦙 = F0 9F A6 99 over four byte tokens */
    static const uint8_t llama[] = {0xf0, 0x9f, 0xa6, 0x99};
    for (int i = 0; i < 3; i++)
        CHECK(plume_detok_stream_put(&st, 238 + llama[i], out, 64) == 0, "emoji byte %d held", i);
    CHECK(plume_detok_stream_put(&st, 238 + llama[3], out, 64) == 4 && !strcmp(out, "🦙"),
          "🦙");
    /* An unfinished E6 97 ended by a normal piece ('a' = 501): one U+FFFD, then the piece. */
    plume_detok_stream_put(&st, 238 + 0xe6, out, 64);
    plume_detok_stream_put(&st, 238 + 0x97, out, 64);
    CHECK(plume_detok_stream_put(&st, 501, out, 64) == 4 && !strcmp(out, "\xef\xbf\xbd"
                                                                         "a"),
          "� then a: '%s'", out);
    /* ▁ (494) decodes to a space. */
    CHECK(plume_detok_stream_put(&st, 494, out, 64) == 1 && !strcmp(out, " "), "▁ -> space");
    /* A bad continuation ends the run at once: F0 then 'A' byte (0x41). */
    plume_detok_stream_put(&st, 238 + 0xf0, out, 64);
    CHECK(plume_detok_stream_put(&st, 238 + 0x41, out, 64) == 4 && !strcmp(out, "\xef\xbf\xbd"
                                                                                "A"),
          "F0 41");
    /* Flush turns an unfinished tail into U+FFFD; a second flush has nothing. */
    plume_detok_stream_put(&st, 238 + 0xf0, out, 64);
    plume_detok_stream_put(&st, 238 + 0x9f, out, 64);
    CHECK(plume_detok_stream_flush(&st, out, 64) == 3 && !strcmp(out, "\xef\xbf\xbd"), "flush");
    CHECK(plume_detok_stream_flush(&st, out, 64) == 0, "second flush");
    /* Skipped specials do not break a byte run (transformers.js drops them first). */
    plume_detok_stream_init(&st, t, 1);
    plume_detok_stream_put(&st, 238 + 0xc3, out, 64);
    CHECK(plume_detok_stream_put(&st, 106, out, 64) == 0, "skipped <turn|>");
    CHECK(plume_detok_stream_put(&st, 238 + 0xa9, out, 64) == 2 && !strcmp(out, "\xc3\xa9"),
          "é across a skipped special");
    plume_detok_stream_init(&st, t, 0);
    CHECK(plume_detok_stream_put(&st, 106, out, 64) == 7 && !strcmp(out, "<turn|>"),
          "kept <turn|>");
    /* Too small a buffer: the length comes back and nothing is consumed. */
    CHECK(plume_detok_stream_put(&st, 106, out, 4) == 7, "small buffer length");
    CHECK(plume_detok_stream_put(&st, 106, out, 8) == 7 && !strcmp(out, "<turn|>"), "retry");
    CHECK(plume_detok_stream_put(&st, 512, out, 64) == PLUME_EINVAL, "bad id");
    CHECK(plume_detok_stream_put(&st, -3, out, 64) == PLUME_EINVAL, "negative id");
}

/* Streaming equals whole decoding on random id sequences rich in byte tokens. */
static void test_stream_vs_whole(void) {
    const plume_tokenizer *t = g_tiny_json;
    uint64_t rng = 42;
    int bad = 0;
    for (int iter = 0; iter < 3000 && !bad; iter++) {
        int32_t ids[24], n = (int32_t)(rng_next(&rng) % 24);
        for (int32_t i = 0; i < n; i++) {
            uint64_t r = rng_next(&rng);
            switch (r % 6) {
            case 0: ids[i] = (int32_t)(494 + (r >> 8) % 18); break;   /* pieces */
            case 1: ids[i] = (int32_t)((r >> 8) % 238); break;        /* added tokens */
            case 2: ids[i] = 238 + 0x80 + (int32_t)((r >> 8) % 64); break; /* continuations */
            default: ids[i] = 238 + (int32_t)((r >> 8) % 256); break; /* any byte */
            }
        }
        for (int skip = 0; skip < 2; skip++) {
            int64_t wl;
            size_t sl = 0;
            char *w = decode(t, ids, n, skip, &wl), *s = stream_decode(t, ids, n, skip, &sl);
            if (!w || !s || (int64_t)sl != wl || memcmp(w, s, sl)) bad = 1;
            CHECK(!bad, "iteration %d skip %d: stream '%s' vs whole '%s'", iter, skip, s, w);
            free(w);
            free(s);
        }
    }
}

/* ---- a handmade vocabulary and a naive twin of the spec ---------------------------------- */

#define U2581 "\xe2\x96\x81"
static const char *const mini_added[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<x>", "<xy>"};
static const int mini_added_special[] = {1, 1, 1, 1, 0, 1};
/* Ids MINI_PIECE0 + i; U2581 stands for the space as in the real vocabulary. */
static const char *const mini_pieces[] = {
    "a",   "b",  "c",   U2581,           "ab", "bc",  /* 0-5 */
    "abc", "aa", "aaa", (U2581 "a"),     "ca", "cab", /* 6-11 */
    (U2581 U2581), "x", "\xc3\xa9", ("a" U2581 "b"), ("a" U2581), /* 12-16 */
};
static const char *const mini_merges[][2] = {
    {"b", "c"}, {"a", "b"},  {"a", "a"},    {U2581, "a"}, {"a", "bc"},  {"aa", "a"},
    {"c", "a"}, {"ca", "b"}, {U2581, U2581}, {"ab", "c"}, {"a", U2581}, {("a" U2581), "b"},
};
#define MINI_N_ADDED 6
#define MINI_N_PIECES (int)(sizeof mini_pieces / sizeof *mini_pieces)
#define MINI_N_MERGES (int)(sizeof mini_merges / sizeof *mini_merges)
#define MINI_BYTE0 MINI_N_ADDED          /* <0x00> */
#define MINI_PIECE0 (MINI_N_ADDED + 256) /* first piece */
#define MINI_N_VOCAB (MINI_PIECE0 + MINI_N_PIECES)

/* The piece of mini id i (static buffer for byte tokens). */
static const char *mini_piece(int i) {
    static char b[8];
    if (i < MINI_N_ADDED) return mini_added[i];
    if (i < MINI_PIECE0) {
        snprintf(b, sizeof b, "<0x%02X>", i - MINI_BYTE0);
        return b;
    }
    return mini_pieces[i - MINI_PIECE0];
}

/* Id of piece s[0..n) in the mini vocabulary, or -1. */
static int mini_id(const char *s, size_t n) {
    for (int i = 0; i < MINI_N_VOCAB; i++) {
        const char *p = mini_piece(i);
        if (strlen(p) == n && !memcmp(p, s, n)) return i;
    }
    return -1;
}

/* Write the mini tokenizer.json; pairs: merges as ["a","b"], else "a b"; dup: repeat the
 * merge "a b" at the end (rank 12), which then wins over its rank 1. */
static char *mini_json(int pairs, int dup) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fprintf(f, "{\"version\": \"1.0\", \"added_tokens\": [");
    for (int i = 0; i < MINI_N_ADDED; i++)
        fprintf(f, "%s{\"id\": %d, \"content\": \"%s\", \"single_word\": false, \"lstrip\": false, "
                   "\"rstrip\": false, \"normalized\": false, \"special\": %s}",
                i ? ", " : "", i, mini_added[i], mini_added_special[i] ? "true" : "false");
    fprintf(f, "], \"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
               "\"content\": \"" U2581 "\"}, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": "
               "{\"String\": \" \"}, \"behavior\": \"MergedWithPrevious\", \"invert\": false}, "
               "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true, "
               "\"vocab\": {");
    for (int i = 0; i < MINI_N_VOCAB; i++)
        fprintf(f, "%s\"%s\": %d", i ? ", " : "", mini_piece(i), i);
    fprintf(f, "}, \"merges\": [");
    for (int i = 0; i < MINI_N_MERGES; i++) {
        if (pairs)
            fprintf(f, "%s[\"%s\", \"%s\"]", i ? ", " : "", mini_merges[i][0], mini_merges[i][1]);
        else fprintf(f, "%s\"%s %s\"", i ? ", " : "", mini_merges[i][0], mini_merges[i][1]);
    }
    if (dup) fprintf(f, ", \"a b\"");
    fprintf(f, "]}}\n");
    fclose(f);
    return buf;
}

/* Write text to g_tmp/name; the path (static buffer). */
static const char *write_tmp(const char *name, const char *text, size_t len) {
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(text, 1, len, f);
        fclose(f);
    }
    return path;
}

/* The spec's pipeline done the slow, obvious way on the mini vocabulary. */
static int32_t naive_encode(const char *s, size_t n, int32_t *out) {
    static int mm[MINI_N_MERGES][3]; /* left, right, result ids of each merge */
    if (!mm[0][0]) {
        for (int r = 0; r < MINI_N_MERGES; r++) {
            char cat[64];
            snprintf(cat, sizeof cat, "%s%s", mini_merges[r][0], mini_merges[r][1]);
            mm[r][0] = mini_id(mini_merges[r][0], strlen(mini_merges[r][0]));
            mm[r][1] = mini_id(mini_merges[r][1], strlen(mini_merges[r][1]));
            mm[r][2] = mini_id(cat, strlen(cat));
        }
    }
    int32_t no = 0, sym[512], ns = 0;
    size_t i = 0;
    while (i <= n) {
        /* step 1: longest added token here? */
        int best = -1;
        size_t blen = 0;
        for (int a = 0; a < MINI_N_ADDED && i < n; a++) {
            size_t l = strlen(mini_added[a]);
            if (l <= n - i && l > blen && !memcmp(s + i, mini_added[a], l)) best = a, blen = l;
        }
        if (best >= 0 || i == n) {
            /* step 4: merge the pending segment, lowest rank, leftmost */
            for (;;) {
                int br = -1, bp = -1;
                for (int p = 0; p + 1 < ns; p++) {
                    for (int r = 0; r < MINI_N_MERGES; r++) {
                        if (mm[r][0] == sym[p] && mm[r][1] == sym[p + 1] && (br < 0 || r < br))
                            br = r, bp = p;
                    }
                }
                if (br < 0) break;
                sym[bp] = mm[br][2];
                memmove(sym + bp + 1, sym + bp + 2, sizeof *sym * (size_t)(ns - bp - 2));
                ns--;
            }
            for (int p = 0; p < ns; p++) out[no++] = sym[p];
            ns = 0;
            if (i == n) break;
            out[no++] = best;
            i += blen;
            continue;
        }
        /* steps 2-3: one character, ' ' as U+2581, else its bytes */
        size_t cl = (unsigned char)s[i] < 0x80 ? 1 : (unsigned char)s[i] < 0xe0 ? 2
                  : (unsigned char)s[i] < 0xf0 ? 3 : 4;
        int id = s[i] == ' ' ? mini_id(U2581, 3) : mini_id(s + i, cl);
        if (id >= 0) sym[ns++] = id;
        else
            for (size_t k = 0; k < cl; k++) sym[ns++] = MINI_BYTE0 + (unsigned char)s[i + k];
        i += cl;
    }
    return no;
}

static plume_tokenizer *g_mini_str, *g_mini_pair, *g_mini_bin;

/* Worked cases on the mini vocabulary: rank order, leftmost ties, added tokens. Merge ranks:
 * 0 b c, 1 a b, 2 a a, 3 ▁ a, 4 a bc, 5 aa a, 6 c a, 7 ca b, 8 ▁ ▁, 9 ab c, 10 a ▁, 11 a▁ b. */
static void test_mini_rules(void) {
    CHECK(g_mini_str && g_mini_pair && g_mini_bin, "mini tokenizers did not load");
    if (!g_mini_str || !g_mini_pair || !g_mini_bin) return;
    enum { A = MINI_PIECE0, C = A + 2, AB = A + 4, ABC = A + 6, AA = A + 7, AAA = A + 8,
           SPSP = A + 12, X = A + 13, A_B = A + 15 };
    static const struct { const char *text; int32_t ids[4]; int32_t n; } cases[] = {
        {"abc", {ABC}, 1},              /* b c (0) before a b (1), then a bc (4) */
        {"aa", {AA}, 1},
        {"aaaa", {AA, AA}, 2},          /* a a leftmost first, twice; aa aa does not merge */
        {"aaa", {AAA}, 1},              /* a a at the left, then aa a */
        {"cab", {C, AB}, 2},            /* a b (1) beats c a (6); c ab does not merge */
        {"  ", {SPSP}, 1},              /* two spaces: ▁ ▁ merge */
        {"a b", {A_B}, 1},              /* a ▁ (10) then a▁ b (11): U+2581 inside a piece */
        {"<x>", {4}, 1},
        {"<xy>", {5}, 1},               /* the longest added token */
        {"<x", {MINI_BYTE0 + '<', X}, 2}, /* '<' is no piece: its byte token */
        {"", {0}, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *text = cases[i].text;
        check_encode(g_mini_str, "mini", text, strlen(text), cases[i].ids, cases[i].n);
        int32_t nv[16];
        int32_t nn = naive_encode(text, strlen(text), nv);
        CHECK(ids_eq(nv, nn, cases[i].ids, cases[i].n), "naive twin disagrees on '%s'", text);
    }
}

/* A pair listed twice takes its later rank, as in HF tokenizers and transformers.js. */
static void test_mini_duplicate_merge(void) {
    char *j = mini_json(0, 1), *err = NULL;
    plume_tokenizer *t = NULL;
    CHECK(plume_tokenizer_open_json(&t, write_tmp("mini_dup.json", j, strlen(j)), &err) == 0,
          "open: %s", err);
    if (t) {
        /* Without the repeat: a b (1) first, giving c ab. With it, a b is rank 12, so c a (6)
         * goes first and ca b (7) gives cab. */
        int32_t want_dup[] = {MINI_PIECE0 + 11}, want[] = {MINI_PIECE0 + 2, MINI_PIECE0 + 4};
        check_encode(t, "dup", "cab", 3, want_dup, 1);
        check_encode(g_mini_str, "no dup", "cab", 3, want, 2);
    }
    plume_tokenizer_free(t);
    free(j);
    free(err);
}

/* The heap BPE equals the naive twin on random strings; both merge formats and the binary
 * form agree. */
static void test_mini_vs_naive(void) {
    if (!g_mini_str || !g_mini_pair || !g_mini_bin) {
        CHECK(0, "mini tokenizers did not load");
        return;
    }
    static const char *const alphabet[] = {"a", "a", "a", "b", "c", " ", " ", "x", "\xc3\xa9",
                                           "<x>", "<xy>", "<", ">", "y", U2581, "\xe2\x82\xac"};
    uint64_t rng = 7;
    int fails = 0;
    for (int iter = 0; iter < 4000 && fails < 3; iter++) {
        char text[256];
        size_t len = 0;
        int n = (int)(rng_next(&rng) % 40);
        for (int k = 0; k < n; k++) {
            const char *piece = alphabet[rng_next(&rng) % (sizeof alphabet / sizeof *alphabet)];
            memcpy(text + len, piece, strlen(piece));
            len += strlen(piece);
        }
        text[len] = 0;
        int32_t want[512], nw = naive_encode(text, len, want);
        const plume_tokenizer *ts[3] = {g_mini_str, g_mini_pair, g_mini_bin};
        for (int k = 0; k < 3; k++) {
            int32_t got[512], ng = plume_tokenize(ts[k], text, len, got, 512);
            if (!ids_eq(got, ng, want, nw)) {
                fails++;
                CHECK(0, "tokenizer %d differs from the naive twin on '%s'", k, text);
                print_ids("naive", want, nw);
                print_ids("got", got, ng);
            }
        }
        /* And it decodes back (U+2581 in the text comes back as a space). */
        int64_t dl;
        char *d = decode(g_mini_bin, want, nw, 0, &dl);
        char norm[256];
        size_t nl = 0;
        for (size_t i = 0; i < len;) {
            if (i + 3 <= len && !memcmp(text + i, U2581, 3)) norm[nl++] = ' ', i += 3;
            else norm[nl++] = text[i++];
        }
        CHECK(d && dl == (int64_t)nl && !memcmp(d, norm, nl), "round trip of '%s' gave '%s'", text,
              d);
        free(d);
    }
}

/* ---- broken files ------------------------------------------------------------------------ */

/* Open path as tokenizer.bin (bin != 0) or tokenizer.json; expect failure with a message. */
static void expect_open_fails(const char *path, int bin, int want_rc, const char *what,
                              const char *not_in_msg) {
    plume_tokenizer *t = (plume_tokenizer *)1;
    char *err = NULL;
    int rc = bin ? plume_tokenizer_open(&t, path, &err) : plume_tokenizer_open_json(&t, path, &err);
    CHECK(rc < 0 && t == NULL, "%s: opened (rc %d)", what, rc);
    CHECK(!want_rc || rc == want_rc, "%s: rc %d, want %d (%s)", what, rc, want_rc, err ? err : "");
    CHECK(err && strstr(err, path), "%s: message '%s' does not name the file", what,
          err ? err : "(none)");
    CHECK(!not_in_msg || !err || !strstr(err, not_in_msg), "%s: caught only as '%s'", what, err);
    if (rc == 0) plume_tokenizer_free(t);
    free(err);
}

/* The checksum of docs/TOKENIZER.md, written again from the document. */
static uint64_t doc_checksum(const uint8_t *p, size_t n) {
    const uint64_t P = 0x100000001b3ull, B = 0xcbf29ce484222325ull;
    uint64_t h[4] = {B, B ^ 1, B ^ 2, B ^ 3}, r = n;
    size_t i = 0;
    for (; n - i >= 32; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w = 0;
            for (int b = 7; b >= 0; b--) w = w << 8 | p[i + 8 * k + b];
            h[k] = (h[k] ^ w) * P;
        }
    for (; i < n; i++) h[0] = (h[0] ^ p[i]) * P;
    for (int k = 0; k < 4; k++) r = (r ^ h[k]) * P;
    return r;
}

/* Little-endian readers and writer for poking at a tokenizer.bin. */
static uint32_t rd32(const uint8_t *b) {
    return b[0] | b[1] << 8 | b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint64_t rd64(const uint8_t *b) { return rd32(b) | (uint64_t)rd32(b + 4) << 32; }
static void wr32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> 8 * i);
}

/* Rewrite a tokenizer.bin with a valid checksum, so only the structural checks can
 * catch what was changed. */
static void reseal(uint8_t *bin, size_t n) {
    uint64_t c = doc_checksum(bin + 32, n - 32);
    for (int i = 0; i < 8; i++) bin[24 + i] = (uint8_t)(c >> 8 * i);
}

/* Truncated, flipped and crafted tokenizer.bin files fail cleanly. */
static void test_corrupt_binary(void) {
    char *err = NULL, src[4200];
    snprintf(src, sizeof src, "%s/mini.bin", g_tmp);
    FILE *f = fopen(src, "rb");
    CHECK(f != NULL, "no mini.bin");
    if (!f) return;
    uint8_t *bin = malloc(1 << 20), *work = malloc(1 << 20);
    size_t n = fread(bin, 1, 1 << 20, f);
    fclose(f);
    CHECK(doc_checksum(bin + 32, n - 32) == rd64(bin + 24),
          "docs/TOKENIZER.md checksum disagrees with the file");

    expect_open_fails("/nonexistent/tokenizer.bin", 1, PLUME_EIO, "missing file", NULL);
    size_t cuts[] = {0, 7, 8, 100, 255, 256, 300, n / 2, n - 8, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        char what[64];
        snprintf(what, sizeof what, "truncated to %zu", cuts[i]);
        expect_open_fails(write_tmp("cut.bin", (char *)bin, cuts[i]), 1, PLUME_EFORMAT, what, NULL);
    }
    uint64_t rng = 3;
    for (int i = 0; i < 40; i++) {
        memcpy(work, bin, n);
        size_t at = 32 + rng_next(&rng) % (n - 32);
        work[at] ^= (uint8_t)(1 + rng_next(&rng) % 255);
        expect_open_fails(write_tmp("flip.bin", (char *)work, n), 1, PLUME_EFORMAT, "flipped byte",
                          NULL);
    }
    /* A changed letter inside an ordinary piece ("abc"): structurally fine, so only the
     * checksum can tell. */
    memcpy(work, bin, n);
    size_t abc = (size_t)rd64(bin + 80) + 4 * (MINI_PIECE0 + 6);
    work[(size_t)rd64(bin + 80 + 16) + rd32(bin + abc)] ^= 0x01;
    expect_open_fails(write_tmp("piece.bin", (char *)work, n), 1, PLUME_EFORMAT, "changed piece",
                      NULL);
    {
        plume_tokenizer *bad = NULL;
        char *msg = NULL;
        plume_tokenizer_open(&bad, write_tmp("piece.bin", (char *)work, n), &msg);
        CHECK(msg && strstr(msg, "checksum"), "changed piece: '%s' is not the checksum error", msg);
        plume_tokenizer_free(bad);
        free(msg);
    }
    memcpy(work, bin, n);
    work[3] = 'X';
    expect_open_fails(write_tmp("magic.bin", (char *)work, n), 1, PLUME_EFORMAT, "bad magic", NULL);

    /* Structural damage behind a valid checksum. Sections: offsets, pieces, flags, byte ids,
     * merges, piece table, merge table, trie nodes, trie edges. */
    uint32_t n_vocab = rd32(bin + 32);
#define SEC_OFF(i) ((size_t)rd64(bin + 80 + 16 * (i)))
    struct { const char *what; size_t at; uint32_t value; } hits[] = {
        {"huge vocab count", 32, 0x7fffffff},
        {"merge count past its section", 36, 1000},
        {"piece offset past the blob", SEC_OFF(0) + 4 * 10, 0x7fffff00},
        {"decreasing piece offset", SEC_OFF(0) + 4 * 270, 0},
        {"byte id out of range", SEC_OFF(3) + 4 * 65, n_vocab},
        {"byte id not a byte piece", SEC_OFF(3) + 4 * 65, MINI_PIECE0},
        {"merge left out of range", SEC_OFF(4), n_vocab},
        {"merge result out of range", SEC_OFF(4) + 8, 0xfffffffe},
        {"trie edge child out of range", SEC_OFF(8) + 4, 1000000},
        {"trie node edges out of range", SEC_OFF(7) + 4, 1000000},
        {"trie node token out of range", SEC_OFF(7) + 8, n_vocab + 5},
        {"section offset past the end", 80 + 16 * 4, 0x00fffff8},
        {"section offset unaligned", 80 + 16 * 2, (uint32_t)SEC_OFF(2) + 1},
        {"piece table slot sizes", 48, 24},
    };
    for (size_t i = 0; i < sizeof hits / sizeof *hits; i++) {
        memcpy(work, bin, n);
        wr32(work + hits[i].at, hits[i].value);
        reseal(work, n);
        expect_open_fails(write_tmp("craft.bin", (char *)work, n), 1, PLUME_EFORMAT, hits[i].what,
                          "checksum");
    }
    /* A flag bit that does not exist, and a special count that disagrees. */
    memcpy(work, bin, n);
    work[SEC_OFF(2) + 9] |= 0x80;
    reseal(work, n);
    expect_open_fails(write_tmp("craft.bin", (char *)work, n), 1, PLUME_EFORMAT, "bad flag",
                      "checksum");
    memcpy(work, bin, n);
    work[SEC_OFF(2) + 4] ^= 1; /* <x> becomes special */
    reseal(work, n);
    expect_open_fails(write_tmp("craft.bin", (char *)work, n), 1, PLUME_EFORMAT, "special count",
                      "checksum");
    /* Hash slots pointing past the arrays. */
    uint32_t ps = rd32(bin + 48);
    for (uint32_t s = 0; s < ps; s++) {
        if (rd32(bin + SEC_OFF(5) + 4 * s) != 0xffffffffu) continue;
        memcpy(work, bin, n);
        wr32(work + SEC_OFF(5) + 4 * s, n_vocab + 1);
        reseal(work, n);
        expect_open_fails(write_tmp("craft.bin", (char *)work, n), 1, PLUME_EFORMAT, "piece slot",
                          "checksum");
        break;
    }
    memcpy(work, bin, n);
    wr32(work + SEC_OFF(6), 0xfff); /* a u64 slot whose rank field is all ones */
    wr32(work + SEC_OFF(6) + 4, 0);
    reseal(work, n);
    expect_open_fails(write_tmp("craft.bin", (char *)work, n), 1, PLUME_EFORMAT, "merge slot",
                      "checksum");
    /* An added token that ends inside a UTF-8 character ("<x>" -> "<x\xc3", piece and trie
     * edge alike): once the encoder read far past the text after such a match ("<x\xc3\xa9"
     * left a segment starting with a continuation byte). And a trie edge that no longer
     * spells its token's piece. */
    for (int both = 0; both < 2; both++) {
        memcpy(work, bin, n);
        uint32_t n_nodes = rd32(bin + 56), n_edges = rd32(bin + 60), x_node = 0;
        for (uint32_t i = 0; i < n_nodes; i++)
            if (rd32(bin + SEC_OFF(7) + 12 * i + 8) == 4) x_node = i;
        for (uint32_t e = 0; e < n_edges; e++)
            if (x_node && rd32(bin + SEC_OFF(8) + 8 * e + 4) == x_node) wr32(work + SEC_OFF(8) + 8 * e, 0xc3);
        if (both) work[SEC_OFF(1) + rd32(bin + SEC_OFF(0) + 4 * 5) - 1] = 0xc3;
        reseal(work, n);
        CHECK(x_node != 0, "no trie node for <x>");
        expect_open_fails(write_tmp("craft.bin", (char *)work, n), 1, PLUME_EFORMAT,
                          both ? "added token ending inside a character" : "trie path", "checksum");
    }
#undef SEC_OFF
    /* The untouched file still opens. */
    plume_tokenizer *t = NULL;
    CHECK(plume_tokenizer_open(&t, write_tmp("ok.bin", (char *)bin, n), &err) == 0,
          "clean copy: %s", err);
    plume_tokenizer_free(t);
    free(err);
    free(bin);
    free(work);
}

/* Replace the first `from` in s by `to`; malloc'd. */
static char *replace1(const char *s, const char *from, const char *to) {
    const char *at = strstr(s, from);
    if (!at) return strdup(s);
    size_t a = (size_t)(at - s), nf = strlen(from), nt = strlen(to), n = strlen(s);
    char *r = malloc(n - nf + nt + 1);
    memcpy(r, s, a);
    memcpy(r + a, to, nt);
    memcpy(r + a + nt, at + nf, n - a - nf + 1);
    return r;
}

/* Broken and unsupported tokenizer.json files fail with a message naming the file. */
static void test_bad_json(void) {
    char *good = mini_json(0, 0);
    expect_open_fails("/nonexistent/tokenizer.json", 0, PLUME_EIO, "missing file", NULL);
    expect_open_fails(write_tmp("e1.json", "", 0), 0, PLUME_EFORMAT, "empty file", NULL);
    expect_open_fails(write_tmp("e2.json", "not json", 8), 0, PLUME_EFORMAT, "not JSON", NULL);
    expect_open_fails(write_tmp("e3.json", "[1, 2]", 6), 0, PLUME_EFORMAT, "an array", NULL);
    expect_open_fails(write_tmp("e4.json", "{}", 2), 0, PLUME_EFORMAT, "empty object", NULL);
    size_t n = strlen(good);
    for (size_t cut = 1; cut < n; cut += n / 23)
        expect_open_fails(write_tmp("cut.json", good, cut), 0, PLUME_EFORMAT, "truncated JSON",
                          NULL);
    struct { const char *what, *from, *to; } edits[] = {
        {"merge with a missing piece", "\"b c\"", "\"b q\""},
        {"merge with three parts", "\"b c\"", "\"b c a\""},
        {"merge without a space", "\"b c\"", "\"bc\""},
        {"merge that is a number", "\"b c\"", "7"},
        {"merge result not a piece", "\"b c\"", "\"aa c\", \"b c\""},
        {"negative id", "\"a\": 262", "\"a\": -1"},
        {"fractional id", "\"a\": 262", "\"a\": 1.5"},
        {"duplicate id", "\"b\": 263", "\"b\": 262"},
        {"missing byte token", "\"<0x41>\"", "\"<0x4G>\""},
        {"other normalizer", "\"Replace\"", "\"NFKC\""},
        {"other pre_tokenizer", "\"Split\"", "\"ByteLevel\""},
        {"no byte fallback", "\"byte_fallback\": true", "\"byte_fallback\": false"},
        {"WordPiece model", "\"BPE\"", "\"WordPiece\""},
        {"lstrip added token", "\"lstrip\": false", "\"lstrip\": true"},
        {"NUL in a piece", "\"x\": ", "\"x\\u0000\": "},
        {"added token without content", "\"content\": \"<x>\"", "\"contents\": \"<x>\""},
        {"merges not an array", "\"merges\": [", "\"merges\": 5, \"zz\": ["},
        {"added token ending inside a character", "\"content\": \"<x>\"", "\"content\": \"<x\xc3\""},
        {"added token starting with a continuation byte", "\"content\": \"<x>\"", "\"content\": \"\xa9<x>\""},
        {"added token id twice", "{\"id\": 5,", "{\"id\": 4,"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        char *bad = replace1(good, edits[i].from, edits[i].to);
        CHECK(strcmp(bad, good) != 0, "%s: edit did not apply", edits[i].what);
        expect_open_fails(write_tmp("edit.json", bad, strlen(bad)), 0, PLUME_EFORMAT, edits[i].what,
                          NULL);
        free(bad);
    }
    free(good);
}

/* ---- the real vocabulary ----------------------------------------------------------------- */

/* The derived vocabulary: 262144 ids, 23 special. */
static void test_real_vocab_shape(void) {
    if (!real_ok()) return;
    const plume_tokenizer *t = g_real_bin;
    CHECK(plume_tokenizer_n_vocab(t) == 262144, "n_vocab %d", plume_tokenizer_n_vocab(t));
    int n_special = 0;
    for (int32_t i = 0; i < 262144; i++) n_special += plume_token_is_special(t, i);
    CHECK(n_special == 23, "%d special tokens, want 23", n_special);
    CHECK(plume_token_is_special(t, 106) && plume_token_is_special(t, 52) &&
              !plume_token_is_special(t, 4) && !plume_token_is_special(t, 138),
          "special flags");
    CHECK(plume_token_find(t, "<bos>") == 2 && plume_token_find(t, "<|turn>") == 105 && plume_token_find(t, "<turn|>") == 106,
          "special ids by text");
}

/* Every case of tokenizer/cases.jsonl, through JSON and binary. */
static void test_real_encode_cases(void) {
    if (!real_ok()) return;
    cJSON **cases = jl_read(data_path("tokenizer/cases.jsonl"));
    int n = 0;
    for (int i = 0; cases && cases[i]; i++, n++) {
        size_t len;
        const char *text = jl_string(cases[i], "text", &len);
        int32_t *want = NULL, nw = jl_ids(cases[i], "ids", &want);
        CHECK(text && nw >= 0, "case %d malformed", i);
        if (text && nw >= 0) {
            check_encode(g_real_json, "json", text, len, want, nw);
            check_encode(g_real_bin, "bin", text, len, want, nw);
        }
        free(want);
    }
    CHECK(n == 245, "%d encode cases, want 245", n);
    jl_free(cases);
}

/* Every case of tokenizer/decode.jsonl (text and text_skip_special), whole and streamed. */
static void test_real_decode_cases(void) {
    if (!real_ok()) return;
    cJSON **cases = jl_read(data_path("tokenizer/decode.jsonl"));
    int n = 0;
    for (int i = 0; cases && cases[i]; i++, n++) {
        size_t l1, l2;
        const char *text = jl_string(cases[i], "text", &l1);
        const char *skip = jl_string(cases[i], "text_skip_special", &l2);
        int32_t *ids = NULL, ni = jl_ids(cases[i], "ids", &ids);
        CHECK(text && skip && ni >= 0, "case %d malformed", i);
        if (text && skip && ni >= 0) {
            const plume_tokenizer *ts[2] = {g_real_json, g_real_bin};
            for (int k = 0; k < 2; k++) {
                check_decode(ts[k], k ? "bin" : "json", ids, ni, 0, text, l1);
                check_decode(ts[k], k ? "bin" : "json", ids, ni, 1, skip, l2);
            }
            for (int s = 0; s < 2; s++) {
                size_t sl = 0;
                char *st = stream_decode(g_real_bin, ids, ni, s, &sl);
                const char *w = s ? skip : text;
                size_t wl = s ? l2 : l1;
                CHECK(st && sl == wl && !memcmp(st, w, wl), "stream decode case %d: '%s' want '%s'",
                      i, st ? st : "(error)", w);
                free(st);
            }
        }
        free(ids);
    }
    CHECK(n == 37, "%d decode cases, want 37", n);
    jl_free(cases);
}

/* Rendered chat prompts tokenize (no auto-BOS) to the golden ids. */
static void test_real_chat_cases(void) {
    if (!real_ok()) return;
    cJSON **cases = jl_read(data_path("chat/cases.jsonl"));
    int n = 0;
    for (int i = 0; cases && cases[i]; i++, n++) {
        size_t len;
        const char *text = jl_string(cases[i], "rendered", &len);
        int32_t *want = NULL, nw = jl_ids(cases[i], "ids", &want);
        CHECK(text && nw > 0 && want[0] == 2, "chat case %d malformed", i);
        if (text && nw >= 0) {
            check_encode(g_real_bin, "chat", text, len, want, nw);
            check_encode(g_real_json, "chat json", text, len, want, nw);
        }
        free(want);
    }
    CHECK(n == 15, "%d chat cases, want 15", n);
    jl_free(cases);
}

/* Whether s[0..n) contains the 3 bytes of U+2581 (memmem is a GNU extension). */
static int has_u2581(const char *s, size_t n) {
    for (size_t i = 0; i + 3 <= n; i++)
        if (!memcmp(s + i, U2581, 3)) return 1;
    return 0;
}

/* decode(encode(text)) == text for every golden text without a literal U+2581; the
 * streaming decoder agrees. */
static void test_real_round_trip(void) {
    if (!real_ok()) return;
    cJSON **cases = jl_read(data_path("tokenizer/cases.jsonl"));
    int n_checked = 0;
    for (int i = 0; cases && cases[i]; i++) {
        size_t len, sl = 0;
        const char *text = jl_string(cases[i], "text", &len);
        if (!text || has_u2581(text, len)) continue;
        int32_t ni;
        int64_t dl;
        int32_t *ids = encode(g_real_bin, text, len, &ni);
        char *d = ids ? decode(g_real_bin, ids, ni, 0, &dl) : NULL;
        char *s = ids ? stream_decode(g_real_bin, ids, ni, 0, &sl) : NULL;
        CHECK(d && dl == (int64_t)len && !memcmp(d, text, len), "round trip of \"%.40s\"", text);
        CHECK(s && sl == len && !memcmp(s, text, len), "stream round trip of \"%.40s\"", text);
        n_checked++;
        free(ids);
        free(d);
        free(s);
    }
    CHECK(n_checked == 243, "%d round trips, want 243", n_checked);
    jl_free(cases);
}

/* Spec worked examples that pin single facts (also in the goldens). */
static void test_real_worked_examples(void) {
    if (!real_ok()) return;
    static const struct { const char *text; int32_t ids[6]; int32_t n; } ex[] = {
        {"Hello world", {9259, 1902}, 2},
        {"  ", {138}, 1},
        {"\n\n\n", {109}, 1},
        {"\r\n", {251, 107}, 2},
        {"<b>x</b>", {200, 236781, 209}, 3},
        {"<bos>", {2}, 1},
        {"\xf3\xb0\x80\x80", {481, 414, 366, 366}, 4},
    };
    for (size_t i = 0; i < sizeof ex / sizeof *ex; i++)
        check_encode(g_real_bin, "example", ex[i].text, strlen(ex[i].text), ex[i].ids, ex[i].n);
    /* 40 newlines: 31 (137) then 9 (115). */
    char nl[41];
    memset(nl, '\n', 40);
    nl[40] = 0;
    int32_t want[] = {137, 115};
    check_encode(g_real_bin, "40 newlines", nl, 40, want, 2);
}

/* ---- the CLI ----------------------------------------------------------------------------- */

/* Run a shell command, returning its stdout (malloc'd) and exit status. */
static char *run_cmd(const char *cmd, int *status) {
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, p)) > 0) fwrite(chunk, 1, r, m);
    fclose(m);
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return buf;
}

/* plume tokenize / detokenize: output, --skip-special, one-line errors. */
static void test_cli(void) {
    char plume[4200], cmd[9000], bin[4200];
    snprintf(plume, sizeof plume, "%s/plume", t_build());
    CHECK(access(plume, X_OK) == 0, "%s not built", plume);
    if (access(plume, X_OK) != 0) return;
    const char *tj = data_path("tiny-a/hf/tokenizer.json");
    snprintf(bin, sizeof bin, "%s/tiny.bin", g_tmp);
    const char *files[2] = {tj, bin};
    for (int k = 0; k < 2; k++) {
        int st;
        snprintf(cmd, sizeof cmd,
                 "printf '%%s\\n' '{\"text\": \"Hello world\"}' '{\"text\": \"a\\u0000b\"}' "
                 "'{\"text\": \"\"}' "
                 "| %s tokenize --tokenizer %s",
                 plume, files[k]);
        char *out = run_cmd(cmd, &st);
        CHECK(st == 0 && out &&
                  !strcmp(out,
                          "{\"ids\": [310, 495, 506, 506, 496, 494, 357, 496, 498, 506, 505]}\n"
                          "{\"ids\": [501, 238, 336]}\n{\"ids\": []}\n"),
              "tokenize (%s): status %d, output '%s'", files[k], st, out);
        free(out);
        snprintf(cmd, sizeof cmd,
                 "printf '%%s\\n' '{\"ids\": [310, 495, 106, 238]}' '{\"ids\": [34, 106, 259]}' | "
                 "%s detokenize --tokenizer %s",
                 plume, files[k]);
        out = run_cmd(cmd, &st);
        CHECK(
            st == 0 && out &&
                !strcmp(
                    out,
                    "{\"text\": \"He<turn|>\\u0000\"}\n{\"text\": \"<unused28><turn|>\\u0015\"}\n"),
            "detokenize: status %d, output '%s'", st, out);
        free(out);
    }
    int st;
    snprintf(cmd, sizeof cmd,
             "echo '{\"ids\": [310, 106, 495]}' | %s detokenize --skip-special --tokenizer %s",
             plume, tj);
    char *out = run_cmd(cmd, &st);
    CHECK(st == 0 && out && !strcmp(out, "{\"text\": \"He\"}\n"), "--skip-special: '%s'", out);
    free(out);
    /* Errors: one line on stderr, non-zero status. */
    static const char *const bad[] = {
        "echo '{\"text\": ' | %s tokenize --tokenizer %s",           /* bad JSON */
        "echo '{\"txt\": \"a\"}' | %s tokenize --tokenizer %s",      /* no text */
        "printf '{\"text\": \"\\377\"}\\n' | %s tokenize --tokenizer %s", /* invalid UTF-8 */
        "echo '{\"ids\": [1, 99999]}' | %s detokenize --tokenizer %s",   /* id out of range */
        "echo '{\"ids\": [1.5]}' | %s detokenize --tokenizer %s",        /* not an integer */
        "echo '' | %s tokenize --bogus %s",                              /* unknown flag */
        "echo '' | %s tokenize --tokenizer %s.missing",                  /* no such file */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(cmd, sizeof cmd, bad[i], plume, tj);
        char full[9100];
        snprintf(full, sizeof full, "(%s) 2>&1 >/dev/null", cmd);
        char *errtext = run_cmd(full, &st);
        size_t lines = 0;
        for (char *c = errtext; c && *c; c++) lines += *c == '\n';
        CHECK(st != 0 && errtext && lines == 1 && !strncmp(errtext, "plume", 5),
              "bad case %zu: status %d, stderr '%s'", i, st, errtext);
        free(errtext);
    }
    snprintf(cmd, sizeof cmd, "%s tokenize --help", plume);
    out = run_cmd(cmd, &st);
    CHECK(st == 0 && out && strstr(out, "usage"), "--help");
    free(out);
}

/* Load the fixtures, run every test, clean up. */
int main(void) {
    g_tmp = t_tmpdir("tokenizer");
    if (!g_tmp) {
        printf("FAIL test_tokenizer: no scratch directory\n");
        return 1;
    }
    open_pair(data_path("tiny-a/hf/tokenizer.json"), "tiny", &g_tiny_json, &g_tiny_bin);
    char *js = mini_json(0, 0), *jp = mini_json(1, 0);
    plume_tokenizer *unused = NULL;
    open_pair(write_tmp("mini_str.json", js, strlen(js)), "mini", &g_mini_str, &g_mini_bin);
    open_pair(write_tmp("mini_pair.json", jp, strlen(jp)), "mini_pair", &g_mini_pair, &unused);
    plume_tokenizer_free(unused);
    free(js);
    free(jp);

    RUN(test_tiny_cases);
    RUN(test_binary_resave);
    RUN(test_invalid_utf8);
    RUN(test_capacity);
    RUN(test_stream_bytes);
    RUN(test_stream_vs_whole);
    RUN(test_mini_rules);
    RUN(test_mini_vs_naive);
    RUN(test_mini_duplicate_merge);
    RUN(test_corrupt_binary);
    RUN(test_bad_json);
    RUN(test_cli);
    RUN_REAL(test_real_vocab_shape);
    RUN_REAL(test_real_encode_cases);
    RUN_REAL(test_real_decode_cases);
    RUN_REAL(test_real_chat_cases);
    RUN_REAL(test_real_round_trip);
    RUN_REAL(test_real_worked_examples);

    plume_tokenizer_free(g_tiny_json);
    plume_tokenizer_free(g_tiny_bin);
    plume_tokenizer_free(g_mini_str);
    plume_tokenizer_free(g_mini_pair);
    plume_tokenizer_free(g_mini_bin);
    plume_tokenizer_free(g_real_json);
    plume_tokenizer_free(g_real_bin);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) printf("  (could not remove %s)\n", g_tmp);
    free(g_tmp);
    return t_total_failed ? 1 : 0;
}
