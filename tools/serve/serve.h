/* serve.h -- the room of `plume serve` (docs/SERVER.md): an HTTP server over one model, with
 * continuous batching, that speaks several API dialects.
 *
 * What it owns: the front door, the transport (libmicrohttpd), the routes, the preparation of
 * jobs, the internal request, the scheduler, the answers and the dialects. What it may call:
 * libplume (plume.h and the utility headers chat/chat.h, common.h, digest.h). What it must
 * not know: the CLI (tools/cli/ calls serve_run and nothing else) and the Hub.
 *
 * Its files, in the order a request goes through them:
 *
 *   serve_door.c     the front door: the listening socket; a connection waits there (a poll
 *                    set, a deadline, a share per client address) until its request head is
 *                    whole and checked, then goes to the daemon; bad heads get JSON errors.
 *   serve_http.c     the transport: sockets, the routes table (each endpoint's dialect, and
 *                    the dialect of a 404 under a prefix), the API key, CORS, limits and the
 *                    memory budget, waiting on a job and sending its bytes (SSE or NDJSON
 *                    streams, whole replies), /health, /metrics, the web page; serve_run.
 *   serve_prepare.c  a request body made into a job: the dialect's parse, the prompt rendered
 *                    and tokenized (<bos> from the vocabulary), ids, bias ids and a request's
 *                    grammar checked against the vocabulary, the context budget, the job's id.
 *   the dialects     one file each: request bytes -> the internal request, answer events ->
 *                    bytes, errors -> bytes (each maps the error kind and the finish to its
 *                    own words), reading only a job's const head (serve_job_head):
 *     serve_openai.c     OpenAI's /v1/chat/completions, /v1/completions and /v1/models;
 *     serve_responses.c  OpenAI's /v1/responses;
 *     serve_anthropic.c  Anthropic's /v1/messages and /v1/messages/count_tokens;
 *     serve_ollama.c     Ollama's /api/chat, /api/generate and its model endpoints;
 *     serve_transcribe.c /v1/audio/transcriptions: a multipart form -> a chat request of a clip;
 *     serve_llama.c      llama-server's /tokenize and /detokenize bodies.
 *   serve_request.c  the internal request, dialect-free: the typed JSON readers every dialect
 *                    shares, its tools, the chat prompt of a request, the context budget,
 *                    UTF-8, the error model.
 *   serve_media.c    images, audio and video: OpenAI's image_url and input_audio parts, vLLM's
 *                    video_url, remote image and video URLs, the prompt of a request with media (runs and keys), their encoding
 *                    on the scheduler's encoder thread (a plume_encoder: threads of its own).
 *   serve_sched.c    the scheduler thread: N slots (a session each), a bounded queue, one
 *                    plume_batch step per iteration, and the encoder thread that runs the
 *                    towers for a slot while the others step; a request of n choices takes n slots
 *                    and prefills once (the session is copied); it hands each generated
 *                    token to its choice's answer as text and log-probabilities (numbers,
 *                    never JSON), and the prompt's log-probabilities when asked.
 *   serve_answer.c   a request in flight (serve_job) and its answers, one per choice:
 *                    generated text -> chat parser -> stop strings -> events (text, thought,
 *                    tool call, end, done, error), each turned into bytes by the job's
 *                    dialect, or gathered into the whole reply when not streamed.
 *   webui.html       the chat page served at / (webui.h: the page as a C string, which the
 *                    Makefile generates from it).
 *
 * The transport, the preparation, the scheduler and the answer name no JSON field; a dialect
 * names no socket or slot (../shared/spec/style.md, "Rooms"). */
#ifndef PLUME_SERVE_H
#define PLUME_SERVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <cjson/cJSON.h>

#include "chat/chat.h"
#include "common.h"
#include "plume.h"

