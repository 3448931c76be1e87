/* serve_sched.c -- the scheduler of `plume serve`: one thread owns the model, N slots and one
 * plume_batch; requests wait in a bounded queue until a slot is idle.
 *
 * Every iteration admits queued requests into idle slots, then runs ONE batch step: one token
 * of every decoding slot plus the next prompt chunk (SERVE_PREFILL_CHUNK tokens, whatever
 * the load) of every prefilling slot. The weights stream once for all of them; a running
 * stream waits one step, not a whole prefill, when a request arrives.
 *
 * Determinism: a slot's logits are bit-identical whatever else is in the step (plume_batch),
 * its prompt is cut into the same chunks whatever the load, and its sampler is its own,
 * seeded by the request. So the tokens a request gets do not depend on other requests.
 *
 * Structured outputs (docs/STRUCTURED.md): a request with a format (req.grammar) gets a
 * constraint per choice, attached to the slot's sampler once the prompt's ids are accepted, so
 * it starts at the first generated token (after the thought, which the grammar leaves free);
 * the sampler draws only what it allows and moves it with every accept and rewind. Prefill,
 * prompt reuse and the batch step are unchanged; the tokens' bytes are indexed once
 * (plume_vocab), at the first request with a format.
 *
 * Speculative decoding (--draft N): a decoding slot queues its pending token and up to N
 * guesses with the logits of every row (plume_spec_draft), cut where a format's constraint
 * refuses one (a refused guess could never be kept); after the step plume_spec_accept keeps
 * the guesses the model agrees with and rewinds the rest (the sampler's rewind takes the
 * constraint back too), and the slot delivers them all. The session may then hold a few
 * tokens past the end of an answer; prompt reuse rewinds them. The guesses come from the MTP
 * drafter when the server has one (p.drafter, shared by the slots: this thread alone drafts,
 * one slot after the other, each from its own session's hidden state and K/V, which the batch
 * step hands over as a lone step does), and then sampled requests draft too (the acceptance
 * rule keeps the sampler's distribution exactly, but a seed's text differs from a server's
 * without the drafter); else from prompt lookup, for greedy requests only (where it cannot
 * change the answer). Each request starts its slot's adaptive draft length afresh
 * (plume_spec_reset), and a step's rows always fit the batch, so a seed's text does not
 * depend on what the slot served before or on the load.
 *
 * Several choices (n): a request of n choices waits until n slots are idle and takes them all.
 * Its first slot (the leader) prefills; the others wait, and when the leader's prompt is in,
 * each gets a copy of its session and its last logits (plume_session_copy), then samples on
 * its own with seed + its index. One prefill, n answers.
 *
 * The prompt's log-probabilities (echo, prompt_logprobs): the leader prefills from position 0
 * (no reuse: every position's logits are needed) in chunks of SERVE_LOGPROB_CHUNK with every
 * row's logits, and scores each prompt token under the row before it.
 *
 * Prompt reuse: a request goes to the idle slot whose tokens share the longest prefix with its
 * prompt; the slot rewinds to that prefix (exact, plume_session_rewind) and prefills only the
 * rest. A client re-sending a growing conversation prefills only the new turn. A rewind never
 * recomputes in this thread: it stops at the last point that costs nothing
 * (plume_session_rewind_point) and the tokens after it go in as ordinary prefill chunks.
 *
 * Images and audio: a leader whose prompt has media to compute (those past the kept prefix: a
 * re-sent image in the reused prefix needs none) hands its job to the encoder thread, which runs
 * the towers on a plume_encoder (threads of its own, --encode-threads, not the model's pool the
 * batch steps use) one request at a time, in order. Meanwhile the slot puts nothing in the steps
 * and the other slots go on decoding and prefilling; when the encode is done the scheduler is
 * woken and the slot prefills as any other. A client gone, a failed job or the server stopping
 * make the encoder's abort callback stop the towers at the next layer; the slot does not wait
 * for it (the task, orphaned, is the encoder's to free). An encode that fails ends its request
 * alone (500). n choices encode once: the other choices wait for the leader's prompt, as ever.
 *
 * Locks: s->mu guards the queue, the slots' job pointers, the encoder's tasks and the figures;
 * j->mu guards a job's output bytes and flags. When both are held, s->mu is taken first
 * (submitting, dropping cancelled jobs from the queue, the encoder's abort callback); the model
 * is touched by this thread only, but for the towers, which the encoder thread runs on its own
 * threads (they read the model's mapped weights and kernel table, which no step writes). */
#include "serve.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat/chat.h"
#include "common.h"

/* A leader's media handed to the encoder thread. Under s->mu; the job's media are the
 * encoder's alone until `done`. Whoever lets go of it last frees it: the slot once done, the
 * encoder when the slot gave it up first (orphaned). */
typedef struct enc_task {
    serve_job *job;        /* a reference of the task's own */
    int32_t from;          /* the slot's kept prefix: media wholly before it need no encode */
    int32_t done;          /* the encoder is through with it: rc, err */
    int32_t orphaned;      /* the slot let go (client gone, job failed, server stopping) */
    int rc;
    char *err;
    struct enc_task *next; /* the encoder's queue */
} enc_task;

