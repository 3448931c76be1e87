/* serve_answer.c -- a request in flight (serve_job) and the writing of its answers, one per
 * choice.
 *
 * The scheduler decodes each generated token to text and hands it here with its
 * log-probabilities; this file turns the text into events: the chat parser splits it into
 * content, thought and tool calls, the stop matcher cuts the content at a stop string. A
 * streamed request's events go to its dialect, which appends their bytes to the job; a
 * non-streamed one's are gathered into each choice's whole answer, which the dialect writes
 * when the last choice has ended. Bytes are appended under the job's mutex; its connection
 * thread sends them. No model, no socket and no JSON here, so a test feeds text and reads the
 * bytes. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- jobs ---------------------------------------------------------------------------------- */

/* Free what a gathered answer holds. */
static void gathered_free(serve_gathered *g) {
    free(g->text.p);
    free(g->thought.p);
    for (int32_t i = 0; g->calls && i < g->n_calls; i++) {
        free(g->calls[i].name);
        free(g->calls[i].arguments);
    }
    free(g->calls);
    free(g->lps);
    memset(g, 0, sizeof *g);
    g->stop = -1;
}

/* A job taking over req, with one reference: a place for each choice's answer when not
 * streamed, the dialect's state when streamed. NULL if out of memory (req is then kept). */
serve_job *serve_job_new(serve_request *req, const serve_dialect *d) {
    serve_job *j = calloc(1, sizeof *j);
    int32_t n = req->n > 0 ? req->n : 1;
    if (j && !req->stream && !(j->choices = calloc((size_t)n, sizeof *j->choices))) goto fail;
    if (j && req->stream && d->state_size && !(j->state = calloc(1, d->state_size))) goto fail;
    if (!j) return NULL;
    j->head.req = *req;
    j->head.req.n = n;
    memset(req, 0, sizeof *req);
    j->head.dialect = d;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->status = 200;
    for (int32_t i = 0; j->choices && i < n; i++) j->choices[i].stop = -1;
    return j;
fail:
    free(j->choices);
    free(j->state);
    free(j);
    return NULL;
}

