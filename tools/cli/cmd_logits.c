/* cmd_logits.c -- `plume logits`: feed ids, write the logits of every position as .npy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "npy.h"

static const char logits_usage[] =
    "usage: plume logits -m BUNDLE (--ids 2,17,... | --ids-npy FILE.npy) [--step N] -o OUT.npy\n"
    "                    [--isa scalar|avx2|avx512|neon] [-t THREADS] [--context N]\n"
    "                    [--load-state FILE] [--save-state FILE] [--fast]\n"
    "                    [--image FILE]... [--image-tokens N] [--audio FILE]... [--video FILE]...\n"
    "  Feed the ids N at a time (--step 1 is pure decode; default: all at once) and write the\n"
    "  float32 logits [T, V] of every position, after the final softcap.\n"
    "  --load-state FILE  continue a session saved earlier (the ids follow its tokens)\n"
    "  --save-state FILE  save the session after the ids\n"
    "  --fast             q8/q4: int8 activations, as run/chat/serve/bench use by default (the\n"
    "                     logits are exact, float32 activations, unless this is given)\n"
    "  --image FILE       an image whose soft tokens fill the next run of image placeholders\n"
    "                     (the model's image_token_id) of the ids, which are the expanded prompt\n"
    "                     (<|image> + N placeholders + <image|> each); repeatable, in order\n"
    "  --image-tokens N   the images' token budget: 70, 140, 280 (default), 560 or 1120\n"
    "  --audio FILE       an audio file whose soft tokens fill the next run of audio placeholders\n"
    "                     (<|audio> + N x audio_token_id + <audio|>); repeatable, in order. Images\n"
    "                     fill the image runs and audio the audio runs, each kind in its order\n"
    "  --video FILE       a video whose frames' soft tokens fill the next video placeholders (the\n"
    "                     model's video_token_id: per frame \"MM:SS \" <|image> + n placeholders +\n"
    "                     <image|>, as the processor expands it); repeatable, in order\n";

/* Read ids from an int32 or float .npy. */
static int read_ids_npy(const char *path, int32_t **ids, int32_t *n) {
    plume_map m;
    npy_view v;
    char *err = NULL;
    if (npy_open(path, &m, &v, &err)) return cli_lib_error_free(err);
    float *f = malloc((size_t)(v.count ? v.count : 1) * sizeof *f);
    *ids = malloc((size_t)(v.count ? v.count : 1) * sizeof **ids);
    int bad = !f || !*ids || v.count < 1 || v.count > INT32_MAX;
    if (!bad) npy_to_f32(&v, f);
    int64_t at = -1; /* a float that is not a small integer is no id (and casting it would be undefined) */
    for (int64_t i = 0; !bad && at < 0 && i < v.count; i++)
        if (!(f[i] >= -1.0f && f[i] <= 16777216.0f) || f[i] != floorf(f[i])) at = i;
        else (*ids)[i] = (int32_t)f[i];
    if (bad || at >= 0) {
        free(f);
        free(*ids);
        *ids = NULL;
        plume_map_free(&m);
        if (at >= 0) return cli_error("logits: %s: element %lld is not a token id", path, (long long)at);
        return cli_error("logits: %s: no ids (or too many)", path);
    }
    *n = (int32_t)v.count;
    free(f);
    plume_map_free(&m);
    return 0;
}

enum { LOGITS_MAX_IMAGES = 64, LOGITS_MAX_AUDIO = 64, LOGITS_MAX_VIDEO = 16 };

/* Encode video files into media (0, or the error: media freed). */
static int encode_videos(plume_model *m, const char *const *paths, int32_t n, plume_embd **media, char **err) {
    for (int32_t i = 0; i < n; i++) {
        plume_video *v = NULL;
        char *why = NULL;
        int rc = plume_video_load(&v, paths[i], NULL, &why);
        if (!rc) rc = plume_video_encode(&media[i], m, v, &why);
        plume_video_free(v);
        if (rc) {
            plume_fail(err, rc, "%s", why ? why : paths[i]);
            free(why);
            while (i-- > 0) plume_embd_free(media[i]);
            return rc;
        }
    }
    return 0;
}