/* One slot: a conversation's session and the state of the request it serves. */
typedef struct {
    plume_session *s;
    serve_job *job;        /* NULL when idle (written under sched->mu) */
    enc_task *task;        /* its media at the encoder, or NULL (under sched->mu) */
    int32_t fresh;         /* admitted, not yet set up */
    int32_t choice;        /* which of the job's choices it answers (0: the leader, which prefills) */
    int32_t waiting;       /* a choice > 0 waiting for the leader's prompt */
    float *rows;           /* [SERVE_LOGPROB_CHUNK, V] every row's logits, while the prompt's
                              log-probabilities are computed (else NULL) */
    plume_sampler *smp;
    plume_constraint *con; /* the request's format, or NULL */
    serve_answer out;      /* the answer being written */
    plume_detok_stream ds;
    float *logits;         /* [V] of the slot's last fed token */
    int32_t pos;           /* prompt tokens in the session (prefill until pos == n_ids) */
    int32_t next_id;       /* the sampled token fed at the next step */
    int32_t taken;         /* tokens this slot put in the current step */
    int32_t n_gen, cached;
    plume_spec *spec;      /* --draft: the slot's drafter, or NULL */
    float *spec_logits;    /* [draft + 1, V] the rows of a speculative step */
    int32_t spec_ids[PLUME_SAMPLER_UNDO]; /* the pending token and the guesses queued */
    int32_t drafting;      /* this request drafts (--draft > 0; greedy, or the MTP drafter) */
    int32_t drafted, accepted; /* this request's guesses and those kept (its usage) */
    double t_setup, t_first; /* plume_now() at set-up and at the first generated token */
    int64_t last_used;     /* step counter at release, for least-recently-used */
} serve_slot;

struct serve_sched {
    plume_model *m;
    const plume_tokenizer *tok;
    int32_t V;
    serve_sched_params p;
    serve_slot *slots;     /* [p.n_slots] */
    plume_batch *batch;
    pthread_t thread;
    int32_t started;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* a job arrived, or stop */
    serve_job *head, *tail;
    int32_t n_queued, stopping;
    serve_stats st;
    int64_t tick;
    plume_vocab *vocab;    /* the tokens' bytes for constraints, made at the first format */
    /* the encoder thread (a bundle with towers): its threads, its queue of tasks */
    plume_encoder *enc;
    pthread_t enc_thread;
    int32_t enc_started, enc_stopping;
    pthread_cond_t enc_cv; /* a task queued, or stop */
    enc_task *enc_head, *enc_tail;
    enc_task *enc_now;     /* the task being encoded (the abort callback reads it) */
    int64_t enc_finished;  /* tasks the encoder is through with, so far */
};

/* ---- slots --------------------------------------------------------------------------------- */

/* The file of slot i in the slot directory (malloc'd). */
static char *slot_path(const serve_sched *s, int32_t i) {
    return plume_sprintf("%s/slot-%d.state", s->p.slot_dir, i);
}

/* Make sure --slot-save names a directory this process can write in (made when absent): found
 * at start, not when the slots are saved at exit. 0 or PLUME_EIO. */
static int slot_dir_check(const char *dir, char **err) {
    struct stat st;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return plume_fail(err, PLUME_EIO, "--slot-save %s: cannot create the directory: %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return plume_fail(err, PLUME_EIO, "--slot-save %s: not a directory (it names the directory the slots are saved in)", dir);
    if (access(dir, W_OK | X_OK) != 0)
        return plume_fail(err, PLUME_EIO, "--slot-save %s: cannot write in it: %s", dir, strerror(errno));
    return 0;
}

/* A session for slot i: loaded from the slot directory when a file of this bundle and
 * context is there, else new. */
static int slot_open(serve_sched *s, int32_t i, char **err) {
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = s->p.n_ctx;
    if (s->p.kv_bits) sp.kv_bits = s->p.kv_bits;
    if (s->p.snapshot_every) sp.snapshot_every = s->p.snapshot_every;
    char *path = s->p.slot_dir ? slot_path(s, i) : NULL;
    if (path && plume_file_exists(path)) {
        char *lerr = NULL;
        plume_session *ls = NULL;
        if (plume_session_load(&ls, s->m, path, &lerr))
            fprintf(stderr, "plume serve: slot %d: ignoring %s: %s\n", i, path, lerr);
        else if (plume_session_n_ctx(ls) != s->p.n_ctx)
            fprintf(stderr, "plume serve: slot %d: ignoring %s: context %d, not %d\n", i, path, plume_session_n_ctx(ls),
                    s->p.n_ctx);
        else {
            fprintf(stderr, "plume serve: slot %d: %d tokens from %s\n", i, plume_session_n_past(ls), path);
            s->slots[i].s = ls;
            ls = NULL;
        }
        free(lerr);
        plume_session_free(ls);
    }
    free(path);
    if (s->slots[i].s) return 0;
    return plume_session_new(&s->slots[i].s, s->m, &sp, err);
}

/* How many leading positions a session's history and a job's prompt share: the same ids and,
 * where images or audio sit, the same media keys (the same pixels or samples, the same row). */
static int32_t common_prefix(const plume_session *ss, const serve_job *j) {
    const int32_t *a = plume_session_tokens(ss);
    const uint64_t *ka = plume_session_keys(ss), *kb = serve_media_keys(j->head.req.media);
    int32_t na = plume_session_n_past(ss), n = na < j->head.n_ids ? na : j->head.n_ids, i = 0;
    while (i < n && a[i] == j->head.ids[i] && (ka ? ka[i] : 0) == (kb ? kb[i] : 0)) i++;
    return i;
}

/* The idle slot for a prompt: the longest shared prefix it can rewind to without recomputing
 * (plume_session_rewind_point), then the least recently used. A
 * prefix shorter than a prefill chunk and than half the slot's tokens counts as none, so a
 * prompt sharing only "<bos>" and a few template tokens does not evict a conversation while a
 * colder slot is idle (a shared system prompt of a chunk or more still counts). -1 when none
 * is idle. Called with s->mu held. */
static int32_t slot_pick(serve_sched *s, const serve_job *j) {
    int32_t best = -1, best_common = -1;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        serve_slot *sl = &s->slots[i];
        if (sl->job) continue;
        int32_t n_past = plume_session_n_past(sl->s);
        int32_t c = plume_session_rewind_point(sl->s, common_prefix(sl->s, j));
        if (c < SERVE_PREFILL_CHUNK && (int64_t)c * 2 < n_past) c = 0;
        if (c > best_common || (c == best_common && sl->last_used < s->slots[best].last_used)) {
            best = i;
            best_common = c;
        }
    }
    return best;
}

