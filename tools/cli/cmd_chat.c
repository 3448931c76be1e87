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
    "    /video FILE      a video (MP4, MOV, MKV, WebM) for your next message, as /image: 32 frames\n"
    "                     with their timestamps (<|video|> places it; --video-audio adds its sound)\n"
    "    /help            this list\n"
    "  Ctrl-C stops an answer; Ctrl-D (or /quit) leaves.\n";

/* Read one line from stdin (without the newline) into line (emptied first); its length, -1
 * at EOF (or out of memory), -2 when interrupted by Ctrl-C. */
static int read_line(plume_buf *line) {
    line->len = 0;
    plume_buf_put(line, "", 0);
    for (;;) {
        errno = 0;
        int c = fgetc(stdin);
        if (c == EOF) {
            if (errno == EINTR || gen_interrupted) {
                clearerr(stdin);
                return -2;
            }
            if (line->len == 0) return -1;
            break;
        }
        if (c == '\n') break;
        char ch = (char)c;
        plume_buf_put(line, &ch, 1);
    }
    return line->oom ? -1 : (int)line->len;
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

/* A conversation between lines: the model, session and sampler, the options, the system
 * prompt /system set, whether the next message opens the conversation, and the images and
 * audio clips (/image, /audio) encoded for the next message. */
typedef struct {
    gen_ctx g;
    const gen_options *o;
    char *sys;
    int first;
    plume_embd *media[GEN_MAX_MEDIA]; /* [n_media] */
    int32_t n_media;
} chat_state;

/* Forget the media waiting for the next message. */
static void chat_drop_media(chat_state *c) {
    while (c->n_media > 0) plume_embd_free(c->media[--c->n_media]);
}

/* /image FILE, /audio FILE or /video FILE (line): encode it for the next message. */
static void chat_media(chat_state *c, const char *line) {
    const char *path = line + 7;
    int32_t k = 0;
    if (c->n_media + (line[1] == 'v' ? 2 : 1) > GEN_MAX_MEDIA)
        cli_error("chat: at most %d images, audio clips and videos a message", GEN_MAX_MEDIA);
    else if (line[1] == 'v' && gen_encode_videos(&c->g, &path, 1, &c->media[c->n_media], &k) == 0)
        c->n_media += k;
    else if (line[1] != 'v' && (line[1] == 'i' ? gen_encode_images : gen_encode_audio)(&c->g, &path, 1, &c->media[c->n_media]) == 0)
        c->n_media++;
}

/* /reset, or /system TEXT (line): a new session, the sampler reset. 0, or 1 when no session
 * could be made (the chat ends). */
static int chat_reset(chat_state *c, const char *line) {
    if (line[1] == 's') {
        free(c->sys);
        c->sys = strdup(line + 8);
        c->g.o.system = c->sys;
    }
    plume_session_free(c->g.s);
    char *err = NULL;
    plume_session_params sp = plume_session_default_params();
    sp.n_ctx = c->o->n_ctx;
    if (c->o->kv_bits) sp.kv_bits = c->o->kv_bits;
    if (plume_session_new(&c->g.s, c->g.m, &sp, &err)) return cli_lib_error_free(err);
    plume_sampler_reset(c->g.smp);
    c->first = 1;
    chat_drop_media(c);
    fprintf(stderr, "[conversation reset]\n");
    return 0;
}

/* /save FILE: the session state. */
static void chat_save(chat_state *c, const char *path) {
    char *err = NULL;
    if (cli_mkdir_parent(path)) return;
    if (plume_session_save(c->g.s, path, &err)) cli_lib_error_free(err);
    else fprintf(stderr, "[saved %d tokens to %s]\n", plume_session_n_past(c->g.s), path);
}

/* /load FILE: a session saved with /save replaces the conversation. */
static void chat_load(chat_state *c, const char *path) {
    char *err = NULL;
    plume_session *s;
    if (plume_session_load(&s, c->g.m, path, &err)) {
        cli_lib_error_free(err);
        return;
    }
    plume_session_free(c->g.s);
    c->g.s = s;
    plume_sampler_reset(c->g.smp);
    c->first = plume_session_n_past(s) == 0;
    fprintf(stderr, "[loaded %d tokens from %s]\n", plume_session_n_past(s), path);
}

/* One message of the user (with the media waiting, placed where it says): its turn after
 * the conversation so far, then the answer. */
static void chat_turn(chat_state *c, const char *line) {
    char *err = NULL, *msg = c->n_media ? gen_media_message(&c->g, line, c->media, c->n_media) : NULL;
    if (c->n_media && !msg) return;
    char *text = turn_text(&c->g.o, msg ? msg : line, c->first, &err);
    free(msg);
    if (!text) {
        cli_lib_error_free(err);
        return;
    }
    int32_t *ids = NULL, k = 0;
    gen_stats stats;
    const plume_embd *const *cm = (const plume_embd *const *)c->media;
    if (gen_tokenize(&c->g, text, &ids, &k) == 0 && (!c->n_media || gen_expand(&c->g, &ids, &k, cm, c->n_media) == 0) &&
        gen_run(&c->g, ids, k, cm, c->n_media, &stats) == 0) {
        fputc('\n', stdout);
        gen_print_stats(&stats);
        c->first = 0;
        chat_drop_media(c); /* the session keeps its copy */
    }
    free(ids);
    free(text);
}

/* One line typed: a command or a message. 1 when the chat ends. */
static int chat_line(chat_state *c, const char *line) {
    if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) return 1;
    if (!strcmp(line, "/help")) fputs(chat_usage, stdout);
    else if (!strcmp(line, "/reset") || !strncmp(line, "/system ", 8)) return chat_reset(c, line);
    else if (!strncmp(line, "/save ", 6)) chat_save(c, line + 6);
    else if (!strncmp(line, "/load ", 6)) chat_load(c, line + 6);
    else if (!strncmp(line, "/image ", 7) || !strncmp(line, "/audio ", 7) || !strncmp(line, "/video ", 7)) chat_media(c, line);
    else if (line[0] == '/') cli_error("chat: unknown command '%s' (/help lists them)", line);
    else chat_turn(c, line);
    return 0;
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
    chat_state c = {.o = &o, .first = 1};
    if (gen_open(&c.g, &o)) return 1;
    if (o.n_images && gen_encode_images(&c.g, o.images, o.n_images, c.media) == 0) c.n_media = o.n_images;
    int32_t n_vid = 0;
    if (o.n_videos && gen_encode_videos(&c.g, o.videos, o.n_videos, c.media + c.n_media, &n_vid) == 0) c.n_media += n_vid;
    if (o.n_audios && gen_encode_audio(&c.g, o.audios, o.n_audios, c.media + c.n_media) == 0) c.n_media += o.n_audios;
    plume_buf line = {0};
    fprintf(stderr, "plume chat: %s weights, %s kernels, %d threads, context %d. /help for commands.\n",
            plume_model_weights(c.g.m), plume_model_isa(c.g.m), plume_model_n_threads(c.g.m), plume_session_n_ctx(c.g.s));
    for (;;) {
        fputs("> ", stdout);
        fflush(stdout);
        gen_interrupted = 0;
        int n = read_line(&line);
        if (n == -1) break;
        if (n == -2) { fputc('\n', stdout); continue; }
        if (n > 0 && chat_line(&c, line.p)) break;
    }
    chat_drop_media(&c);
    fputc('\n', stdout);
    plume_buf_free(&line);
    free(c.sys);
    gen_close(&c.g);
    return 0;
}
