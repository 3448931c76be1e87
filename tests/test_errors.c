/* test_errors.c -- bad input gets one clear line naming the file and the problem, a non-zero
 * exit, no crash and no half-written output. One test per case, through the CLI. */
#include <sys/stat.h>
#include <unistd.h>

#include "t.h"

static char *tmp;
static char good[600]; /* a converted f32 bundle of tiny-a */

/* Copy the tiny-a checkpoint into dir (so a test can break it). */
static void copy_ckpt(const char *dir) {
    char out[1024];
    t_sh(out, sizeof out, "rm -rf '%s' && cp -r '%s/tiny-a/hf' '%s' && chmod -R u+w '%s'", dir, t_data(), dir, dir);
}

/* Run convert on a checkpoint; expect failure, a message containing want, no output dir. */
static void expect_convert_fails(const char *ckpt, const char *want, const char *label) {
    char out[8192], dst[700];
    snprintf(dst, sizeof dst, "%s/out-%s", tmp, label);
    int st = t_sh(out, sizeof out, "%s/plume convert '%s' '%s' --weights f32 --quiet", t_build(), ckpt, dst);
    CHECK(st > 0, "%s: exit status %d (want a clean non-zero exit): %s", label, st, out);
    CHECK(strstr(out, want) != NULL, "%s: message lacks '%s': %s", label, want, out);
    CHECK(strncmp(out, "plume: ", 7) == 0 && strchr(out, '\n') == out + strlen(out) - 1, "%s: not one line: %s", label, out);
    CHECK(access(dst, F_OK) != 0, "%s: a half bundle was left at %s", label, dst);
    char tmpdir[800];
    snprintf(tmpdir, sizeof tmpdir, "%s.tmp-", dst);
    char ls[4096];
    t_sh(ls, sizeof ls, "ls -d '%s'* 2>/dev/null | wc -l", tmpdir);
    CHECK(atoi(ls) == 0, "%s: a temporary directory was left behind", label);
}

/* Truncate a file to n bytes. */
static void truncate_to(const char *path, long n) { CHECK(truncate(path, n) == 0, "truncate %s", path); }

static void test_truncated_safetensors(void) {
    char d[600], f[700];
    snprintf(d, sizeof d, "%s/trunc", tmp);
    copy_ckpt(d);
    snprintf(f, sizeof f, "%s/model-00002-of-00002.safetensors", d);
    truncate_to(f, 300000);
    expect_convert_fails(d, "model-00002-of-00002.safetensors", "truncated");
    expect_convert_fails(d, "past the end", "truncated2");
    truncate_to(f, 5);
    expect_convert_fails(d, "shorter than 8 bytes", "truncated-tiny");
}

static void test_header_offsets_lie(void) {
    char d[600], f[700], out[1024];
    snprintf(d, sizeof d, "%s/lie", tmp);
    copy_ckpt(d);
    snprintf(f, sizeof f, "%s/model-00001-of-00002.safetensors", d);
    /* data_offsets [0, 65536] of embed_tokens -> [0, 65538]: the span no longer fits the shape */
    t_sh(out, sizeof out, "sed -i 's/\"data_offsets\":\\[0,65536\\]/\"data_offsets\":[0,65538]/' '%s'", f);
    expect_convert_fails(d, "data_offsets", "offsets");
    /* a header length larger than the file */
    copy_ckpt(d);
    t_sh(out, sizeof out, "printf '\\377\\377\\377\\377' | dd of='%s' bs=1 seek=0 conv=notrunc 2>/dev/null", f);
    expect_convert_fails(d, "header length", "hlen");
}

static void test_corrupt_header_json(void) {
    char d[600], f[700], out[1024];
    snprintf(d, sizeof d, "%s/json", tmp);
    copy_ckpt(d);
    snprintf(f, sizeof f, "%s/model-00001-of-00002.safetensors", d);
    t_sh(out, sizeof out, "printf '@@' | dd of='%s' bs=1 seek=8 conv=notrunc 2>/dev/null", f);
    expect_convert_fails(d, "not a JSON object", "hdrjson");
}

