/* fuzz_serve_req.c -- the bytes side of `plume serve` (tools/serve/: serve_request.c, the
 * OpenAI dialect serve_openai.c, serve_answer.c): a
 * request body of /v1/chat/completions, /v1/completions, /tokenize or /detokenize through its
 * parser; an accepted chat request rendered to its prompt and tokenized with the tiny
 * tokenizer ($PLUME_FUZZ_TOKENIZER); then, for a generation request, "generated" text fed to
 * the answer writer in small pieces (chat parser, stop strings, logprobs) and the reply
 * checked. Input: mode byte | body | 0xFF | piece-size byte | generated text. 0xFF cannot
 * occur in the UTF-8 a body must be, so the first one ends the body.
 * Invariants: a refused body is a 4xx (never a 500: nothing here runs out of memory) with
 * an OpenAI error JSON whose message is not empty; an accepted request is within the bounds
 * the parser promises; a rendered prompt starts with <bos> and tokenizes; the reply is JSON
 * (one object, or server-sent events of objects ending in [DONE]) and its content holds no
 * complete stop string. The body's bytes are also read as a request head by the server's door
 * (serve_head_parse). */
#include "fuzz.h"

#include <math.h>

#include "serve/serve.h"

static plume_tokenizer *tok;

/* Open the tokenizer once. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = fuzz_fixture("PLUME_FUZZ_TOKENIZER");
    char *err = NULL;
    if (plume_tokenizer_open(&tok, path, &err)) {
        fprintf(stderr, "fuzz: %s\n", err ? err : path);
        exit(2);
    }
    return 0;
}

/* A refusal must be a 4xx whose body is {"error": {"message": non-empty, "type": string, ...}}. */
static void check_error(int rc, const serve_error *e) {
    if (rc < 400 || rc > 499 || e->status != rc || !*e->message) abort();
    char *body = serve_openai_chat.error(e);
    cJSON *root = cJSON_Parse(body);
    free(body);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(err, "message");
    if (!cJSON_IsString(msg) || !*msg->valuestring || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(err, "type")) ||
        !cJSON_GetObjectItemCaseSensitive(err, "param") || !cJSON_GetObjectItemCaseSensitive(err, "code"))
        abort();
    cJSON_Delete(root);
}

/* What the parser promises of an accepted request. */
static void check_request(const serve_request *r, serve_kind kind) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    if (r->kind != kind) abort();
    if (kind == SERVE_CHAT) {
        if (r->n_msgs < 1 || r->n_msgs > SERVE_MAX_MESSAGES || !r->msgs || !r->tool_choice || r->prompt) abort();
        for (int32_t i = 0; i < r->n_msgs; i++) {
            const serve_message *m = &r->msgs[i];
            int known = 0;
            for (int k = 0; m->role && k < 5; k++) known |= !strcmp(m->role, roles[k]);
            if (!known || (m->content && m->parts) || m->n_parts < 0 || (m->n_parts && !m->parts)) abort();
            if (!m->content && !m->parts && !(m->n_calls && !strcmp(m->role, "assistant"))) abort();
            for (int32_t c = 0; c < m->n_calls; c++)
                if (!m->calls || !m->calls[c].name) abort();
            for (int32_t p = 0; p < m->n_parts; p++)
                if (!m->parts[p]) abort();
        }
        if (r->top_logprobs < 0 || r->top_logprobs > SERVE_MAX_TOP_LOGPROBS || (r->top_logprobs && !r->logprobs)) abort();
    } else if (!r->prompt || r->msgs || r->logprobs) {
        abort();
    }
    if (r->n_stops < 0 || r->n_stops > SERVE_MAX_STOPS) abort();
    for (int32_t i = 0; i < r->n_stops; i++)
        if (!r->stops[i] || !*r->stops[i] || strlen(r->stops[i]) > SERVE_MAX_STOP_LEN) abort();
    if (!(r->max_tokens == -1 || (r->max_tokens >= 1 && r->max_tokens <= 1 << 24))) abort();
    const plume_sampler_params *p = &r->sp;
    if (!(p->temperature >= 0 && p->temperature <= 2) || !(p->top_p >= 0 && p->top_p <= 1) || p->top_k < 0 ||
        !(p->min_p >= 0 && p->min_p <= 1) || !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty) ||
        !(p->repeat_penalty > 0))
        abort();
}

