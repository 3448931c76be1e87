/* test_parsers.c -- the defects found by fuzzing and reading the parsers (issue 11), each with
 * the input that showed it, and the resource bounds: no file makes plume allocate without
 * limit or loop for long. Every case must end in a clear error (or a clean success), and the
 * suite runs it under ASan + UBSan (float-cast-overflow included), which is what catches the
 * out-of-bounds reads and undefined casts these inputs used to cause. */
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "npy.h"
#include "safetensors.h"
#include "t.h"

static char *tmp;

/* Write bytes to tmp/name; the path (static buffer). */
static const char *write_tmp(const char *name, const void *data, size_t len) {
    static char path[700];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
    return path;
}

/* A safetensors file: the u64 header length, the header, then data_bytes zero bytes. */
static const char *write_st(const char *name, const char *header, size_t data_bytes) {
    size_t hl = strlen(header), n = 8 + hl + data_bytes;
    uint8_t *b = calloc(1, n);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    const char *p = write_tmp(name, b, n);
    free(b);
    return p;
}

/* Expect st_open to fail with a message containing want. */
static void expect_st_fails(const char *path, const char *want, const char *what) {
    st_file f;
    char *err = NULL;
    int rc = st_open(&f, path, &err);
    CHECK(rc == PLUME_EFORMAT, "%s: rc %d (%s)", what, rc, err ? err : "");
    CHECK(err && strstr(err, want) && strstr(err, path), "%s: message '%s' lacks '%s'", what, err ? err : "", want);
    if (!rc) st_close(&f);
    free(err);
}

/* ---- defects ----------------------------------------------------------------------------- */

/* Defect 2: two "__metadata__" keys (cJSON keeps both) made st_open write past its metadata
 * array; a tensor named twice is refused the same way. */
static void test_safetensors_duplicate_keys(void) {
    expect_st_fails(write_st("meta2.st", "{\"__metadata__\":{\"a\":\"b\"},\"__metadata__\":{\"c\":\"d\",\"e\":\"f\"}}", 0),
                    "\"__metadata__\" twice", "two __metadata__");
    expect_st_fails(write_st("name2.st",
                             "{\"t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
                             "\"t\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[2,4]}}", 4),
                    "\"t\" twice", "tensor named twice");
    expect_st_fails(write_st("metakey2.st", "{\"__metadata__\":{\"a\":\"b\",\"a\":\"c\"}}", 0), "\"a\" twice",
                    "metadata key twice");
    /* the same file with one of each opens */
    st_file f;
    char *err = NULL;
    const char *ok = write_st("ok.st", "{\"__metadata__\":{\"a\":\"b\"},\"t\":{\"dtype\":\"U8\",\"shape\":[2],"
                                       "\"data_offsets\":[0,2]}}", 2);
    CHECK(st_open(&f, ok, &err) == 0 && f.n == 1 && f.n_meta == 1 && !strcmp(st_meta(&f, "a"), "b"), "good file: %s",
          err ? err : "");
    st_close(&f);
    free(err);
}

/* Defect 4: a header that ends right after 'shape': made npy_parse read one byte past it
 * (the buffer is exactly the file, so ASan sees the read). */
