/* cmd_transcribe.c -- `plume transcribe`: speech to text. The audio is heard 30 s at a time
 * (what the model was trained on): each clip is its own one-turn conversation, the audio then
 * the instruction, answered greedily, its text streamed to stdout as it comes, the clips'
 * texts one after the other. --translate asks for a translation instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "generate.h"

static const char transcribe_usage[] =
    "usage: plume transcribe [-m BUNDLE] FILE [--translate LANG] [options]\n"
    "  Write what is said in FILE (WAV, FLAC, Ogg Vorbis/Opus or MP3; any rate and channels) to\n"
    "  stdout. Audio over 30 s is cut into 30 s clips (the most the model hears at once), each\n"
    "  transcribed on its own, the texts on one line each. The bundle needs an audio tower.\n"
    "  --translate LANG   translate the speech into LANG (e.g. English, French) instead\n"
    "  -n N               tokens to generate at most per clip (default 256)\n"
    "  Decoding is greedy (--temp 0) unless --temp says otherwise. The options of plume run:\n";

/* The instruction after the clip. */
static char *instruction(const char *lang) {
    if (lang)
        return plume_sprintf("Translate the speech in this audio clip into %s. Reply with the translation only.", lang);
    return plume_sprintf("Transcribe this audio clip word for word, in the language it is spoken in. Reply with "
                         "the transcription only.");
}

/* One clip: a fresh conversation of the clip and the instruction; the answer to stdout. */
static int transcribe_clip(gen_ctx *g, const float *pcm, int64_t n, const char *ask, double *t_encode, gen_stats *st) {
    char *err = NULL, *msg = NULL, *text = NULL;
    plume_audio *a = NULL;
    plume_embd *e = NULL;
    int32_t *ids = NULL, k = 0;
    double t0 = plume_now();
    int rc = plume_audio_from_pcm(&a, pcm, n, PLUME_AUDIO_RATE, &err);
    if (!rc) rc = plume_audio_encode(&e, g->m, a, &err);
    *t_encode += plume_now() - t0;
    if (rc) rc = cli_lib_error_free(err);
    if (!rc && !(msg = gen_media_message(g, ask, &e, 1))) rc = 1;
    if (!rc && gen_render_first(&g->o, msg, &text, &err)) rc = cli_lib_error_free(err);
    if (!rc) rc = gen_tokenize(g, text, &ids, &k);
    if (!rc) rc = gen_expand(g, &ids, &k, (const plume_embd *const *)&e, 1);
    if (!rc && plume_session_rewind(g->s, 0, &err)) rc = cli_lib_error_free(err);
    if (!rc) {
        plume_sampler_reset(g->smp);
        rc = gen_run(g, ids, k, (const plume_embd *const *)&e, 1, st);
    }
    plume_embd_free(e);
    plume_audio_free(a);
    free(ids), free(text), free(msg);
    return rc;
}

int cmd_transcribe(int argc, char **argv) {
    gen_options o;
    gen_options_default(&o);
    o.sp.temperature = 0.0f; /* greedy: a transcription, not a story */
    o.n_predict = 256;
    const char *file = NULL, *lang = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s%s", transcribe_usage, gen_options_help);
            return 0;
        }
        int r = gen_parse_option(&o, argc, argv, &i, "transcribe");
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "--translate") && i + 1 < argc) lang = argv[++i];
        else if (argv[i][0] != '-' && !file) file = argv[i];
        else return cli_error("transcribe: unknown option '%s' (see plume transcribe --help)", argv[i]), 2;
    }
    if (!file) {
        fprintf(stderr, "%s%s", transcribe_usage, gen_options_help);
        return 2;
    }
    if (o.n_images || o.n_audios) return cli_error("transcribe: the audio is FILE; --image and --audio do not apply"), 2;
    if (lang && !*lang) return cli_error("transcribe: --translate wants a language"), 2;
    char *err = NULL;
    plume_audio *a = NULL;
    double t0 = plume_now();
    if (plume_audio_load(&a, file, &err)) return cli_lib_error_free(err);
    gen_ctx g;
    if (gen_open(&g, &o)) {
        plume_audio_free(a);
        return 1;
    }
    int rc = plume_model_has_audio(g.m) ? 0 : cli_error("transcribe: this bundle has no audio tower");
    char *ask = instruction(lang);
    const int64_t n = plume_audio_n_samples(a);
    const int32_t clips = (int32_t)((n + PLUME_AUDIO_CLIP_SAMPLES - 1) / PLUME_AUDIO_CLIP_SAMPLES);
    double t_encode = 0, t_prefill = 0, t_decode = 0;
    int32_t n_gen = 0, done = 0;
    for (int32_t c = 0; !rc && c < clips && !gen_interrupted; c++) {
        const int64_t at = (int64_t)c * PLUME_AUDIO_CLIP_SAMPLES, len = n - at < PLUME_AUDIO_CLIP_SAMPLES ? n - at : PLUME_AUDIO_CLIP_SAMPLES;
        if (c > 0 && len < PLUME_AUDIO_RATE / 100) break; /* a tail under 10 ms: no token, nothing said */
        gen_stats st;
        rc = transcribe_clip(&g, plume_audio_samples(a) + at, len, ask, &t_encode, &st);
        if (!rc) {
            fputc('\n', stdout);
            fflush(stdout);
            t_prefill += st.t_prefill, t_decode += st.t_decode, n_gen += st.n_gen, done++;
        }
    }
    const double sec = plume_audio_seconds(a), total = plume_now() - t0;
    if (!rc)
        fprintf(stderr, "[%s: %.1f s of audio in %d clip%s | encode %.2f s, prefill %.2f s, decode %.2f s (%d tokens) | "
                "%.2f s in all, %.2fx real time]\n",
                file, sec, done, done == 1 ? "" : "s", t_encode, t_prefill, t_decode, n_gen, total,
                sec > 0 ? total / sec : 0.0);
    free(ask);
    plume_audio_free(a);
    gen_close(&g);
    return rc;
}
