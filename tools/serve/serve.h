/* serve.h -- `plume serve`, an OpenAI-compatible HTTP server (docs/SERVER.md), in three parts:
 *
 *   serve_req.c    request bytes -> a parsed request or an OpenAI-shaped error; the prompt
 *                  of a chat request; the response JSON builders (chunks, final replies,
 *                  usage, errors). No sockets, no model: a fuzzer or a unit test drives it
 *                  with bytes.
 *   serve_out.c    a request in flight (serve_job) and the writing of its answer: generated
 *                  text -> chat parser -> stop strings -> SSE chunks or the final reply.
 *   serve_sched.c  the scheduler thread: N slots (a session each), a bounded queue, and the
 *                  continuous-batching loop (one plume_batch step for every active slot).
 *   cmd_serve.c    flags, libmicrohttpd, routing, SSE, auth, limits, signals, metrics.
 *
 * A request travels as a serve_job: the connection thread parses and tokenizes it, submits
 * it, then waits on the job's bytes (server-sent events, or the final JSON) and sends them. */
#ifndef PLUME_SERVE_H
#define PLUME_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "chat.h"
#include "plume.h"

#define SERVE_MAX_STOPS 16        /* stop strings a request may give */
#define SERVE_MAX_STOP_LEN 1024   /* bytes of one stop string */
#define SERVE_MAX_TOP_LOGPROBS 20 /* as OpenAI */
#define SERVE_MAX_MESSAGES 4096   /* messages of one chat request */
#define SERVE_PREFILL_CHUNK 64    /* prompt tokens a slot feeds per step, whatever the load */
#define SERVE_DEFAULT_SEED 0      /* the sampler's seed when a request gives none */

/* ---- requests ------------------------------------------------------------------------- */

typedef enum { SERVE_CHAT = 0, SERVE_COMPLETION = 1 } serve_kind;

/* One chat message as the client sent it (every string malloc'd, NULL when absent). */
typedef struct {
    char *role;              /* system, developer, user, assistant, tool */
    char *content;           /* a string content; NULL for parts or an assistant's tool calls */
    char **parts;            /* [n_parts] content given as a list of text parts */
    int32_t n_parts;
    char *reasoning_content; /* assistant: its thought ("reasoning" is taken too) */
    char *tool_calls;        /* assistant: the tool_calls array, as JSON text */
    char *tool_call_id;      /* tool: the call it answers */
    char *name;              /* tool: the function's name */
} serve_message;

/* A parsed /v1/chat/completions or /v1/completions request. */
typedef struct {
    serve_kind kind;
    char *model;                /* as given (any name is served by the one model) */
    serve_message *msgs;        /* [n_msgs] chat */
    int32_t n_msgs;
    char *prompt;               /* completion: the raw prompt */
    char *tools;                /* the tools array as JSON text, or NULL */
    char *tool_choice;          /* "auto" (default), "none", "required", or a function's name */
    int32_t enable_thinking;    /* reasoning_effort or chat_template_kwargs.enable_thinking */
    int32_t stream;
    int32_t include_usage;      /* stream_options.include_usage */
    int32_t max_tokens;         /* < 0: until the context is full */
    plume_sampler_params sp;
    char *stops[SERVE_MAX_STOPS];
    int32_t n_stops;
    int32_t ignore_eos;         /* llama-server's extension: end-of-turn ids do not end the answer */
    int32_t logprobs;           /* chat: 1 to return the chosen tokens' log-probabilities */
    int32_t top_logprobs;       /* 0..SERVE_MAX_TOP_LOGPROBS alternatives per token */
} serve_request;

/* An HTTP error status with its OpenAI-shaped JSON body (malloc'd). */
typedef struct {
    int32_t status;
    char *body;
} serve_error;

/* Parse a request body of the given kind. 0, or the HTTP status (400, or 500 when out of
 * memory) with e filled. The body need not be NUL-terminated; invalid UTF-8 is refused. */
int serve_request_parse(serve_request *r, serve_kind kind, const char *body, size_t len, serve_error *e);
void serve_request_free(serve_request *r);

/* Fill e with status and {"error": {"message", "type", "param", "code"}}; returns status.
 * param and code may be NULL (JSON null). */
