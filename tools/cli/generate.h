/* generate.h -- what `plume run` and `plume chat` share: options, the model/session setup,
 * and the generation loop (sampling, streaming UTF-8-safe text, stop ids and strings,
 * Ctrl-C, the stats line). */
#ifndef PLUME_GENERATE_H
#define PLUME_GENERATE_H

#include <signal.h>

#include "chat/chat.h"
#include "cli.h"

#define GEN_MAX_STOPS 16
#define GEN_MAX_IMAGES 16
#define GEN_MAX_AUDIO 16
#define GEN_MAX_VIDEO 4
#define GEN_MAX_MEDIA (GEN_MAX_IMAGES + GEN_MAX_AUDIO + 2 * GEN_MAX_VIDEO) /* a video and its sound */

typedef struct {
    const char *model, *isa, *system, *prompt, *cache;
    int32_t n_predict, n_threads, n_ctx, thinking, raw, verbose, exact, kv_bits;
    int32_t draft; /* --draft: tokens guessed per step; -1: the default (on only when greedy) */
    const char *drafter; /* --drafter DIR: the MTP drafter (default: BUNDLE/drafter when there) */
    int32_t no_drafter;  /* --no-drafter: prompt lookup even when the bundle has a drafter */
    int32_t no_lookup;   /* --no-lookup: with a drafter, the drafter alone (no prompt lookup) */
    const char *json_schema, *grammar; /* --json-schema FILE, --grammar FILE: the answer's format */
    int32_t json;                      /* --json: any JSON object */
    plume_sampler_params sp;
    const char *stops[GEN_MAX_STOPS];
    int32_t n_stops;
    const char *images[GEN_MAX_IMAGES]; /* --image FILE, in order */
    int32_t n_images;
    int32_t image_tokens;               /* --image-tokens: the budget (0: the model's 280) */
    const char *audios[GEN_MAX_AUDIO];  /* --audio FILE, in order */
    int32_t n_audios;
    const char *videos[GEN_MAX_VIDEO];  /* --video FILE, in order */
    int32_t n_videos;
    int32_t video_audio;                /* --video-audio: each video's sound track after its frames */
} gen_options;

/* What a generation did, for the stats line. */
typedef struct {
    int32_t n_prompt, n_gen;
    double t_prefill, t_decode; /* seconds */
    int32_t stopped_by;         /* 0 limit, 1 end-of-turn id, 2 stop string, 3 interrupted, 4 context full */
    int32_t incomplete;         /* a format was asked for and the answer stopped before its value was whole */
    int32_t last_id;
    int32_t draft;                            /* draft length in use, 0: off */
    int32_t mtp;                              /* the MTP drafter drafted (else prompt lookup) */
    int32_t lookup;                           /* with the drafter, prompt lookup too */
    int64_t n_lookup_drafted, n_lookup_accepted; /* of n_drafted and n_accepted: prompt lookup's */
    int64_t n_steps, n_drafted, n_accepted;   /* speculative steps and drafts of this run */
} gen_stats;

typedef struct {
    plume_model *m;
    plume_session *s;
    plume_sampler *smp;
    plume_spec *spec; /* speculative decoding, or NULL */
    plume_drafter *drafter; /* the MTP drafter the speculative steps use, or NULL (prompt lookup) */
    plume_vocab *vocab;     /* the tokens as bytes, when a format is asked for */
    plume_constraint *con;  /* --json-schema, --json, --grammar; or NULL */
    float *logits; /* [V] of the last fed token */
    gen_options o;
} gen_ctx;

extern volatile sig_atomic_t gen_interrupted;

/* Parse one option shared by run and chat at argv[*i]; 1 if it was one (advancing *i),
 * 0 if not, -1 on a bad value (message printed). */
int gen_parse_option(gen_options *o, int argc, char **argv, int *i, const char *cmd);
/* Defaults: the model's generation config. */
void gen_options_default(gen_options *o);
/* The GBNF grammar of the format the options ask for (malloc'd), or NULL when none; 0, or 1
 * having printed the error. */
int gen_format_grammar(const gen_options *o, char **gbnf);
/* Open the model, a session and a sampler (and the format's constraint); installs the SIGINT
 * handler. */
int gen_open(gen_ctx *g, const gen_options *o);
void gen_close(gen_ctx *g);
/* Tokenize text (no BOS); a malloc'd array. Invalid UTF-8 is an error message. */
int gen_tokenize(gen_ctx *g, const char *text, int32_t **ids, int32_t *n);
/* Feed the prompt ids (their image runs filled by media[0..n_media), in order), then sample
 * and stream up to n_predict tokens to stdout. */
int gen_run(gen_ctx *g, const int32_t *ids, int32_t n, const plume_embd *const *media, int32_t n_media,
            gen_stats *stats);
/* Load and encode image files with the model's tower into out[0..n) (a line each on stderr:
 * size, soft tokens, encode time); 0, or 1 having printed the error (out freed). */
int gen_encode_images(gen_ctx *g, const char *const *paths, int32_t n, plume_embd **out);
/* Load and encode audio files with the model's tower into out[0..n) (a line each on stderr:
 * length, format, soft tokens, encode time, and the 30 s clips when longer); 0, or 1 having
 * printed the error (out freed). */
int gen_encode_audio(gen_ctx *g, const char *const *paths, int32_t n, plume_embd **out);
/* Load and encode video files into out[0..): each video's frames, then (with --video-audio)
 * its sound track as an audio clip; *n_out of them (a line each on stderr: size, frames,
 * sampled, soft tokens, times); 0, or 1 having printed the error (out freed). */
int gen_encode_videos(gen_ctx *g, const char *const *paths, int32_t n, plume_embd **out, int32_t *n_out);
/* A user message with one placeholder per media (<|image|> per image, <|audio|> per audio,
 * <|video|> per video):
 * msg as it is when it holds exactly as many of each as media[0..n) has (each goes where the
 * user put it: media is reordered, each kind keeping its order, to the placeholders' order),
 * else the placeholders first, in media's order (the model card: media before text). NULL
 * (printed) when msg holds some but not as many. */
char *gen_media_message(gen_ctx *g, const char *msg, plume_embd **media, int32_t n);
/* Replace each image placeholder of *ids by its run (<|image> + N placeholders + <image|>),
 * in place (a new array). 0, or 1 having printed the error. */
int gen_expand(gen_ctx *g, int32_t **ids, int32_t *n, const plume_embd *const *media, int32_t n_media);
/* Print the stats line on stderr. */
void gen_print_stats(const gen_stats *stats);
/* The chat-template text of a first turn: the optional system turn, the user message and
 * the generation prompt. */
int gen_render_first(const gen_options *o, const char *msg, char **out, char **err);
/* The options' help text shared by run and chat. */
extern const char gen_options_help[];

#endif