/* Encode the files of paths into media with the model's tower: images (budget tokens; 0: the
 * default) or audio. 0, or the error (media freed). */
static int encode_media(plume_model *m, const char *const *paths, int32_t n, int audio, int32_t tokens, plume_embd **media,
                        char **err) {
    plume_image_params ip = plume_image_default_params();
    ip.max_tokens = tokens;
    for (int32_t i = 0; i < n; i++) {
        plume_image *img = NULL;
        plume_audio *a = NULL;
        char *why = NULL;
        int rc = audio ? plume_audio_load(&a, paths[i], &why) : plume_image_load(&img, paths[i], &why);
        if (!rc) rc = audio ? plume_audio_encode(&media[i], m, a, &why) : plume_image_encode(&media[i], m, img, &ip, &why);
        plume_image_free(img);
        plume_audio_free(a);
        if (rc) {
            plume_fail(err, rc, "%s", why);
            free(why);
            while (i-- > 0) plume_embd_free(media[i]);
            return rc;
        }
    }
    return 0;
}

/* What one run asks for: the flags. */
typedef struct {
    const char *model, *ids_s, *ids_npy, *outp, *isa, *load, *save;
    const char *images[LOGITS_MAX_IMAGES], *audios[LOGITS_MAX_AUDIO]; /* [n_images], [n_audios] */
    const char *videos[LOGITS_MAX_VIDEO];                              /* [n_videos] */
    int32_t n_images, n_audios, n_videos;
    int64_t step, threads, ctx, image_tokens;
    int fast;
} logits_opts;

/* Parse the flags into o. -1: go on; else the exit status (help printed, or an error). */
static int logits_parse(logits_opts *o, int argc, char **argv) {
    *o = (logits_opts){0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(logits_usage, stdout); return 0; }
        else if (!strcmp(a, "-m") && more) o->model = argv[++i];
        else if (!strcmp(a, "--ids") && more) o->ids_s = argv[++i];
        else if (!strcmp(a, "--ids-npy") && more) o->ids_npy = argv[++i];
        else if (!strcmp(a, "-o") && more) o->outp = argv[++i];
        else if (!strcmp(a, "--isa") && more) o->isa = argv[++i];
        else if (!strcmp(a, "--fast")) o->fast = 1;
        else if (!strcmp(a, "--load-state") && more) o->load = argv[++i];
        else if (!strcmp(a, "--save-state") && more) o->save = argv[++i];
        else if (!strcmp(a, "--image") && more) {
            if (o->n_images == LOGITS_MAX_IMAGES) return cli_error("logits: at most %d --image files", LOGITS_MAX_IMAGES);
            o->images[o->n_images++] = argv[++i];
        } else if (!strcmp(a, "--audio") && more) {
            if (o->n_audios == LOGITS_MAX_AUDIO) return cli_error("logits: at most %d --audio files", LOGITS_MAX_AUDIO);
            o->audios[o->n_audios++] = argv[++i];
        } else if (!strcmp(a, "--video") && more) {
            if (o->n_videos == LOGITS_MAX_VIDEO) return cli_error("logits: at most %d --video files", LOGITS_MAX_VIDEO);
            o->videos[o->n_videos++] = argv[++i];
        } else if (!strcmp(a, "--image-tokens") && more) {
            if (cli_int(argv[++i], 1, 1120, &o->image_tokens)) return cli_error("logits: --image-tokens wants 70..1120");
        }
        else if (!strcmp(a, "--step") && more) {
            if (cli_int(argv[++i], 1, 1 << 20, &o->step)) return cli_error("logits: --step wants a positive integer");
        } else if (!strcmp(a, "-t") && more) {
            if (cli_int(argv[++i], 1, 1024, &o->threads)) return cli_error("logits: -t wants 1..1024");
        } else if (!strcmp(a, "--context") && more) {
            if (cli_int(argv[++i], 1, 1 << 24, &o->ctx)) return cli_error("logits: --context wants a positive integer");
        } else return cli_error("logits: unknown option '%s' (see plume logits --help)", a);
    }
    if ((!o->ids_s == !o->ids_npy) || !o->outp) { fputs(logits_usage, stderr); return 2; }
    return -1;
}

