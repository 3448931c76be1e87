/* serve_transcribe.c -- POST /v1/audio/transcriptions in `plume serve` (docs/SERVER.md):
 * OpenAI's (Whisper's) multipart form -> a chat request of one user turn (the clip, then
 * plume transcribe's instruction), answered greedily through the scheduler like any chat; the
 * answer written as json, text, srt, vtt or verbose_json. The clip is a medium of the request
 * (serve_media.c decodes and counts it; the scheduler encodes it). */
#include "serve.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"


/* ---- multipart/form-data ------------------------------------------------------------------- */

/* The value of a parameter (name="...") in a Content-Disposition line [h, end); "" if absent. */
static void disposition_param(const char *h, const char *end, const char *key, char *out, size_t cap) {
    out[0] = 0;
    size_t kl = strlen(key);
    for (const char *p = h; p + kl + 2 <= end; p++) {
        if (strncasecmp(p, key, kl) || p[kl] != '=' || (p > h && p[-1] != ' ' && p[-1] != ';')) continue;
        const char *v = p + kl + 1;
        int quoted = *v == '"';
        v += quoted;
        size_t k = 0;
        while (v < end && (quoted ? *v != '"' : *v != ';' && *v != ' ' && *v != '\r') && k + 1 < cap) out[k++] = *v++;
        out[k] = 0;
        return;
    }
}

/* Where needle [n] first occurs in hay [len], or NULL: memmem, which the portable (POSIX)
 * build does not have. */
static const char *find_bytes(const char *hay, size_t len, const char *needle, size_t n) {
    for (size_t i = 0; n && i + n <= len; i++)
        if (hay[i] == needle[0] && !memcmp(hay + i, needle, n)) return hay + i;
    return NULL;
}

/* Split a multipart/form-data body into fields (at most cap). The boundary is the body's first
 * line ("--BOUNDARY"), as every client writes it. Returns how many, or -1 for a body that is
 * not a whole multipart form. */
int serve_multipart_parse(const char *body, size_t len, serve_form_field *f, int cap) {
    const char *end = body + len;
    if (len < 4 || body[0] != '-' || body[1] != '-') return -1;
    const char *eol = find_bytes(body, len, "\r\n", 2);
    if (!eol || eol - body > 200 || eol - body < 3) return -1;
    char delim[256];
    int dl = snprintf(delim, sizeof delim, "\r\n%.*s", (int)(eol - body), body);
    const char *p = eol + 2;
    int n = 0;
    for (;;) {
        const char *hend = find_bytes(p, (size_t)(end - p), "\r\n\r\n", 4);
        if (!hend) return -1;
        const char *data = hend + 4;
        const char *next = find_bytes(data, (size_t)(end - data), delim, (size_t)dl);
        if (!next) return -1;
        if (n < cap) {
            serve_form_field *ff = &f[n];
            memset(ff, 0, sizeof *ff);
            for (const char *h = p; h < hend;) { /* the part's header lines */
                const char *le = find_bytes(h, (size_t)(hend - h), "\r\n", 2);
                if (!le) le = hend;
                if ((size_t)(le - h) > 20 && !strncasecmp(h, "Content-Disposition:", 20)) {
                    disposition_param(h + 20, le, "name", ff->name, sizeof ff->name);
                    disposition_param(h + 20, le, "filename", ff->filename, sizeof ff->filename);
                }
                h = le + 2;
            }
            ff->data = data;
            ff->len = (size_t)(next - data);
            n++;
        }
        p = next + dl;
        if (end - p >= 2 && p[0] == '-' && p[1] == '-') return n; /* the closing delimiter */
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n') return -1;
        p += 2;
    }
}

/* ---- POST /v1/audio/transcriptions ------------------------------------------------------------ */

#define FORM_MAX 32

/* A form field's text as a malloc'd string (NUL-terminated). */
static char *field_text(const serve_form_field *f) {
    char *s = malloc(f->len + 1);
    if (s) {
        memcpy(s, f->data, f->len);
        s[f->len] = 0;
    }
    return s;
}