static void test_shape_disagrees_with_config(void) {
    char d[600], f[700], out[1024];
    snprintf(d, sizeof d, "%s/shape", tmp);
    copy_ckpt(d);
    snprintf(f, sizeof f, "%s/config.json", d);
    t_sh(out, sizeof out, "sed -i 's/\"intermediate_size\": 128/\"intermediate_size\": 96/' '%s'", f);
    expect_convert_fails(d, "mlp.gate_proj.weight has shape [128, 64], config says [96, 64]", "shape");
}

static void test_missing_tensor(void) {
    char d[600], f[700], out[1024];
    snprintf(d, sizeof d, "%s/missing", tmp);
    copy_ckpt(d);
    snprintf(f, sizeof f, "%s/model-00001-of-00002.safetensors", d);
    /* rename a tensor in the header (same length keeps offsets valid) */
    t_sh(out, sizeof out, "sed -i 's/layers.0.self_attn.q_norm.weight/layers.0.self_attn.X_norm.weight/' '%s'", f);
    expect_convert_fails(d, "missing tensor model.language_model.layers.0.self_attn.q_norm.weight", "missing");
}

static void test_invalid_config_json(void) {
    char d[600], f[700], out[1024];
    snprintf(d, sizeof d, "%s/cfg", tmp);
    copy_ckpt(d);
    snprintf(f, sizeof f, "%s/config.json", d);
    t_sh(out, sizeof out, "printf '{\"text_config\": {\"hidden_size\": 64,' > '%s'", f);
    expect_convert_fails(d, "invalid JSON", "cfgjson");
    t_sh(out, sizeof out, "printf '{\"text_config\": {\"hidden_size\": 64}}' > '%s'", f);
    expect_convert_fails(d, "missing key text_config.num_hidden_layers", "cfgkey");
}

static void test_wrong_dtype(void) {
    char d[600], f[700], out[1024];
    snprintf(d, sizeof d, "%s/dtype", tmp);
    copy_ckpt(d);
    snprintf(f, sizeof f, "%s/model-00002-of-00002.safetensors", d);
    /* BF16 -> I16 is unknown; BF16 -> F16 keeps sizes but is fine; use an unknown dtype */
    t_sh(out, sizeof out, "sed -i '0,/\"BF16\"/s//\"XX16\"/' '%s'", f);
    expect_convert_fails(d, "unknown dtype XX16", "dtype");
}

/* Run plume logits on a bundle; expect failure mentioning want. */
static void expect_logits_fails(const char *b, const char *ids, const char *want, const char *label) {
    char out[8192];
    int st = t_sh(out, sizeof out, "%s/plume logits -m '%s' --ids %s -o %s/x-%s.npy", t_build(), b, ids, tmp, label);
    CHECK(st > 0, "%s: exit status %d: %s", label, st, out);
    CHECK(strstr(out, want) != NULL, "%s: message lacks '%s': %s", label, want, out);
    CHECK(strncmp(out, "plume: ", 7) == 0 && strchr(out, '\n') == out + strlen(out) - 1, "%s: not one line: %s", label, out);
    char p[800];
    snprintf(p, sizeof p, "%s/x-%s.npy", tmp, label);
    CHECK(access(p, F_OK) != 0, "%s: output written anyway", label);
}

/* Copy the good bundle (to break it). */
static void copy_bundle(const char *dst) {
    char out[1024];
    t_sh(out, sizeof out, "rm -rf '%s' && cp -r '%s' '%s'", dst, good, dst);
}

