/* serve.h -- the room of `plume serve` (docs/SERVER.md): an HTTP server over one model, with
 * continuous batching, that speaks several API dialects.
 *
 * What it owns: the transport (libmicrohttpd), the routes, the internal request, the
 * scheduler, the answers and the dialects. What it may call: libplume (plume.h and the
 * utility headers chat/chat.h, common.h). What it must not know: the CLI (tools/cli/ calls
 * serve_run and nothing else) and the Hub.
 *
 * Its files, in the order a request goes through them:
 *
 *   serve_http.c     the transport: sockets, routes, the API key, limits, waiting on a job and
 *                    sending its bytes (SSE or NDJSON streams, whole replies), /health,
 *                    /metrics, /v1/models, the web page; serve_run.
 *   serve_openai.c   a dialect (there will be more: one file each): request bytes -> the
 *                    internal request, answer events -> bytes, errors -> bytes. OpenAI's
 *                    /v1/chat/completions and /v1/completions, and llama-server's /tokenize
 *                    and /detokenize bodies.
 *   serve_request.c  the internal request, dialect-free: the typed JSON readers every dialect
 *                    shares, the chat prompt of a request, the context budget, UTF-8.
 *   serve_sched.c    the scheduler thread: N slots (a session each), a bounded queue, one
 *                    plume_batch step per iteration; it hands each generated token to the
 *                    job's answer as text and log-probabilities (numbers, never JSON).
 *   serve_answer.c   a request in flight (serve_job) and its answer: generated text -> chat
 *                    parser -> stop strings -> events (text, thought, tool call, end, error),
 *                    each turned into bytes by the job's dialect, or gathered into the whole
 *                    reply when not streamed.
 *
 * The transport, the scheduler and the answer name no JSON field; a dialect names no socket
 * or slot (../shared/spec/style.md, "Rooms"). */
#ifndef PLUME_SERVE_H
#define PLUME_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "chat/chat.h"
#include "common.h"
#include "plume.h"

#define SERVE_MAX_STOPS 16        /* stop strings a request may give */
#define SERVE_MAX_STOP_LEN 1024   /* bytes of one stop string */
#define SERVE_MAX_TOP_LOGPROBS 20 /* as OpenAI */
#define SERVE_MAX_MESSAGES 4096   /* messages of one chat request */
#define SERVE_PREFILL_CHUNK 64    /* prompt tokens a slot feeds per step, whatever the load */
#define SERVE_DEFAULT_SEED 0      /* the sampler's seed when a request gives none */

/* ---- errors -----------------------------------------------------------------------------
 * What went wrong, in no dialect's words: each dialect spells it (serve_dialect.error). */

typedef struct {
    int32_t status;     /* HTTP status: 400, 401, 404, 413, 429, 500, 503, ... */
    char type[32];      /* invalid_request_error, server_error, rate_limit_error, ... */
    char param[80];     /* the request field at fault, or "" */
    char code[32];      /* invalid_value, missing_field, ..., or "" */
    char message[1024];
} serve_error;

/* Fill e (param and code may be NULL); returns status. */
int serve_error_set(serve_error *e, int32_t status, const char *type, const char *param, const char *code,
                    const char *fmt, ...) __attribute__((format(printf, 6, 7)));

/* ---- the internal request -------------------------------------------------------------- */

typedef enum { SERVE_CHAT = 0, SERVE_COMPLETION = 1 } serve_kind;

/* One tool call of an assistant message (strings malloc'd). */
typedef struct {
    char *id;        /* or NULL */
    char *name;
    char *arguments; /* the arguments as JSON text */
} serve_tool_call;

/* One chat message (every string malloc'd, NULL when absent). */
typedef struct {
    char *role;              /* system, developer, user, assistant, tool */
    char *content;           /* a string content; NULL for parts or an assistant's tool calls */
    char **parts;            /* [n_parts] content given as a list of text parts */
    int32_t n_parts;
    char *reasoning_content; /* assistant: its thought */
    serve_tool_call *calls;  /* [n_calls] assistant: its tool calls */
    int32_t n_calls;
    char *tool_call_id;      /* tool: the call it answers */
    char *name;              /* tool: the function's name */
} serve_message;