/* Tokenize text as the server does (no BOS added); valid UTF-8 must tokenize. The count. */
static int32_t tokenize(const char *text) {
    size_t len = strlen(text);
    int32_t cap = (int32_t)(len + 16);
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) abort();
    int32_t n = plume_tokenize(tok, text, len, ids, cap);
    if (n < 0 || n > cap) abort();
    free(ids);
    return n;
}

/* Append the content strings of a reply object (chat message or delta content, completion
 * text) to *acc. */
static void gather_content(const cJSON *reply, int stream, char **acc, size_t *len) {
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(reply, "choices")) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, stream ? "delta" : "message");
        const cJSON *s = m ? cJSON_GetObjectItemCaseSensitive(m, "content") : cJSON_GetObjectItemCaseSensitive(c, "text");
        if (!cJSON_IsString(s)) continue;
        size_t n = strlen(s->valuestring);
        char *nb = realloc(*acc, *len + n + 1);
        if (!nb) abort();
        memcpy(nb + *len, s->valuestring, n + 1);
        *acc = nb;
        *len += n;
    }
}

/* The reply of a finished job: one JSON object, or "data: {json}\n\n" events ending with
 * "data: [DONE]\n\n"; its content must hold no complete stop string. */
static void check_reply(const serve_job *j) {
    if (!j->done || !j->out.p) abort();
    const char *out = j->out.p;
    size_t out_len = j->out.len;
    char *acc = NULL;
    size_t len = 0;
    if (!j->req.stream) {
        cJSON *root = cJSON_ParseWithLength(out, out_len);
        if (!cJSON_IsObject(root) || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(root, "choices"))) abort();
        gather_content(root, 0, &acc, &len);
        cJSON_Delete(root);
    } else {
        static const char done[] = "data: [DONE]\n\n";
        size_t at = 0, nd = sizeof done - 1;
        if (out_len < nd || memcmp(out + out_len - nd, done, nd)) abort();
        while (at < out_len - nd) {
            if (out_len - at < 6 || memcmp(out + at, "data: ", 6)) abort();
            const char *end = NULL; /* the blank line ending the event (memmem is a GNU extension) */
            for (size_t k = at + 6; !end && k + 1 < out_len; k++)
                if (out[k] == '\n' && out[k + 1] == '\n') end = out + k;
            if (!end) abort();
            cJSON *ev = cJSON_ParseWithLength(out + at + 6, (size_t)(end - out - at - 6));
            if (!cJSON_IsObject(ev)) abort();
            gather_content(ev, 1, &acc, &len);
            cJSON_Delete(ev);
            at = (size_t)(end - out) + 2;
        }
    }
    for (int32_t i = 0; acc && i < j->req.n_stops; i++)
        if (strstr(acc, j->req.stops[i])) abort();
    free(acc);
}

/* The log-probabilities of the k-th piece, alternatives drawn from the piece's bytes. */
static serve_logprob logprob_of(const uint8_t *piece, size_t n, int32_t n_top) {
    int32_t nv = plume_tokenizer_n_vocab(tok);
    serve_logprob lp = {.id = n ? piece[0] % nv : 0, .logprob = -0.5f, .n_top = n_top};
    for (int32_t i = 0; i < n_top; i++) {
        lp.top_ids[i] = (int32_t)((n ? piece[i % n] : 0) * 7 + i) % nv;
        lp.top_lps[i] = i == 3 ? -INFINITY : -0.25f * (float)i;
    }
    return lp;
}

/* Write an answer of the accepted request r (taken over) from text: pieces of 1..16 bytes. */
static void answer(serve_request *r, const char *prompt, const uint8_t *text, size_t n) {
    const serve_dialect *d = r->kind == SERVE_CHAT ? &serve_openai_chat : &serve_openai_completion;
    serve_job *j = serve_job_new(r, d);
    if (!j) abort();
    j->tok = tok;
    j->created = 1700000000;
    j->model = j->req.model;
    snprintf(j->id, sizeof j->id, "%s-1", d->id_prefix);
    static const char thought[] = "<|channel>thought\n";
    size_t pl = prompt ? strlen(prompt) : 0;
    j->in_thought = pl >= sizeof thought - 1 && !strcmp(prompt + pl - (sizeof thought - 1), thought);
    size_t step = n ? 1 + text[0] % 16 : 1;
    if (n) text++, n--;
    serve_answer o;
    char *err = NULL;
    int32_t parse = j->req.kind == SERVE_CHAT;
    if (serve_answer_init(&o, j, parse, &err)) {
        if (!err) abort(); /* the stops were checked by the parser: only memory can fail */
        fuzz_note(err);
        free(err);
        serve_job_unref(j);
        return;
    }
    int32_t pieces = 0;
    const char *reason = "length";
    for (size_t at = 0; at < n; at += step, pieces++) {
        size_t k = n - at < step ? n - at : step;
        serve_logprob lp = logprob_of(text + at, k, j->req.top_logprobs);
        int rc = serve_answer_put(&o, (const char *)text + at, k, j->req.logprobs ? &lp : NULL);
        if (rc < 0 || rc > SERVE_ANSWER_END) abort();
        if (rc) { reason = "stop"; break; }
    }
    serve_usage u = {.prompt = 9, .completion = pieces, .cached = 2, .prompt_ms = 1.5, .predicted_ms = pieces * 0.5};
    serve_answer_finish(&o, reason, &u);
    check_reply(j);
    serve_answer_free(&o);
    serve_job_unref(j);
}