static void test_bundle_missing_file(void) {
    char b[600], out[1024];
    snprintf(b, sizeof b, "%s/b-missing", tmp);
    copy_bundle(b);
    t_sh(out, sizeof out, "rm '%s/embed_tokens_per_layer_scales.bin'", b);
    expect_logits_fails(b, "2,3", "embed_tokens_per_layer_scales.bin: cannot open", "bmissing");
    copy_bundle(b);
    t_sh(out, sizeof out, "rm '%s/chunk_2.safetensors'", b);
    expect_logits_fails(b, "2,3", "chunk_2.safetensors: cannot open", "bmissing2");
}

static void test_bundle_truncated_sidecar_and_chunk(void) {
    char b[600], f[700];
    snprintf(b, sizeof b, "%s/b-trunc", tmp);
    copy_bundle(b);
    snprintf(f, sizeof f, "%s/embed_tokens_q8.bin", b);
    truncate_to(f, 1000);
    expect_logits_fails(b, "2,3", "embed_tokens_q8.bin: 1000 bytes, expected 32768", "btrunc");
    copy_bundle(b);
    snprintf(f, sizeof f, "%s/chunk_3.safetensors", b);
    truncate_to(f, 4096);
    expect_logits_fails(b, "2,3", "chunk_3.safetensors", "btrunc2");
}

static void test_bundle_bad_model_config(void) {
    char b[600], out[1024];
    snprintf(b, sizeof b, "%s/b-cfg", tmp);
    copy_bundle(b);
    t_sh(out, sizeof out, "printf '{\"hidden_size\": [' > '%s/model_config.json'", b);
    expect_logits_fails(b, "2,3", "model_config.json: invalid JSON", "bcfg");
    copy_bundle(b);
    t_sh(out, sizeof out, "sed -i '/\"sliding_window\"/d' '%s/model_config.json'", b);
    expect_logits_fails(b, "2,3", "missing key sliding_window", "bcfg2");
}

static void test_ids_outside_vocab(void) {
    expect_logits_fails(good, "2,512", "token id 512 (at 1) is outside the vocabulary [0, 512)", "vocab");
    expect_logits_fails(good, "2,-1", "token id -1", "vocab2");
    expect_logits_fails(good, "2,x", "--ids wants comma-separated integers", "vocab3");
    /* one list rule for every list flag (cli_int_list): no empty item, none past int32 */
    expect_logits_fails(good, "2,3,", "--ids wants comma-separated integers", "list1");
    expect_logits_fails(good, ",2", "--ids wants comma-separated integers", "list2");
    expect_logits_fails(good, "2,,3", "--ids wants comma-separated integers", "list3");
    expect_logits_fails(good, "2,4294967298", "--ids wants comma-separated integers", "list4");
    static const char *const bad_lists[] = {"1,,2", "1,2,", ",", "1,2,3,4,5,6,7,8,9", "0", "65"};
    for (size_t i = 0; i < sizeof bad_lists / sizeof *bad_lists; i++) {
        char out[4096];
        int st = t_sh(out, sizeof out, "%s/plume bench -m '%s' -p 4 -n 2 -r 1 --batch %s", t_build(), good, bad_lists[i]);
        CHECK(st > 0 && strstr(out, "--batch wants up to 8 comma-separated counts in 1..64"), "--batch %s: %d %s",
              bad_lists[i], st, out);
    }
}

static void test_prompt_longer_than_context(void) {
    char ids[4096] = "2";
    for (int i = 0; i < 40; i++) strcat(ids, ",5");
    char out[8192];
    int st = t_sh(out, sizeof out, "%s/plume logits -m '%s' --ids %s --context 16 -o %s/ctx.npy", t_build(), good, ids, tmp);
    CHECK(st > 0 && strstr(out, "do not fit"), "context overflow: %d %s", st, out);
}