/* The least recently used idle slot, or -1. Called with s->mu held. */
static int32_t slot_pick_lru(serve_sched *s) {
    int32_t best = -1;
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (!s->slots[i].job && (best < 0 || s->slots[i].last_used < s->slots[best].last_used)) best = i;
    return best;
}

/* Free an encoder task and its job reference (NULL: nothing). Without s->mu. */
static void task_free(enc_task *t) {
    if (!t) return;
    free(t->err);
    serve_job_unref(t->job);
    free(t);
}

/* Hand the slot's media to the encoder: those a prefill from `from` needs. The slot puts
 * nothing in the steps until the task is done (slot_ready). 0 or PLUME_ENOMEM. */
static int encode_submit(serve_sched *s, serve_slot *sl, int32_t from, char **err) {
    enc_task *t = calloc(1, sizeof *t);
    if (!t) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    t->job = sl->job;
    t->from = from;
    pthread_mutex_lock(&t->job->mu);
    t->job->refs++;
    pthread_mutex_unlock(&t->job->mu);
    pthread_mutex_lock(&s->mu);
    if (s->enc_tail) s->enc_tail->next = t;
    else s->enc_head = t;
    s->enc_tail = t;
    sl->task = t;
    s->st.encoding++;
    pthread_cond_signal(&s->enc_cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Give the slot back (its session keeps its tokens for a later prompt). */
static void slot_release(serve_sched *s, serve_slot *sl) {
    plume_sampler_free(sl->smp);
    sl->smp = NULL;
    plume_constraint_free(sl->con);
    sl->con = NULL;
    free(sl->rows);
    sl->rows = NULL;
    sl->waiting = 0;
    serve_answer_free(&sl->out);
    serve_job *j = sl->job;
    pthread_mutex_lock(&s->mu);
    enc_task *t = sl->task; /* at the encoder still: it stops and frees the task */
    if (t && !t->done) {
        t->orphaned = 1;
        t = NULL;
    }
    sl->task = NULL;
    sl->job = NULL;
    sl->last_used = ++s->tick;
    pthread_mutex_unlock(&s->mu);
    task_free(t);
    serve_job_unref(j);
}

/* The constraint of the slot's request format, attached to its sampler (whose prompt ids are
 * accepted: it starts at the first generated token). The thought stays free: the prompt
 * opened it, or thinking is on and the model may open it. */
static int slot_constrain(serve_sched *s, serve_slot *sl, char **err) {
    const serve_job *j = sl->job;
    if (!s->vocab) {
        int rc = plume_vocab_new(&s->vocab, s->tok, err);
        if (rc) return rc;
    }
    plume_constraint_params cp = plume_constraint_default_params();
    cp.thinking = j->head.req.kind != SERVE_CHAT ? 0 : j->head.in_thought ? 2 : j->head.req.enable_thinking ? 1 : 0;
    int rc = plume_constraint_new_grammar(&sl->con, s->vocab, j->head.req.grammar, strlen(j->head.req.grammar), &cp, err);
    if (!rc) plume_sampler_set_constraint(sl->smp, sl->con);
    return rc;
}

/* Prepare an admitted slot: rewind to the shared prefix (the leader), a sampler seeded for its
 * choice with the request's bias, a stop matcher, the start event of a stream. A choice > 0
 * waits for the leader's prompt. */
static int slot_setup(serve_sched *s, serve_slot *sl, char **err) {
    serve_job *j = sl->job;
    int32_t keep = common_prefix(sl->s, j);
    if (keep > j->head.n_ids - 1) keep = j->head.n_ids - 1; /* the last prompt token is fed for its logits */
    if (j->head.prompt_lps || sl->choice > 0) keep = 0; /* every row is scored / the leader's copy comes */
    /* only as far back as costs nothing: what a deeper rewind would recompute here, with every
     * other stream waiting, is fed again as prefill chunks between decode steps */
    keep = plume_session_rewind_point(sl->s, keep);
    int rc = plume_session_rewind(sl->s, keep, err);
    plume_sampler_params sp = j->head.req.sp;
    sp.seed += (uint64_t)sl->choice;
    if (!rc) rc = plume_sampler_new(&sl->smp, &sp, s->V, err);
    if (!rc && j->head.req.n_bias) rc = plume_sampler_set_bias(sl->smp, j->head.req.bias_ids, j->head.req.bias_vals, j->head.req.n_bias, err);
    if (!rc && j->head.prompt_lps && sl->choice == 0 &&
        !(sl->rows = malloc((size_t)SERVE_LOGPROB_CHUNK * (size_t)s->V * sizeof *sl->rows)))
        rc = plume_fail(err, PLUME_ENOMEM, "out of memory for the prompt's logits");
    /* chat answers go through the parser (special tokens kept for it), unless ignore_eos asks
     * for every token as text */
    int parse = j->head.req.kind == SERVE_CHAT && !j->head.req.ignore_eos;
    if (sl->choice == 0) j->head.cached_at_start = keep;
    if (!rc) rc = serve_answer_init(&sl->out, j, sl->choice, parse, err);
    if (rc) return rc;
    for (int32_t i = 0; i < j->head.n_ids; i++) plume_sampler_accept(sl->smp, j->head.ids[i]);
    if (j->head.req.grammar && (rc = slot_constrain(s, sl, err))) return rc;
    plume_detok_stream_init(&sl->ds, s->tok, !parse);
    sl->drafting = sl->spec && (s->p.drafter || j->head.req.sp.temperature <= 0.0f);
    plume_spec_reset(sl->spec);
    sl->drafted = sl->accepted = 0;
    sl->pos = keep;
    sl->cached = keep;
    sl->n_gen = 0;
    sl->next_id = -1;
    sl->waiting = sl->choice > 0;
    sl->t_setup = plume_now();
    pthread_mutex_lock(&s->mu);
    s->st.cached_tokens += keep;
    pthread_mutex_unlock(&s->mu);
    /* the images and audio whose rows the prefill computes go through their towers on the
     * encoder thread (once: the other choices copy the leader's session); with none to encode,
     * their pixels and samples are freed here */
    if (sl->choice > 0) return 0;
    if (serve_media_pending(j->head.req.media, keep)) return encode_submit(s, sl, keep, err);
    int32_t none;
    return serve_media_encode(j->head.req.media, s->enc, keep, &none, err);
}

/* ---- output -------------------------------------------------------------------------------- */

/* The log-probability of id under logits [V] and the n_top most likely ids with theirs. */
static float logprob_top(const float *logits, int32_t V, int32_t id, int32_t n_top, int32_t *top_ids, float *top_lps) {
    float max = -INFINITY;
    for (int32_t i = 0; i < V; i++) max = logits[i] > max ? logits[i] : max;
    double sum = 0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)logits[i] - max);
    float lse = max + (float)log(sum);
    int32_t k = 0;
    for (int32_t i = 0; i < V && n_top > 0; i++) { /* insertion into a short sorted list */
        if (k == n_top && logits[i] <= logits[top_ids[k - 1]]) continue;
        int32_t at = k < n_top ? k++ : k - 1;
        while (at > 0 && logits[top_ids[at - 1]] < logits[i]) {
            top_ids[at] = top_ids[at - 1];
            at--;
        }
        top_ids[at] = i;
    }
    for (int32_t i = 0; i < k; i++) top_lps[i] = logits[top_ids[i]] - lse;
    return logits[id] - lse;
}

