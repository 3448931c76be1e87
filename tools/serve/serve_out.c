/* serve_out.c -- a request in flight (serve_job) and the writing of its answer.
 *
 * The scheduler decodes each generated token to text and hands it here; this file turns the
 * text into what the client receives: the chat parser splits it into content, thought and tool
 * calls, the stop matcher cuts the content at a stop string, and the pieces become SSE chunks
 * (streamed) or are gathered into the final reply. Bytes are appended to the job's output
 * under its mutex; its connection thread sends them. No model and no socket here, so a test
 * feeds text and reads the bytes. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- jobs ---------------------------------------------------------------------------------- */

/* A job taking over req, with one reference. */
serve_job *serve_job_new(serve_request *req) {
    serve_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->req = *req;
    memset(req, 0, sizeof *req);
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->status = 200;
    return j;
}

/* Drop a reference; the last one frees the job. */
void serve_job_unref(serve_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    serve_request_free(&j->req);
    free(j->ids);
    free(j->out);
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

/* Append n bytes to the job's output (dropped if out of memory: the client then sees a
 * truncated stream, the server goes on). Called with j->mu held. */
static void job_write_locked(serve_job *j, const char *b, size_t n) {
    if (j->out_len + n > j->out_cap) {
        size_t cap = j->out_cap ? j->out_cap : 1024;
        while (cap < j->out_len + n) cap *= 2;
        char *nb = realloc(j->out, cap);
        if (!nb) return;
        j->out = nb;
        j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, b, n);
    j->out_len += n;
}

/* Send one server-sent event "data: json\n\n" (json freed). */
static void job_event(serve_job *j, char *json) {
    if (!json) return;
    pthread_mutex_lock(&j->mu);
    job_write_locked(j, "data: ", 6);
    job_write_locked(j, json, strlen(json));
    job_write_locked(j, "\n\n", 2);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    free(json);
}

/* The job's last bytes (body may be NULL; it is freed), its status, and done. */
void serve_job_finish(serve_job *j, int32_t status, char *body) {
    pthread_mutex_lock(&j->mu);
    if (body) job_write_locked(j, body, strlen(body));
    j->status = status;
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    free(body);
}

/* End a job with an error: an error event then [DONE] when streaming, else the status. */
void serve_job_fail(serve_job *j, int32_t status, const char *type, const char *msg) {
    serve_error e = {0};
    serve_error_set(&e, status, type, NULL, NULL, "%s", msg);
    if (j->req.stream) {
        job_event(j, e.body);
        serve_job_finish(j, status, strdup("data: [DONE]\n\n"));
    } else {
        serve_job_finish(j, status, e.body);
    }
}

/* ---- the answer ---------------------------------------------------------------------------- */

/* Append n bytes to a growing NUL-terminated string (dropped if out of memory). */
static void text_append(char **buf, size_t *len, size_t *cap, const char *text, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        while (c < *len + n + 1) c *= 2;
        char *nb = realloc(*buf, c);
        if (!nb) return;
        *buf = nb;
        *cap = c;
    }
    memcpy(*buf + *len, text, n);
    *len += n;
    (*buf)[*len] = 0;
}

/* Hand a piece of the answer, or of its thought (reasoning), with a token's logprobs entry
 * (may be NULL, taken over) to the client. */
static void out_text(serve_out *o, int reasoning, const char *text, size_t n, cJSON *lp) {
    serve_job *j = o->job;
    if (!j->req.stream) {
        if (reasoning) text_append(&o->thought, &o->thought_len, &o->thought_cap, text, n);
        else text_append(&o->text, &o->text_len, &o->text_cap, text, n);
        if (lp && o->logprobs) cJSON_AddItemToArray(o->logprobs, lp);
        else cJSON_Delete(lp);
        return;
    }
    if (!n && !lp) return;
    char *piece = strndup(text, n);
    serve_delta d = {0};
    if (reasoning) d.reasoning = piece ? piece : "";
    else d.content = piece ? piece : "";
    if (lp) {
        d.logprobs = cJSON_CreateArray();
        cJSON_AddItemToArray(d.logprobs, lp);
    }
    job_event(j, serve_json_chunk(&j->head, &d));
    free(piece);
}

/* Hand a complete tool call to the client: OpenAI's {"id", "type": "function", "function":
 * {"name", "arguments"}} (with "index" when streamed). */
static void out_call(serve_out *o, const char *name, const char *arguments) {
    serve_job *j = o->job;
    cJSON *c = cJSON_CreateObject(), *f;
    const char *dash = strchr(j->head.id, '-');
    char id[96];
    snprintf(id, sizeof id, "call_%s_%d", dash ? dash + 1 : j->head.id, o->n_calls);
    if (j->req.stream) cJSON_AddNumberToObject(c, "index", o->n_calls);
    cJSON_AddStringToObject(c, "id", id);
    cJSON_AddStringToObject(c, "type", "function");
    if ((f = cJSON_AddObjectToObject(c, "function"))) {
        cJSON_AddStringToObject(f, "name", name ? name : "");
        cJSON_AddStringToObject(f, "arguments", arguments ? arguments : "{}");
    }
    o->n_calls++;
    if (!j->req.stream) {
        if (!o->calls) o->calls = cJSON_CreateArray();
        cJSON_AddItemToArray(o->calls, c);
        return;
    }
    serve_delta d = {.tool_calls = cJSON_CreateArray()};
    cJSON_AddItemToArray(d.tool_calls, c);
    job_event(j, serve_json_chunk(&j->head, &d));
}

