/* serve_prepare.c -- a request body made into a job, on the connection's thread, before the
 * scheduler sees it (docs/SERVER.md): the route's dialect parses it into the internal request,
 * the prompt is rendered (a chat through the template, a completion after <bos>, or ids as
 * given) and tokenized (images and audio counted and their runs made: serve_media.c), then
 * what only the tokenizer and the context can decide is checked: token ids and bias ids in
 * the vocabulary, a request's own grammar bound to the tokens, the context budget. No socket
 * and no JSON field here: the transport hands the bytes in and gets a job or an error. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve.h"

/* ---- the prompt's tokens --------------------------------------------------------------------- */

/* Fill what p needs of the model: its tokenizer and <bos>'s id. */
void serve_prep_init(serve_prep *p, plume_model *m) {
    p->m = m;
    p->tok = plume_model_tokenizer(m);
    p->bos = p->tok ? plume_token_find(p->tok, "<bos>") : -1;
}

/* Tokenize text (no <bos> added) into a malloc'd array. 0 or an error in e. */
int serve_tokenize_text(const plume_tokenizer *tok, const char *text, int32_t **ids, int32_t *n, serve_error *e) {
    size_t len = strlen(text);
    int32_t cap = (int32_t)(len < (1u << 28) ? len + 16 : (1u << 28));
    if (!(*ids = malloc((size_t)cap * sizeof **ids))) return SERVE_OOM(e);
    int32_t k = plume_tokenize(tok, text, len, *ids, cap);
    if (k < 0 || k > cap) {
        free(*ids);
        *ids = NULL;
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, NULL, "invalid_utf8", "the text is not valid UTF-8");
    }
    *n = k;
    return 0;
}

/* The prompt given as token ids: each in the vocabulary; <bos> put first unless it is there
 * (or the vocabulary has none). *ids malloc'd, *echo_from the first of them the client gave.
 * 0 or 400. */
static int prompt_of_ids(const serve_prep *p, const serve_request *r, int32_t **ids, int32_t *n, int32_t *echo_from,
                         serve_error *e) {
    int32_t nv = plume_tokenizer_n_vocab(p->tok), bos = p->bos >= 0 && r->prompt_ids[0] != p->bos;
    for (int32_t i = 0; i < r->n_prompt_ids; i++)
        if (r->prompt_ids[i] >= nv)
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, "prompt", "invalid_value",
                                   "token id %d of the prompt is outside the vocabulary of %d", r->prompt_ids[i], nv);
    if (!(*ids = malloc(((size_t)r->n_prompt_ids + 1) * sizeof **ids))) return SERVE_OOM(e);
    (*ids)[0] = p->bos;
    memcpy(*ids + bos, r->prompt_ids, (size_t)r->n_prompt_ids * sizeof **ids);
    *n = r->n_prompt_ids + bos;
    *echo_from = bos;
    return 0;
}

/* The request's prompt tokens: a chat rendered, a completion's text after <bos>, or its ids. */
static int prompt_tokens(const serve_prep *p, serve_request *r, const serve_watch *w, int32_t **ids, int32_t *n,
                         int32_t *echo_from, int32_t *in_thought, serve_error *e) {
    char *text = NULL;
    int rc = 0;
    *echo_from = 0;
    if (r->kind == SERVE_COMPLETION && r->prompt_ids) return prompt_of_ids(p, r, ids, n, echo_from, e);
    if (r->kind == SERVE_CHAT) {
        rc = serve_chat_render(r, &text, in_thought, e);
    } else if (!(text = plume_sprintf("<bos>%s", r->prompt))) {
        rc = SERVE_OOM(e);
    }
    if (!rc && r->media) { /* images and audio: their runs and keys (serve_media.c) */
        rc = serve_media_prompt(p->m, r, &p->media, w, text, ids, n, e);
    } else if (!rc) {
        rc = serve_tokenize_text(p->tok, text, ids, n, e);
    }
    if (!rc && r->kind == SERVE_COMPLETION) *echo_from = 1;
    free(text);
    return rc;
}

/* ---- checks and budgets ---------------------------------------------------------------------- */

/* Every format of a request (its own GBNF, or the grammar of a JSON schema, JSON mode or a
 * forced tool call, in any dialect) bound to the tokenizer: its token references, its rules
 * (a rule that derives no finite text, left recursion), its start state within the
 * recognizer's budget. The one place a format is checked against what a slot will build, so a
 * format that cannot be enforced is a 400 naming its field here, never a 500 from the
 * scheduler ({"$ref": "#"}, a $ref cycle, a 100,000-value enum). 0 or an error in e. */
static int grammar_bind(const serve_prep *p, const serve_request *r, serve_error *e) {
    char *err = NULL;
    const char *param = r->grammar_param ? r->grammar_param : "grammar";
    int g = plume_grammar_check(r->grammar, strlen(r->grammar), p->tok, &err);
    if (g == PLUME_ENOMEM) g = SERVE_OOM(e);
    else if (g)
        g = serve_error_set(e, 400, SERVE_ERR_REQUEST, param, r->grammar_given ? "invalid_value" : "unsupported_value",
                            "'%s': %s%s", param, r->grammar_given ? "" : "the format cannot be enforced: ",
                            !err ? "cannot be enforced" : strncmp(err, "grammar: ", 9) ? err : err + 9);
    free(err);
    return g;
}

