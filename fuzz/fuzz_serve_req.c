/* fuzz_serve_req.c -- the bytes side of `plume serve` (tools/serve/: serve_request.c, the
 * dialects serve_openai.c, serve_responses.c, serve_anthropic.c, serve_ollama.c, and
 * serve_answer.c): a request body of one of the endpoints through its dialect's parser; an
 * accepted chat request rendered to its prompt and tokenized with the tiny tokenizer
 * ($PLUME_FUZZ_TOKENIZER); then, for a generation request, "generated" text fed to each
 * choice's answer writer in small pieces (chat parser, stop strings, logprobs, the prompt's
 * log-probabilities) and the reply checked in the dialect's framing. Input: mode byte | body |
 * 0xFF | piece-size byte | generated text. 0xFF cannot occur in the UTF-8 a body must be, so
 * the first one ends the body. Modes (byte % 9): 0 /v1/chat/completions, 1 /v1/completions,
 * 2 /tokenize, 3 /detokenize, 4 /v1/responses, 5 /v1/messages, 6 /v1/messages/count_tokens,
 * 7 /api/chat, 8 /api/generate.
 * Invariants: a refused body is a 4xx (never a 500: nothing here runs out of memory) with the
 * dialect's error JSON whose message is not empty; an accepted request is within the bounds
 * the parser promises; a rendered prompt starts with <bos> and tokenizes; the reply is JSON
 * in the dialect's framing (one object; "data: {json}" events ending in [DONE]; "event: X /
 * data: {json}" events; NDJSON lines) and no choice's content holds a complete stop string. The
 * body's bytes are also read as a request head by the server's door (serve_head_parse). */
#include "fuzz.h"

#include <math.h>

#include "fuzz_serve.h"
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

/* What a parser promises of an accepted request. */
static void check_request(const serve_request *r) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    if (r->kind == SERVE_CHAT) {
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
        if (r->continue_final && strcmp(r->msgs[r->n_msgs - 1].role, "assistant")) abort();
    } else if (r->kind == SERVE_COMPLETION) {
        if ((!r->prompt) == (!r->prompt_ids) || r->msgs || (r->prompt_ids && r->n_prompt_ids < 1)) abort();
        for (int32_t i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] < 0) abort();
    } else if (r->kind != SERVE_LOAD) {
        abort();
    }
    if (r->top_logprobs < 0 || r->top_logprobs > SERVE_MAX_TOP_LOGPROBS || (r->top_logprobs && !r->logprobs)) abort();
    if (r->prompt_logprobs < -1 || r->prompt_logprobs > SERVE_MAX_TOP_LOGPROBS) abort();
    if (r->n < 1 || r->n > SERVE_MAX_CHOICES || r->n_bias < 0 || r->n_bias > SERVE_MAX_BIAS) abort();
    for (int32_t i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] < 0 || !(fabsf(r->bias_vals[i]) <= 100)) abort();
    if (r->n_stops < 0 || r->n_stops > SERVE_MAX_STOPS) abort();
    for (int32_t i = 0; i < r->n_stops; i++)
        if (!r->stops[i] || !*r->stops[i] || strlen(r->stops[i]) > SERVE_MAX_STOP_LEN) abort();
    if (!(r->max_tokens == -1 || (r->max_tokens >= 1 && r->max_tokens <= 1 << 24) || (r->max_tokens == 0 && r->echo)))
        abort();
    const plume_sampler_params *p = &r->sp;
    if (!(p->temperature >= 0 && p->temperature <= 2) || !(p->top_p >= 0 && p->top_p <= 1) || p->top_k < 0 ||
        !(p->min_p >= 0 && p->min_p <= 1) || !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty) ||
        !(p->repeat_penalty > 0))
        abort();
}

/* Tokenize text as the server does (no BOS added); valid UTF-8 must tokenize. The count;
 * the ids (malloc'd) in *out when out is not NULL. */
static int32_t tokenize(const char *text, int32_t **out) {
    size_t len = strlen(text);
    int32_t cap = (int32_t)(len + 16);
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) abort();
    int32_t n = plume_tokenize(tok, text, len, ids, cap);
    if (n < 0 || n > cap) abort();
    if (out) *out = ids;
    else free(ids);
    return n;
}

/* The content gathered per choice, to check that no stop string is in it. */
typedef struct {
    char *text[SERVE_MAX_CHOICES];
    size_t len[SERVE_MAX_CHOICES];
} gathered;