/* Answer text through the stop matcher; 1 when a stop string completed. */
static int out_content(serve_out *o, const char *text, size_t n, cJSON **lp) {
    const char *emit = "";
    size_t n_emit = 0;
    int hit = plume_stop_matcher_feed(&o->sm, text, n, &emit, &n_emit);
    out_text(o, 0, emit, hit < 0 ? 0 : n_emit, *lp);
    *lp = NULL;
    return hit == 1;
}

/* Deliver the chat parser's deltas: content through the stop matcher, thought as reasoning,
 * tool calls. *lp goes with the first text. 1 when a stop string completed, else 0. */
static int out_deltas(serve_out *o, const plume_chat_delta *dl, int32_t n, cJSON **lp) {
    for (int32_t i = 0; i < n; i++) {
        if (dl[i].type == PLUME_CHAT_TOOL_CALL) {
            out_call(o, dl[i].name, dl[i].arguments);
        } else if (dl[i].type == PLUME_CHAT_REASONING) {
            out_text(o, 1, dl[i].text, dl[i].len, *lp);
            *lp = NULL;
        } else if (out_content(o, dl[i].text, dl[i].len, lp)) {
            return 1;
        }
    }
    return 0;
}

/* Start an answer: the stop matcher, the chat parser when parse, the role chunk of a chat
 * stream. 0 or a PLUME_E* with *err. */
int serve_out_init(serve_out *o, serve_job *j, int32_t parse, char **err) {
    memset(o, 0, sizeof *o);
    o->job = j;
    int rc = plume_stop_matcher_init(&o->sm, (const char *const *)j->req.stops, j->req.n_stops, err);
    if (!rc && parse) rc = plume_chat_parser_new(&o->cp, j->in_thought, err);
    if (rc) {
        serve_out_free(o);
        return rc;
    }
    if (!j->req.stream && j->req.logprobs) o->logprobs = cJSON_CreateArray();
    if (j->req.stream && j->req.kind == SERVE_CHAT) {
        serve_delta d = {.role = 1, .content = ""};
        job_event(j, serve_json_chunk(&j->head, &d));
    }
    return 0;
}

/* piece[0..len) with every NUL byte (a model can write one: the byte token <0x00>) replaced
 * by U+FFFD, malloc'd, its length in *n; NULL if out of memory. The JSON strings of a reply
 * are C strings: a NUL would cut the rest of a non-streamed answer and of a streamed piece. */
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

/* Feed the text of one token (lp: its logprobs entry or NULL, taken over). 0 to go on,
 * SERVE_OUT_STOP when a stop string completed, SERVE_OUT_END when the chat parser read an end
 * marker. */
int serve_out_put(serve_out *o, const char *piece, size_t len, cJSON *lp) {
    if (len && memchr(piece, 0, len)) {
        size_t n = 0;
        char *clean = without_nul(piece, len, &n);
        int r = clean ? serve_out_put(o, clean, n, lp) : 0; /* out of memory: the piece is dropped */
        if (!clean) cJSON_Delete(lp);
        free(clean);
        return r;
    }
    int hit = 0, ended = 0;
    if (o->cp) {
        const plume_chat_delta *dl;
        int32_t nd = 0;
        ended = plume_chat_parser_feed(o->cp, piece, len, &dl, &nd);
        if (ended >= 0) hit = out_deltas(o, dl, nd, &lp);
        if (lp) out_text(o, 0, "", 0, lp); /* the token gave no text yet */
    } else {
        hit = out_content(o, piece, len, &lp);
    }
    if (hit) o->stopped = 1;
    return hit ? SERVE_OUT_STOP : ended == 1 ? SERVE_OUT_END : 0;
}

/* End the answer: release what the parser and the matcher hold (unless a stop string ended
 * it), then the final chunk, the usage chunk and [DONE]; or the whole reply. reason is "stop"
 * or "length"; "tool_calls" when calls were made and the model stopped. */
void serve_out_finish(serve_out *o, const char *reason, const serve_usage *u) {
    serve_job *j = o->job;
    cJSON *none = NULL;
    if (!o->stopped && o->cp) {
        const plume_chat_delta *dl;
        int32_t nd = 0;
        if (plume_chat_parser_flush(o->cp, &dl, &nd) == 0) o->stopped = out_deltas(o, dl, nd, &none);
    }
    if (o->stopped) {
        reason = "stop";
    } else {
        const char *emit = "";
        size_t n_emit = plume_stop_matcher_flush(&o->sm, &emit);
        out_text(o, 0, emit, n_emit, NULL);
    }
    if (o->n_calls > 0 && !strcmp(reason, "stop")) reason = "tool_calls";
    if (j->req.stream) {
        serve_delta d = {.finish_reason = reason};
        job_event(j, serve_json_chunk(&j->head, &d));
        if (j->req.include_usage) {
            serve_delta du = {.usage = u};
            job_event(j, serve_json_chunk(&j->head, &du));
        }
        serve_job_finish(j, 200, strdup("data: [DONE]\n\n"));
        return;
    }
    serve_delta d = {.content = o->text ? o->text : "", .reasoning = o->thought, .tool_calls = o->calls,
                     .finish_reason = reason, .usage = u, .logprobs = o->logprobs};
    if (o->calls && (!o->text || !*o->text)) d.content = NULL;
    o->logprobs = o->calls = NULL;
    serve_job_finish(j, 200, serve_json_final(&j->head, &d));
}

/* Free what the answer holds (the job is not touched). */
void serve_out_free(serve_out *o) {
    plume_stop_matcher_free(&o->sm);
    plume_chat_parser_free(o->cp);
    free(o->text);
    free(o->thought);
    cJSON_Delete(o->calls);
    cJSON_Delete(o->logprobs);
    memset(o, 0, sizeof *o);
}
