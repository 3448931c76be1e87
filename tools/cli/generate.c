/* generate.c -- the generation loop of `plume run` and `plume chat`. */
#include "generate.h"
#include "common.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t gen_interrupted;

const char gen_options_help[] =
    "  -m BUNDLE|ORG/NAME   the model: a bundle, or a Hub model pulled on first use (default:\n"
    "                       $PLUME_MODEL, then the bundle plume pull makes; plume list shows it)\n"
    "  -n N                 tokens to generate at most (default 512; -1: until the context is full)\n"
    "  --temp T             temperature (default 1.0; 0 = greedy)\n"
    "  --top-k K            (default 64; 0 = off)\n"
    "  --top-p P            (default 0.95; 1 = off)\n"
    "  --min-p P            (default 0 = off)\n"
    "  --repeat-penalty R   (default 1 = off)  --repeat-last-n N (default 64)\n"
    "  --presence-penalty P --frequency-penalty F  (default 0 = off)\n"
    "  --seed S             make sampling reproducible (default: from the clock)\n"
    "  --stop STR           stop when the text contains STR (repeatable)\n"
    "  --system TEXT        a system prompt\n"
    "  --thinking           let the model think first (<|think|> in the system turn)\n"
    "  -t N                 threads (default: physical cores)\n"
    "  --context N          context length (default: the bundle's)\n"
    "  --kv-bits 8|32       8: int8 K/V for the full-attention layers (a quarter of the memory)\n"
    "  --isa NAME           force kernels: scalar, avx2, avx512, neon\n"
    "  --exact              q8/q4: float32 activations, the reference (default: int8 activations,\n"
    "                       faster, ~1% error per matmul; docs/BENCHMARKS.md)\n"
    "  --draft N            speculative decoding: guess up to N tokens a step from the context and\n"
    "                       verify them in one pass (0 = off; default 3 when greedy, where the output\n"
    "                       is identical, else off; with sampling the distribution is unchanged)\n"
    "  --drafter DIR        draft with this MTP drafter (a converted gemma-4-*-assistant; default:\n"
    "                       BUNDLE/drafter when the bundle has one; docs/SPECULATIVE.md)\n"
    "  --no-drafter         draft by prompt lookup even when the bundle has a drafter\n"
    "  --no-lookup          with a drafter, draft by it alone (default: prompt lookup drafts instead\n"
    "                       where the text repeats itself and lookup guesses as well as the drafter)\n"
    "  --image FILE         a PNG, JPEG or WebP image for the prompt (repeatable, in order; the bundle\n"
    "                       needs a vision tower); it goes where the prompt says <|image|>, else first\n"
    "  --image-tokens N     soft tokens per image: 70, 140, 280 (default), 560 or 1120\n"
    "  --video FILE         an MP4, MOV, MKV or WebM video for the prompt (repeatable; the bundle needs a\n"
    "                       vision tower): 32 frames with their MM:SS timestamps, 70 tokens each;\n"
    "                       it goes where the prompt says <|video|>, else first\n"
    "  --video-audio        add each video's sound track as an audio part after its frames (the\n"
    "                       bundle needs an audio tower; Hugging Face's processor ignores the sound)\n"
    "  --audio FILE         a WAV, FLAC, Ogg (Vorbis, Opus) or MP3 clip for the prompt (repeatable,\n"
    "                       in order; the bundle needs an audio tower); it goes where the prompt\n"
    "                       says <|audio|>, else first; over 30 s it is heard as 30 s clips\n"

    "  --json-schema FILE   the answer is JSON valid against the schema in FILE (a subset of JSON\n"
    "                       Schema; what is outside it is refused by name: docs/STRUCTURED.md)\n"
    "  --json               the answer is a JSON object\n"
    "  --grammar FILE       the answer matches the GBNF grammar in FILE (start rule root)\n"
    "                       (with --thinking the thought stays free; -n cuts the answer short:\n"
    "                       the stats line says when the value is incomplete)\n";

void gen_options_default(gen_options *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = 512;
    o->draft = -1;
    o->sp = plume_sampler_default_params();
    o->sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
}