/* Append s to choice k's content. */
static void gather(gathered *g, int32_t k, const cJSON *s) {
    if (!cJSON_IsString(s) || k < 0 || k >= SERVE_MAX_CHOICES) return;
    size_t n = strlen(s->valuestring);
    char *nb = realloc(g->text[k], g->len[k] + n + 1);
    if (!nb) abort();
    memcpy(nb + g->len[k], s->valuestring, n + 1);
    g->text[k] = nb;
    g->len[k] += n;
}

/* The content of one JSON object of a reply (a whole reply, a chunk, an event, a line). */
static void gather_object(const serve_dialect *d, const cJSON *o, int stream, gathered *g) {
    const cJSON *c, *x;
    if (d == &serve_openai_chat || d == &serve_openai_completion) {
        if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o, "choices"))) abort();
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(o, "choices")) {
            const cJSON *idx = cJSON_GetObjectItemCaseSensitive(c, "index");
            const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, stream ? "delta" : "message");
            gather(g, cJSON_IsNumber(idx) ? idx->valueint : -1,
                   m ? cJSON_GetObjectItemCaseSensitive(m, "content") : cJSON_GetObjectItemCaseSensitive(c, "text"));
        }
    } else if (d == &serve_responses) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
        if (stream) {
            if (cJSON_IsString(type) && !strcmp(type->valuestring, "response.output_text.delta"))
                gather(g, 0, cJSON_GetObjectItemCaseSensitive(o, "delta"));
            return;
        }
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(o, "output"))
            cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(x, "content"))
                if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(c, "type")) &&
                    !strcmp(cJSON_GetObjectItemCaseSensitive(c, "type")->valuestring, "output_text"))
                    gather(g, 0, cJSON_GetObjectItemCaseSensitive(c, "text"));
    } else if (d == &serve_anthropic) {
        if (stream) {
            gather(g, 0, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "delta"), "text"));
            return;
        }
        cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(o, "content"))
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(c, "type")->valuestring, "text"))
                gather(g, 0, cJSON_GetObjectItemCaseSensitive(c, "text"));
    } else {
        gather(g, 0, cJSON_GetObjectItemCaseSensitive(o, "response"));
        gather(g, 0, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "message"), "content"));
    }
}

/* The blank line ending an event that starts at out + at, or NULL (memmem is a GNU extension). */
static const char *event_end(const char *out, size_t at, size_t out_len) {
    for (size_t k = at; k + 1 < out_len; k++)
        if (out[k] == '\n' && out[k + 1] == '\n') return out + k;
    return NULL;
}

/* A parsed JSON object of bytes [p, p + n), or abort. */
static cJSON *object_of(const char *p, size_t n) {
    cJSON *o = cJSON_ParseWithLength(p, n);
    if (!cJSON_IsObject(o)) abort();
    return o;
}

/* The reply of a finished job, in its dialect's framing: one JSON object; "data: {json}\n\n"
 * events ending with "data: [DONE]\n\n" (OpenAI); "event: X\ndata: {json}\n\n" events
 * (Responses, Anthropic); JSON lines (Ollama). No choice's content holds a complete stop
 * string (an echoed prompt may). */
static void check_reply(const serve_job *j) {
    if (!j->done || !j->out.p) abort();
    const serve_dialect *d = j->head.dialect;
    const char *out = j->out.p;
    size_t n = j->out.len, at = 0;
    gathered g = {{0}, {0}};
    if (!j->head.req.stream || j->head.req.kind == SERVE_LOAD) {
        cJSON *o = object_of(out, n);
        gather_object(d, o, 0, &g);
        cJSON_Delete(o);
    } else if (d == &serve_openai_chat || d == &serve_openai_completion) {
        static const char done[] = "data: [DONE]\n\n";
        size_t nd = sizeof done - 1;
        if (n < nd || memcmp(out + n - nd, done, nd)) abort();
        while (at < n - nd) {
            const char *end = event_end(out, at, n);
            if (n - at < 6 || memcmp(out + at, "data: ", 6) || !end) abort();
            cJSON *o = object_of(out + at + 6, (size_t)(end - out - at - 6));
            if (!cJSON_GetObjectItemCaseSensitive(o, "error")) gather_object(d, o, 1, &g);
            cJSON_Delete(o);
            at = (size_t)(end - out) + 2;
        }
    } else if (d == &serve_responses || d == &serve_anthropic) {
        while (at < n) {
            const char *end = event_end(out, at, n), *nl = memchr(out + at, '\n', n - at);
            if (n - at < 7 || memcmp(out + at, "event: ", 7) || !end || !nl || nl >= end || end - nl < 7 ||
                memcmp(nl + 1, "data: ", 6))
                abort();
            cJSON *o = object_of(nl + 7, (size_t)(end - nl - 7));
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
            if (!cJSON_IsString(type) || strncmp(type->valuestring, out + at + 7, (size_t)(nl - out - at - 7))) abort();
            gather_object(d, o, 1, &g);
            cJSON_Delete(o);
            at = (size_t)(end - out) + 2;
        }
    } else {
        while (at < n) {
            const char *nl = memchr(out + at, '\n', n - at);
            if (!nl) abort();
            cJSON *o = object_of(out + at, (size_t)(nl - out - at));
            gather_object(d, o, 1, &g);
            cJSON_Delete(o);
            at = (size_t)(nl - out) + 1;
        }
    }
    for (int k = 0; k < SERVE_MAX_CHOICES; k++) {
        for (int32_t i = 0; g.text[k] && !j->head.req.echo && i < j->head.req.n_stops; i++)
            if (strstr(g.text[k], j->head.req.stops[i])) abort();
        free(g.text[k]);
    }
}

