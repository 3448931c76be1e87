/* cmd_run.c -- `plume run`: one prompt in, the answer streamed out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"

static const char run_usage[] =
    "usage: plume run [-m BUNDLE] -p PROMPT [options]\n"
    "  Render PROMPT with the chat template (or feed it as is with --raw, after <bos>),\n"
    "  stream the answer to stdout and a stats line to stderr.\n"
    "  -p PROMPT            the prompt (UTF-8); '-' reads it from stdin\n"
    "  --raw                no chat template\n";

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

int cmd_run(int argc, char **argv) {
    gen_options o;
    gen_options_default(&o);
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
        else return cli_error("run: unknown option '%s' (see plume run --help)", argv[i]), 2;
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
    if (gen_open(&g, &o)) { free(stdin_text); return 1; }
    char *text = NULL, *err = NULL;
    int rc = 0;
    if (o.raw) {
        if (asprintf(&text, "<bos>%s", o.prompt) < 0) text = NULL;
    } else {
        plume_chat_message msgs[2];
        int32_t n = 0;
        if (o.system) msgs[n++] = (plume_chat_message){"system", o.system};
        msgs[n++] = (plume_chat_message){"user", o.prompt};
        if (plume_chat_render(msgs, n, 1, o.thinking, &text, &err)) rc = cli_lib_error(err);
    }
    int32_t *ids = NULL, n = 0;
    if (!rc && !text) rc = cli_error("out of memory");
    if (!rc) rc = gen_tokenize(&g, text, &ids, &n);
    gen_stats st;
    if (!rc) rc = gen_run(&g, ids, n, &st);
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