int serve_error_set(serve_error *e, int32_t status, const char *type, const char *param, const char *code,
                    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
void serve_error_free(serve_error *e);

/* Whether s[0..n) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
int serve_utf8_valid(const char *s, size_t n);

/* The prompt text of a parsed chat request (*out malloc'd): the chat template with tools,
 * tool calls and replies, content parts and reasoning; tool_choice "none" renders no tools.
 * *in_thought says whether the prompt opened the thought channel. 0, or 400 (500 when out of
 * memory) with e filled. */
int serve_chat_render(const serve_request *r, char **out, int32_t *in_thought, serve_error *e);

/* Check that a prompt of n_prompt tokens and max_tokens (< 0: none) fit a context of n_ctx;
 * 0 or 400 with e filled. */
int serve_check_budget(int32_t n_prompt, int32_t max_tokens, int32_t n_ctx, serve_error *e);

/* POST /tokenize: {"content": TEXT[, "add_special": bool]}; *content malloc'd. 0 or 400. */
int serve_tokenize_parse(const char *body, size_t len, char **content, int32_t *add_special, serve_error *e);
/* POST /detokenize: {"tokens": [ids]} with ids in [0, n_vocab); *ids malloc'd. 0 or 400. */
int serve_detokenize_parse(const char *body, size_t len, int32_t n_vocab, int32_t **ids, int32_t *n,
                           serve_error *e);

/* ---- responses ------------------------------------------------------------------------ */

/* Token counts of a reply. */
typedef struct {
    int32_t prompt, completion, cached; /* cached: prompt tokens reused from a slot */
    double prompt_ms;    /* slot set up -> the first generated token (the prefill) */
    double predicted_ms; /* the first generated token -> the last: completion - 1 decode steps */
} serve_usage;

/* What every chunk and reply of one request repeats. */
typedef struct {
    serve_kind kind;
    char id[48];     /* "chatcmpl-..." or "cmpl-..." */
    const char *model;
    int64_t created; /* Unix seconds */
} serve_reply_head;

/* One piece of output: a streamed delta, or (for serve_json_final) the whole answer. The
 * cJSON members are taken over by the builders (freed). */
typedef struct {
    const char *content;       /* text, or NULL */
    const char *reasoning;     /* reasoning_content, or NULL */
    cJSON *tool_calls;         /* array of tool calls (or deltas), or NULL */
    cJSON *logprobs;           /* array of logprob entries, or NULL */
    int32_t role;              /* a chat delta carrying "role": "assistant" (the first) */
    const char *finish_reason; /* NULL while running */
    const serve_usage *usage;  /* final reply; or alone, the last chunk of include_usage */
} serve_delta;

/* A streamed chunk (chat.completion.chunk or text_completion), unformatted JSON, malloc'd. */
char *serve_json_chunk(const serve_reply_head *h, serve_delta *d);
/* The non-streamed reply (chat.completion or text_completion), malloc'd. */
char *serve_json_final(const serve_reply_head *h, serve_delta *d);
/* One logprobs.content entry: {"token", "logprob", "bytes", "top_logprobs": [...]}. */
cJSON *serve_json_logprob(const plume_tokenizer *tok, int32_t id, float logprob, const int32_t *top_ids,
                          const float *top_lps, int32_t n_top);
/* The usage object {"prompt_tokens", "completion_tokens", "total_tokens",
 * "prompt_tokens_details": {"cached_tokens"}}. */
cJSON *serve_json_usage(const serve_usage *u);

/* ---- the scheduler ---------------------------------------------------------------------- */

/* A request in flight, shared by its connection thread and the scheduler (reference counted).
 * Everything above `mu` is written by the connection before submitting and read-only after. */
typedef struct serve_job {
    serve_request req;
    int32_t *ids;             /* [n_ids] the prompt's tokens */
    int32_t n_ids;
    int32_t in_thought;       /* chat: the prompt opened the thought channel */
    serve_reply_head head;
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* signalled when bytes arrive or the job ends */
    char *out;                /* [out_len] bytes to send: SSE events, or the final JSON */
    size_t out_len, out_cap, out_sent;
    int32_t status;           /* HTTP status of a non-streamed reply */
    int32_t done;             /* the scheduler wrote its last byte */
    int32_t cancelled;        /* the client went away: stop generating */
    int32_t refs;
    struct serve_job *next;   /* the queue */
} serve_job;

/* A new job owning req (moved in), with one reference for the caller. NULL if out of memory. */
serve_job *serve_job_new(serve_request *req);
/* Drop a reference; the last frees the job. */
void serve_job_unref(serve_job *j);
/* Ask the scheduler to stop the job (the client is gone); it frees its slot at the next step. */
void serve_job_cancel(serve_job *j);
/* Whether the job was cancelled. */
int serve_job_cancelled(serve_job *j);
/* Append body (may be NULL; freed), set the status, mark the job done and wake its connection. */
void serve_job_finish(serve_job *j, int32_t status, char *body);
/* End the job with an error: an error event and [DONE] when streaming, else the error reply. */
void serve_job_fail(serve_job *j, int32_t status, const char *type, const char *msg);

/* The answer of one job as it is generated (serve_out.c). */
typedef struct {
    serve_job *job;
    plume_chat_parser *cp;  /* chat: text -> content, thought, tool calls; NULL: text is content */
    plume_stop_matcher sm;  /* the request's stop strings, on the content */
    int32_t stopped;        /* a stop string completed */
    int32_t n_calls;        /* tool calls delivered */
    char *text;             /* [text_len] the content so far (non-streamed replies) */
    size_t text_len, text_cap;
    char *thought;          /* [thought_len] the reasoning so far (non-streamed replies) */
    size_t thought_len, thought_cap;
    cJSON *calls;           /* the tool calls (non-streamed replies) */
    cJSON *logprobs;        /* logprobs.content entries (non-streamed replies with logprobs) */
} serve_out;

enum { SERVE_OUT_STOP = 1, SERVE_OUT_END = 2 };

/* Start the answer of j: parse != 0 runs the chat parser (its text must keep the special
 * tokens it reads); a chat stream gets its role chunk. 0 or a PLUME_E* with *err. */
int serve_out_init(serve_out *o, serve_job *j, int32_t parse, char **err);
/* Feed the text of one generated token and its logprobs entry (NULL, or taken over). 0, or
 * SERVE_OUT_STOP (a stop string completed) or SERVE_OUT_END (the parser read an end marker):
 * then the answer is over. */
int serve_out_put(serve_out *o, const char *piece, size_t len, cJSON *lp);
/* Send the end: held text, finish_reason ("stop" or "length"; "tool_calls" after calls),
 * the usage, [DONE] or the whole reply; the job is done. */
void serve_out_finish(serve_out *o, const char *reason, const serve_usage *u);
/* Free the answer's state (not the job). */
void serve_out_free(serve_out *o);

/* Scheduler settings. */
typedef struct {
    int32_t n_slots;        /* --parallel */
    int32_t n_ctx;          /* context of each slot */
    int32_t kv_bits;        /* 0: default */
    int32_t snapshot_every; /* 0: default */
    int32_t draft;          /* speculative decoding of greedy requests: tokens guessed per step, 0: off */
    int32_t queue_max;      /* requests waiting for a slot (beyond the idle slots) */
    const char *slot_dir;   /* --slot-save, or NULL */
} serve_sched_params;

/* Figures for /metrics. */
typedef struct {
    int64_t requests, prompt_tokens, cached_tokens, generated_tokens, steps;
    int64_t drafted, accepted; /* speculative decoding: tokens guessed, guesses accepted */
    double decode_seconds;  /* time in steps that decoded at least one token */
    int32_t queued, busy, n_slots;
} serve_stats;

typedef struct serve_sched serve_sched;

enum { SERVE_EFULL = 1, SERVE_ESTOPPED = 2 };

/* Create the slots (loading --slot-save files when there are) and start the thread. */
int serve_sched_new(serve_sched **out, plume_model *m, const serve_sched_params *p, char **err);
/* Queue a job (the scheduler takes a reference). 0, SERVE_EFULL or SERVE_ESTOPPED. */
int serve_sched_submit(serve_sched *s, serve_job *j);
/* Current figures. */
void serve_sched_stats(serve_sched *s, serve_stats *st);
/* Refuse new jobs, end every queued and running one (with a "shutting down" error), and
 * join the thread. Idempotent. */
void serve_sched_stop(serve_sched *s);
/* Save idle slots to the slot directory (if any), free everything. */
void serve_sched_free(serve_sched *s);

#endif