/* The same bytes as a request head at the door (serve_door.c): whole and well formed, more
 * wanted, or a refusal with a status and a message; a head read whole lies inside the bytes. */
static void check_head(const char *p, size_t n) {
    serve_head h;
    serve_error e = {0};
    int rc = serve_head_parse(p, n, &h, &e);
    if (rc == 1) return;
    if (rc == 0) {
        if (h.head_len > n || h.head_len > SERVE_HEAD_MAX || !h.method[0] || strlen(h.path) >= sizeof h.path ||
            (h.chunked && h.content_length >= 0))
            abort();
        return;
    }
    if (rc < 400 || rc > 505 || e.status != rc || !*e.message) abort();
}

/* Parse one body; drive what it asks for. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0] % 4;
    const uint8_t *body = data + 1, *sep = memchr(body, 0xff, size - 1);
    size_t blen = sep ? (size_t)(sep - body) : size - 1;
    const uint8_t *text = sep ? sep + 1 : NULL;
    size_t tlen = sep ? size - 1 - blen - 1 : 0;
    char *copy = malloc(blen ? blen : 1); /* exactly the body's bytes: an overread is seen */
    if (!copy) abort();
    memcpy(copy, body, blen);
    check_head(copy, blen);
    serve_error e = {0};
    int rc;
    if (mode == 2) {
        char *content = NULL;
        int32_t special = -1;
        rc = serve_tokenize_parse(copy, blen, &content, &special, &e);
        if (rc) check_error(rc, &e);
        else if (!content || (special != 0 && special != 1)) abort();
        else tokenize(content);
        free(content);
    } else if (mode == 3) {
        int32_t *ids = NULL, n = -1, nv = plume_tokenizer_n_vocab(tok);
        rc = serve_detokenize_parse(copy, blen, nv, &ids, &n, &e);
        if (rc) {
            check_error(rc, &e);
            if (ids || n) abort();
        } else {
            if (!ids || n < 0) abort();
            for (int32_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= nv) abort();
            if (plume_detokenize(tok, ids, n, 0, NULL, 0) < 0) abort();
        }
        free(ids);
    } else {
        serve_kind kind = mode == 0 ? SERVE_CHAT : SERVE_COMPLETION;
        serve_request r;
        rc = serve_request_parse(&r, kind == SERVE_CHAT ? &serve_openai_chat : &serve_openai_completion, copy, blen, &e);
        if (rc) {
            check_error(rc, &e);
        } else {
            check_request(&r, kind);
            char *prompt = NULL;
            int32_t in_thought = -1;
            if (kind == SERVE_CHAT) {
                rc = serve_chat_render(&r, &prompt, &in_thought, &e);
                if (rc) check_error(rc, &e);
                else if (!prompt || strncmp(prompt, "<bos>", 5) || (in_thought != 0 && in_thought != 1)) abort();
            } else if (!(prompt = plume_sprintf("<bos>%s", r.prompt))) {
                abort();
            }
            if (!rc) {
                int32_t n = tokenize(prompt);
                int32_t n_ctx = 1 + (int32_t)(blen % 4096);
                int b = serve_check_budget(n, r.max_tokens, n_ctx, &e);
                if (b) check_error(b, &e);
                else if (n >= n_ctx || (r.max_tokens > 0 && n + r.max_tokens > n_ctx)) abort();
                answer(&r, prompt, text, tlen); /* takes r over */
            } else {
                serve_request_free(&r);
            }
            free(prompt);
        }
    }
    fuzz_note(e.message);
    free(copy);
    return 0;
}