/* Whether a special token's text is one the chat parser reads (the others are dropped). */
static int parser_marker(const char *piece) {
    static const char *const marks[] = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|\"|>",
                                        "<turn|>", "<eos>", "<|tool_response>"};
    for (size_t i = 0; i < sizeof marks / sizeof *marks; i++)
        if (!strcmp(piece, marks[i])) return 1;
    return 0;
}

/* The answer is over: flush the detokenizer (unless a stop string ended the answer), send
 * the end and free the slot. */
static void slot_finish(serve_sched *s, serve_slot *sl, serve_finish reason, int stopped) {
    if (!stopped) {
        char piece[64];
        int32_t k = plume_detok_stream_flush(&sl->ds, piece, sizeof piece);
        if (k > 0 && serve_answer_put(&sl->out, piece, (size_t)k, 0, NULL) == SERVE_ANSWER_STOP) reason = SERVE_FINISH_STOP;
    }
    double now = plume_now();
    serve_usage u = {.prompt = sl->job->head.n_ids, .completion = sl->n_gen, .cached = sl->cached,
                     .prompt_ms = sl->n_gen ? (sl->t_first - sl->t_setup) * 1e3 : (now - sl->t_setup) * 1e3,
                     .predicted_ms = sl->n_gen ? (now - sl->t_first) * 1e3 : 0,
                     .drafted = sl->drafted, .accepted = sl->accepted};
    serve_answer_finish(&sl->out, reason, &u);
    slot_release(s, sl);
}

/* Deliver the slot's next token id, drawn from logits [V], with n_past tokens before it (in
 * plain decoding, the session's). Returns 1 when that ended the answer (an end id, a stop
 * string, max_tokens or a full context; the slot is released), else 0. */
static int slot_deliver(serve_sched *s, serve_slot *sl, int32_t id, const float *logits, int32_t n_past) {
    serve_job *j = sl->job;
    if (sl->n_gen++ == 0) sl->t_first = plume_now();
    pthread_mutex_lock(&s->mu);
    s->st.generated_tokens++;
    pthread_mutex_unlock(&s->mu);
    if (plume_model_ends_turn(s->m, id) && !j->head.req.ignore_eos) {
        slot_finish(s, sl, SERVE_FINISH_STOP, 0);
        return 1;
    }
    serve_logprob lp = {.id = id, .n_top = j->head.req.top_logprobs};
    if (j->head.req.logprobs) lp.logprob = logprob_top(logits, s->V, id, lp.n_top, lp.top_ids, lp.top_lps);
    char piece[256];
    int32_t k = plume_detok_stream_put(&sl->ds, id, piece, sizeof piece), special = plume_token_is_special(s->tok, id);
    int r = 0;
    if (k > 0 && special) { /* the stream's piece may start with the end of a character held before */
        uint8_t own[128];
        int32_t n = plume_token_bytes(s->tok, id, own, (int32_t)sizeof own);
        if (n > 0 && n <= (int32_t)sizeof own && n < k && !memcmp(piece + k - n, own, (size_t)n)) {
            r = serve_answer_put(&sl->out, piece, (size_t)(k - n), 0, NULL);
            memmove(piece, piece + k - n, (size_t)n);
            k = n;
            piece[k] = 0;
        }
    }
    if (k < 0 || (sl->out.cp && special && !parser_marker(piece))) k = 0;
    if (!r) r = serve_answer_put(&sl->out, piece, (size_t)k, special, j->head.req.logprobs ? &lp : NULL);
    if (r) slot_finish(s, sl, SERVE_FINISH_STOP, r == SERVE_ANSWER_STOP);
    else if ((j->head.req.max_tokens > 0 && sl->n_gen >= j->head.req.max_tokens) || n_past >= plume_session_n_ctx(sl->s))
        slot_finish(s, sl, SERVE_FINISH_LENGTH, 0);
    else {
        sl->next_id = id;
        return 0;
    }
    return 1;
}

/* Whether the slot's format passed the recognizer's limits (then its job fails with a 400
 * saying so: the request's grammar is too ambiguous or nested too deep for the text). */
