/* cmd_chat.c -- `plume chat`: an interactive conversation in the terminal.
 *
 * The KV cache is kept between turns: a turn feeds only its own tokens. The cache holds
 * exactly what the model saw, so a turn appends "<turn|>\n<|turn>user\n...<turn|>\n<|turn>model\n"
 * (the template's rendering of the next user turn) after the model's answer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "generate.h"

static const char chat_usage[] =
    "usage: plume chat [-m BUNDLE] [options]\n"
    "  An interactive conversation. Type a message and press Enter. Commands:\n"
    "    /reset           forget the conversation\n"
    "    /system TEXT     set the system prompt (and start over)\n"
    "    /save FILE       save the conversation (the session state) to FILE\n"
    "    /load FILE       continue a conversation saved with /save\n"
    "    /image FILE      an image for your next message (repeatable; the bundle needs a vision\n"
    "                     tower): it goes where the message says <|image|>, else first\n"
    "    /audio FILE      an audio clip (WAV, FLAC, Ogg, MP3) for your next message, as /image\n"
    "                     (the bundle needs an audio tower; <|audio|> places it)\n"
    "    /help            this list\n"
    "  Ctrl-C stops an answer; Ctrl-D (or /quit) leaves.\n";

/* Read one line from stdin (without the newline) into a growing buffer; -1 at EOF, -2 when
 * interrupted by Ctrl-C. */
static int read_line(char **buf, size_t *cap) {
    size_t n = 0;
    for (;;) {
        if (n + 2 > *cap) {
            char *nb = realloc(*buf, *cap = *cap ? *cap * 2 : 1024);
            if (!nb) return -1;
            *buf = nb;
        }
        errno = 0;
        int c = fgetc(stdin);
        if (c == EOF) {
            if (errno == EINTR || gen_interrupted) {
                clearerr(stdin);
                return -2;
            }
            if (n == 0) return -1;
            break;
        }
        if (c == '\n') break;
        (*buf)[n++] = (char)c;
    }
    (*buf)[n] = 0;
    return (int)n;
}

/* The text of a first turn (with the optional system turn) or of a later one. */
static char *turn_text(const gen_options *o, const char *msg, int first, char **err) {
    char *out = NULL;
    if (first) return gen_render_first(o, msg, &out, err) ? NULL : out;
    /* "<|turn>user\n{msg}<turn|>\n<|turn>model\n" after the closing "<turn|>\n" of the answer,
     * with the template's trimming of the message: render it and drop the "<bos>" it starts with */
    plume_chat_message m = {"user", msg};
    char *r = NULL;
    if (plume_chat_render(&m, 1, 1, 0, &r, err)) return NULL;
    out = plume_sprintf("<turn|>\n%s", r + strlen("<bos>"));
    free(r);
    return out;
}

int cmd_chat(int argc, char **argv) {
    gen_options o;
    gen_options_default(&o);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s%s", chat_usage, gen_options_help);
            return 0;
        }
        int r = gen_parse_option(&o, argc, argv, &i, "chat");
        if (r < 0) return 2;
        if (!r) return cli_error("chat: unknown option '%s' (see plume chat --help)", argv[i]), 2;
    }
    gen_ctx g;
    if (gen_open(&g, &o)) return 1;
    char *line = NULL, *sys = NULL;
    size_t cap = 0;
    int first = 1;
    plume_embd *media[GEN_MAX_MEDIA]; /* /image and /audio files for the next message, encoded */
    int32_t n_media = 0;
    if (o.n_images && gen_encode_images(&g, o.images, o.n_images, media) == 0) n_media = o.n_images;
    if (o.n_audios && gen_encode_audio(&g, o.audios, o.n_audios, media + n_media) == 0) n_media += o.n_audios;
    fprintf(stderr, "plume chat: %s weights, %s kernels, %d threads, context %d. /help for commands.\n",
            plume_model_weights(g.m), plume_model_isa(g.m), plume_model_n_threads(g.m), plume_session_n_ctx(g.s));
    for (;;) {
        fputs("> ", stdout);
        fflush(stdout);
        gen_interrupted = 0;
        int n = read_line(&line, &cap);
        if (n == -1) break;
        if (n == -2) { fputc('\n', stdout); continue; }
        if (n == 0) continue;
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) break;
        if (!strcmp(line, "/help")) { fputs(chat_usage, stdout); continue; }
        if (!strcmp(line, "/reset") || !strncmp(line, "/system ", 8)) {
            if (line[1] == 's') {
                free(sys);
                sys = strdup(line + 8);
                g.o.system = sys;
            }
            plume_session_free(g.s);
            char *err = NULL;
            plume_session_params sp = plume_session_default_params();
            sp.n_ctx = o.n_ctx;
            if (o.kv_bits) sp.kv_bits = o.kv_bits;
            if (plume_session_new(&g.s, g.m, &sp, &err)) { cli_lib_error(err); break; }
            plume_sampler_reset(g.smp);
            first = 1;
            while (n_media > 0) plume_embd_free(media[--n_media]);
            fprintf(stderr, "[conversation reset]\n");
            continue;
        }
        if (!strncmp(line, "/image ", 7) || !strncmp(line, "/audio ", 7)) {
            const char *path = line + 7;
            if (n_media == GEN_MAX_MEDIA) cli_error("chat: at most %d images and audio clips a message", GEN_MAX_MEDIA);
            else if ((line[1] == 'i' ? gen_encode_images : gen_encode_audio)(&g, &path, 1, &media[n_media]) == 0) n_media++;
            continue;
        }
        if (!strncmp(line, "/save ", 6)) {
            char *err = NULL;
            if (cli_mkdir_parent(line + 6)) continue;
            if (plume_session_save(g.s, line + 6, &err)) cli_lib_error(err);
            else fprintf(stderr, "[saved %d tokens to %s]\n", plume_session_n_past(g.s), line + 6);
            continue;
        }
        if (!strncmp(line, "/load ", 6)) {
            char *err = NULL;
            plume_session *s;
            if (plume_session_load(&s, g.m, line + 6, &err)) { cli_lib_error(err); continue; }
            plume_session_free(g.s);
            g.s = s;
            plume_sampler_reset(g.smp);
            first = plume_session_n_past(s) == 0;
            fprintf(stderr, "[loaded %d tokens from %s]\n", plume_session_n_past(s), line + 6);
            continue;
        }
        if (line[0] == '/') { cli_error("chat: unknown command '%s' (/help lists them)", line); continue; }
        char *err = NULL, *msg = n_media ? gen_media_message(&g, line, media, n_media) : NULL;
        if (n_media && !msg) continue;
        char *text = turn_text(&g.o, msg ? msg : line, first, &err);
        free(msg);
        if (!text) { cli_lib_error(err); continue; }
        int32_t *ids = NULL, k = 0;
        gen_stats st;
        const plume_embd *const *cm = (const plume_embd *const *)media;
        if (gen_tokenize(&g, text, &ids, &k) == 0 && (!n_media || gen_expand(&g, &ids, &k, cm, n_media) == 0) &&
            gen_run(&g, ids, k, cm, n_media, &st) == 0) {
            fputc('\n', stdout);
            gen_print_stats(&st);
            first = 0;
            while (n_media > 0) plume_embd_free(media[--n_media]); /* the session keeps its copy */
        }
        free(ids);
        free(text);
    }
    while (n_media > 0) plume_embd_free(media[--n_media]);
    fputc('\n', stdout);
    free(line);
    free(sys);
    gen_close(&g);
    return 0;
}