/* Feed ids [n] to s, the logits of every position into logits [n, V]: with media, one feed
 * through them (the images fill the image runs, then the audio the audio runs, in order; the
 * session steps --step rows at a time); else --step tokens a feed. 0 or a PLUME_E*. */
static int logits_feed(const logits_opts *o, plume_model *m, plume_session *s, const int32_t *ids, int32_t n,
                       float *logits, char **err) {
    plume_embd *media[LOGITS_MAX_IMAGES + LOGITS_MAX_AUDIO + LOGITS_MAX_VIDEO]; /* images, audio, videos */
    const int32_t n_media = o->n_images + o->n_audios + o->n_videos;
    if (n_media) { /* encode_media frees what it made when it fails */
        int rc = o->n_images ? encode_media(m, o->images, o->n_images, 0, (int32_t)o->image_tokens, media, err) : 0;
        if (rc) return rc;
        if (o->n_audios && (rc = encode_media(m, o->audios, o->n_audios, 1, 0, media + o->n_images, err))) {
            for (int32_t i = 0; i < o->n_images; i++) plume_embd_free(media[i]);
            return rc;
        }
        const int32_t before = o->n_images + o->n_audios;
        if (o->n_videos && (rc = encode_videos(m, o->videos, o->n_videos, media + before, err))) {
            for (int32_t i = 0; i < before; i++) plume_embd_free(media[i]);
            return rc;
        }
        rc = plume_session_feed_media(s, ids, n, (const plume_embd *const *)media, n_media, logits, 1, err);
        for (int32_t i = 0; i < n_media; i++) plume_embd_free(media[i]);
        return rc;
    }
    int rc = 0;
    const int64_t V = plume_model_n_vocab(m);
    const int32_t chunk = o->step > 0 ? (int32_t)o->step : n;
    for (int32_t i = 0; !rc && i < n; i += chunk) {
        int32_t k = n - i < chunk ? n - i : chunk;
        rc = plume_session_feed(s, ids + i, k, logits + (int64_t)i * V, 1, err);
    }
    return rc;
}

int cmd_logits(int argc, char **argv) {
    logits_opts o;
    int rc = logits_parse(&o, argc, argv);
    if (rc >= 0) return rc;
    if (cli_mkdir_parent(o.outp) || (o.save && cli_mkdir_parent(o.save))) return 1;
    const char *model = cli_model_path(o.model);
    if (!model) return 1;
    int32_t *ids = NULL, n = 0;
    if (o.ids_s && cli_int_list(o.ids_s, INT32_MIN, INT32_MAX, 0, &ids, &n))
        return cli_error("logits: --ids wants comma-separated integers");
    if (o.ids_npy && read_ids_npy(o.ids_npy, &ids, &n)) return 1;
    char *err = NULL;
    plume_model *m;
    plume_model_params mp = plume_model_default_params();
    mp.isa = o.isa;
    mp.n_threads = (int32_t)o.threads;
    mp.exact = !o.fast;
    if (plume_model_open(&m, model, &mp, &err)) { free(ids); return cli_lib_error_free(err); }
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = (int32_t)o.ctx;
    sp.n_batch = o.step > 0 ? (int32_t)o.step : n;
    plume_session *s = NULL;
    rc = o.load ? plume_session_load(&s, m, o.load, &err) : plume_session_new(&s, m, &sp, &err);
    int64_t V = plume_model_n_vocab(m);
    float *logits = rc ? NULL : malloc((size_t)(n * V) * sizeof *logits);
    if (!rc && !logits) rc = plume_fail(&err, PLUME_ENOMEM, "out of memory for %d x %lld logits", n, (long long)V);
    if (!rc) rc = logits_feed(&o, m, s, ids, n, logits, &err);
    int64_t shape[2] = {n, V};
    if (!rc) rc = npy_write(o.outp, "<f4", shape, 2, logits, &err);
    if (!rc && o.save) rc = plume_session_save(s, o.save, &err);
    free(logits);
    free(ids);
    plume_session_free(s);
    plume_model_free(m);
    return rc ? cli_lib_error_free(err) : 0;
}