static int slot_format_limited(serve_slot *sl) {
    if (!sl->con || plume_constraint_status(sl->con) != PLUME_CONSTRAINT_LIMIT) return 0;
    serve_job_fail(sl->job, 400, SERVE_ERR_REQUEST,
                   "the format's grammar is too ambiguous or nested too deep for the text so far: a step passed "
                   "the recognizer's limit (docs/STRUCTURED.md, Limits)");
    return 1;
}

/* Sample the slot's next token from its logits and deliver it. */
static void slot_sample(serve_sched *s, serve_slot *sl) {
    int32_t id = plume_sampler_sample(sl->smp, sl->logits);
    if (id < 0) {
        if (!slot_format_limited(sl))
            serve_job_fail(sl->job, 500, SERVE_ERR_SERVER,
                           sl->con ? "sampling failed (no token the format allows has a finite logit)"
                                   : "sampling failed (no finite logit)");
        slot_release(s, sl);
        return;
    }
    /* a drafting slot's pending token is accepted by its next speculative step */
    if (!slot_deliver(s, sl, id, sl->logits, plume_session_n_past(sl->s)) && !sl->drafting)
        plume_sampler_accept(sl->smp, id);
}

/* After a speculative step of `taken` tokens: accept the guesses the model agrees with and
 * deliver them and the token after them (the next pending one, not yet fed or accepted). */
static void slot_accept(serve_sched *s, serve_slot *sl) {
    char *err = NULL;
    int32_t out[PLUME_SAMPLER_UNDO];
    int64_t l0[2], l1[2]; /* prompt lookup's guesses and those kept, before and after */
    plume_spec_source_stats(sl->spec, PLUME_SPEC_LOOKUP, NULL, &l0[0], &l0[1]);
    int32_t n = plume_spec_accept(sl->spec, sl->s, sl->smp, sl->spec_ids, sl->taken, sl->spec_logits, out, &err);
    plume_spec_source_stats(sl->spec, PLUME_SPEC_LOOKUP, NULL, &l1[0], &l1[1]);
    if (n < 0) {
        if (!slot_format_limited(sl)) serve_job_fail(sl->job, 500, SERVE_ERR_SERVER, err ? err : "speculative step failed");
        free(err);
        slot_release(s, sl);
        return;
    }
    pthread_mutex_lock(&s->mu);
    s->st.drafted += sl->taken - 1;
    s->st.accepted += n - 1;
    s->st.lookup_drafted += l1[0] - l0[0];
    s->st.lookup_accepted += l1[1] - l0[1];
    pthread_mutex_unlock(&s->mu);
    sl->drafted += sl->taken - 1;
    sl->accepted += n - 1;
    /* out[i] was drawn from row i; plain decoding would have fed the i + 1 tokens before it */
    int32_t base = plume_session_n_past(sl->s) - n;
    for (int32_t i = 0; i < n; i++)
        if (slot_deliver(s, sl, out[i], sl->spec_logits + (size_t)i * (size_t)s->V, base + 1 + i)) return;
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* Move queued jobs into idle slots (cancelled ones are dropped); how many were admitted.
 * Called with s->mu held. */
static int32_t admit_locked(serve_sched *s) {
    int32_t admitted = 0;
    /* Jobs whose clients left while they waited: no slot, and no place in the queue. */
    serve_job **at = &s->head, *prev = NULL;
    while (*at) {
        serve_job *j = *at;
        if (!serve_job_cancelled(j)) {
            prev = j;
            at = &j->next;
            continue;
        }
        *at = j->next;
        if (s->tail == j) s->tail = prev;
        s->n_queued--;
        serve_job_abandon(j, 499);
        serve_job_unref(j);
    }
    while (s->head) {
        serve_job *j = s->head;
        int32_t idle = 0;
        for (int32_t i = 0; i < s->p.n_slots; i++) idle += !s->slots[i].job;
        if (idle < j->head.req.n) return admitted; /* a request of n choices waits for n idle slots */
        admitted++;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->n_queued--;
        for (int32_t k = 0; k < j->head.req.n; k++) {
            int32_t i = k == 0 ? slot_pick(s, j) : slot_pick_lru(s);
            if (k > 0) { /* each choice holds a reference, released with its slot */
                pthread_mutex_lock(&j->mu);
                j->refs++;
                pthread_mutex_unlock(&j->mu);
            }
            s->slots[i].job = j;
            s->slots[i].fresh = 1;
            s->slots[i].choice = k;
        }
    }
    return admitted;
}

/* Score the prompt tokens that the rows of the last prefill step predict: row r (position
 * pos + r) gives the log-probability of the token at pos + r + 1; the last prompt row is kept
 * as the slot's logits. */
static void score_rows(serve_sched *s, serve_slot *sl) {
    serve_job *j = sl->job;
    for (int32_t r = 0; r < sl->taken; r++) {
        int32_t p = sl->pos + r;
        const float *row = sl->rows + (size_t)r * (size_t)s->V;
        if (p + 1 < j->head.n_ids) {
            serve_logprob *lp = &j->head.prompt_lps[p + 1];
            lp->id = j->head.ids[p + 1];
            lp->n_top = j->head.prompt_top;
            lp->logprob = logprob_top(row, s->V, lp->id, lp->n_top, lp->top_ids, lp->top_lps);
            lp->rank = 1;
            for (int32_t v = 0; v < s->V; v++) lp->rank += row[v] > row[lp->id];
        } else {
            memcpy(sl->logits, row, (size_t)s->V * sizeof *row);
        }
    }
}

/* The leader's prompt is in: give every waiting choice of its job a copy of the session and
 * of the last logits; then each choice samples its first token (or, when nothing is to be
 * generated, ends). */
static void prompt_done(serve_sched *s, serve_slot *leader) {
    serve_job *j = leader->job;
    char *err = NULL;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        serve_slot *sl = &s->slots[i];
        if (sl == leader || sl->job != j || !sl->waiting) continue;
        if (plume_session_copy(sl->s, leader->s, &err)) {
            serve_job_fail(j, 500, SERVE_ERR_SERVER, err ? err : "cannot copy a session");
            free(err);
            slot_release(s, leader);
            return; /* the other choices see the job cancelled at the next step */
        }
        memcpy(sl->logits, leader->logits, (size_t)s->V * sizeof *sl->logits);
        sl->pos = j->head.n_ids;
        sl->cached = leader->cached;
        sl->waiting = 0;
    }
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        serve_slot *sl = &s->slots[i];
        if (sl->job != j || sl->waiting || sl->pos < j->head.n_ids || sl->n_gen || sl->next_id >= 0) continue;
        serve_answer_prompt(&sl->out);
        if (j->head.req.max_tokens == 0) slot_finish(s, sl, SERVE_FINISH_LENGTH, 0);
        else slot_sample(s, sl);
    }
}