static void test_npy_header_ends_after_key(void) {
    static const char *const dicts[] = {
        "{'descr': '<f4', 'fortran_order': False, 'shape':",
        "{'descr': '<f4', 'fortran_order': False, 'shape': ",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (",
        "{'fortran_order': False, 'shape': (2,), 'descr':",
        "{'shape': (2,), 'descr': '<f4', 'fortran_order':",
    };
    for (size_t i = 0; i < sizeof dicts / sizeof *dicts; i++) {
        size_t hl = strlen(dicts[i]);
        uint8_t *b = malloc(10 + hl);
        memcpy(b, "\x93NUMPY\x01\x00", 8);
        b[8] = (uint8_t)hl;
        b[9] = 0;
        memcpy(b + 10, dicts[i], hl);
        npy_view v;
        char *err = NULL;
        int rc = npy_parse(b, 10 + hl, "cut.npy", &v, &err);
        CHECK(rc == PLUME_EFORMAT && err && strstr(err, "cut.npy"), "header %zu: rc %d %s", i, rc, err ? err : "");
        free(err);
        free(b);
    }
}

/* The tiny-a config.json with one substitution applied (malloc'd), or NULL. */
static char *tiny_config_with(const char *from, const char *to) {
    char path[600], *text = NULL, *err = NULL;
    snprintf(path, sizeof path, "%s/tiny-a/hf/config.json", t_data());
    if (plume_read_file(path, &text, NULL, &err)) { free(err); return NULL; }
    char *at = strstr(text, from);
    if (!at) { free(text); return NULL; }
    char *r = malloc(strlen(text) + strlen(to) + 1);
    memcpy(r, text, (size_t)(at - text));
    strcpy(r + (at - text), to);
    strcat(r, at + strlen(from));
    free(text);
    return r;
}

/* Defect 5: eos_token_id 1e10 was cast to int32 unchecked (undefined; UBSan's
 * float-cast-overflow reports it). Now any eos id outside [0, vocab_size) is an error. */
static void test_config_eos_out_of_range(void) {
    static const char *const bad[] = {"[1e10, 106]", "[1, -3]", "[1.5]", "1e300", "[1, 512]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *js = tiny_config_with("[\n    1,\n    106\n  ]", bad[i]);
        CHECK(js != NULL, "tiny-a config.json lacks the eos list");
        if (!js) return;
        plume_config c;
        char *err = NULL;
        int rc = plume_config_from_hf_text(&c, js, "cfg.json", &err);
        CHECK(rc == PLUME_EFORMAT && err && strstr(err, "eos token id"), "eos %s: rc %d %s", bad[i], rc, err ? err : "");
        free(err);
        free(js);
    }
    char *js = tiny_config_with("\"num_global_key_value_heads\": null", "\"num_global_key_value_heads\": 1e10");
    if (js) { /* the same cast elsewhere: a compared double, never cast */
        plume_config c;
        char *err = NULL;
        CHECK(plume_config_from_hf_text(&c, js, "cfg.json", &err) == PLUME_EFORMAT, "num_global_key_value_heads 1e10");
        free(err);
        free(js);
    }
    js = tiny_config_with("[\n    1,\n    106\n  ]", "[1, 106]");
    plume_config c;
    char *err = NULL;
    CHECK(js && plume_config_from_hf_text(&c, js, "cfg.json", &err) == 0 && c.n_eos == 2 && c.eos_ids[1] == 106,
          "good eos list: %s", err ? err : "");
    free(err);
    free(js);
}

/* ---- resource bounds ---------------------------------------------------------------------- */

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define BOUND_SECONDS 20 /* CPU seconds a bounded case may use: each needs milliseconds */
#define BOUND_BYTES (512ull << 20) /* address space (not under ASan, which reserves terabytes) */

/* Run fn in a child limited to BOUND_SECONDS of CPU and BOUND_BYTES of address space: an
 * input that made plume allocate without limit or loop gets the child killed (SIGXCPU) or
 * its allocation refused, and fails the test. fn returns the number of failed checks. */
static void bounded(const char *what, int (*fn)(void)) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit cpu = {BOUND_SECONDS, BOUND_SECONDS}, as = {BOUND_BYTES, BOUND_BYTES};
        setrlimit(RLIMIT_CPU, &cpu);
        if (!UNDER_ASAN) setrlimit(RLIMIT_AS, &as);
        int bad = fn();
        fflush(stdout);
        _exit(bad ? 1 : 0);
    }
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "%s: fork", what);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the child %s %d", what, WIFEXITED(st) ? "failed, status" : "was killed by signal",
          WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
}

/* A safetensors header declaring 2^40 elements: refused from the header, nothing allocated. */
static int huge_tensor(void) {
    int before = t_failed_now;
    expect_st_fails(write_st("huge.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1048576,1048576],"
                                        "\"data_offsets\":[0,4398046511104]}}", 16), "past the end", "2^40 elements");
    expect_st_fails(write_st("huge2.st", "{\"t\":{\"dtype\":\"F32\",\"shape\":[1048576,1048576],"
                                         "\"data_offsets\":[0,16]}}", 16), "span", "2^40 elements, 16 bytes");
    expect_st_fails(write_st("huge3.st", "{\"t\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,4294967296],"
                                         "\"data_offsets\":[0,16]}}", 16), "too large", "2^96 elements");
    /* a header length of 2^63 and one just under the 100 MB limit, in a 100-byte file */
    uint8_t b[100] = {0};
    b[7] = 0x80;
    expect_st_fails(write_tmp("hlen.st", b, sizeof b), "header length", "header length 2^63");
    b[7] = 0, b[3] = 0x06; /* 100 MB */
    expect_st_fails(write_tmp("hlen2.st", b, sizeof b), "header length", "header length 100 MB");
    return t_failed_now - before;
}