/* A generation request as every dialect maps it: a chat (messages through the chat template)
 * or a raw completion (a prompt as it is). */
typedef struct {
    serve_kind kind;
    char *model;                /* as given (any name is served by the one model) */
    serve_message *msgs;        /* [n_msgs] chat */
    int32_t n_msgs;
    char *prompt;               /* completion: the raw prompt */
    char *tools;                /* the tools as the chat template takes them (OpenAI's list), JSON text, or NULL */
    char *tool_choice;          /* "auto" (default), "none", "required", or a function's name */
    int32_t enable_thinking;
    int32_t stream;
    int32_t include_usage;      /* streams: a last event with the usage */
    int32_t max_tokens;         /* < 0: until the context is full */
    plume_sampler_params sp;
    char *stops[SERVE_MAX_STOPS];
    int32_t n_stops;
    int32_t ignore_eos;         /* end-of-turn ids do not end the answer */
    int32_t logprobs;           /* return the chosen tokens' log-probabilities */
    int32_t top_logprobs;       /* 0..SERVE_MAX_TOP_LOGPROBS alternatives per token */
} serve_request;

struct serve_dialect;

/* Reset r to an empty request of a kind, with the sampler's defaults. */
void serve_request_init(serve_request *r, serve_kind kind);
/* Parse a request body in a dialect into r. 0, or an HTTP status with e filled (r is then
 * empty: nothing to free). The body need not be NUL-terminated; invalid UTF-8 is refused. */
int serve_request_parse(serve_request *r, const struct serve_dialect *d, const char *body, size_t len, serve_error *e);
/* Free every string of r. */
void serve_request_free(serve_request *r);

/* The prompt text of a chat request (*out malloc'd): the chat template with tools, tool
 * calls and replies, content parts and reasoning; tool_choice "none" renders no tools.
 * *in_thought says whether the prompt opened the thought channel. 0, or 400 (500 when out of
 * memory) with e filled. */
int serve_chat_render(const serve_request *r, char **out, int32_t *in_thought, serve_error *e);

/* Check that a prompt of n_prompt tokens and max_tokens (< 0: none) fit a context of n_ctx;
 * 0 or 400 with e filled. */
int serve_check_budget(int32_t n_prompt, int32_t max_tokens, int32_t n_ctx, serve_error *e);

/* Whether s[0..n) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
int serve_utf8_valid(const char *s, size_t n);

/* ---- typed JSON readers, shared by the dialects -----------------------------------------
 * Each reads one field of an object and leaves *out untouched when the field is absent or
 * null; 0, or a 400 naming the field (500 when out of memory). */

/* Parse a body as a JSON object (after checking its UTF-8); NULL and a 400 if it is not. */
cJSON *serve_json_object(const char *body, size_t len, serve_error *e);
int serve_json_bool(const cJSON *o, const char *name, int32_t *out, serve_error *e);
int serve_json_num(const cJSON *o, const char *name, double lo, double hi, float *out, serve_error *e);
int serve_json_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t *out, serve_error *e);
int serve_json_str(const cJSON *o, const char *name, char **out, serve_error *e); /* *out malloc'd */
/* A 400 invalid_value about one field: "'<param>' must be <what>". */
int serve_json_bad(serve_error *e, const char *param, const char *what);

/* ---- answers: events ------------------------------------------------------------------- */

/* Token counts and times of an answer. */
typedef struct {
    int32_t prompt, completion, cached; /* cached: prompt tokens reused from a slot */
    double prompt_ms;    /* slot set up -> the first generated token (the prefill) */
    double predicted_ms; /* the first generated token -> the last: completion - 1 decode steps */
} serve_usage;

/* The log-probability of one generated token and its most likely alternatives. */
typedef struct {
    int32_t id;
    float logprob;
    int32_t n_top;
    int32_t top_ids[SERVE_MAX_TOP_LOGPROBS];
    float top_lps[SERVE_MAX_TOP_LOGPROBS];
} serve_logprob;