/* Whether slot sl has rows for this step: a job that is not cancelled (the slot is freed),
 * has its session set up (a failure tells the job and frees the slot) and is not a choice
 * waiting for its leader's prompt. */
static int slot_ready(serve_sched *s, serve_slot *sl) {
    sl->taken = 0;
    if (!sl->job) return 0;
    if (serve_job_cancelled(sl->job)) { /* the client is gone (or the job failed): free the slot now */
        serve_job_abandon(sl->job, 499);
        slot_release(s, sl);
        return 0;
    }
    if (sl->fresh) {
        char *err = NULL;
        sl->fresh = 0;
        int rc = slot_setup(s, sl, &err);
        if (rc) { /* a format refused here passed serve_prepare.c's check: still the request's (400) */
            if (rc == PLUME_EINVAL) serve_job_fail(sl->job, 400, SERVE_ERR_REQUEST, err ? err : "the format cannot be enforced");
            else serve_job_fail(sl->job, 500, SERVE_ERR_SERVER, err ? err : "cannot set up a slot");
            free(err);
            slot_release(s, sl);
            return 0;
        }
    }
    if (sl->task) { /* its media at the encoder: nothing to step until they are encoded */
        pthread_mutex_lock(&s->mu);
        enc_task *t = sl->task->done ? sl->task : NULL;
        if (t) sl->task = NULL;
        pthread_mutex_unlock(&s->mu);
        if (!t) return 0;
        if (t->rc) serve_job_fail(sl->job, 500, SERVE_ERR_SERVER, t->err ? t->err : "cannot encode the media");
        int rc = t->rc;
        task_free(t);
        if (rc) {
            slot_release(s, sl);
            return 0;
        }
    }
    return !sl->waiting;
}

/* Put slot sl's rows of this step into the batch: a chunk of its prompt (with the rows of its
 * images and audio), its next token, or, drafting, that token and the guesses (cut where the
 * format refuses). 1 when it decodes, 0 when it prefills; a failure tells the job and frees
 * the slot (0). */
static int slot_queue(serve_sched *s, serve_slot *sl) {
    char *err = NULL;
    serve_job *j = sl->job;
    int prefill = sl->pos < j->head.n_ids;
    const int32_t *ids = prefill ? j->head.ids + sl->pos : &sl->next_id;
    int32_t n = prefill ? j->head.n_ids - sl->pos : 1;
    int32_t chunk = sl->rows ? SERVE_LOGPROB_CHUNK : SERVE_PREFILL_CHUNK;
    if (n > chunk) n = chunk;
    int spec = !prefill && sl->drafting;
    if (spec) { /* the pending token and the guesses, every row's logits */
        int32_t want = j->head.req.max_tokens > 0 ? j->head.req.max_tokens - sl->n_gen : PLUME_SAMPLER_UNDO;
        n = plume_spec_draft(sl->spec, sl->s, sl->next_id, sl->spec_ids, want, &err);
        ids = sl->spec_ids;
        int32_t ok = n > 1 && sl->con ? plume_sampler_allowed_prefix(sl->smp, ids, n) : n; /* the format's */
        if (ok < n) n = ok > 1 ? ok : 1;
    }
    int rows = spec || (prefill && sl->rows);
    float *out = spec ? sl->spec_logits : prefill && sl->rows ? sl->rows : sl->logits;
    int32_t taken = n;
    if (n >= 0 && prefill && j->head.req.media) { /* rows of images and audio among the prompt's */
        const plume_embd *const *media;
        int32_t skip, n_media = serve_media_at(j->head.req.media, sl->pos, &media, &skip);
        taken = plume_batch_add_media(s->batch, sl->s, ids, n, media, n_media, skip, out, rows, &err);
    } else if (n >= 0) {
        taken = plume_batch_add(s->batch, sl->s, ids, n, out, rows, &err);
    }
    if (taken < 0) {
        serve_job_fail(j, 500, SERVE_ERR_SERVER, err ? err : "cannot queue a step");
        free(err);
        slot_release(s, sl);
        return 0;
    }
    sl->taken = taken;
    return !prefill;
}

/* After the step ran (dt seconds): each slot's prompt moves on, its drafts are accepted, or
 * its next token is drawn; the step's figures. */
static void step_done(serve_sched *s, double dt, int decoding) {
    int64_t prompt_tokens = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        serve_slot *sl = &s->slots[i];
        if (!sl->taken || !sl->job) continue;
        if (sl->pos < sl->job->head.n_ids) {
            if (sl->rows) score_rows(s, sl);
            sl->pos += sl->taken;
            prompt_tokens += sl->taken;
            if (sl->pos == sl->job->head.n_ids) prompt_done(s, sl);
            continue;
        } else if (sl->drafting) {
            slot_accept(s, sl);
            continue;
        }
        slot_sample(s, sl);
    }
    pthread_mutex_lock(&s->mu);
    s->st.steps++;
    s->st.prompt_tokens += prompt_tokens;
    if (decoding) s->st.decode_seconds += dt;
    pthread_mutex_unlock(&s->mu);
}