static void test_bound_safetensors_2p40(void) { bounded("2^40-element header", huge_tensor); }

/* A .npy shape of 2^40 elements in a small file: refused before anything is sized from it. */
static int huge_npy(void) {
    static const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }";
    uint8_t b[10 + sizeof dict + 16] = "\x93NUMPY\x01\x00";
    b[8] = (uint8_t)(sizeof dict - 1);
    memcpy(b + 10, dict, sizeof dict - 1);
    npy_view v;
    char *err = NULL;
    int rc = npy_parse(b, 10 + sizeof dict - 1 + 16, "huge.npy", &v, &err);
    int bad = !(rc == PLUME_EFORMAT && err && strstr(err, "truncated"));
    if (bad) printf("  huge.npy: rc %d %s\n", rc, err ? err : "");
    free(err);
    return bad;
}

static void test_bound_npy_2p40(void) { bounded("2^40-element .npy", huge_npy); }

/* tokenizer.json files with absurd sizes: an id near the 2^28 limit among few entries, ids
 * past it, and a huge merge count claimed by nothing. Each is refused from what the file
 * holds; memory stays proportional to the file. */
static int absurd_tokenizer(void) {
    static const char *const files[] = {
        "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}, "
        "\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"a\": 268435455}, \"merges\": []}}",
        "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}, "
        "\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"a\": 0}, \"merges\": []}, "
        "\"added_tokens\": [{\"id\": 268435000, \"content\": \"<x>\"}]}",
        "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}, "
        "\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"a\": 1e300}, \"merges\": []}}",
        "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}, "
        "\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"a\": 4294967296}, \"merges\": []}}",
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        plume_tokenizer *t = NULL;
        char *err = NULL;
        int rc = plume_tokenizer_open_json(&t, write_tmp("absurd.json", files[i], strlen(files[i])), &err);
        if (rc != PLUME_EFORMAT || !err) bad++, printf("  absurd tokenizer %zu: rc %d %s\n", i, rc, err ? err : "");
        plume_tokenizer_free(t);
        free(err);
    }
    return bad;
}

static void test_bound_tokenizer_json(void) { bounded("absurd tokenizer.json", absurd_tokenizer); }

/* A config.json whose sizes are the largest accepted (L 128, D 65536, V 2^24, I 2^20):
 * convert refuses it from the checkpoint's shapes, within the bounds, before writing any
 * tensor. */
static void test_bound_convert_absurd_config(void) {
    char d[600], out[8192];
    snprintf(d, sizeof d, "%s/absurd", tmp);
    t_sh(out, sizeof out, "rm -rf '%s' && cp -r '%s/tiny-a/hf' '%s' && chmod -R u+w '%s' && sed -i "
                          "-e 's/\"hidden_size\": 64/\"hidden_size\": 65536/' "
                          "-e 's/\"vocab_size\": 512/\"vocab_size\": 16777216/' "
                          "-e 's/\"vocab_size_per_layer_input\": 512/\"vocab_size_per_layer_input\": 16777216/' "
                          "-e 's/\"intermediate_size\": 128/\"intermediate_size\": 1048576/' '%s/config.json'",
          d, t_data(), d, d, d);
    int st = t_sh(out, sizeof out, "%s ulimit -t %d; %s/plume convert '%s' '%s/absurd-out' --weights q8 --quiet",
                  UNDER_ASAN ? "" : "ulimit -v 1048576;", BOUND_SECONDS, t_build(), d, tmp);
    CHECK(st > 0 && strstr(out, "plume: ") && strstr(out, "config says"), "convert: status %d: %s", st, out);
}

int main(void) {
    tmp = t_tmpdir("parsers");
    RUN(test_safetensors_duplicate_keys);
    RUN(test_npy_header_ends_after_key);
    RUN(test_config_eos_out_of_range);
    RUN(test_bound_safetensors_2p40);
    RUN(test_bound_npy_2p40);
    RUN(test_bound_tokenizer_json);
    RUN(test_bound_convert_absurd_config);
    char out[1024];
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