/* The instruction after the clip: plume transcribe's, with the language and the prompt. */
static char *transcribe_instruction(const char *language, const char *prompt) {
    return plume_sprintf("Transcribe this audio clip word for word, in the language it is spoken in%s%s%s. Reply with "
                         "the transcription only.%s%s%s",
                         language ? " (" : "", language ? language : "", language ? ")" : "",
                         prompt ? " The text before it, and the spelling of its names: \"" : "", prompt ? prompt : "",
                         prompt ? "\"" : "");
}

/* One text field of the form (v, malloc'd: taken when kept) into r: model, language, prompt
 * (*prompt), response_format, temperature, stream; others are ignored, as OpenAI's SDKs send
 * fields a server may not know. 0 or 400 naming it. */
static int form_field(serve_request *r, serve_media *md, const char *name, char **v, char **prompt, serve_error *e) {
    char **keep = !strcmp(name, "model") ? &r->model : !strcmp(name, "language") ? &md->language
                  : !strcmp(name, "prompt")                                    ? prompt
                                                                               : NULL;
    if (keep) {
        free(*keep);
        *keep = **v ? *v : NULL;
        if (**v) *v = NULL;
    } else if (!strcmp(name, "response_format")) {
        static const char *const fmts[] = {"json", "text", "srt", "vtt", "verbose_json"};
        int ok = 0;
        for (size_t k = 0; k < sizeof fmts / sizeof *fmts; k++) ok |= !strcmp(*v, fmts[k]);
        if (!ok) return serve_json_bad(e, "response_format", "one of json, text, srt, vtt, verbose_json");
        snprintf(md->format, sizeof md->format, "%s", *v);
    } else if (!strcmp(name, "temperature")) {
        char *endp;
        double t = strtod(*v, &endp);
        if (!**v || *endp || !(t >= 0 && t <= 2)) return serve_json_bad(e, "temperature", "a number between 0 and 2");
        r->sp.temperature = (float)t;
    } else if (!strcmp(name, "stream") && !strcmp(*v, "true")) {
        return serve_json_unsupported(e, "stream", "is not supported for transcriptions: the answer comes whole");
    }
    return 0;
}

/* The user turn of a transcription: the clip (file's bytes), then the instruction. */
static int transcription_turn(serve_request *r, const serve_form_field *file, const char *prompt, serve_error *e) {
    if (!file)
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, "file", "missing_field", "'file' is required (the audio)");
    if (!file->len) return SERVE_BAD_MEDIA(e, "file", "'file' is empty (zero bytes)");
    serve_message *m = serve_request_add_message(r, "user", e);
    serve_medium *it = m ? serve_media_add(r, m, PLUME_CHAT_PART_AUDIO, "file", e) : NULL;
    if (!it) return e->status;
    if (!(it->bytes = malloc(file->len))) return SERVE_OOM(e);
    memcpy(it->bytes, file->data, file->len);
    it->len = file->len;
    char *ask = transcribe_instruction(r->media->language, prompt);
    int rc = ask ? serve_message_add_part(m, ask, e) : SERVE_OOM(e);
    free(ask);
    return rc;
}

/* Parse the transcription form into a chat request: one user turn of the clip and the
 * instruction, greedy unless temperature says otherwise. */
static int parse_transcription(serve_request *r, const char *body, size_t len, serve_error *e) {
    serve_form_field f[FORM_MAX];
    int n = serve_multipart_parse(body, len, f, FORM_MAX);
    if (n < 0)
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, NULL, "invalid_value",
                               "the body must be multipart/form-data (fields file, model, language, prompt, "
                               "response_format, temperature)");
    serve_media *md = serve_media_of(r, e);
    if (!md) return e->status;
    md->transcribe = 1;
    snprintf(md->format, sizeof md->format, "json");
    r->sp.temperature = 0.0f;
    const serve_form_field *file = NULL;
    char *prompt = NULL;
    int rc = 0;
    for (int i = 0; i < n && i < FORM_MAX && !rc; i++) {
        if (!strcmp(f[i].name, "file")) {
            file = &f[i];
            continue;
        }
        char *v = field_text(&f[i]);
        if (!v) rc = SERVE_OOM(e);
        else if (!serve_utf8_valid(v, f[i].len) || strlen(v) != f[i].len) rc = serve_json_bad(e, f[i].name, "UTF-8 text");
        else rc = form_field(r, md, f[i].name, &v, &prompt, e);
        free(v);
    }
    if (!rc) rc = transcription_turn(r, file, prompt, e);
    free(prompt);
    return rc;
}