/* One iteration of the scheduler: every ready slot's rows in one plume_batch step. 0 when no
 * slot had rows (they wait for the encoder, or were freed), else 1. */
static int step(serve_sched *s) {
    int decoding = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (slot_ready(s, &s->slots[i])) decoding |= slot_queue(s, &s->slots[i]);
    if (plume_batch_n_tokens(s->batch) == 0) return 0;
    char *err = NULL;
    double t0 = plume_now();
    if (plume_batch_run(s->batch, &err)) {
        for (int32_t i = 0; i < s->p.n_slots; i++)
            if (s->slots[i].taken) {
                serve_job_fail(s->slots[i].job, 500, SERVE_ERR_SERVER, err ? err : "the forward step failed");
                slot_release(s, &s->slots[i]);
            }
        free(err);
        return 1;
    }
    step_done(s, plume_now() - t0, decoding);
    return 1;
}

/* Whether any slot has a job. Called with s->mu held. */
static int any_busy_locked(const serve_sched *s) {
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].job) return 1;
    return 0;
}

/* Wait on cv (mu held) until signalled or ms milliseconds pass. */
static void cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, int32_t ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

/* The scheduler thread: admit, step, until stopped; then end every job left. When a step had
 * nothing to run (its slots wait for the encoder) and nothing new came in, it sleeps until the
 * encoder or a new job wakes it, or SERVE_IDLE_MS pass (a client gone meanwhile frees its slot
 * then). */
static void *sched_main(void *arg) {
    serve_sched *s = arg;
    int idle = 0;
    int64_t seen = 0; /* enc_finished before the last step: an encode done since is no reason to sleep */
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        int32_t admitted = admit_locked(s);
        if (!any_busy_locked(s)) {
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        if (idle && !admitted && seen == s->enc_finished) {
            idle = 0;
            cond_wait_ms(&s->cv, &s->mu, SERVE_IDLE_MS);
            continue;
        }
        seen = s->enc_finished;
        pthread_mutex_unlock(&s->mu);
        idle = !step(s);
        pthread_mutex_lock(&s->mu);
    }
    serve_job *q = s->head;
    s->head = s->tail = NULL;
    s->n_queued = 0;
    pthread_mutex_unlock(&s->mu);
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].job) {
            s->slots[i].fresh = 0;
            serve_job_fail(s->slots[i].job, 503, SERVE_ERR_SERVER, "the server is shutting down");
            slot_release(s, &s->slots[i]);
        }
    while (q) {
        serve_job *next = q->next;
        serve_job_fail(q, 503, SERVE_ERR_SERVER, "the server is shutting down");
        serve_job_unref(q);
        q = next;
    }
    return NULL;
}

/* ---- the encoder thread ------------------------------------------------------------------- */

/* The towers' abort callback: stop the encode in progress when the server stops, or when its
 * job was cancelled (the client left, the job failed) or its slot let it go. */
static int encode_abort(void *ctx) {
    serve_sched *s = ctx;
    pthread_mutex_lock(&s->mu);
    int stop = s->enc_stopping || (s->enc_now && (s->enc_now->orphaned || serve_job_cancelled(s->enc_now->job)));
    pthread_mutex_unlock(&s->mu);
    return stop;
}

/* The encoder thread: take the tasks in order, encode each one's media on the encoder's
 * threads, mark it done and wake the scheduler (or free it, when its slot let it go). */
static void *encode_main(void *arg) {
    serve_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->enc_stopping && !s->enc_head) pthread_cond_wait(&s->enc_cv, &s->mu);
        if (s->enc_stopping) break;
        enc_task *t = s->enc_head;
        s->enc_head = t->next;
        if (!s->enc_head) s->enc_tail = NULL;
        s->enc_now = t;
        int skip = t->orphaned;
        pthread_mutex_unlock(&s->mu);
        double t0 = plume_now();
        int32_t n = 0;
        int rc = skip ? PLUME_ECANCELED : serve_media_encode(t->job->head.req.media, s->enc, t->from, &n, &t->err);
        double dt = plume_now() - t0;
        pthread_mutex_lock(&s->mu);
        s->enc_now = NULL;
        t->rc = rc;
        t->done = 1;
        s->enc_finished++;
        s->st.encoding--;
        s->st.encodes += n;
        s->st.encodes_abandoned += rc == PLUME_ECANCELED && !s->enc_stopping;
        s->st.encode_seconds += dt;
        pthread_cond_signal(&s->cv);
        if (t->orphaned) {
            pthread_mutex_unlock(&s->mu);
            task_free(t);
            pthread_mutex_lock(&s->mu);
        }
    }
    enc_task *q = s->enc_head; /* the scheduler has stopped: every task left is orphaned */
    s->enc_head = s->enc_tail = NULL;
    for (enc_task *t = q; t; t = t->next) s->st.encoding--;
    pthread_mutex_unlock(&s->mu);
    while (q) {
        enc_task *next = q->next;
        task_free(q);
        q = next;
    }
    return NULL;
}

/* ---- public ------------------------------------------------------------------------------ */