/* Drop a reference; the last one frees the job. */
void serve_job_unref(serve_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    for (int32_t i = 0; j->choices && i < j->head.req.n; i++) gathered_free(&j->choices[i]);
    free(j->choices);
    if (j->state && j->head.dialect->state_free) j->head.dialect->state_free(j->state);
    free(j->state);
    serve_request_free(&j->head.req);
    free(j->head.ids);
    free(j->head.prompt_lps);
    free(j->out.p);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

/* Mark the job cancelled: the scheduler frees its slot at the next step. */
void serve_job_cancel(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    j->cancelled = 1;
    pthread_mutex_unlock(&j->mu);
}

/* Whether the job's client went away. */
int serve_job_cancelled(serve_job *j) {
    pthread_mutex_lock(&j->mu);
    int c = j->cancelled;
    pthread_mutex_unlock(&j->mu);
    return c;
}

/* Mark the job done with a status (and wake its connection); the first end wins. Called
 * with j->mu held. */
static void job_done_locked(serve_job *j, int32_t status) {
    if (j->done) return;
    j->status = status;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
}

/* Hand one event of a streamed answer to the dialect; its bytes go out (none once the job is
 * done: a failed job's other choices may still be running until their next step). */
static void job_event(serve_job *j, const serve_event *ev) {
    pthread_mutex_lock(&j->mu);
    if (!j->done) j->head.dialect->stream(&j->out, &j->head, j->state, ev);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* The job's whole body (may be NULL: out of memory, the client gets what there is; freed),
 * its status, and done. */
static void job_finish(serve_job *j, int32_t status, char *body) {
    pthread_mutex_lock(&j->mu);
    if (body && !j->done) plume_buf_puts(&j->out, body);
    job_done_locked(j, status);
    pthread_mutex_unlock(&j->mu);
    free(body);
}

/* The reply of a request that generates nothing. */
void serve_job_load(serve_job *j) {
    serve_reply r = {.text = "", .finish = SERVE_FINISH_LOAD};
    job_finish(j, 200, j->head.dialect->reply(&j->head, &r, 1, NULL));
}

/* End the job without a reply: its client is gone. */
void serve_job_abandon(serve_job *j, int32_t status) {
    pthread_mutex_lock(&j->mu);
    job_done_locked(j, status);
    pthread_mutex_unlock(&j->mu);
}

/* End a job with an error: an error event when streaming, else the error reply. Its other
 * choices stop at the next step (the job counts as cancelled). */
void serve_job_fail(serve_job *j, int32_t status, serve_error_kind kind, const char *msg) {
    serve_error e;
    serve_error_set(&e, status, kind, NULL, NULL, "%s", msg);
    char *body = j->head.req.stream ? NULL : j->head.dialect->error(&e);
    serve_event ev = {.kind = SERVE_EV_ERROR, .error = &e};
    pthread_mutex_lock(&j->mu);
    if (!j->done) {
        if (j->head.req.stream) j->head.dialect->stream(&j->out, &j->head, j->state, &ev);
        else if (body) plume_buf_puts(&j->out, body);
    }
    j->cancelled = 1;
    job_done_locked(j, status);
    pthread_mutex_unlock(&j->mu);
    free(body);
}

/* ---- the answer ---------------------------------------------------------------------------- */

/* Hand a piece of the answer, or of its thought, with the token behind it (may be NULL) to
 * the client: an event, or gathered for the whole reply. */
static void put_text(serve_answer *a, serve_event_kind kind, const char *text, size_t n, const serve_logprob *lp) {
    serve_job *j = a->job;
    if (!j->head.req.stream) {
        serve_gathered *g = &a->g;
        plume_buf_put(kind == SERVE_EV_THOUGHT ? &g->thought : &g->text, text, n);
        /* out of memory: the entry is dropped */
        if (lp && j->head.req.logprobs && !plume_grow(&g->lps, &g->cap_lps, (size_t)g->n_lps + 1, sizeof *g->lps))
            g->lps[g->n_lps++] = *lp;
        return;
    }
    if (!n && !lp) return;
    serve_event ev = {.kind = kind, .choice = a->choice, .text = text, .len = n, .lp = lp};
    job_event(j, &ev);
}

/* Hand a complete tool call to the client. */
static void put_call(serve_answer *a, const char *name, const char *arguments) {
    serve_job *j = a->job;
    serve_tool_call t = {.name = (char *)(name ? name : ""), .arguments = (char *)(arguments ? arguments : "{}")};
    int32_t index = a->n_calls++;
    if (j->head.req.stream) {
        serve_event ev = {.kind = SERVE_EV_TOOL_CALL, .choice = a->choice, .call = &t, .call_index = index};
        job_event(j, &ev);
        return;
    }
    serve_gathered *g = &a->g;
    serve_tool_call *nc = realloc(g->calls, (size_t)(g->n_calls + 1) * sizeof *nc);
    if (!nc) return; /* out of memory: the call is dropped */
    g->calls = nc;
    g->calls[g->n_calls++] = (serve_tool_call){NULL, strdup(t.name), strdup(t.arguments)};
}

/* Answer text through the stop matcher; 1 when a stop string completed. */
static int put_content(serve_answer *a, const char *text, size_t n, const serve_logprob **lp) {
    const char *emit = "";
    size_t n_emit = 0;
    int hit = plume_stop_matcher_feed(&a->sm, text, n, &emit, &n_emit);
    put_text(a, SERVE_EV_TEXT, emit, hit < 0 ? 0 : n_emit, *lp);
    *lp = NULL;
    return hit == 1;
}

/* Deliver the chat parser's deltas: content through the stop matcher, thought, tool calls.
 * *lp goes with the first text; *thought_only says whether only thought came. 1 when a stop
 * string completed or, for a request of one call, the call came; else 0. */
static int put_deltas(serve_answer *a, const plume_chat_delta *dl, int32_t n, const serve_logprob **lp,
                      int *thought_only) {
    *thought_only = n > 0;
    for (int32_t i = 0; i < n; i++) {
        if (dl[i].type != PLUME_CHAT_REASONING) *thought_only = 0;
        if (dl[i].type == PLUME_CHAT_TOOL_CALL) {
            put_call(a, dl[i].name, dl[i].arguments);
            if (a->job->head.req.one_call) return 1; /* one call asked for: the answer ends with it */
        } else if (dl[i].type == PLUME_CHAT_REASONING) {
            put_text(a, SERVE_EV_THOUGHT, dl[i].text, dl[i].len, *lp);
            *lp = NULL;
        } else if (put_content(a, dl[i].text, dl[i].len, lp)) {
            return 1;
        }
    }
    return 0;
}

/* Start an answer: the stop matcher, the chat parser when parse, the start event of a
 * stream. 0 or a PLUME_E* with *err. */
int serve_answer_init(serve_answer *a, serve_job *j, int32_t choice, int32_t parse, char **err) {
    memset(a, 0, sizeof *a);
    a->job = j;
    a->choice = choice;
    a->g.stop = -1;
    int rc = plume_stop_matcher_init(&a->sm, (const char *const *)j->head.req.stops, j->head.req.n_stops, err);
    if (!rc && parse) rc = plume_chat_parser_new(&a->cp, j->head.in_thought, err);
    if (rc) {
        serve_answer_free(a);
        return rc;
    }
    if (j->head.req.stream) {
        serve_event ev = {.kind = SERVE_EV_START, .choice = choice};
        job_event(j, &ev);
    }
    return 0;
}

/* The prompt has been read: the PROMPT event of a stream. */
void serve_answer_prompt(serve_answer *a) {
    if (!a->job->head.req.stream) return;
    serve_event ev = {.kind = SERVE_EV_PROMPT, .choice = a->choice};
    job_event(a->job, &ev);
}

/* piece[0..len) with every NUL byte (a model can write one: the byte token <0x00>) replaced
 * by U+FFFD, malloc'd, its length in *n; NULL if out of memory. Events carry C strings to the
 * dialects: a NUL would cut the rest of a non-streamed answer and of a streamed piece. */
static char *without_nul(const char *piece, size_t len, size_t *n) {
    size_t z = 0;
    for (size_t i = 0; i < len; i++) z += piece[i] == 0;
    char *s = malloc(len + 2 * z + 1), *w = s;
    if (!s) return NULL;
    for (size_t i = 0; i < len; i++) {
        if (piece[i]) *w++ = piece[i];
        else memcpy(w, "\xef\xbf\xbd", 3), w += 3;
    }
    *n = (size_t)(w - s);
    return s;
}

/* Feed the text of one token (special: it is a special token; lp: its log-probabilities or
 * NULL). The chat parser acts on special tokens only: text that spells a marker is text. 0 to
 * go on, SERVE_ANSWER_STOP when a stop string completed, SERVE_ANSWER_END when the chat
 * parser read an end marker. */
int serve_answer_put(serve_answer *a, const char *piece, size_t len, int32_t special, const serve_logprob *lp) {
    if (len && memchr(piece, 0, len)) {
        size_t n = 0;
        char *clean = without_nul(piece, len, &n);
        int r = clean ? serve_answer_put(a, clean, n, special, lp) : 0; /* out of memory: the piece is dropped */
        free(clean);
        return r;
    }
    int hit = 0, ended = 0;
    if (a->cp) {
        const plume_chat_delta *dl;
        int32_t nd = 0;
        int thought_only = 0;
        ended = plume_chat_parser_feed_token(a->cp, piece, len, special, &dl, &nd);
        if (ended >= 0) hit = put_deltas(a, dl, nd, &lp, &thought_only);
        a->n_thought += thought_only;
        if (lp) put_text(a, SERVE_EV_TEXT, "", 0, lp); /* the token gave no text yet */
    } else {
        hit = put_content(a, piece, len, &lp);
    }
    if (hit) a->stopped = 1;
    return hit ? SERVE_ANSWER_STOP : ended == 1 ? SERVE_ANSWER_END : 0;
}

/* Add a choice's usage to the request's: the prompt once, the generated tokens summed, the
 * longest times. Called with j->mu held. */
static void usage_add(serve_usage *sum, const serve_usage *u) {
    sum->prompt = u->prompt;
    sum->cached = u->cached > sum->cached ? u->cached : sum->cached;
    sum->completion += u->completion;
    sum->reasoning += u->reasoning;
    sum->prompt_ms = u->prompt_ms > sum->prompt_ms ? u->prompt_ms : sum->prompt_ms;
    sum->predicted_ms = u->predicted_ms > sum->predicted_ms ? u->predicted_ms : sum->predicted_ms;
    sum->drafted += u->drafted;
    sum->accepted += u->accepted;
}

/* The whole reply of a job whose choices have all ended (no one writes them any more). */
static char *whole_reply(serve_job *j) {
    serve_reply r[SERVE_MAX_CHOICES];
    int32_t n = j->head.req.n < SERVE_MAX_CHOICES ? j->head.req.n : SERVE_MAX_CHOICES;
    for (int32_t i = 0; i < n; i++) {
        const serve_gathered *g = &j->choices[i];
        r[i] = (serve_reply){.text = g->text.p ? g->text.p : "", .thought = g->thought.p, .calls = g->calls,
                             .n_calls = g->n_calls, .lps = g->lps, .n_lps = g->n_lps,
                             .finish = g->finish ? g->finish : SERVE_FINISH_STOP,
                             .stop = g->stop >= 0 ? j->head.req.stops[g->stop] : NULL};
    }
    return j->head.dialect->reply(&j->head, r, n, &j->usage);
}

/* Whether the request forces a tool call (tool_choice "required" or a function's name). */
static int forced_call(const serve_request *r) {
    return r->tool_choice && r->n_tools && strcmp(r->tool_choice, "auto") && strcmp(r->tool_choice, "none");
}

/* The function a forced call cut short names, from what the model wrote of its name: the one
 * forced, else the first declared whose name starts with it (malloc'd; NULL out of memory). */
static char *cut_call_name(const serve_request *r, const char *prefix) {
    if (strcmp(r->tool_choice, "required")) return strdup(r->tool_choice);
    for (int32_t k = 0; k < r->n_tools; k++)
        if (!strncmp(r->tools[k].name, prefix, strlen(prefix))) return strdup(r->tools[k].name);
    return strdup(prefix);
}

/* Release what the parser holds at the end of a choice. A forced call that the length cut
 * short comes back as a call in the dialect's own shape, never as Gemma's markup: its name
 * completed from the tools, its arguments the members written in full. */
static void flush_parser(serve_answer *a, serve_finish reason) {
    const plume_chat_delta *dl;
    int32_t nd = 0;
    int thought_only;
    const serve_logprob *none = NULL;
    const serve_request *r = &a->job->head.req;
    if (reason == SERVE_FINISH_LENGTH && forced_call(r)) {
        if (plume_chat_parser_flush_cut(a->cp, &dl, &nd)) return;
        plume_chat_delta fixed[8];
        char *names[8] = {0};
        for (int32_t i = 0; i < nd; i += 8) {
            int32_t k = nd - i < 8 ? nd - i : 8;
            for (int32_t c = 0; c < k; c++) {
                fixed[c] = dl[i + c];
                if (fixed[c].type == PLUME_CHAT_TOOL_CALL && (names[c] = cut_call_name(r, fixed[c].name)))
                    fixed[c].name = names[c];
            }
            if (!a->stopped) a->stopped = put_deltas(a, fixed, k, &none, &thought_only);
            for (int32_t c = 0; c < k; c++) {
                free(names[c]);
                names[c] = NULL;
            }
        }
        return;
    }
    if (plume_chat_parser_flush(a->cp, &dl, &nd) == 0) a->stopped = put_deltas(a, dl, nd, &none, &thought_only);
}

/* End the choice: release what the parser and the matcher hold (unless a stop string ended
 * it), then its end event or its gathered answer; the last choice to end sends DONE or the
 * whole reply. reason is STOP or LENGTH; TOOL_CALLS when calls were made and the model
 * stopped. */
void serve_answer_finish(serve_answer *a, serve_finish reason, const serve_usage *u) {
    serve_job *j = a->job;
    if (!a->stopped && a->cp) flush_parser(a, reason);
    if (a->stopped) {
        reason = SERVE_FINISH_STOP;
    } else {
        const char *emit = "";
        size_t n_emit = plume_stop_matcher_flush(&a->sm, &emit);
        put_text(a, SERVE_EV_TEXT, emit, n_emit, NULL);
    }
    if (a->n_calls > 0 && reason == SERVE_FINISH_STOP) reason = SERVE_FINISH_TOOL_CALLS;
    int32_t stop = a->stopped && a->sm.matched >= 0 && a->sm.matched < j->head.req.n_stops ? a->sm.matched : -1;
    serve_usage mine = *u;
    mine.reasoning = a->n_thought;
    if (j->head.req.stream) {
        serve_event end = {.kind = SERVE_EV_END, .choice = a->choice, .finish = reason,
                           .stop = stop >= 0 ? j->head.req.stops[stop] : NULL, .usage = &mine};
        job_event(j, &end);
    }
    pthread_mutex_lock(&j->mu);
    usage_add(&j->usage, &mine);
    int last = ++j->n_ended == j->head.req.n;
    if (j->choices && a->choice >= 0 && a->choice < j->head.req.n) {
        serve_gathered *g = &j->choices[a->choice];
        gathered_free(g);
        *g = a->g;
        g->finish = reason;
        g->stop = stop;
        memset(&a->g, 0, sizeof a->g);
        a->g.stop = -1;
    }
    if (last && j->head.req.stream) {
        serve_event done = {.kind = SERVE_EV_DONE, .usage = &j->usage};
        if (!j->done) j->head.dialect->stream(&j->out, &j->head, j->state, &done);
        job_done_locked(j, 200);
    }
    pthread_mutex_unlock(&j->mu);
    if (last && !j->head.req.stream) job_finish(j, 200, whole_reply(j));
}

/* Free what the answer holds (the job is not touched). */
void serve_answer_free(serve_answer *a) {
    plume_stop_matcher_free(&a->sm);
    plume_chat_parser_free(a->cp);
    gathered_free(&a->g);
    memset(a, 0, sizeof *a);
}