/* The special tokens a generation holds (one id each in Gemma 4's vocabulary). */
static const char *const specials[] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<turn|>", "<eos>",
                                       "<|tool_response>", "<tool_response|>", "<|\"|>", NULL};

/* The length of the special token at s[0, n), or 0. */
static size_t special_at(const char *s, size_t n) {
    for (int k = 0; specials[k]; k++) {
        size_t l = strlen(specials[k]);
        if (l <= n && !memcmp(s, specials[k], l)) return l;
    }
    return 0;
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

/* Write the answer of the accepted request r (taken over) with prompt tokens ids[n_ids]
 * (taken over) from text: every choice gets the same pieces of 1..16 bytes. */
static void answer(serve_request *r, const serve_dialect *d, int32_t *ids, int32_t n_ids, int32_t echo_from,
                   int32_t in_thought, const uint8_t *text, size_t n) {
    serve_job *j = serve_job_new(r, d);
    if (!j) abort();
    j->head.tok = tok;
    j->head.created = 1700000000;
    j->head.model = j->head.req.model;
    j->head.ids = ids;
    j->head.n_ids = n_ids;
    j->head.echo_from = echo_from;
    j->head.in_thought = in_thought;
    snprintf(j->head.id, sizeof j->head.id, "%s-1", d->id_prefix);
    if (j->head.req.kind == SERVE_LOAD) {
        serve_job_load(j);
        check_reply(j);
        serve_job_unref(j);
        return;
    }
    if (j->head.req.prompt_logprobs >= 0 || (j->head.req.echo && j->head.req.logprobs)) {
        j->head.prompt_top = j->head.req.prompt_logprobs > j->head.req.top_logprobs ? j->head.req.prompt_logprobs : j->head.req.top_logprobs;
        if (!(j->head.prompt_lps = calloc((size_t)n_ids, sizeof *j->head.prompt_lps))) abort();
        for (int32_t i = 0; i < n_ids; i++) {
            j->head.prompt_lps[i] = logprob_of((const uint8_t *)&ids[i], 4, j->head.prompt_top);
            j->head.prompt_lps[i].id = ids[i];
        }
        j->head.prompt_lps[0].logprob = NAN;
    }
    size_t step = n ? 1 + text[0] % 16 : 1;
    if (n) text++, n--;
    serve_answer o[SERVE_MAX_CHOICES];
    int32_t parse = j->head.req.kind == SERVE_CHAT, nc = j->head.req.n;
    for (int32_t k = 0; k < nc; k++) {
        char *err = NULL;
        if (serve_answer_init(&o[k], j, k, parse, &err)) abort(); /* the stops were checked: only memory can fail */
        serve_answer_prompt(&o[k]);
    }
    for (int32_t k = 0; k < nc; k++) {
        int32_t pieces = 0;
        serve_finish reason = SERVE_FINISH_LENGTH;
        for (size_t at = 0, len = 0; j->head.req.max_tokens != 0 && at < n; at += len, pieces++) {
            /* as the scheduler feeds tokens: a special token's text one special piece, text in
             * pieces of at most step bytes up to the next special token */
            size_t sp = special_at((const char *)text + at, n - at);
            len = sp;
            while (!sp && len < step && at + len < n && !special_at((const char *)text + at + len, n - at - len)) len++;
            serve_logprob lp = logprob_of(text + at, len, j->head.req.top_logprobs);
            int rc = serve_answer_put(&o[k], (const char *)text + at, len, sp > 0, j->head.req.logprobs ? &lp : NULL);
            if (rc < 0 || rc > SERVE_ANSWER_END) abort();
            if (rc) { reason = SERVE_FINISH_STOP; break; }
        }
        serve_usage u = {.prompt = n_ids, .completion = pieces, .cached = 2, .prompt_ms = 1.5, .predicted_ms = pieces * 0.5};
        serve_answer_finish(&o[k], reason, &u);
        if (k < nc - 1 && j->done) abort(); /* done only after the last choice */
    }
    check_reply(j);
    for (int32_t k = 0; k < nc; k++) serve_answer_free(&o[k]);
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

/* The dialect of a generation mode. */
static const serve_dialect *dialect_of(uint8_t mode) {
    static const serve_dialect *const d[] = {&serve_openai_chat, &serve_openai_completion, NULL, NULL, &serve_responses,
                                             &serve_anthropic, &serve_anthropic_count, &serve_ollama_chat,
                                             &serve_ollama_generate};
    return d[mode];
}

/* Parse a generation body in a dialect; render, tokenize, check the budget; answer it. */
static void generation(const serve_dialect *d, const char *body, size_t blen, const uint8_t *text, size_t tlen,
                       serve_error *e) {
    serve_request r;
    int rc = serve_request_parse(&r, d, body, blen, e);
    if (rc) {
        check_error(rc, e, d);
        return;
    }
    check_request(&r);
    char *prompt = NULL;
    int32_t in_thought = -1, *ids = NULL, n = 0, echo_from = 0, nv = plume_tokenizer_n_vocab(tok);
    if (r.kind == SERVE_CHAT) {
        rc = serve_chat_render(&r, &prompt, &in_thought, e);
        if (rc) check_error(rc, e, d);
        else if (!prompt || strncmp(prompt, "<bos>", 5) || (in_thought != 0 && in_thought != 1)) abort();
    } else if (r.kind == SERVE_COMPLETION && r.prompt && !(prompt = plume_sprintf("<bos>%s", r.prompt))) {
        abort();
    }
    if (!rc && prompt) {
        n = tokenize(prompt, &ids);
        echo_from = r.kind == SERVE_COMPLETION;
    } else if (!rc && r.prompt_ids) { /* as the server does: ids in the vocabulary, <bos> first */
        for (int32_t i = 0; i < r.n_prompt_ids && !rc; i++) rc = r.prompt_ids[i] >= nv;
        if (!rc) {
            if (!(ids = malloc(((size_t)r.n_prompt_ids + 1) * sizeof *ids))) abort();
            ids[0] = 2;
            echo_from = r.prompt_ids[0] != 2;
            memcpy(ids + echo_from, r.prompt_ids, (size_t)r.n_prompt_ids * sizeof *ids);
            n = r.n_prompt_ids + echo_from;
        }
    }
    if (!rc && d->count) { /* a token count: its body */
        char *c = d->count(n);
        cJSON *o = cJSON_Parse(c);
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "input_tokens"))) abort();
        cJSON_Delete(o);
        free(c);
    }
    if (!rc && r.kind != SERVE_LOAD) {
        int32_t n_ctx = 1 + (int32_t)(blen % 4096);
        int b = serve_check_request_budget(&r, n, n_ctx, e); /* a max_tokens past the room is no error */
        if (b) check_error(b, e, d);
        else if (n >= n_ctx) abort();
        rc = b;
    }
    if (!rc && d != &serve_anthropic_count) {
        answer(&r, d, ids, n, echo_from, in_thought == 1, text, tlen); /* takes r and ids over */
        ids = NULL;
    } else {
        serve_request_free(&r);
    }
    free(ids);
    free(prompt);
}

/* Parse one body; drive what it asks for. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t mode = data[0] % 9;
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
        if (rc) check_error(rc, &e, &serve_openai_chat);
        else if (!content || (special != 0 && special != 1)) abort();
        else tokenize(content, NULL);
        free(content);
    } else if (mode == 3) {
        int32_t *ids = NULL, n = -1, nv = plume_tokenizer_n_vocab(tok);
        rc = serve_detokenize_parse(copy, blen, nv, &ids, &n, &e);
        if (rc) {
            check_error(rc, &e, &serve_openai_chat);
            if (ids || n) abort();
        } else {
            if (!ids || n < 0) abort();
            for (int32_t i = 0; i < n; i++)
                if (ids[i] < 0 || ids[i] >= nv) abort();
            if (plume_detokenize(tok, ids, n, 0, NULL, 0) < 0) abort();
        }
        free(ids);
    } else {
        generation(dialect_of(mode), copy, blen, text, tlen, &e);
    }
    fuzz_note(e.message);
    free(copy);
    return 0;
}
