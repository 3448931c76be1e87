/* cmd_run.c -- `plume run`: one prompt in, the answer streamed out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "generate.h"

static const char run_usage[] =
    "usage: plume run [-m BUNDLE] -p PROMPT [options]\n"
    "  Render PROMPT with the chat template (or feed it as is with --raw, after <bos>),\n"
    "  stream the answer to stdout and a stats line to stderr.\n"
    "  -p PROMPT            the prompt (UTF-8); '-' reads it from stdin\n"
    "  --raw                no chat template\n"
    "  --cache FILE         a reusable prompt cache: the session state after the prompt is\n"
    "                       saved there, and a later prompt sharing its prefix (e.g. a long\n"
    "                       system prompt, the same image) prefills only the rest\n"
    "  --print-grammar      print the GBNF grammar of --json-schema / --json / --grammar and exit\n";

/* Prefill through the prompt cache at path (load it if it is there and belongs to this
 * bundle, reuse the shared prefix, save the state after the prompt), then generate. */
static int prefill_cached(gen_ctx *g, const char *path, const int32_t *ids, int32_t n, const plume_embd *const *media,
                          int32_t n_media, gen_stats *stats) {
    char *err = NULL;
    if (plume_file_exists(path)) {
        plume_session *s;
        if (plume_session_load(&s, g->m, path, &err)) {
            fprintf(stderr, "plume: ignoring the cache: %s\n", err);
            free(err);
            err = NULL;
        } else {
            plume_session_free(g->s);
            g->s = s;
        }
    }
    int32_t reused = 0;
    double t0 = plume_now();
    if (plume_session_feed_prompt_media(g->s, ids, n, media, n_media, g->logits, &reused, &err)) return cli_lib_error_free(err);
    double t_prefill = plume_now() - t0;
    for (int32_t i = 0; i < n; i++) plume_sampler_accept(g->smp, ids[i]);
    if (plume_session_save(g->s, path, &err)) return cli_lib_error_free(err);
    fprintf(stderr, "[cache %s: %d of %d prompt tokens reused]\n", path, reused, n);
    int rc = gen_run(g, NULL, 0, NULL, 0, stats);
    stats->n_prompt = n - reused;
    stats->t_prefill = t_prefill;
    return rc;
}

int cmd_run(int argc, char **argv) {
    gen_options o;
    gen_options_default(&o);
    int print_grammar = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s%s", run_usage, gen_options_help);
            return 0;
        }
        int r = gen_parse_option(&o, argc, argv, &i, "run");
        if (r < 0) return 2;
        if (r) continue;
        if (!strcmp(argv[i], "-p") && i + 1 < argc) o.prompt = argv[++i];
        else if (!strcmp(argv[i], "--raw")) o.raw = 1;
        else if (!strcmp(argv[i], "--cache") && i + 1 < argc) o.cache = argv[++i];
        else if (!strcmp(argv[i], "--print-grammar")) print_grammar = 1;
        else return cli_error("run: unknown option '%s' (see plume run --help)", argv[i]), 2;
    }
    if (print_grammar) {
        char *gbnf = NULL;
        if (gen_format_grammar(&o, &gbnf)) return 1;
        if (!gbnf) return cli_error("run: --print-grammar wants --json-schema, --json or --grammar"), 2;
        fputs(gbnf, stdout);
        free(gbnf);
        return 0;
    }
    if (!o.prompt) {
        fprintf(stderr, "%s%s", run_usage, gen_options_help);
        return 2;
    }
    char *stdin_text = NULL;
    if (!strcmp(o.prompt, "-")) {
        if (plume_read_stream(stdin, &stdin_text, NULL)) return cli_error("run: cannot read the prompt from stdin");
        o.prompt = stdin_text;
    }
    gen_ctx g;
    if ((o.cache && cli_mkdir_parent(o.cache)) || gen_open(&g, &o)) { free(stdin_text); return 1; }
    char *text = NULL, *err = NULL, *msg = NULL;
    plume_embd *media[GEN_MAX_MEDIA]; /* the images, the videos, then the audio clips */
    const plume_embd *const *cm = (const plume_embd *const *)media;
    int rc = o.n_images ? gen_encode_images(&g, o.images, o.n_images, media) : 0;
    int32_t n_media = rc ? 0 : o.n_images;
    int32_t n_vid = 0; /* the videos (and their sound tracks), then the audio clips */
    if (!rc && o.n_videos && (rc = gen_encode_videos(&g, o.videos, o.n_videos, media + n_media, &n_vid)) == 0) n_media += n_vid;
    if (!rc && o.n_audios && (rc = gen_encode_audio(&g, o.audios, o.n_audios, media + n_media)) == 0) n_media += o.n_audios;
    if (!rc && n_media && !(msg = gen_media_message(&g, o.prompt, media, n_media))) rc = 1;
    if (rc) {
    } else if (o.raw) {
        text = plume_sprintf("<bos>%s", msg ? msg : o.prompt);
    } else if (gen_render_first(&o, msg ? msg : o.prompt, &text, &err)) {
        rc = cli_lib_error_free(err);
    }
    int32_t *ids = NULL, n = 0;
    if (!rc && !text) rc = cli_error("out of memory");
    if (!rc) rc = gen_tokenize(&g, text, &ids, &n);
    if (!rc && n_media) rc = gen_expand(&g, &ids, &n, cm, n_media);
    gen_stats stats;
    if (!rc && o.cache) rc = prefill_cached(&g, o.cache, ids, n, cm, n_media, &stats);
    else if (!rc) rc = gen_run(&g, ids, n, cm, n_media, &stats);
    if (!rc) {
        if (!o.raw) fputc('\n', stdout);
        gen_print_stats(&stats);
    }
    free(ids);
    free(text);
    free(msg);
    for (int32_t i = 0; i < n_media; i++) plume_embd_free(media[i]);
    free(stdin_text);
    gen_close(&g);
    return rc;
}