/* The value after a flag, or NULL (message printed). */
static const char *value(int argc, char **argv, int *i, const char *cmd) {
    if (*i + 1 >= argc) {
        cli_error("%s: %s needs a value", cmd, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int gen_parse_option(gen_options *o, int argc, char **argv, int *i, const char *cmd) {
    static const char *const with_value[] = {"-m", "-n", "-t", "--context", "--temp", "--top-k", "--top-p",
                                             "--min-p", "--repeat-penalty", "--repeat-last-n",
                                             "--presence-penalty", "--frequency-penalty", "--seed", "--stop",
                                             "--system", "--isa", "--kv-bits", "--draft", "--drafter", "--image",
                                             "--image-tokens", "--audio", "--video", "--json-schema",
                                             "--grammar"};
    const char *a = argv[*i], *v = NULL;
    int64_t n;
    float f;
    for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
        if (!strcmp(a, with_value[k]) && !(v = value(argc, argv, i, cmd))) return -1;
#define FLAG(name) (!strcmp(a, name))
    if (FLAG("-m")) { o->model = v; }
    else if (FLAG("-n")) { if (cli_int(v, -1, 1 << 24, &n)) return cli_error("%s: -n wants an integer >= -1", cmd), -1; o->n_predict = (int32_t)n; }
    else if (FLAG("-t")) { if (cli_int(v, 1, 1024, &n)) return cli_error("%s: -t wants 1..1024", cmd), -1; o->n_threads = (int32_t)n; }
    else if (FLAG("--context")) { if (cli_int(v, 1, 1 << 24, &n)) return cli_error("%s: --context wants a positive integer", cmd), -1; o->n_ctx = (int32_t)n; }
    else if (FLAG("--temp")) { if (cli_float(v, &f) || f < 0) return cli_error("%s: --temp wants a number >= 0", cmd), -1; o->sp.temperature = f; }
    else if (FLAG("--top-k")) { if (cli_int(v, 0, 1 << 24, &n)) return cli_error("%s: --top-k wants an integer >= 0", cmd), -1; o->sp.top_k = (int32_t)n; }
    else if (FLAG("--top-p")) { if (cli_float(v, &f) || f <= 0 || f > 1) return cli_error("%s: --top-p wants a number in (0, 1]", cmd), -1; o->sp.top_p = f; }
    else if (FLAG("--min-p")) { if (cli_float(v, &f) || f < 0 || f > 1) return cli_error("%s: --min-p wants a number in [0, 1]", cmd), -1; o->sp.min_p = f; }
    else if (FLAG("--repeat-penalty")) { if (cli_float(v, &f) || f <= 0) return cli_error("%s: --repeat-penalty wants a number > 0", cmd), -1; o->sp.repeat_penalty = f; }
    else if (FLAG("--repeat-last-n")) { if (cli_int(v, -1, 1 << 24, &n)) return cli_error("%s: --repeat-last-n wants an integer >= -1", cmd), -1; o->sp.repeat_last_n = (int32_t)n; }
    else if (FLAG("--presence-penalty")) { if (cli_float(v, &f)) return cli_error("%s: --presence-penalty wants a number", cmd), -1; o->sp.presence_penalty = f; }
    else if (FLAG("--frequency-penalty")) { if (cli_float(v, &f)) return cli_error("%s: --frequency-penalty wants a number", cmd), -1; o->sp.frequency_penalty = f; }
    else if (FLAG("--seed")) { if (cli_int(v, 0, INT64_MAX, &n)) return cli_error("%s: --seed wants a non-negative integer", cmd), -1; o->sp.seed = (uint64_t)n; }
    else if (FLAG("--stop")) {
        if (!*v) return cli_error("%s: --stop wants a non-empty string", cmd), -1;
        if (o->n_stops == GEN_MAX_STOPS) return cli_error("%s: at most %d --stop strings", cmd, GEN_MAX_STOPS), -1;
        o->stops[o->n_stops++] = v;
    }
    else if (FLAG("--system")) { o->system = v; }
    else if (FLAG("--isa")) { o->isa = v; }
    else if (FLAG("--kv-bits")) { if (cli_int(v, 8, 32, &n) || (n != 8 && n != 32)) return cli_error("%s: --kv-bits wants 8 or 32", cmd), -1; o->kv_bits = (int32_t)n; }
    else if (FLAG("--draft")) { if (cli_int(v, 0, PLUME_SAMPLER_UNDO - 1, &n)) return cli_error("%s: --draft wants 0..%d", cmd, PLUME_SAMPLER_UNDO - 1), -1; o->draft = (int32_t)n; }
    else if (FLAG("--drafter")) { o->drafter = v; }
    else if (FLAG("--no-drafter")) o->no_drafter = 1;
    else if (FLAG("--no-lookup")) o->no_lookup = 1;
    else if (FLAG("--json-schema")) { o->json_schema = v; }
    else if (FLAG("--grammar")) { o->grammar = v; }
    else if (FLAG("--json")) o->json = 1;
    else if (FLAG("--image")) {
        if (o->n_images == GEN_MAX_IMAGES) return cli_error("%s: at most %d --image files", cmd, GEN_MAX_IMAGES), -1;
        o->images[o->n_images++] = v;
    }
    else if (FLAG("--video")) {
        if (o->n_videos == GEN_MAX_VIDEO) return cli_error("%s: at most %d --video files", cmd, GEN_MAX_VIDEO), -1;
        o->videos[o->n_videos++] = v;
    }
    else if (FLAG("--audio")) {
        if (o->n_audios == GEN_MAX_AUDIO) return cli_error("%s: at most %d --audio files", cmd, GEN_MAX_AUDIO), -1;
        o->audios[o->n_audios++] = v;
    }
    else if (FLAG("--image-tokens")) {
        if (cli_int(v, 1, 1120, &n) || (n != 70 && n != 140 && n != 280 && n != 560 && n != 1120))
            return cli_error("%s: --image-tokens wants 70, 140, 280, 560 or 1120", cmd), -1;
        o->image_tokens = (int32_t)n;
    }
    else if (FLAG("--video-audio")) o->video_audio = 1;
    else if (FLAG("--thinking")) o->thinking = 1;
    else if (FLAG("--verbose")) o->verbose = 1;
    else if (FLAG("--exact")) o->exact = 1;
    else return 0;
#undef FLAG
    return 1;
}

/* SIGINT: stop the current generation, not the program. */
static void on_sigint(int sig) {
    (void)sig;
    gen_interrupted = 1;
}

/* The draft length: --draft, or by default the library's when decoding is greedy (drafting
 * cannot change greedy output) and 0 when sampling (it keeps the distribution, but a seed
 * no longer gives the same text as without). */
static int32_t gen_draft(const gen_options *o) {
    if (o->draft >= 0) return o->draft;
    return o->sp.temperature <= 0.0f || (o->drafter && !o->no_drafter) ? plume_spec_default_params().draft_max : 0;
}

int gen_format_grammar(const gen_options *o, char **gbnf) {
    *gbnf = NULL;
    if ((o->json_schema != NULL) + (o->grammar != NULL) + (o->json != 0) > 1)
        return cli_error("--json-schema, --json and --grammar exclude each other");
    char *err = NULL, *text = NULL;
    size_t len = 0;
    const char *path = o->json_schema ? o->json_schema : o->grammar;
    if (path && plume_read_file(path, &text, &len, &err)) return cli_lib_error_free(err);
    int rc = 0;
    if (o->grammar) {
        *gbnf = text;
        return 0;
    }
    if (o->json) rc = plume_json_schema_to_grammar("{\"type\": \"object\"}", 18, gbnf, &err);
    else if (o->json_schema) rc = plume_json_schema_to_grammar(text, len, gbnf, &err);
    free(text);
    if (rc) {
        fprintf(stderr, "plume: %s: %s\n", path ? path : "--json", err ? err : "error");
        free(err);
        return 1;
    }
    return 0;
}

/* The constraint the options ask for (none when they ask for no format): every format is a
 * grammar (a schema's is what plume_json_schema_to_grammar() writes). */
static int gen_constraint(gen_ctx *g, const gen_options *o) {
    char *gbnf = NULL, *err = NULL;
    if (gen_format_grammar(o, &gbnf)) return 1;
    if (!gbnf) return 0;
    plume_constraint_params cp = plume_constraint_default_params();
    cp.thinking = o->thinking && !o->raw ? 1 : 0;
    int rc = plume_vocab_new(&g->vocab, plume_model_tokenizer(g->m), &err);
    if (!rc) rc = plume_constraint_new_grammar(&g->con, g->vocab, gbnf, strlen(gbnf), &cp, &err);
    free(gbnf);
    if (rc) {
        const char *what = o->json_schema ? o->json_schema : o->grammar ? o->grammar : "--json";
        fprintf(stderr, "plume: %s: %s\n", what, err ? err : "error");
        free(err);
        return 1;
    }
    return 0;
}

int gen_open(gen_ctx *g, const gen_options *o) {
    memset(g, 0, sizeof *g);
    g->o = *o;
    const char *path = cli_model_path(o->model);
    if (!path) return 1;
    char *err = NULL;
    plume_model_params mp = plume_model_default_params();
    mp.isa = o->isa;
    mp.n_threads = o->n_threads;
    mp.exact = o->exact;
    if (plume_model_open(&g->m, path, &mp, &err)) return cli_lib_error_free(err);
    if (!plume_model_tokenizer(g->m)) {
        gen_close(g);
        return cli_error("%s: the bundle has no tokenizer (hf_model/tokenizer.json)", path);
    }
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = o->n_ctx;
    if (o->kv_bits) sp.kv_bits = o->kv_bits;
    if (plume_session_new(&g->s, g->m, &sp, &err) ||
        plume_sampler_new(&g->smp, &o->sp, plume_model_n_vocab(g->m), &err)) {
        gen_close(g);
        return cli_lib_error_free(err);
    }
    if (gen_constraint(g, o)) {
        gen_close(g);
        return 1;
    }
    plume_spec_params dp = plume_spec_default_params();
    dp.draft_max = gen_draft(o);
    if (o->drafter && o->no_drafter) {
        gen_close(g);
        return cli_error("--drafter and --no-drafter contradict each other");
    }
    if (o->no_lookup && o->no_drafter) {
        gen_close(g);
        return cli_error("--no-lookup and --no-drafter contradict each other (--draft 0 turns drafting off)");
    }
    char *dpath = dp.draft_max > 0 && !o->no_drafter ? (o->drafter ? strdup(o->drafter) : plume_drafter_find(g->m)) : NULL;
    if (dpath && plume_drafter_open(&g->drafter, g->m, dpath, &err)) {
        free(dpath);
        gen_close(g);
        return cli_lib_error_free(err);
    }
    free(dpath);
    dp.drafter = g->drafter;
    dp.lookup = !o->no_lookup;
    if (o->no_lookup && dp.draft_max > 0 && !g->drafter) {
        gen_close(g);
        return cli_error("--no-lookup: there is no drafter to draft alone (the bundle has none; --drafter DIR names one)");
    }
    if (dp.draft_max > 0 && plume_spec_new(&g->spec, g->m, &dp, &err)) {
        gen_close(g);
        return cli_lib_error_free(err);
    }
    g->logits = malloc((size_t)plume_model_n_vocab(g->m) * sizeof *g->logits);
    if (!g->logits) {
        gen_close(g);
        return cli_error("out of memory");
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint; /* no SA_RESTART: a read at the chat prompt returns EINTR */
    sigaction(SIGINT, &sa, NULL);
    return 0;
}

void gen_close(gen_ctx *g) {
    free(g->logits);
    plume_constraint_free(g->con);
    plume_vocab_free(g->vocab);
    plume_spec_free(g->spec);
    plume_drafter_free(g->drafter);
    plume_sampler_free(g->smp);
    plume_session_free(g->s);
    plume_model_free(g->m);
    memset(g, 0, sizeof *g);
}

int gen_tokenize(gen_ctx *g, const char *text, int32_t **ids, int32_t *n) {
    const plume_tokenizer *tok = plume_model_tokenizer(g->m);
    size_t len = strlen(text);
    int32_t cap = (int32_t)(len < (1u << 28) ? len + 16 : (1u << 28));
    *ids = malloc((size_t)cap * sizeof **ids);
    if (!*ids) return cli_error("out of memory");
    int32_t k = plume_tokenize(tok, text, len, *ids, cap);
    if (k == PLUME_EINVAL) {
        free(*ids);
        *ids = NULL;
        return cli_error("the prompt is not valid UTF-8");
    }
    if (k < 0 || k > cap) {
        free(*ids);
        *ids = NULL;
        return cli_error("cannot tokenize the prompt");
    }
    *n = k;
    return 0;
}

/* Ids decided ahead by a speculative step, handed out one at a time. */
typedef struct {
    int32_t id[PLUME_SAMPLER_UNDO];
    int32_t n, next;
} gen_queue;

/* The next id: sampled from the logits of the last fed token; or, with drafting, the first
 * one sampled so, then the ids of speculative steps, each started from the previous id
 * (pending: processed but not fed). cap: ids still wanted. PLUME_E* on failure (message
 * printed). */
static int32_t gen_next(gen_ctx *g, gen_queue *q, int32_t pending, int32_t cap) {
    if (!g->spec || pending < 0) return plume_sampler_sample(g->smp, g->logits);
    if (q->next == q->n) {
        char *err = NULL;
        int32_t n = plume_spec_step(g->spec, g->s, g->smp, pending, q->id, cap, &err);
        if (n < 0 && g->con && plume_constraint_status(g->con) == PLUME_CONSTRAINT_LIMIT) return free(err), n; /* said by the caller */
        if (n < 0) return cli_lib_error_free(err), n;
        q->n = n;
        q->next = 0;
    }
    return q->id[q->next++];
}

/* After a run with drafting: leave the session and the sampler as plain decoding would have,
 * holding the prompt and the first n_fed generated ids (speculative steps may have fed a few
 * more, or not yet the last one). */
static int gen_settle(gen_ctx *g, int32_t n_fed, int32_t last) {
    char *err = NULL;
    int32_t have = plume_session_n_past(g->s);
    if (have > n_fed) {
        plume_sampler_rewind(g->smp, have - n_fed);
        if (plume_session_rewind(g->s, n_fed, &err)) return cli_lib_error_free(err);
    } else if (have < n_fed) { /* the last id is pending */
        plume_sampler_accept(g->smp, last);
        if (plume_session_feed(g->s, &last, 1, g->logits, 0, &err)) return cli_lib_error_free(err);
    }
    return 0;
}

int gen_encode_images(gen_ctx *g, const char *const *paths, int32_t n, plume_embd **out) {
    char *err = NULL;
    plume_image_params ip = plume_image_default_params();
    ip.max_tokens = g->o.image_tokens;
    for (int32_t i = 0; i < n; i++) {
        plume_image *img = NULL;
        double t0 = plume_now();
        int rc = plume_image_load(&img, paths[i], &err);
        if (!rc) rc = plume_image_encode(&out[i], g->m, img, &ip, &err);
        if (!rc)
            fprintf(stderr, "[image %s: %d x %d, %d soft tokens, encoded in %.2f s]\n", paths[i], plume_image_width(img),
                    plume_image_height(img), plume_embd_n_tokens(out[i]), plume_now() - t0);
        plume_image_free(img);
        if (rc) {
            while (i-- > 0) plume_embd_free(out[i]);
            return cli_lib_error_free(err);
        }
    }
    return 0;
}

int gen_encode_audio(gen_ctx *g, const char *const *paths, int32_t n, plume_embd **out) {
    char *err = NULL;
    for (int32_t i = 0; i < n; i++) {
        plume_audio *a = NULL;
        double t0 = plume_now();
        int rc = plume_audio_load(&a, paths[i], &err);
        if (!rc) rc = plume_audio_encode(&out[i], g->m, a, &err);
        if (!rc) {
            double sec = plume_audio_seconds(a);
            fprintf(stderr, "[audio %s: %.1f s, %d soft tokens, encoded in %.2f s", paths[i], sec, plume_embd_n_tokens(out[i]),
                    plume_now() - t0);
            if (sec > 30.0) fprintf(stderr, "; longer than the 30 s the model hears: %d clips of 30 s", (int)((sec + 29.999) / 30));
            fputs("]\n", stderr);
        }
        plume_audio_free(a);
        if (rc) {
            while (i-- > 0) plume_embd_free(out[i]);
            return cli_lib_error_free(err);
        }
    }
    return 0;
}

int gen_encode_videos(gen_ctx *g, const char *const *paths, int32_t n, plume_embd **out, int32_t *n_out) {
    char *err = NULL;
    plume_video_params vp = plume_video_default_params();
    vp.audio = g->o.video_audio;
    int32_t k = 0;
    int rc = 0;
    for (int32_t i = 0; i < n && !rc; i++) {
        plume_video *v = NULL;
        double t0 = plume_now(), t1 = t0;
        rc = plume_video_load(&v, paths[i], &vp, &err);
        if (!rc) {
            t1 = plume_now();
            rc = plume_video_encode(&out[k], g->m, v, &err);
        }
        if (!rc) {
            const int32_t f = plume_video_n_frames(v);
            fprintf(stderr, "[video %s: %s, %d x %d, %d frames at %.3g fps, %d sampled (%s to %s), %d soft tokens (%d a frame), "
                    "decoded in %.2f s, encoded in %.2f s]\n", paths[i], plume_video_format(v), plume_video_width(v),
                    plume_video_height(v), plume_video_n_decoded(v), plume_video_fps(v), f, plume_video_timestamp(v, 0),
                    plume_video_timestamp(v, f - 1), plume_embd_n_tokens(out[k]), plume_embd_n_tokens(out[k]) / f, t1 - t0,
                    plume_now() - t1);
            k++;
        }
        if (!rc && g->o.video_audio) {
            const plume_audio *a = plume_video_audio(v);
            if (!a) {
                fprintf(stderr, "[video %s: no sound track]\n", paths[i]);
            } else if ((rc = plume_audio_encode(&out[k], g->m, a, &err)) == 0) {
                fprintf(stderr, "[video %s: its sound track, %.1f s, %d soft tokens, after the frames]\n", paths[i],
                        plume_audio_seconds(a), plume_embd_n_tokens(out[k]));
                k++;
            }
        }
        plume_video_free(v);
    }
    if (rc) {
        while (k-- > 0) plume_embd_free(out[k]);
        return cli_lib_error_free(err);
    }
    *n_out = k;
    return 0;
}

/* The text of the model's media token `name` ("image": <|image|>, "audio": <|audio|>), from the
 * tokenizer; "" if none. */
static void media_placeholder(gen_ctx *g, const char *name, char *buf, size_t cap) {
    int32_t id = plume_model_media_token(g->m, name);
    buf[0] = 0;
    if (id >= 0 && plume_detokenize(plume_model_tokenizer(g->m), &id, 1, 0, buf, cap) < 0) buf[0] = 0;
}

char *gen_media_message(gen_ctx *g, const char *msg, plume_embd **media, int32_t n) {
    enum { KINDS = 3 };
    static const char *const kinds[KINDS] = {"image", "audio", "video"}, *const plural[KINDS] = {"images", "audio clips",
                                                                                                "videos"};
    char ph[KINDS][64];
    int32_t want[KINDS] = {0}, have[KINDS] = {0}, id[KINDS], kind_of[GEN_MAX_MEDIA];
    if (n > GEN_MAX_MEDIA) return cli_error("at most %d images, audio clips and videos a message", GEN_MAX_MEDIA), NULL;
    int same = 1, any = 0;
    for (int k = 0; k < KINDS; k++) {
        media_placeholder(g, kinds[k], ph[k], sizeof ph[k]);
        id[k] = plume_model_media_token(g->m, kinds[k]);
        for (int32_t i = 0; i < n; i++)
            if (plume_embd_placeholder(media[i]) == id[k]) want[k]++, kind_of[i] = k;
        if (want[k] && !ph[k][0]) return cli_error("the model has no %s placeholder token", kinds[k]), NULL;
        for (const char *p = ph[k][0] ? strstr(msg, ph[k]) : NULL; p; p = strstr(p + strlen(ph[k]), ph[k])) have[k]++;
        same &= have[k] == want[k];
        any |= have[k] != 0;
    }
    if (same) { /* where the user put them: media in that order, each kind keeping its own */
        plume_embd *order[GEN_MAX_MEDIA];
        int32_t next[KINDS] = {0}, k = 0;
        for (const char *p = msg; k < n; k++) {
            const char *at = NULL;
            int kind = 0;
            for (int j = 0; j < KINDS; j++) {
                const char *q = have[j] ? strstr(p, ph[j]) : NULL;
                if (q && (!at || q < at)) at = q, kind = j;
            }
            while (kind_of[next[kind]] != kind) next[kind]++;
            order[k] = media[next[kind]++];
            p = at + strlen(ph[kind]);
        }
        memcpy(media, order, (size_t)n * sizeof *media);
        return strdup(msg);
    }
    if (any)
        return cli_error("the prompt holds %d %s, %d %s and %d %s, but %d %s, %d %s and %d %s were given", have[0], ph[0],
                         have[1], ph[1], have[2], ph[2], want[0], plural[0], want[1], plural[1], want[2], plural[2]),
               NULL;
    size_t len = strlen(msg) + 1;
    for (int32_t i = 0; i < n; i++) len += strlen(ph[kind_of[i]]);
    char *out = malloc(len);
    if (!out) return cli_error("out of memory"), NULL;
    out[0] = 0;
    for (int32_t i = 0; i < n; i++) strcat(out, ph[kind_of[i]]);
    strcat(out, msg);
    return out;
}

int gen_expand(gen_ctx *g, int32_t **ids, int32_t *n, const plume_embd *const *media, int32_t n_media) {
    char *err = NULL;
    int32_t need = plume_prompt_expand(g->m, *ids, *n, media, n_media, NULL, 0, &err);
    if (need < 0) return cli_lib_error_free(err);
    int32_t *out = malloc((size_t)need * sizeof *out + 1);
    if (!out) return cli_error("out of memory");
    plume_prompt_expand(g->m, *ids, *n, media, n_media, out, need, &err);
    free(*ids);
    *ids = out;
    *n = need;
    return 0;
}

int gen_run(gen_ctx *g, const int32_t *ids, int32_t n, const plume_embd *const *media, int32_t n_media,
            gen_stats *stats) {
    memset(stats, 0, sizeof *stats);
    stats->n_prompt = n;
    stats->last_id = -1;
    char *err = NULL;
    int32_t room = plume_session_n_ctx(g->s) - plume_session_n_past(g->s);
    if (n > room)
        return cli_error("the prompt has %d tokens, but only %d of the context's %d are free", n, room,
                         plume_session_n_ctx(g->s));
    gen_interrupted = 0;
    double t0 = plume_now();
    int fed = n_media ? plume_session_feed_media(g->s, ids, n, media, n_media, g->logits, 0, &err)
                      : n > 0 ? plume_session_feed(g->s, ids, n, g->logits, 0, &err) : 0;
    if (fed) return cli_lib_error_free(err);
    for (int32_t i = 0; i < n; i++) plume_sampler_accept(g->smp, ids[i]);
    stats->t_prefill = plume_now() - t0;
    if (g->con) { /* from here on, what the sampler accepts moves the constraint */
        plume_constraint_reset(g->con);
        plume_sampler_set_constraint(g->smp, g->con);
    }
    plume_stop_matcher sm;
    if (plume_stop_matcher_init(&sm, g->o.stops, g->o.n_stops, &err)) return cli_lib_error_free(err);
    plume_detok_stream ds;
    plume_detok_stream_init(&ds, plume_model_tokenizer(g->m), 1);
    char piece[256];
    const char *emit;
    size_t n_emit;
    int64_t s0[5], l0;
    plume_spec_stats(g->spec, &s0[0], &s0[1], &s0[2]);
    plume_spec_source_stats(g->spec, PLUME_SPEC_LOOKUP, &l0, &s0[3], &s0[4]);
    /* pos: where plain decoding would be, the prompt and the ids it has fed */
    int32_t pos = plume_session_n_past(g->s), pending = -1, n_ctx = plume_session_n_ctx(g->s);
    gen_queue q = {{0}, 0, 0};
    t0 = plume_now();
    int rc = 0;
    while (g->o.n_predict < 0 || stats->n_gen < g->o.n_predict) {
        if (gen_interrupted) { stats->stopped_by = 3; break; }
        int32_t want = g->o.n_predict < 0 ? PLUME_SAMPLER_UNDO : g->o.n_predict - stats->n_gen;
        int32_t id = gen_next(g, &q, pending, want < PLUME_SAMPLER_UNDO ? want : PLUME_SAMPLER_UNDO);
        if (id < 0) {
            rc = g->con && plume_constraint_status(g->con) == PLUME_CONSTRAINT_LIMIT
                     ? cli_error("the grammar is too ambiguous or nested too deep for the text so far: a step passed "
                                 "the recognizer's limit (docs/STRUCTURED.md, Limits)")
                 : g->spec && pending >= 0 ? 1
                 : cli_error(g->con ? "sampling failed (no allowed token has a finite logit)" : "sampling failed (no finite logit)");
            break;
        }
        stats->last_id = id;
        if (plume_model_ends_turn(g->m, id)) { stats->stopped_by = 1; break; }
        int32_t k = plume_detok_stream_put(&ds, id, piece, sizeof piece);
        int hit = plume_stop_matcher_feed(&sm, piece, k > 0 ? (size_t)k : 0, &emit, &n_emit);
        fwrite(emit, 1, n_emit, stdout);
        fflush(stdout);
        stats->n_gen++;
        if (hit) { stats->stopped_by = 2; break; }
        if (pos >= n_ctx) { stats->stopped_by = 4; break; }
        pos++;
        if (g->spec) { pending = id; continue; } /* fed by the next speculative step */
        plume_sampler_accept(g->smp, id);
        if (plume_session_feed(g->s, &id, 1, g->logits, 0, &err)) { rc = cli_lib_error_free(err); break; }
    }
    if (g->spec && !rc) rc = gen_settle(g, pos, pending);
    if (g->con) {
        stats->incomplete = plume_constraint_status(g->con) == PLUME_CONSTRAINT_OPEN;
        plume_sampler_set_constraint(g->smp, NULL);
    }
    if (stats->stopped_by != 2) {
        int32_t k = plume_detok_stream_flush(&ds, piece, sizeof piece);
        plume_stop_matcher_feed(&sm, piece, k > 0 ? (size_t)k : 0, &emit, &n_emit);
        fwrite(emit, 1, n_emit, stdout);
        n_emit = plume_stop_matcher_flush(&sm, &emit);
        fwrite(emit, 1, n_emit, stdout);
    }
    fflush(stdout);
    stats->t_decode = plume_now() - t0;
    plume_spec_stats(g->spec, &stats->n_steps, &stats->n_drafted, &stats->n_accepted);
    stats->n_steps -= s0[0];
    stats->n_drafted -= s0[1];
    stats->n_accepted -= s0[2];
    stats->draft = g->spec ? gen_draft(&g->o) : 0;
    stats->mtp = g->drafter != NULL;
    stats->lookup = stats->mtp && !g->o.no_lookup;
    int64_t l[3];
    plume_spec_source_stats(g->spec, PLUME_SPEC_LOOKUP, &l[0], &l[1], &l[2]);
    stats->n_lookup_drafted = l[1] - s0[3];
    stats->n_lookup_accepted = l[2] - s0[4];
    plume_stop_matcher_free(&sm);
    return rc;
}

void gen_print_stats(const gen_stats *stats) {
    static const char *const why[] = {"limit", "end of turn", "stop string", "interrupted", "context full"};
    char draft[192] = "", lookup[64] = "";
    if (stats->lookup) /* the guesses prompt lookup drafted instead of the drafter */
        snprintf(lookup, sizeof lookup, ", lookup %lld of %lld", (long long)stats->n_lookup_accepted,
                 (long long)stats->n_lookup_drafted);
    if (stats->draft > 0)
        snprintf(draft, sizeof draft, " | draft %d%s: %lld of %lld accepted (%.0f%%), %.2f tokens/step%s", stats->draft, stats->mtp ? " (mtp)" : "",
                 (long long)stats->n_accepted, (long long)stats->n_drafted,
                 stats->n_drafted ? 100.0 * (double)stats->n_accepted / (double)stats->n_drafted : 0.0,
                 stats->n_steps ? (double)(stats->n_steps + stats->n_accepted) / (double)stats->n_steps : 1.0, lookup);
    fprintf(stderr, "\n[prompt %d tokens, prefill %.1f tok/s | generated %d tokens, decode %.1f tok/s%s | %s%s]\n",
            stats->n_prompt, stats->t_prefill > 0 ? stats->n_prompt / stats->t_prefill : 0.0, stats->n_gen,
            stats->t_decode > 0 ? stats->n_gen / stats->t_decode : 0.0, draft, why[stats->stopped_by],
            stats->incomplete ? ", the value is incomplete" : "");
}

int gen_render_first(const gen_options *o, const char *msg, char **out, char **err) {
    plume_chat_message msgs[2];
    int32_t n = 0;
    if (o->system) msgs[n++] = (plume_chat_message){"system", o->system};
    msgs[n++] = (plume_chat_message){"user", msg};
    return plume_chat_render(msgs, n, 1, o->thinking, out, err);
}