static void test_unknown_flags(void) {
    char out[8192];
    int st = t_sh(out, sizeof out, "%s/plume logits --bogus", t_build());
    CHECK(st > 0 && strstr(out, "unknown option '--bogus'"), "logits: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume convert a b --weights q7", t_build());
    CHECK(st > 0 && strstr(out, "--weights must be"), "convert weights: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume nosuchcommand", t_build());
    CHECK(st > 0 && strstr(out, "unknown command"), "command: %d %s", st, out);
    st = t_sh(out, sizeof out, "%s/plume synth --config tiny --seed -4 --hf x", t_build());
    CHECK(st > 0 && strstr(out, "--seed"), "synth seed: %d %s", st, out);
}

static void test_convert_refuses_existing_output(void) {
    char out[8192];
    int st = t_sh(out, sizeof out, "%s/plume convert %s/tiny-a/hf '%s' --quiet", t_build(), t_data(), good);
    CHECK(st > 0 && strstr(out, "already exists"), "%d %s", st, out);
}

/* plume verify: a converted bundle matches its manifest; a flipped byte in a weight file, a
 * missing file, an unlisted file and a missing manifest are each named in the error. */
static void test_verify(void) {
    char b[600], out[8192];
    int st = t_sh(out, sizeof out, "%s/plume verify '%s'", t_build(), good);
    CHECK(st == 0 && strstr(out, "every file matches"), "clean bundle: %d %s", st, out);
    st = t_sh(out, sizeof out, "cd '%s' && sha256sum --quiet -c manifest.sha256", good);
    CHECK(st == 0, "sha256sum -c disagrees with the manifest: %s", out);
    snprintf(b, sizeof b, "%s/b-verify", tmp);
    copy_bundle(b);
    t_sh(out, sizeof out, "printf '\\001' | dd of='%s/embed_tokens_per_layer_q8.bin' bs=1 seek=777 conv=notrunc 2>/dev/null", b);
    st = t_sh(out, sizeof out, "%s/plume verify '%s' --quiet", t_build(), b);
    CHECK(st == 1 && strstr(out, "embed_tokens_per_layer_q8.bin: sha256 mismatch") && !strstr(out, "chunk_1"),
          "flipped byte: %d %s", st, out);
    copy_bundle(b);
    t_sh(out, sizeof out, "rm '%s/chunk_3.safetensors' && touch '%s/extra.bin'", b, b);
    st = t_sh(out, sizeof out, "%s/plume verify '%s' --quiet", t_build(), b);
    CHECK(st == 1 && strstr(out, "chunk_3.safetensors: cannot open") && strstr(out, "extra.bin: not in the manifest"),
          "missing and extra files: %d %s", st, out);
    t_sh(out, sizeof out, "rm '%s/manifest.sha256'", b);
    st = t_sh(out, sizeof out, "%s/plume verify '%s'", t_build(), b);
    CHECK(st == 1 && strstr(out, "no manifest.sha256"), "no manifest: %d %s", st, out);
}

int main(void) {
    tmp = t_tmpdir("errors");
    snprintf(good, sizeof good, "%s/good", tmp);
    char out[4096];
    if (t_sh(out, sizeof out, "%s/plume convert %s/tiny-a/hf %s --weights f32 --quiet", t_build(), t_data(), good))
        printf("  setup: %s\n", out);
    RUN(test_truncated_safetensors);
    RUN(test_header_offsets_lie);
    RUN(test_corrupt_header_json);
    RUN(test_shape_disagrees_with_config);
    RUN(test_missing_tensor);
    RUN(test_invalid_config_json);
    RUN(test_wrong_dtype);
    RUN(test_bundle_missing_file);
    RUN(test_bundle_truncated_sidecar_and_chunk);
    RUN(test_bundle_bad_model_config);
    RUN(test_ids_outside_vocab);
    RUN(test_prompt_longer_than_context);
    RUN(test_unknown_flags);
    RUN(test_convert_refuses_existing_output);
    RUN(test_verify);
    t_sh(out, sizeof out, "rm -rf '%s'", tmp);
    free(tmp);
    return t_total_failed != 0;
}