/* A time as SRT (00:00:01,500) or WebVTT (00:00:01.500) write it. */
static void cue_time(char *out, size_t cap, double t, char sep) {
    unsigned long ms = t > 0 && t < 360000 ? (unsigned long)lround(t * 1000) : 0;
    snprintf(out, cap, "%02lu:%02lu:%02lu%c%03lu", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, sep, ms % 1000);
}

/* The text of a transcription, trimmed of the blank around it. */
static char *trimmed(const char *s) {
    while (*s && isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) n--;
    return plume_sprintf("%.*s", (int)n, s);
}

/* The transcription in the asked format: json {"text"}, text, srt and vtt (one cue over the
 * clip), verbose_json (task, language, duration, text, one segment). */
static char *transcription_reply(const serve_job_head *j, const serve_reply *a, int32_t n, const serve_usage *u) {
    (void)n;
    const serve_media *md = j->req.media;
    char *text = trimmed(a[0].text ? a[0].text : ""), *out = NULL;
    if (!text) return NULL;
    char t0[32], t1[32];
    if (!strcmp(md->format, "text")) {
        out = plume_sprintf("%s\n", text);
    } else if (!strcmp(md->format, "srt") || !strcmp(md->format, "vtt")) {
        int srt = md->format[0] == 's';
        cue_time(t0, sizeof t0, 0, srt ? ',' : '.');
        cue_time(t1, sizeof t1, md->seconds, srt ? ',' : '.');
        out = plume_sprintf("%s%s --> %s\n%s\n\n", srt ? "1\n" : "WEBVTT\n\n", t0, t1, text);
    } else {
        cJSON *root = cJSON_CreateObject();
        int verbose = !strcmp(md->format, "verbose_json");
        if (verbose) {
            cJSON_AddStringToObject(root, "task", "transcribe");
            cJSON_AddStringToObject(root, "language", md->language ? md->language : "");
            cJSON_AddNumberToObject(root, "duration", md->seconds);
        }
        cJSON_AddStringToObject(root, "text", text);
        if (verbose) {
            cJSON *segs = cJSON_AddArrayToObject(root, "segments"), *s = cJSON_CreateObject();
            cJSON_AddItemToArray(segs, s);
            cJSON_AddNumberToObject(s, "id", 0);
            cJSON_AddNumberToObject(s, "start", 0);
            cJSON_AddNumberToObject(s, "end", md->seconds);
            cJSON_AddStringToObject(s, "text", text);
        }
        cJSON *usage = cJSON_AddObjectToObject(root, "usage");
        if (usage && u) {
            cJSON_AddStringToObject(usage, "type", "tokens");
            cJSON_AddNumberToObject(usage, "input_tokens", u->prompt);
            cJSON_AddNumberToObject(usage, "output_tokens", u->completion);
            cJSON_AddNumberToObject(usage, "total_tokens", (double)u->prompt + u->completion);
        }
        out = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
    }
    free(text);
    return out;
}

/* The Content-Type of a transcription: JSON, or plain text (text, srt), or text/vtt. */
static const char *transcription_type(const serve_job_head *j) {
    const char *f = j->req.media->format;
    return !strcmp(f, "text") || !strcmp(f, "srt") ? "text/plain; charset=utf-8"
           : !strcmp(f, "vtt")                     ? "text/vtt; charset=utf-8"
                                                   : "application/json";
}

/* A stream is refused at parse: nothing to write. */
static void transcription_stream(plume_buf *out, const serve_job_head *j, void *state, const serve_event *ev) {
    (void)out, (void)j, (void)state, (void)ev;
}

const serve_dialect serve_transcription = {
    .name = "openai-transcription", .id_prefix = "tr", .stream_type = "text/event-stream",
    .parse = parse_transcription, .stream = transcription_stream, .reply = transcription_reply,
    .error = serve_openai_error, .content_type = transcription_type, .form_body = 1,
};