typedef enum {
    SERVE_EV_START,     /* the answer begins */
    SERVE_EV_TEXT,      /* a piece of the answer's text (may be empty when it only carries lp) */
    SERVE_EV_THOUGHT,   /* a piece of its thought (reasoning) */
    SERVE_EV_TOOL_CALL, /* a complete tool call */
    SERVE_EV_END,       /* the answer is over */
    SERVE_EV_USAGE,     /* after END, when the request asked for the usage of a stream */
    SERVE_EV_ERROR,     /* the answer failed */
} serve_event_kind;

/* One event of an answer. */
typedef struct {
    serve_event_kind kind;
    const char *text;             /* TEXT, THOUGHT: [len] bytes, no NUL inside */
    size_t len;
    const serve_logprob *lp;      /* TEXT, THOUGHT: the token behind the piece, or NULL */
    const serve_tool_call *call;  /* TOOL_CALL */
    int32_t call_index;           /* TOOL_CALL: 0, 1, ... in the answer */
    const char *finish;           /* END: "stop", "length" or "tool_calls" */
    const serve_usage *usage;     /* END, USAGE */
    const serve_error *error;     /* ERROR */
} serve_event;

/* A whole answer, for the reply of a request that is not streamed. */
typedef struct {
    const char *text;             /* the content ("" when none) */
    const char *thought;          /* the reasoning, or NULL */
    const serve_tool_call *calls; /* [n_calls] */
    int32_t n_calls;
    const serve_logprob *lps;     /* [n_lps] when the request asked for log-probabilities */
    int32_t n_lps;
    const char *finish;
    const serve_usage *usage;
} serve_reply;

/* ---- dialects ------------------------------------------------------------------------- */

struct serve_job;

/* One API dialect: its bytes -> the internal request; answer events -> its bytes. The job
 * gives what every reply repeats (id, model, created time, the tokenizer for logprob text). */
typedef struct serve_dialect {
    const char *name;        /* "openai-chat", "openai-completion", ... */
    const char *id_prefix;   /* of the answer's id: "chatcmpl", "cmpl", ... */
    const char *stream_type; /* the Content-Type of a streamed answer */
    /* Parse a request body into r (serve_request_init'ed by the caller; freed by it on error).
     * 0, or an HTTP status with e filled. */
    int (*parse)(serve_request *r, const char *body, size_t len, serve_error *e);
    /* The bytes of one event of a streamed answer, appended to out. */
    void (*stream)(plume_buf *out, const struct serve_job *j, const serve_event *ev);
    /* The body of a whole (non-streamed) answer, malloc'd (NULL: out of memory). */
    char *(*reply)(const struct serve_job *j, const serve_reply *r);
    /* The body of an error reply, malloc'd (NULL: out of memory). */
    char *(*error)(const serve_error *e);
} serve_dialect;

extern const serve_dialect serve_openai_chat;       /* POST /v1/chat/completions */
extern const serve_dialect serve_openai_completion; /* POST /v1/completions */

/* POST /tokenize: {"content": TEXT[, "add_special": bool]}; *content malloc'd. 0 or 400. */
int serve_tokenize_parse(const char *body, size_t len, char **content, int32_t *add_special, serve_error *e);
/* POST /detokenize: {"tokens": [ids]} with ids in [0, n_vocab); *ids malloc'd. 0 or 400. */
int serve_detokenize_parse(const char *body, size_t len, int32_t n_vocab, int32_t **ids, int32_t *n,
                           serve_error *e);

/* ---- jobs and answers -------------------------------------------------------------------- */

/* A request in flight, shared by its connection thread and the scheduler (reference counted).
 * Everything above `mu` is written by the connection before submitting and read-only after. */