/* Open the slots and the batch, start the scheduler thread. */
int serve_sched_new(serve_sched **out, plume_model *m, const serve_sched_params *p, char **err) {
    *out = NULL;
    serve_sched *s = calloc(1, sizeof *s);
    if (!s) return plume_fail(err, PLUME_ENOMEM, "out of memory");
    s->m = m;
    s->tok = plume_model_tokenizer(m);
    s->V = plume_model_n_vocab(m);
    s->p = *p;
    s->st.n_slots = p->n_slots;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->enc_cv, NULL);
    int rc = 0;
    if (!(s->slots = calloc((size_t)p->n_slots, sizeof *s->slots))) rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
    if (!rc && p->slot_dir) rc = slot_dir_check(p->slot_dir, err);
    for (int32_t i = 0; !rc && i < p->n_slots; i++) {
        rc = slot_open(s, i, err);
        if (!rc && !(s->slots[i].logits = malloc((size_t)s->V * sizeof(float))))
            rc = plume_fail(err, PLUME_ENOMEM, "out of memory");
        if (!rc && p->draft > 0) {
            plume_spec_params dp = plume_spec_default_params();
            dp.draft_max = p->draft;
            dp.drafter = p->drafter;
            dp.lookup = !p->no_lookup;
            rc = plume_spec_new(&s->slots[i].spec, m, &dp, err);
            if (!rc && !(s->slots[i].spec_logits = malloc((size_t)(p->draft + 1) * (size_t)s->V * sizeof(float))))
                rc = plume_fail(err, PLUME_ENOMEM, "out of memory for the logits of speculative steps");
        }
    }
    int32_t per_slot = SERVE_PREFILL_CHUNK > p->draft ? SERVE_PREFILL_CHUNK + 1 : p->draft + 1;
    if (!rc) rc = plume_batch_new(&s->batch, m, p->n_slots * per_slot, err);
    if (!rc && (plume_model_has_vision(m) || plume_model_has_audio(m))) { /* the towers' own threads */
        int32_t half = plume_model_n_threads(m) / 2;
        rc = plume_encoder_new(&s->enc, m, p->encode_threads > 0 ? p->encode_threads : half > 1 ? half : 1, err);
        if (!rc) plume_encoder_set_abort(s->enc, encode_abort, s);
        if (!rc && pthread_create(&s->enc_thread, NULL, encode_main, s))
            rc = plume_fail(err, PLUME_ENOMEM, "cannot start the encoder thread");
        if (!rc) s->enc_started = 1;
        if (!rc) s->st.encode_threads = plume_encoder_n_threads(s->enc);
    }
    if (!rc && pthread_create(&s->thread, NULL, sched_main, s))
        rc = plume_fail(err, PLUME_ENOMEM, "cannot start the scheduler thread");
    if (rc) {
        serve_sched_free(s);
        return rc;
    }
    s->started = 1;
    *out = s;
    return 0;
}

/* Queue a job unless stopping, full (idle slots + queue_max), or of more choices than slots. */
int serve_sched_submit(serve_sched *s, serve_job *j) {
    pthread_mutex_lock(&s->mu);
    int32_t idle = 0; /* queued jobs first take the idle slots, then wait */
    for (int32_t i = 0; i < s->p.n_slots; i++) idle += !s->slots[i].job;
    int rc = s->stopping ? SERVE_ESTOPPED : j->head.req.n > s->p.n_slots ? SERVE_ESLOTS
             : s->n_queued >= s->p.queue_max + idle ? SERVE_EFULL : 0;
    if (!rc) {
        pthread_mutex_lock(&j->mu);
        j->refs++;
        pthread_mutex_unlock(&j->mu);
        j->next = NULL;
        if (s->tail) s->tail->next = j;
        else s->head = j;
        s->tail = j;
        s->n_queued++;
        s->st.requests++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* A consistent copy of the figures for /metrics. */
void serve_sched_stats(serve_sched *s, serve_stats *st) {
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->queued = s->n_queued;
    st->busy = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) st->busy += s->slots[i].job != NULL;
    pthread_mutex_unlock(&s->mu);
}

/* Stop the encoder thread (after the scheduler: every task is orphaned by then); the encode in
 * progress stops at its next layer. */
static void encode_stop(serve_sched *s) {
    if (!s->enc_started) return;
    pthread_mutex_lock(&s->mu);
    s->enc_stopping = 1;
    pthread_cond_signal(&s->enc_cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->enc_thread, NULL);
    s->enc_started = 0;
}

/* Stop the threads: every queued and running job ends with a 503. */
void serve_sched_stop(serve_sched *s) {
    if (!s) return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        s->started = 0;
    }
    encode_stop(s);
}

/* Save a slot's session at path, a name plume owns: written in a fresh private directory
 * beside it (nothing can be planted there), then renamed over path, which replaces a link or
 * FIFO someone put there instead of writing through it (an unlink before the save would
 * leave a moment to plant one again). 0 or an error in *err. */
static int slot_save(const plume_session *ss, const char *path, char **err) {
    char *dir = plume_mkdtemp_beside(path, err), *file = dir ? plume_sprintf("%s/slot.state", dir) : NULL;
    int rc = !dir ? PLUME_EIO : !file ? plume_fail(err, PLUME_ENOMEM, "out of memory") : plume_session_save(ss, file, err);
    if (!rc && rename(file, path) != 0) rc = plume_fail(err, PLUME_EIO, "%s: cannot rename into place: %s", path, strerror(errno));
    if (dir) plume_rm_tree(dir);
    free(file);
    free(dir);
    return rc;
}

/* Save the slots (--slot-save), free them, the batch and the scheduler. */
int serve_sched_free(serve_sched *s) {
    if (!s) return 0;
    int failed = 0;
    serve_sched_stop(s);
    for (int32_t i = 0; s->slots && i < s->p.n_slots; i++) {
        serve_slot *sl = &s->slots[i];
        if (s->p.slot_dir && sl->s && plume_session_n_past(sl->s) > 0) {
            char *path = slot_path(s, i), *err = NULL;
            if (!path || slot_save(sl->s, path, &err)) {
                fprintf(stderr, "plume: serve: slot %d not saved: %s\n", i, err ? err : "out of memory");
                failed = -1;
            }
            free(err);
            free(path);
        }
        plume_session_free(sl->s);
        free(sl->logits);
        free(sl->rows);
        plume_spec_free(sl->spec);
        free(sl->spec_logits);
    }
    plume_batch_free(s->batch);
    plume_encoder_free(s->enc);
    plume_vocab_free(s->vocab);
    free(s->slots);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->enc_cv);
    free(s);
    return failed;
}
