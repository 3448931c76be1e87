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
    "                       system prompt) prefills only the rest\n"
    "  --print-grammar      print the GBNF grammar of --json-schema / --json / --grammar and exit\n";

/* Read all of stdin into a malloc'd string. */
static char *read_stdin(void) {
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n - 1, stdin)) > 0) {
        n += r;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) { free(b); return NULL; }
            b = nb;
        }
    }
    if (b) b[n] = 0;
    return b;
}

/* Prefill through the prompt cache at path (load it if it is there and belongs to this
 * bundle, reuse the shared prefix, save the state after the prompt), then generate. */
static int prefill_cached(gen_ctx *g, const char *path, const int32_t *ids, int32_t n, gen_stats *st) {
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
    if (plume_session_feed_prompt(g->s, ids, n, g->logits, &reused, &err)) return cli_lib_error(err);
    double t_prefill = plume_now() - t0;
    for (int32_t i = 0; i < n; i++) plume_sampler_accept(g->smp, ids[i]);
    if (plume_session_save(g->s, path, &err)) return cli_lib_error(err);
    fprintf(stderr, "[cache %s: %d of %d prompt tokens reused]\n", path, reused, n);
    int rc = gen_run(g, NULL, 0, st);
    st->n_prompt = n - reused;
    st->t_prefill = t_prefill;
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
        stdin_text = read_stdin();
        if (!stdin_text) return cli_error("run: cannot read the prompt from stdin");
        o.prompt = stdin_text;
    }
    gen_ctx g;
    if ((o.cache && cli_mkdir_parent(o.cache)) || gen_open(&g, &o)) { free(stdin_text); return 1; }
    char *text = NULL, *err = NULL;
    int rc = 0;
    if (o.raw) {
        text = plume_sprintf("<bos>%s", o.prompt);
    } else if (gen_render_first(&o, o.prompt, &text, &err)) {
        rc = cli_lib_error(err);
    }
    int32_t *ids = NULL, n = 0;
    if (!rc && !text) rc = cli_error("out of memory");
    if (!rc) rc = gen_tokenize(&g, text, &ids, &n);
    gen_stats st;
    if (!rc && o.cache) rc = prefill_cached(&g, o.cache, ids, n, &st);
    else if (!rc) rc = gen_run(&g, ids, n, &st);
    if (!rc) {
        if (!o.raw) fputc('\n', stdout);
        gen_print_stats(&st);
    }
    free(ids);
    free(text);
    free(stdin_text);
    gen_close(&g);
    return rc;
}