typedef struct serve_job {
    serve_request req;
    const serve_dialect *dialect;
    const plume_tokenizer *tok; /* spells the tokens of log-probabilities */
    int32_t *ids;             /* [n_ids] the prompt's tokens */
    int32_t n_ids;
    int32_t in_thought;       /* chat: the prompt opened the thought channel */
    char id[48];              /* "<dialect id_prefix>-..." */
    const char *model;        /* the name the model is served as */
    int64_t created;          /* Unix seconds */
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* signalled when bytes arrive or the job ends */
    plume_buf out;            /* bytes to send: stream events, or the whole reply */
    size_t out_sent;
    int32_t status;           /* HTTP status of a non-streamed reply */
    int32_t done;             /* the scheduler wrote its last byte */
    int32_t cancelled;        /* the client went away: stop generating */
    int32_t refs;
    struct serve_job *next;   /* the queue */
} serve_job;

/* A new job owning req (moved in) in a dialect, with one reference for the caller. NULL if
 * out of memory. */
serve_job *serve_job_new(serve_request *req, const serve_dialect *d);
/* Drop a reference; the last frees the job. */
void serve_job_unref(serve_job *j);
/* Ask the scheduler to stop the job (the client is gone); it frees its slot at the next step. */
void serve_job_cancel(serve_job *j);
/* Whether the job was cancelled. */
int serve_job_cancelled(serve_job *j);
/* End the job without a reply (its client is gone): status, done, its connection woken. */
void serve_job_abandon(serve_job *j, int32_t status);
/* End the job with an error: an error event when streaming, else the error reply. */
void serve_job_fail(serve_job *j, int32_t status, const char *type, const char *msg);

/* The answer of one job as it is generated. */
typedef struct {
    serve_job *job;
    plume_chat_parser *cp;  /* chat: text -> content, thought, tool calls; NULL: text is content */
    plume_stop_matcher sm;  /* the request's stop strings, on the content */
    int32_t stopped;        /* a stop string completed */
    int32_t n_calls;        /* tool calls delivered */
    /* the whole answer, gathered when the request is not streamed */
    plume_buf text, thought;
    serve_tool_call *calls; /* [n_calls] */
    serve_logprob *lps;     /* [n_lps] */
    int32_t n_lps, cap_lps;
} serve_answer;

enum { SERVE_ANSWER_STOP = 1, SERVE_ANSWER_END = 2 };

/* Start the answer of j: parse != 0 runs the chat parser (its text must keep the special
 * tokens it reads). 0 or a PLUME_E* with *err. */
int serve_answer_init(serve_answer *a, serve_job *j, int32_t parse, char **err);
/* Feed the text of one generated token and its log-probabilities (NULL when not asked). 0,
 * or SERVE_ANSWER_STOP (a stop string completed) or SERVE_ANSWER_END (the parser read an end
 * marker): then the answer is over. */
int serve_answer_put(serve_answer *a, const char *piece, size_t len, const serve_logprob *lp);
/* Send the end: held text, finish reason ("stop" or "length"; "tool_calls" after calls), the
 * usage, or the whole reply; the job is done. */
void serve_answer_finish(serve_answer *a, const char *reason, const serve_usage *u);
/* Free the answer's state (not the job). */
void serve_answer_free(serve_answer *a);

/* ---- the scheduler ---------------------------------------------------------------------- */

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

/* ---- the server ---------------------------------------------------------------------------- */

/* What `plume serve` was asked for (tools/cli/cmd_serve.c fills it from the flags). */
typedef struct {
    const char *bundle;     /* the model's directory */
    const char *host, *api_key, *slot_dir, *isa;
    int32_t port, parallel, n_ctx, queue, timeout, n_threads, kv_bits, snapshot_every, exact, draft;
    int32_t drain;          /* seconds running requests may take to finish after SIGTERM; 0: cut them */
    size_t max_body;
} serve_config;

/* The defaults of every field but bundle. */
serve_config serve_config_default(void);
/* Open the model, listen, serve until SIGINT or SIGTERM, drain (c->drain), shut down in
 * order. Returns the process exit status (messages printed on stderr). */
int serve_run(const serve_config *c);

#endif