/* What the prompt and the tokenizer decide: the bias ids in the vocabulary, the request's
 * format bound to the tokens, the context budget (the request's own limit shortening
 * max_tokens), a seed when none was given. 0 or an error in e. */
static int job_fit(const serve_prep *p, serve_request *r, int32_t n, serve_error *e) {
    int32_t nv = plume_tokenizer_n_vocab(p->tok);
    for (int32_t i = 0; i < r->n_bias; i++)
        if (r->bias_ids[i] >= nv)
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, "logit_bias", "invalid_value",
                                   "logit_bias names token %d, outside the vocabulary of %d", r->bias_ids[i], nv);
    if (r->ctx_limit > p->n_ctx)
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, "num_ctx", "invalid_value",
                               "'num_ctx' %d is more than the server's context of %d tokens per slot (plume serve "
                               "--context)", r->ctx_limit, p->n_ctx);
    int rc = r->grammar ? grammar_bind(p, r, e) : 0;
    if (rc) return rc;
    int32_t ctx = r->ctx_limit > 0 ? r->ctx_limit : p->n_ctx;
    if (r->media && r->media->transcribe) { /* no max_tokens field: the clip must fit, the answer takes what is left */
        if (n >= ctx)
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, "file", "context_length_exceeded",
                                   "the audio (%.1f s) and the instruction take %d tokens (25 a second), but the context "
                                   "holds %d; send a shorter clip or start the server with a larger --context (600 s "
                                   "need about 15,100)", r->media->seconds, n, ctx);
        if (r->max_tokens > ctx - n) r->max_tokens = ctx - n;
    }
    if ((rc = serve_check_request_budget(r, n, ctx, e))) return rc;
    if (ctx < p->n_ctx && (r->max_tokens < 0 || r->max_tokens > ctx - n)) r->max_tokens = ctx - n;
    if (!r->seed_given) r->sp.seed = (uint64_t)serve_seed_draw();
    return 0;
}

/* ---- jobs ------------------------------------------------------------------------------------ */

/* Fill the head of a new job: its prompt (ids and plp moved in), the place of the prompt's
 * log-probabilities, its id, model and time. */
static void job_head(serve_prep *p, const serve_dialect *d, serve_job_head *h, int32_t *ids, int32_t n,
                     int32_t echo_from, int32_t in_thought, serve_logprob *plp) {
    if (plp) plp[0] = (serve_logprob){.id = ids[0], .logprob = NAN};
    h->ids = ids;
    h->n_ids = n;
    h->echo_from = echo_from;
    h->prompt_lps = plp;
    h->prompt_top = h->req.prompt_logprobs > h->req.top_logprobs || !h->req.echo ? h->req.prompt_logprobs : h->req.top_logprobs;
    if (h->prompt_top < 0) h->prompt_top = 0;
    h->in_thought = in_thought;
    h->tok = p->tok;
    h->created = (int64_t)time(NULL);
    h->model = p->model;
    snprintf(h->id, sizeof h->id, "%s-%llx%06llx", d->id_prefix, (unsigned long long)h->created,
             (unsigned long long)atomic_fetch_add(&p->next_id, 1));
}

/* Parse, render, tokenize and check a generation request of a dialect into a job. 0 or an
 * error in e. */
int serve_prepare_job(serve_prep *p, const serve_dialect *d, const char *body, size_t len, const serve_watch *w,
                      serve_job **out, serve_error *e) {
    serve_request r;
    int rc = serve_request_parse(&r, d, body, len, e);
    int32_t in_thought = 0, *ids = NULL, n = 0, echo_from = 0;
    if (!rc && r.kind != SERVE_LOAD) rc = prompt_tokens(p, &r, w, &ids, &n, &echo_from, &in_thought, e);
    if (!rc && r.kind != SERVE_LOAD) rc = job_fit(p, &r, n, e);
    serve_logprob *plp = NULL;
    int32_t want_plp = r.prompt_logprobs >= 0 || (r.echo && r.logprobs);
    if (!rc && want_plp && !(plp = calloc((size_t)n, sizeof *plp))) rc = SERVE_OOM(e);
    serve_job *j = rc ? NULL : serve_job_new(&r, d);
    if (!rc && !j) rc = SERVE_OOM(e);
    if (rc) {
        serve_request_free(&r);
        free(ids);
        free(plp);
        return rc;
    }
    job_head(p, d, &j->head, ids, n, echo_from, in_thought, plp);
    *out = j;
    return 0;
}

/* A request's prompt tokens, counted: parsed, rendered, tokenized. */
int serve_prepare_count(serve_prep *p, const serve_dialect *d, const char *body, size_t len, int32_t *n_tokens,
                        serve_error *e) {
    serve_request r;
    int32_t *ids = NULL, n = 0, echo_from = 0, in_thought = 0;
    int rc = serve_request_parse(&r, d, body, len, e);
    if (rc) return rc;
    rc = r.kind == SERVE_LOAD ? 0 : prompt_tokens(p, &r, NULL, &ids, &n, &echo_from, &in_thought, e);
    serve_request_free(&r);
    free(ids);
    *n_tokens = n;
    return rc;
}
