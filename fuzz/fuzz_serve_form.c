/* fuzz_serve_form.c -- the request parsers of `plume serve` that fuzz_serve_req.c does not
 * reach: POST /v1/audio/transcriptions (tools/serve/serve_transcribe.c: the Content-Type's
 * boundary found in the body, serve_multipart_start; the multipart/form-data split,
 * serve_multipart_parse; the form made into a chat request of one clip, the transcription
 * dialect's parse) and Ollama's POST /api/show body (serve_ollama_show).
 * Input: mode byte | Content-Type header | '\n' | body. Modes (byte % 2): 0 the transcription
 * form (the header is the Content-Type), 1 /api/show (the header is ignored).
 * Invariants: every field the splitter returns lies inside the body, in order, with its name
 * and filename NUL-terminated, and never more fields than asked; a form that starts is placed
 * at a "--BOUNDARY" CRLF line of the body; a refused body is a 4xx (never a 500: nothing here
 * runs out of memory) whose error JSON has a non-empty message; an accepted form is a chat
 * request of one user turn holding exactly one audio clip, the bytes of the form's 'file'
 * field; /api/show answers a JSON object or refuses. */
#include "fuzz.h"

#include "fuzz_serve.h"
#include "serve/serve.h"

/* Nothing to open: the parsers need no model. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return 0;
}

/* The splitter's promises on body [len]: fields inside it, in order, names terminated. */
static void check_split(const char *body, size_t len) {
    enum { CAP = 8 };
    serve_form_field f[CAP];
    int n = serve_multipart_parse(body, len, f, CAP);
    if (n < -2 || n > CAP) abort();
    const char *at = body;
    for (int i = 0; i < n; i++) {
        if (f[i].data < at || f[i].len > len || f[i].data + f[i].len > body + len) abort();
        if (!memchr(f[i].name, 0, sizeof f[i].name) || !memchr(f[i].filename, 0, sizeof f[i].filename)) abort();
        at = f[i].data + f[i].len;
    }
}

/* The transcription endpoint: the boundary found, the form parsed into a request. */
static void transcription(const char *ct, const char *body, size_t len) {
    check_split(body, len);
    serve_error e = {0};
    size_t off = 0;
    int rc = serve_multipart_start(ct, body, len, &off, &e);
    if (rc) {
        check_error(rc, &e, &serve_transcription);
        return;
    }
    if (off + 2 > len || body[off] != '-' || body[off + 1] != '-' || (off && body[off - 1] != '\n')) abort();
    /* exactly the form's bytes from the boundary on: an overread is seen */
    size_t n = len - off;
    char *copy = malloc(n ? n : 1);
    if (!copy) abort();
    memcpy(copy, body + off, n);
    serve_request r;
    rc = serve_request_parse(&r, &serve_transcription, copy, n, &e);
    if (rc) {
        check_error(rc, &e, &serve_transcription);
    } else {
        const serve_media *md = r.media;
        if (r.kind != SERVE_CHAT || r.n_msgs != 1 || !md || !md->transcribe || md->n != 1) abort();
        const serve_medium *it = &md->items[0];
        if (it->kind != PLUME_CHAT_PART_AUDIO || !it->bytes || !it->len || it->len > n) abort();
        if (r.sp.temperature < 0.0f || r.sp.temperature > 2.0f) abort();
        serve_request_free(&r);
    }
    fuzz_note(rc ? e.message : NULL);
    free(copy);
}

/* Ollama's /api/show: a JSON object naming the model, answered with the model's details. */
static void show(const char *body, size_t len) {
    static const serve_info m = {.model = "fuzz", .weights = "q8", .n_ctx = 512, .n_vocab = 262144, .n_layers = 2,
                                 .n_slots = 1, .bytes = 1 << 20, .modified = 1700000000, .digest = "0"};
    char *copy = malloc(len ? len : 1);
    if (!copy) abort();
    memcpy(copy, body, len);
    serve_error e = {0};
    char *out = serve_ollama_show(&m, copy, len, &e);
    if (!out) {
        check_error(e.status, &e, &serve_ollama_chat);
    } else {
        cJSON *root = cJSON_Parse(out);
        if (!cJSON_IsObject(root)) abort();
        cJSON_Delete(root);
    }
    fuzz_note(out ? NULL : e.message);
    free(out);
    free(copy);
}

/* Split the input into the mode, the header and the body; run the mode's parser. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0] % 2;
    const char *rest = (const char *)data + 1;
    size_t rlen = size - 1;
    const char *nl = memchr(rest, '\n', rlen);
    size_t hlen = nl ? (size_t)(nl - rest) : rlen;
    char ct[512];
    snprintf(ct, sizeof ct, "%.*s", (int)(hlen < sizeof ct ? hlen : sizeof ct - 1), rest);
    const char *body = nl ? nl + 1 : rest + rlen;
    size_t blen = nl ? rlen - hlen - 1 : 0;
    if (mode == 0) transcription(ct, body, blen);
    else show(body, blen);
    return 0;
}