#define SERVE_MAX_STOPS 16        /* stop strings a request may give */
#define SERVE_MAX_STOP_LEN 1024   /* bytes of one stop string */
#define SERVE_MAX_TOP_LOGPROBS 20 /* as OpenAI */
#define SERVE_MAX_MESSAGES 4096   /* messages of one chat request */
#define SERVE_PREFILL_CHUNK 64    /* prompt tokens a slot feeds per step, whatever the load */
#define SERVE_IDLE_MS 50          /* the scheduler's nap when its slots wait for the encoder */
#define SERVE_LOGPROB_CHUNK 16    /* the same for a prompt whose log-probabilities are asked
                                     (every row's logits: 16 x V floats, 16 MB for Gemma) */
#define SERVE_MAX_CHOICES 8       /* n: choices of one request (each takes a slot) */
#define SERVE_MAX_BIAS 1024       /* logit_bias entries */
#define SERVE_SEED_MAX ((int64_t)1 << 53) /* drawn seeds are below: exact as a JSON number */
#define SERVE_MAX_MEDIA 32        /* images, audio clips and videos of one request */

/* ---- errors -----------------------------------------------------------------------------
 * What went wrong, in no dialect's words: an HTTP status, plume's kind of error and its code;
 * each dialect spells them in its own vocabulary (serve_dialect.error: OpenAI's "type",
 * Anthropic's error.type, Ollama's plain "error"). */

/* Whose fault, and what the client may do about it. */
typedef enum {
    SERVE_ERR_REQUEST = 0, /* the request is wrong or cannot be served as asked: change it */
    SERVE_ERR_BUSY,        /* the server is busy (queue, memory, connections): retry later */
    SERVE_ERR_TIMEOUT,     /* the client was too slow to send its request */
    SERVE_ERR_SERVER,      /* plume failed, or is shutting down */
} serve_error_kind;

typedef struct {
    int32_t status;        /* HTTP status: 400, 401, 404, 413, 429, 500, 503, ... */
    serve_error_kind kind;
    char param[80];        /* the request field at fault, or "" */
    char code[32];         /* plume's code: invalid_value, missing_field, server_busy, ..., or "" */
    char message[1024];
} serve_error;

/* Fill e (param and code may be NULL); returns status. */
int serve_error_set(serve_error *e, int32_t status, serve_error_kind kind, const char *param, const char *code,
                    const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Out of memory: a 500 (returns 500). */
#define SERVE_OOM(e) serve_error_set(e, 500, SERVE_ERR_SERVER, NULL, NULL, "out of memory")
/* A 400 invalid_media about an image or audio part (param: the part); printf's arguments. */
/* How deep a tool's parameters may nest as JSON: two levels (a schema, its "properties") for
 * each of the 100 schema levels the schema compiler follows (src/constrain/schema.c), as a
 * response format's schema may. */
#define SERVE_SCHEMA_MAX_JSON_DEPTH 200

#define SERVE_BAD_MEDIA(e, param, ...) serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "invalid_media", __VA_ARGS__)

/* ---- the internal request -------------------------------------------------------------- */

/* What a request asks for: a chat (messages through the chat template), a raw completion (a
 * prompt as it is), or nothing (a client loading the model: answered at once). */
typedef enum { SERVE_CHAT = 0, SERVE_COMPLETION = 1, SERVE_LOAD = 2 } serve_kind;

/* One tool call of an assistant message (strings malloc'd). */
typedef struct {
    char *id;        /* or NULL */
    char *name;
    char *arguments; /* the arguments as JSON text */
} serve_tool_call;

/* One tool a request declares, in no dialect's shape (strings malloc'd). */
typedef struct {
    char *name;
    char *description; /* or NULL */
    char *parameters;  /* the JSON Schema of its arguments as JSON text (the client's schema,
                          printed unformatted), or NULL when none was given */
    char *space;       /* Responses: the namespace tool that declared it (its calls name it), or NULL */
} serve_tool;

/* One chat message (every string malloc'd, NULL when absent). */
typedef struct {
    char *role;              /* system, developer, user, assistant, tool */
    char *content;           /* a string content; NULL for parts or an assistant's tool calls */
    char **parts;            /* [n_parts] content given as a list of text parts */
    int32_t n_parts;
    int32_t *part_types;     /* [n_parts] PLUME_CHAT_PART_* when media parts are among them, else NULL */
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
    size_t cap_msgs;
    int32_t continue_final;     /* chat: the last message (the assistant's) is continued, not closed */
    int32_t unload;             /* SERVE_LOAD: Ollama's keep_alive 0 (answered "unload"; the model stays) */
    int32_t one_call;           /* at most one tool call: the answer ends after the first (parallel_tool_calls
                                 * false, Anthropic's disable_parallel_tool_use) */
    const char *prompt_name;    /* the dialect's names of the prompt and of max_tokens, for errors: */
    const char *length_name;    /* "messages", "input", "prompt"; "max_tokens", "num_predict", ... */
    char *prompt;               /* completion: the raw prompt (text), or NULL when given as ids */
    int32_t *prompt_ids;        /* completion: [n_prompt_ids] the prompt as token ids (checked */
    int32_t n_prompt_ids;       /*   against the vocabulary when the job is made) */
    serve_tool *tools;          /* [n_tools] the tools the model may call */
    int32_t n_tools;
    char *tool_choice;          /* "auto" (default), "none", "required", or a function's name */
    char *warning;              /* what the request asked that plume left out (Responses' hosted
                                   tools), sent as the X-Plume-Warning header, or NULL */
    char *grammar;              /* the answer's format as GBNF (docs/STRUCTURED.md): a JSON schema,
                                   JSON mode or a forced tool call, compiled when the request is
                                   parsed (what cannot be enforced is a 400 then), or the
                                   request's own grammar; NULL: free */
    int32_t grammar_given;      /* 1: grammar is the request's GBNF text ("grammar") */
    const char *grammar_param;  /* the field the grammar came from ("grammar", "response_format",
                                   "format", "text.format", "tools", ...; static), named by the
                                   400 when the grammar cannot be enforced: every grammar is
                                   bound to the tokenizer and its start state made when the job
                                   is prepared (serve_prepare.c), never first when a slot takes it */
    int32_t enable_thinking;
    int32_t omit_thought;       /* the thought is not sent (Anthropic's thinking.display "omitted":
                                   the thinking block comes back empty) */
    int32_t stream;
    int32_t include_usage;      /* streams: the usage is sent (OpenAI asks; other dialects always send it) */
    int32_t max_tokens;         /* < 0: until the context is full; 0 (echo only): nothing generated */
    int32_t ctx_limit;          /* > 0: this request's context is smaller than the slots' (Ollama's num_ctx) */
    int32_t n;                  /* choices, 1..SERVE_MAX_CHOICES, sampled from one prefill */
    plume_sampler_params sp;    /* choice k samples with seed sp.seed + k */
    int32_t seed_given;         /* the request named its seed; else the server draws one */
    int32_t *bias_ids;          /* [n_bias] logit bias: bias_vals[i] added to the logit of */
    float *bias_vals;           /*   bias_ids[i] before sampling */
    int32_t n_bias;
    char *stops[SERVE_MAX_STOPS];
    int32_t n_stops;
    int32_t ignore_eos;         /* end-of-turn ids do not end the answer */
    int32_t logprobs;           /* return the chosen tokens' log-probabilities */
    int32_t top_logprobs;       /* 0..SERVE_MAX_TOP_LOGPROBS alternatives per token */
    int32_t echo;               /* completion: the answer's text starts with the prompt's (with
                                   logprobs: the prompt tokens' log-probabilities too) */
    int32_t prompt_logprobs;    /* -1: none; 0..SERVE_MAX_TOP_LOGPROBS: the prompt tokens' log-
                                   probabilities with that many alternatives (vLLM's field) */
    struct serve_media *media;  /* the images, audio and videos of the messages (serve_media.c), or NULL */
} serve_request;

struct serve_dialect;

/* Reset r to an empty request of a kind, with the sampler's defaults. */
void serve_request_init(serve_request *r, serve_kind kind);
/* Parse a request body in a dialect into r. 0, or an HTTP status with e filled (r is then
 * empty: nothing to free). The body need not be NUL-terminated; invalid UTF-8 is refused. */
int serve_request_parse(serve_request *r, const struct serve_dialect *d, const char *body, size_t len, serve_error *e);
/* Free every string of r. */
void serve_request_free(serve_request *r);
/* Append an empty message of a role to r (the list grows; at most SERVE_MAX_MESSAGES); NULL
 * with e filled (400 past the limit, 500 out of memory). */
serve_message *serve_request_add_message(serve_request *r, const char *role, serve_error *e);
/* Append a tool to r: its name, its description (NULL: none) and the JSON Schema of its
 * arguments (NULL or JSON null: none; printed as JSON text). 0 or 500. */
int serve_request_add_tool(serve_request *r, const char *name, const char *description, const cJSON *parameters,
                           serve_error *e);
/* A function declaration {"name", "description", "parameters"} (OpenAI's tools[i].function,
 * a Responses function tool) appended to r's tools. 0, or a 400 "'tools' must be <what>" when
 * fn is not an object with a string name (and a string description, if any). */
int serve_function_tool(serve_request *r, const cJSON *fn, const char *what, serve_error *e);
/* The tools of r in the shape libplume takes them (plume_chat_options.tools_json,
 * plume_tool_call_grammar: OpenAI's list of function declarations), JSON text, malloc'd; NULL
 * when out of memory. */
char *serve_tools_json(const serve_request *r);
/* Append a tool call to m (every string copied; arguments JSON text, NULL: none). 0 or 500. */
int serve_message_add_call(serve_message *m, const char *id, const char *name, const char *arguments,
                           serve_error *e);
/* Append one text part to m (m->content and parts are exclusive: a content string becomes the
 * first part). 0 or 500. */
int serve_message_add_part(serve_message *m, const char *text, serve_error *e);
/* A seed no request has had: [0, SERVE_SEED_MAX), from a generator seeded by the clock and
 * the process at the first call (thread-safe). */
int64_t serve_seed_draw(void);

/* The prompt text of a chat request (*out malloc'd): the chat template with tools, tool
 * calls and replies, content parts and reasoning; tool_choice "none" renders no tools.
 * *in_thought says whether the prompt opened the thought channel. 0, or 400 (500 when out of
 * memory) with e filled. */
int serve_chat_render(const serve_request *r, char **out, int32_t *in_thought, serve_error *e);

/* Check that a prompt of n_prompt tokens leaves room to answer in a context of n_ctx; 0 or
 * 400 with e filled, naming the prompt as the request's dialect does. A max_tokens beyond
 * that room is no error (the answer stops when the context is full, finish "length"). */
int serve_check_request_budget(const serve_request *r, int32_t n_prompt, int32_t n_ctx, serve_error *e);

/* Whether s[0..n) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
int serve_utf8_valid(const char *s, size_t n);

/* ---- typed JSON readers, shared by the dialects -----------------------------------------
 * Each reads one field of an object and leaves *out untouched when the field is absent or
 * null; 0, or a 400 naming the field (500 when out of memory). */

/* Parse a body as a JSON object (after checking its UTF-8 and serve_json_check); NULL and a
 * 400 if it is not one, or if bytes other than white space follow it. */
cJSON *serve_json_object(const char *body, size_t len, serve_error *e);
/* node (parsed by serve_json_object) as compact JSON text with each number exactly as the
 * client wrote it (cJSON's own printing rounds them); malloc'd, NULL if out of memory. */
char *serve_json_exact(const cJSON *node);
/* Scan a JSON body without parsing it: refuse (400) what the parser would take silently and
 * C strings cannot hold, a raw control character or an escaped \u0000 inside a string (the
 * text would be cut there); count in *nodes an upper bound of the values a parse makes (the
 * parsed tree costs about SERVE_JSON_NODE_BYTES each: the transport's memory budget). 0 or a
 * 400 in e. */
int serve_json_check(const char *body, size_t len, size_t *nodes, serve_error *e);
#define SERVE_JSON_NODE_BYTES 128 /* a cJSON node (64 bytes), its key and malloc's overhead */
int serve_json_bool(const cJSON *o, const char *name, int32_t *out, serve_error *e);
int serve_json_num(const cJSON *o, const char *name, double lo, double hi, float *out, serve_error *e);
int serve_json_int(const cJSON *o, const char *name, int64_t lo, int64_t hi, int64_t *out, serve_error *e);
int serve_json_str(const cJSON *o, const char *name, char **out, serve_error *e); /* *out malloc'd */
/* A seed (any integer of a JSON number's exact range); sets r->seed_given. */
int serve_json_seed(const cJSON *o, const char *name, serve_request *r, serve_error *e);
/* Stop strings: a string or a list of at most SERVE_MAX_STOPS (list_only: a string alone is
 * refused), appended to r->stops. */
int serve_json_stops(const cJSON *o, const char *name, int32_t list_only, serve_request *r, serve_error *e);
/* A 400 invalid_value about one field: "'<param>' must be <what>". */
int serve_json_bad(serve_error *e, const char *param, const char *what);
/* A 400 unsupported_value about one field plume cannot honour: "'<param>' <why>". */
int serve_json_unsupported(serve_error *e, const char *param, const char *why);
/* The answer's format (r->grammar) from a JSON Schema, or any JSON object when schema is NULL
 * (OpenAI's json_object, Ollama's "json"). A schema outside the subset plume enforces is a 400
 * about param naming the keyword and where it is. */
int serve_format_schema(serve_request *r, const char *param, const cJSON *schema, serve_error *e);
/* A tool_choice mode: whether s is "auto", "none" or "required". */
int serve_tool_mode(const char *s);
/* A reasoning effort: 1 (thinking on: low, medium, high), 0 (off: none, minimal), -1 (not one). */
int32_t serve_effort_thinking(const char *effort);

/* ---- answers: events ------------------------------------------------------------------- */

/* Token counts and times of an answer (of one choice, or summed over a request's choices:
 * the prompt counted once). */
typedef struct {
    int32_t prompt, completion, cached; /* cached: prompt tokens reused from a slot */
    int32_t reasoning;   /* completion tokens that went to the thought */
    double prompt_ms;    /* slot set up -> the first generated token (the prefill) */
    double predicted_ms; /* the first generated token -> the last: completion - 1 decode steps */
    int32_t drafted, accepted; /* speculative decoding: tokens guessed, guesses the model kept */
} serve_usage;

/* Why a choice ended, in no dialect's words (each dialect names it: OpenAI's finish_reason,
 * Anthropic's stop_reason, Ollama's done_reason). */
typedef enum {
    SERVE_FINISH_NONE = 0,   /* not ended (yet) */
    SERVE_FINISH_STOP,       /* the model ended its turn, or a stop string came */
    SERVE_FINISH_LENGTH,     /* max_tokens, or the context, ran out */
    SERVE_FINISH_TOOL_CALLS, /* the model stopped after calling tools */
    SERVE_FINISH_LOAD,       /* a SERVE_LOAD request: nothing was generated */
} serve_finish;

/* The log-probability of one generated token and its most likely alternatives. */
typedef struct {
    int32_t id;
    float logprob;
    int32_t rank;  /* prompt tokens: 1 + the ids more likely than it; 0: not computed */
    int32_t n_top;
    int32_t top_ids[SERVE_MAX_TOP_LOGPROBS];
    float top_lps[SERVE_MAX_TOP_LOGPROBS];
} serve_logprob;

/* The events of a streamed answer, in order: per choice START, [PROMPT], then TEXT, THOUGHT
 * and TOOL_CALL pieces, END; once every choice has ended, DONE. ERROR ends it instead. The
 * choices of one request interleave. */
typedef enum {
    SERVE_EV_START,     /* a choice begins */
    SERVE_EV_PROMPT,    /* the prompt was read: its log-probabilities are in the job (echo, prompt_logprobs) */
    SERVE_EV_TEXT,      /* a piece of the answer's text (may be empty when it only carries lp) */
    SERVE_EV_THOUGHT,   /* a piece of its thought (reasoning) */
    SERVE_EV_TOOL_CALL, /* a complete tool call */
    SERVE_EV_END,       /* a choice is over */
    SERVE_EV_DONE,      /* every choice is over: the request's usage; the last event */
    SERVE_EV_ERROR,     /* the answer failed; the last event */
} serve_event_kind;

/* One event of an answer. */
typedef struct {
    serve_event_kind kind;
    int32_t choice;               /* 0..n-1 (all but DONE, ERROR) */
    const char *text;             /* TEXT, THOUGHT: [len] bytes, no NUL inside */
    size_t len;
    const serve_logprob *lp;      /* TEXT, THOUGHT: the token behind the piece, or NULL */
    const serve_tool_call *call;  /* TOOL_CALL */
    int32_t call_index;           /* TOOL_CALL: 0, 1, ... in the choice */
    serve_finish finish;          /* END: STOP, LENGTH or TOOL_CALLS */
    const char *stop;             /* END: the stop string that ended the choice, or NULL */
    const serve_usage *usage;     /* END: the choice's; DONE: the request's */
    const serve_error *error;     /* ERROR */
} serve_event;

/* One choice of a whole answer, for the reply of a request that is not streamed. */
typedef struct {
    const char *text;             /* the content ("" when none) */
    const char *thought;          /* the reasoning, or NULL */
    const serve_tool_call *calls; /* [n_calls] */
    int32_t n_calls;
    const serve_logprob *lps;     /* [n_lps] when the request asked for log-probabilities */
    int32_t n_lps;
    serve_finish finish;          /* STOP, LENGTH, TOOL_CALLS (SERVE_LOAD: LOAD) */
    const char *stop;             /* the stop string that ended it, or NULL */
} serve_reply;

/* What a dialect's endpoints that generate nothing tell about the model (Ollama's /api/tags,
 * /api/show, /api/ps, ...). */
typedef struct {
    const char *model;       /* the name it is served as */
    const char *weights;     /* "f32", "bf16", "q8", "q4" */
    int32_t n_ctx;           /* context of each slot */
    int32_t n_vocab, n_layers;
    int32_t vision, audio;   /* the bundle has a vision / an audio tower */
    int32_t video;           /* and a video token for its vision tower */
    int32_t n_slots, busy;   /* slots, and slots serving a request now */
    uint64_t bytes;          /* the bundle's files, on disk */
    int64_t modified;        /* the bundle's newest file, Unix seconds */
    char digest[65];         /* hex SHA-256 of the bundle's manifest (or of its name and size) */
} serve_info;

/* ---- JSON writers, shared by the dialects ------------------------------------------------- */

/* The text of one token id (special tokens written out) into text[cap] (cap >= 64); its
 * length. */
int64_t serve_token_text(const plume_tokenizer *tok, int32_t id, char *text, size_t cap);
/* {"token", "logprob", "bytes"} of one id (a log-probability of -inf, a banned token, as
 * -9999: JSON has no infinity). */
cJSON *serve_json_token_logprob(const plume_tokenizer *tok, int32_t id, float logprob);
/* The same for a generated token, with "top_logprobs": [its alternatives, the same shape]. */
cJSON *serve_json_logprob(const plume_tokenizer *tok, const serve_logprob *lp);

/* ---- dialects ------------------------------------------------------------------------- */

struct serve_dialect;

/* What a dialect reads of a job (its head): what every reply repeats (id, model, created
 * time), the request, the tokenizer for logprob text, the prompt's tokens. Written by the
 * connection thread before the job is submitted (prompt_lps: by the scheduler before the
 * PROMPT event), read-only after; a dialect is given it const, never the job's lock or queue. */
typedef struct {
    serve_request req;
    const struct serve_dialect *dialect;
    const plume_tokenizer *tok; /* spells the tokens of log-probabilities */
    int32_t *ids;             /* [n_ids] the prompt's tokens */
    int32_t n_ids;
    int32_t echo_from;        /* ids[echo_from..] are the client's (1 when plume added the <bos>) */
    int32_t in_thought;       /* chat: the prompt opened the thought channel */
    serve_logprob *prompt_lps;/* [n_ids] when asked (req.echo && logprobs, or prompt_logprobs): */
                              /*   entry i is ids[i] given ids[<i]; entry 0 has none (NaN) */
    int32_t prompt_top;       /* alternatives per prompt token */
    int32_t cached_at_start;  /* prompt tokens reused from the slot: by the scheduler before the
                                 START event (Anthropic's message_start reports them) */
    char id[48];              /* "<dialect id_prefix>-..." */
    const char *model;        /* the name the model is served as */
    int64_t created;          /* Unix seconds */
} serve_job_head;

/* One API dialect: its bytes -> the internal request; answer events -> its bytes. The job's
 * head gives what every reply repeats and, for a stream, the dialect has its own state
 * (state_size bytes, zeroed, freed with state_free). */
typedef struct serve_dialect {
    const char *name;        /* "openai-chat", "openai-completion", "ollama-chat", ... */
    const char *id_prefix;   /* of the answer's id: "chatcmpl", "cmpl", "msg", ... */
    const char *stream_type; /* the Content-Type of a streamed answer */
    size_t state_size;       /* bytes of a stream's state (0: none) */
    /* Parse a request body into r (serve_request_init'ed by the caller; freed by it on error).
     * 0, or an HTTP status with e filled. */
    int (*parse)(serve_request *r, const char *body, size_t len, serve_error *e);
    /* The bytes of one event of a streamed answer, appended to out. */
    void (*stream)(plume_buf *out, const serve_job_head *j, void *state, const serve_event *ev);
    /* The body of a whole (non-streamed) answer of n choices and their usage, malloc'd (NULL:
     * out of memory). u is NULL for a SERVE_LOAD request. */
    char *(*reply)(const serve_job_head *j, const serve_reply *r, int32_t n, const serve_usage *u);
    /* The body of an error reply, malloc'd (NULL: out of memory). */
    char *(*error)(const serve_error *e);
    /* Bytes a client of a stream skips (an SSE comment line ":"; a space before the next of
     * JSON lines), sent once when the client's input ends: a client that only half-closed
     * reads them, a gone one resets. NULL: the end of its input ends the stream. */
    const char *idle;
    /* The body answering a token count of a parsed request, malloc'd, or NULL (none). */
    char *(*count)(int32_t n_tokens);
    /* Free what the dialect keeps in a stream's state (may be NULL). */
    void (*state_free)(void *state);
    /* The Content-Type of a whole reply (NULL, or the function NULL: application/json). */
    const char *(*content_type)(const serve_job_head *j);
    /* The request body is not JSON (a multipart form): the transport budgets it by its bytes
     * alone, without the JSON check and count of values. */
    int form_body;
} serve_dialect;

/* An endpoint of a dialect that generates nothing: the reply body (malloc'd) to a request body
 * about the model, or NULL with e filled (a 4xx, or 500 out of memory). */
typedef char *(*serve_info_fn)(const serve_info *m, const char *body, size_t len, serve_error *e);

extern const serve_dialect serve_openai_chat;       /* POST /v1/chat/completions */
extern const serve_dialect serve_openai_completion; /* POST /v1/completions */
extern const serve_dialect serve_responses;         /* POST /v1/responses */
/* The body of an OpenAI error (the Responses API's too): {"error": {"message", "type",
 * "param", "code"}}, malloc'd. */
char *serve_openai_error(const serve_error *e);
/* OpenAI's error "type" of a kind of error: invalid_request_error, rate_limit_error, ... */
const char *serve_openai_error_type(serve_error_kind kind);
/* OpenAI's finish_reason of a finish: "stop", "length", "tool_calls" ("load": SERVE_LOAD). */
const char *serve_openai_finish(serve_finish f);
/* GET /v1/models: the list of the one model; GET /v1/models/NAME (one not NULL): that model
 * (any name is served by the one model). The body, malloc'd (NULL: out of memory). */
char *serve_openai_models(const serve_info *m, const char *one);
extern const serve_dialect serve_anthropic;         /* POST /v1/messages */
extern const serve_dialect serve_anthropic_count;   /* POST /v1/messages/count_tokens */
extern const serve_dialect serve_ollama_chat;       /* POST /api/chat */
extern const serve_dialect serve_ollama_generate;   /* POST /api/generate */

/* Ollama's endpoints that generate nothing, and the text of its GET / (a client's probe). */
char *serve_ollama_version(const serve_info *m, const char *body, size_t len, serve_error *e);
char *serve_ollama_tags(const serve_info *m, const char *body, size_t len, serve_error *e);
char *serve_ollama_ps(const serve_info *m, const char *body, size_t len, serve_error *e);
char *serve_ollama_show(const serve_info *m, const char *body, size_t len, serve_error *e);
char *serve_ollama_embed(const serve_info *m, const char *body, size_t len, serve_error *e);
extern const char serve_ollama_banner[];

/* POST /tokenize: {"content": TEXT[, "add_special": bool]}; *content malloc'd. 0 or 400. */
int serve_tokenize_parse(const char *body, size_t len, char **content, int32_t *add_special, serve_error *e);
/* POST /detokenize: {"tokens": [ids]} with ids in [0, n_vocab); *ids malloc'd. 0 or 400. */
int serve_detokenize_parse(const char *body, size_t len, int32_t n_vocab, int32_t **ids, int32_t *n,
                           serve_error *e);
/* The /tokenize reply {"tokens": [bos?, ids...]} (bos < 0: none), written as it is (at most 12
 * bytes an id), not built as a tree of a node per id; malloc'd (NULL: out of memory). */
char *serve_tokenize_reply(const int32_t *ids, int32_t n, int32_t bos);
/* The /detokenize reply {"content": text}, malloc'd (NULL: out of memory). */
char *serve_detokenize_reply(const char *text);

/* ---- jobs and answers -------------------------------------------------------------------- */

/* A choice's whole answer, gathered while it is generated (requests not streamed). */
typedef struct {
    plume_buf text, thought;
    serve_tool_call *calls; /* [n_calls] */
    int32_t n_calls;
    serve_logprob *lps;     /* [n_lps] */
    int32_t n_lps;
    size_t cap_lps;
    serve_finish finish;    /* once ended: STOP, LENGTH, TOOL_CALLS */
    int32_t stop;           /* the index of the stop string that ended it, or -1 */
} serve_gathered;

/* A request in flight, shared by its connection thread and the scheduler (reference counted).
 * Its head is written by the connection before submitting and read-only after (the dialect
 * reads it); the rest, under `mu`. */
typedef struct serve_job {
    serve_job_head head;      /* what the dialect reads */
    void *state;              /* the dialect's state of a stream (dialect->state_size bytes) */
    pthread_mutex_t mu;
    pthread_cond_t cv;        /* signalled when bytes arrive or the job ends */
    plume_buf out;            /* bytes to send: stream events, or the whole reply */
    size_t out_sent;
    int32_t status;           /* HTTP status of a non-streamed reply */
    int32_t done;             /* the scheduler wrote its last byte */
    int32_t cancelled;        /* the client went away, or the job failed: stop generating */
    int32_t n_ended;          /* choices ended */
    serve_usage usage;        /* summed over the choices ended */
    serve_gathered *choices;  /* [req.n] not streamed: each choice's answer, moved in as it ends */
    int32_t refs;
    struct serve_job *next;   /* the queue */
} serve_job;

/* A new job owning req (moved in) in a dialect, with one reference for the caller. NULL if
 * out of memory. */
serve_job *serve_job_new(serve_request *req, const serve_dialect *d);
/* The whole reply of a SERVE_LOAD job (nothing generated; finish "load"): body, status, done. */
void serve_job_load(serve_job *j);
/* Drop a reference; the last frees the job. */
void serve_job_unref(serve_job *j);
/* Ask the scheduler to stop the job (the client is gone); it frees its slot at the next step. */
void serve_job_cancel(serve_job *j);
/* Whether the job was cancelled. */
int serve_job_cancelled(serve_job *j);
/* End the job without a reply (its client is gone): status, done, its connection woken. */
void serve_job_abandon(serve_job *j, int32_t status);
/* End the job with an error: an error event when streaming, else the error reply. */
void serve_job_fail(serve_job *j, int32_t status, serve_error_kind kind, const char *msg);

/* The answer of one choice of a job as it is generated. */
typedef struct {
    serve_job *job;
    int32_t choice;         /* 0..req.n-1 */
    plume_chat_parser *cp;  /* chat: text -> content, thought, tool calls; NULL: text is content */
    plume_stop_matcher sm;  /* the request's stop strings, on the content */
    int32_t stopped;        /* a stop string completed */
    int32_t n_calls;        /* tool calls delivered */
    int32_t n_thought;      /* tokens whose text went to the thought only */
    serve_gathered g;       /* the whole answer, gathered when the request is not streamed */
} serve_answer;

enum { SERVE_ANSWER_STOP = 1, SERVE_ANSWER_END = 2 };

/* Start the answer of choice `choice` of j: parse != 0 runs the chat parser (its text must
 * keep the special tokens it reads). 0 or a PLUME_E* with *err. */
int serve_answer_init(serve_answer *a, serve_job *j, int32_t choice, int32_t parse, char **err);
/* The prompt has been read (its log-probabilities, when asked, are in the job): the PROMPT
 * event of a stream. */
void serve_answer_prompt(serve_answer *a);
/* Feed the text of one generated token, whether it is a special token (the chat parser acts
 * on special tokens only: a model spelling "<turn|>" or a tool call with ordinary tokens
 * writes text), and its log-probabilities (NULL when not asked). 0, or SERVE_ANSWER_STOP (a
 * stop string completed) or SERVE_ANSWER_END (the parser read an end marker): then the
 * answer is over. */
int serve_answer_put(serve_answer *a, const char *piece, size_t len, int32_t special, const serve_logprob *lp);
/* End the choice: held text, finish reason (STOP or LENGTH; TOOL_CALLS after calls), its
 * usage. The last choice to end sends DONE, or the whole reply; the job is then done. */
void serve_answer_finish(serve_answer *a, serve_finish reason, const serve_usage *u);
/* Free the answer's state (not the job). */
void serve_answer_free(serve_answer *a);

/* ---- media (serve_media.c) -----------------------------------------------------------------
 * A request's images, audio and videos: the dialect's parser keeps each part's bytes, the connection
 * thread decodes and counts them while it makes the prompt, the scheduler's encoder thread
 * encodes them, beside the batch steps, when a slot must compute their rows. */

/* One image, audio clip or video of a request. */
typedef struct {
    int32_t kind;       /* PLUME_CHAT_PART_IMAGE, PLUME_CHAT_PART_AUDIO or PLUME_CHAT_PART_VIDEO */
    char param[80];     /* the part, as the client wrote it: "messages[0].content[1]", "file" */
    uint8_t *bytes;     /* the file's bytes (a data URL's, an input_audio's, a fetched URL's) */
    size_t len;
    char *url;          /* a remote image or video, fetched when the prompt is made; or NULL */
    plume_image *img;   /* decoded, when the prompt is made */
    plume_audio *aud;
    plume_video *vid;   /* a video's sampled frames, resized */
    int32_t n_tokens;   /* soft tokens (the run's placeholders) */
    uint64_t key;       /* its identity (pixels / samples hash) */
    int32_t start;      /* the prompt position of its first placeholder row */
    int32_t *pos;       /* [n_tokens] the position of each row when they are not [start, start +
                           n_tokens): a video's frames, runs split by their timestamps; or NULL */
    plume_embd *emb;    /* encoded by the encoder thread, when its rows must be computed */
} serve_medium;

typedef struct serve_media {
    serve_medium *items; /* [n] in the prompt's order */
    int32_t n;
    size_t cap;
    uint64_t *keys;      /* [n_keys] each prompt position's key (0: a token) */
    int32_t n_keys;
    const plume_embd **list; /* [n] scratch of serve_media_at */
    /* POST /v1/audio/transcriptions */
    int32_t transcribe;  /* 1: a transcription (the dialect's reply reads the fields below) */
    char format[16];     /* response_format: json, text, srt, vtt, verbose_json */
    char *language;      /* as given, or NULL */
    double seconds;      /* the clip's length */
    /* the memory budget (--max-request-memory) its decoded pixels and samples hold */
    atomic_size_t *pool; /* the server's bytes in use, or NULL: not counted */
    size_t held;         /* bytes of it this request holds until the encoder frees them */
} serve_media;

/* The prompt position of row k (0 <= k < n_tokens) of a medium. */
int32_t serve_medium_pos(const serve_medium *it, int32_t k);
/* The request's media, made on first use; NULL (500 in e) when out of memory. */
serve_media *serve_media_of(serve_request *r, serve_error *e);
/* Append a medium of a kind (PLUME_CHAT_PART_IMAGE, _AUDIO, _VIDEO) to r, and its part to m (NULL:
 * none); param names it in refusals. NULL with e filled (400 past SERVE_MAX_MEDIA, 500). */
serve_medium *serve_media_add(serve_request *r, serve_message *m, int32_t kind, const char *param, serve_error *e);

/* How remote media URLs are fetched, and the budget decoded media take. */
typedef struct {
    int32_t allow_remote; /* 0: refused (400), 1: public addresses only, 2: private ones too */
    size_t max_bytes;     /* the largest image fetched */
    int32_t timeout;      /* seconds a fetch may take, redirects included */
    atomic_size_t *mem_used; /* the server's memory budget in use (decoded media count in it), or NULL */
    size_t mem_cap;          /* --max-request-memory */
    atomic_int_fast64_t *abandoned; /* the server's count of requests whose media work stopped because
                                       their client left (/metrics), or NULL */
} serve_media_opts;

/* Whether the client of a request being made ready is still there: gone(ctx) is asked between
 * the steps of its media (fetch, decode, shrink, count) and between a video's packets, so a
 * client that left stops the work at the next step (an image or an audio clip is decoded
 * whole: those decoders are not stopped midway). */
typedef struct {
    int (*gone)(void *ctx); /* nonzero: the client left */
    void *ctx;
} serve_watch;
/* Give back the budget md's decoded media hold (when their pixels and samples are freed). */
void serve_media_release(serve_media *md);

/* One field of a multipart/form-data body. */
typedef struct {
    char name[64];
    char filename[256];
    const char *data; /* into the body */
    size_t len;
} serve_form_field;

/* Append a media part (PLUME_CHAT_PART_IMAGE, _AUDIO, _VIDEO) to m: the chat template writes its
 * placeholder there. 0 or 500. */
int serve_message_add_media_part(serve_message *m, int32_t kind, serve_error *e);
/* An OpenAI media content part ({"type": "image_url" | "input_audio" | "video_url", ...}) of message m of r:
 * its bytes kept (a data URL or base64 decoded; a remote URL noted). 0, or a 400 naming the part
 * (param, e.g. "messages[0].content[1]"). */
int serve_media_part(serve_request *r, serve_message *m, const cJSON *part, const char *param, serve_error *e);
/* Ollama's "images" (a list of base64 strings) of message m: image parts before its text. 0,
 * or a 400 naming the image (param: the list, e.g. "messages[1].images"). */
int serve_media_images(serve_request *r, serve_message *m, const cJSON *list, const char *param, serve_error *e);
/* An Anthropic image block ({"type": "image", "source": {"type": "base64", "data"} or {"type":
 * "url", "url"}}) of user message m. 0, or a 400 naming the block (param). */
int serve_media_image_block(serve_request *r, serve_message *m, const cJSON *blk, const char *param, serve_error *e);
/* The tokens of a chat request with media whose rendered prompt is text: remote images fetched,
 * every medium decoded, checked and counted (no tower run), placeholders expanded into runs, each
 * position's key noted. *ids malloc'd. 0, or a 400 naming the part (500 out of memory). */
int serve_media_prompt(const plume_model *m, serve_request *r, const serve_media_opts *o, const serve_watch *w,
                       const char *text, int32_t **ids, int32_t *n, serve_error *e);
/* Each prompt position's media key (0: a token), or NULL when the request has no media. */
const uint64_t *serve_media_keys(const serve_media *md);
/* How many media a prefill from position `from` needs encoded (their rows start at or after it,
 * or run past it, and are not encoded yet). */
int32_t serve_media_pending(const serve_media *md, int32_t from);
/* Encode with enc (the towers, on its own threads) every medium whose rows a prefill from
 * position `from` needs, then free the pixels and samples. The scheduler's encoder thread,
 * once per request, while no other thread reads the media; *n_encoded: media encoded. 0 or a
 * PLUME_E* with *err (PLUME_ECANCELED: enc's abort callback stopped it). */
int serve_media_encode(serve_media *md, plume_encoder *enc, int32_t from, int32_t *n_encoded, char **err);
/* The media of a prefill from position pos, for plume_batch_add_media: *list (valid until the
 * next call), how many of the first one's rows lie before pos (*skip); returns the count. */
int32_t serve_media_at(serve_media *md, int32_t pos, const plume_embd *const **list, int32_t *skip);
void serve_media_free(serve_media *md);
/* Decode base64 (standard or URL-safe, whitespace skipped, padding optional) into *out
 * (malloc'd). 0, -1 (not base64), -2 (out of memory). */
int serve_base64_decode(const char *s, size_t n, uint8_t **out, size_t *len);
/* Whether a socket address is loopback, private, link-local, multicast or otherwise not public. */
struct sockaddr;
int serve_addr_private(const struct sockaddr *sa);
/* The fields of a multipart/form-data body (boundary from its first line), at most cap; their
 * count, -1 when the body is not a whole form, -2 when it has more than cap fields (the scan
 * stops there: 100,000 small fields cost no more than cap). */
int serve_multipart_parse(const char *body, size_t len, serve_form_field *f, int cap);
/* Where the form of a multipart body starts: the first line "--BOUNDARY" of the boundary its
 * Content-Type declares (content_type, the header; a preamble before it is skipped, as RFC
 * 2046 allows). 0 and *off, or a 400 in e (no boundary declared, or the body does not hold it). */
int serve_multipart_start(const char *content_type, const char *body, size_t len, size_t *off, serve_error *e);

extern const serve_dialect serve_transcription; /* POST /v1/audio/transcriptions */

/* ---- job preparation (serve_prepare.c) ------------------------------------------------------
 * What the connection thread does with a request body before the scheduler sees it: the
 * dialect parses it, the prompt is rendered and tokenized (media counted and their runs made),
 * the prompt and the request are checked against the vocabulary and the context. */

/* What preparing a job needs of the server (filled once at start; next_id counts jobs). */
typedef struct {
    plume_model *m;
    const plume_tokenizer *tok;
    int32_t n_ctx;            /* context of each slot */
    int32_t bos;              /* the id of <bos> in the vocabulary, or -1 (none) */
    const char *model;        /* the name the model is served as */
    serve_media_opts media;   /* how remote images are fetched */
    _Atomic int64_t next_id;  /* the number in the next job's id */
} serve_prep;

/* Fill what p needs of the model (tok, bos); the caller sets n_ctx, model and media. */
void serve_prep_init(serve_prep *p, plume_model *m);
/* Parse, render, tokenize and check a generation request body of a dialect into a job (one
 * reference, for the caller). 0 or an HTTP status with e filled. */
int serve_prepare_job(serve_prep *p, const serve_dialect *d, const char *body, size_t len, const serve_watch *w,
                      serve_job **out, serve_error *e);
/* The number of prompt tokens of a request body (Anthropic's count_tokens): parsed, rendered,
 * tokenized. 0 or an HTTP status with e filled. */
int serve_prepare_count(serve_prep *p, const serve_dialect *d, const char *body, size_t len, int32_t *n_tokens,
                        serve_error *e);
/* Tokenize text (no <bos> added) into *ids (malloc'd). 0, or 400 (not UTF-8) or 500 in e. */
int serve_tokenize_text(const plume_tokenizer *tok, const char *text, int32_t **ids, int32_t *n, serve_error *e);

/* ---- the scheduler ---------------------------------------------------------------------- */

/* Scheduler settings. */
typedef struct {
    int32_t n_slots;        /* --parallel */
    int32_t n_ctx;          /* context of each slot */
    int32_t kv_bits;        /* 0: default */
    int32_t snapshot_every; /* 0: default */
    int32_t draft;          /* speculative decoding: tokens guessed per step at most, 0: off */
    plume_drafter *drafter; /* the MTP drafter (the caller's; it drafts for every request,
                               sampled ones too), or NULL: prompt lookup for greedy requests */
    int32_t no_lookup;      /* with the drafter: 1, the drafter alone; 0, prompt lookup too */
    int32_t queue_max;      /* requests waiting for a slot (beyond the idle slots) */
    const char *slot_dir;   /* --slot-save, or NULL */
    int32_t encode_threads; /* threads of the media encoder (--encode-threads); 0: half the
                               model's, at least 1 */
} serve_sched_params;

/* Figures for /metrics. */
typedef struct {
    int64_t requests, prompt_tokens, cached_tokens, generated_tokens, steps;
    int64_t drafted, accepted; /* speculative decoding: tokens guessed, guesses accepted */
    int64_t lookup_drafted, lookup_accepted; /* of those, prompt lookup's (PLUME_SPEC_LOOKUP) */
    double decode_seconds;  /* time in steps that decoded at least one token */
    int64_t encodes;        /* images and audio clips encoded */
    int64_t encodes_abandoned; /* encodes stopped (or skipped) because their client left or the job failed */
    double encode_seconds;  /* time the encoder spent encoding (stopped encodes too) */
    int32_t queued, busy, n_slots;
    int32_t encoding;       /* requests whose media are being encoded or wait for the encoder */
    int32_t encode_threads;
} serve_stats;

typedef struct serve_sched serve_sched;

enum { SERVE_EFULL = 1, SERVE_ESTOPPED = 2, SERVE_ESLOTS = 3 };

/* Create the slots (loading --slot-save files when there are) and start the thread. */
int serve_sched_new(serve_sched **out, plume_model *m, const serve_sched_params *p, char **err);
/* Queue a job (the scheduler takes a reference). 0, SERVE_EFULL, SERVE_ESTOPPED, or
 * SERVE_ESLOTS (it asks for more choices than there are slots). */
int serve_sched_submit(serve_sched *s, serve_job *j);
/* Current figures. */
void serve_sched_stats(serve_sched *s, serve_stats *st);
/* Refuse new jobs, end every queued and running one (with a "shutting down" error), and
 * join the thread. Idempotent. */
void serve_sched_stop(serve_sched *s);
/* Save idle slots to the slot directory (if any), free everything. 0, or -1 when a slot
 * could not be saved (said on stderr): the server then exits 1. */
int serve_sched_free(serve_sched *s);

/* ---- the door (serve_door.c) ----------------------------------------------------------------
 * Connections wait at the door until their request head is whole; only then does the HTTP
 * daemon see them. */

#define SERVE_HEAD_MAX (32 * 1024) /* bytes of a request head (request line and headers) */

/* A request head, as the door reads it. */
typedef struct {
    char method[16];
    char path[256];          /* the target's path without its query; "" when longer or none */
    int32_t http11;          /* HTTP/1.1, else 1.0 */
    int64_t content_length;  /* -1: none given */
    int32_t chunked;         /* Transfer-Encoding: chunked */
    size_t head_len;         /* bytes of the head, through its empty line */
} serve_head;

/* Read the request head at the start of buf[0..n) (bytes of the body may follow): 0 when it is
 * whole and well formed (h filled), 1 when more bytes are needed and nothing is wrong so far,
 * or the HTTP status of a refusal (400, 413, 414, 431, 501, 505) with e saying why. */
int serve_head_parse(const char *buf, size_t n, serve_head *h, serve_error *e);

typedef struct serve_door serve_door;

/* What the door asks of the server. */
typedef struct {
    void *ctx;
    /* A whole, well-formed head came on fd: take the connection (0: the fd is the server's
     * now) or refuse it (a status, with e filled: the door answers and closes). */
    int (*admit)(void *ctx, int fd, const struct sockaddr *addr, socklen_t alen, const serve_head *h, serve_error *e);
    /* The body of an error reply for a request to path ("" unknown), malloc'd (NULL: "{}"). */
    char *(*error_body)(void *ctx, const char *path, const serve_error *e);
    /* Told of each connection the door ends: the status it answered, 0 when dropped (may be NULL). */
    void (*refused)(void *ctx, int32_t status);
    double head_timeout;   /* seconds from accept for the whole head (--timeout) */
    int32_t per_addr;      /* heads awaited from one client address */
    int32_t pending_max;   /* heads awaited in all */
} serve_door_params;

/* Start the door's thread on a bound, listening socket (it becomes the door's). */
int serve_door_start(serve_door **out, int listen_fd, const serve_door_params *p, char **err);
/* Stop accepting, close what the door holds (and the listening socket), join its thread. */
void serve_door_stop(serve_door *d);

/* ---- the server ---------------------------------------------------------------------------- */

/* What `plume serve` was asked for (tools/cli/cmd_serve.c fills it from the flags). */
typedef struct {
    const char *bundle;     /* the model's directory */
    const char *host, *api_key, *slot_dir, *isa;
    const char *cors;       /* origins allowed to call from a browser: "A,B,..." or "*"; NULL: none */
    int32_t port, parallel, n_ctx, queue, timeout, n_threads, kv_bits, snapshot_every, exact, draft;
    const char *drafter;    /* --drafter DIR; NULL: BUNDLE/drafter when there is one */
    int32_t no_drafter;     /* --no-drafter: prompt lookup even when the bundle has a drafter */
    int32_t no_lookup;      /* --no-lookup: with the drafter, the drafter alone */
    int32_t drain;          /* seconds running requests may take to finish after SIGTERM; 0: cut them */
    int32_t encode_threads; /* threads of the media encoder; 0: half of -t's, at least 1 */
    size_t max_body;
    size_t max_request_memory; /* bytes for the requests in flight: bodies and what parsing them takes */
    int32_t allow_remote_media; /* image URLs: 0 refused, 1 fetched from public addresses, 2 private too */
} serve_config;

/* The defaults of every field but bundle. */
serve_config serve_config_default(void);
/* Open the model, listen, serve until SIGINT or SIGTERM, drain (c->drain), shut down in
 * order. Returns the process exit status (messages printed on stderr). */
int serve_run(const serve_config *c);

#endif
