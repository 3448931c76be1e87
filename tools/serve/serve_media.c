/* serve_media.c -- images and audio in `plume serve` (docs/SERVER.md, "Images and audio"):
 * OpenAI's content parts {"type": "image_url"} and {"type": "input_audio"}, remote image URLs
 * (--allow-remote-media), the prompt of a request with media (placeholders -> runs, and the key
 * of every position for prefix reuse), the encoding on the scheduler's encoder thread
 * (serve_transcribe.c makes requests of audio files with the same media).
 *
 * A medium goes through three hands: the dialect's parser keeps its bytes (a data URL decoded,
 * or the URL of a remote image); the connection thread fetches, decodes, checks and counts it
 * (plume_image_tokens / plume_audio_tokens: no tower, no model state touched) while it builds
 * the prompt; the scheduler's encoder thread encodes it with the tower (a plume_encoder: threads
 * of its own, not the model's pool the batch steps run on) only when a slot has to compute its
 * rows: a conversation re-sent with the same image reuses the cache and encodes nothing. Every
 * refusal is a 400 naming the part. */
#include "serve.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <curl/curl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common.h"


/* ---- the request's media ------------------------------------------------------------------ */

/* The request's media list, made on first use; NULL (500 in e) when out of memory. */
serve_media *serve_media_of(serve_request *r, serve_error *e) {
    if (!r->media && !(r->media = calloc(1, sizeof *r->media))) SERVE_OOM(e);
    return r->media;
}

/* Append a media part to m (NULL: none, the medium only): its placeholder in the message
 * (part_types) and a medium in r. */
serve_medium *serve_media_add(serve_request *r, serve_message *m, int32_t kind, const char *param, serve_error *e) {
    serve_media *md = serve_media_of(r, e);
    if (!md) return NULL;
    if (md->n == SERVE_MAX_MEDIA) {
        serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "invalid_value", "at most %d images and audio clips a request",
                        SERVE_MAX_MEDIA);
        return NULL;
    }
    if (plume_grow(&md->items, &md->cap, (size_t)md->n + 1, sizeof *md->items) ||
        (m && serve_message_add_media_part(m, kind, e))) {
        if (!e->status) SERVE_OOM(e);
        return NULL;
    }
    serve_medium *it = &md->items[md->n++];
    memset(it, 0, sizeof *it);
    it->kind = kind;
    snprintf(it->param, sizeof it->param, "%s", param);
    return it;
}

/* ---- base64 and data URLs ----------------------------------------------------------------- */

/* The value of a base64 digit (standard or URL-safe alphabet), or -1. */
static int b64_digit(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
}

/* Decode base64 text (whitespace skipped, '=' padding optional) into a malloc'd buffer. 0, or
 * -1 for a character outside the alphabet or a dangling digit; -2 out of memory. */
int serve_base64_decode(const char *s, size_t n, uint8_t **out, size_t *len) {
    *out = malloc(n / 4 * 3 + 3);
    if (!*out) return -2;
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
        if (c == '=') {
            pad++;
            continue;
        }
        int d = b64_digit(c);
        if (d < 0 || pad) {
            free(*out);
            *out = NULL;
            return -1;
        }
        acc = acc << 6 | (uint32_t)d;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            (*out)[k++] = (uint8_t)(acc >> bits);
        }
    }
    if (bits >= 6 || pad > 2) { /* a single digit left over cannot end a byte */
        free(*out);
        *out = NULL;
        return -1;
    }
    *len = k;
    return 0;
}

/* The bytes of base64 text for a part: 0, or a 400 naming it. */
static int part_base64(serve_medium *it, const char *text, size_t n, serve_error *e) {
    int rc = serve_base64_decode(text, n, &it->bytes, &it->len);
    if (rc == -2) return SERVE_OOM(e);
    if (rc) return SERVE_BAD_MEDIA(e, it->param, "'%s' is not valid base64", it->param);
    if (!it->len) return SERVE_BAD_MEDIA(e, it->param, "'%s' is empty (zero bytes)", it->param);
    return 0;
}

/* An image_url part: a data URL (data:image/...;base64,...) or a remote http(s) URL, fetched
 * later if the server allows it. */
static int part_image(serve_medium *it, const cJSON *part, serve_error *e) {
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(part, "image_url");
    const cJSON *url = cJSON_IsObject(iu) ? cJSON_GetObjectItemCaseSensitive(iu, "url") : iu; /* a bare string too */
    if (!cJSON_IsString(url))
        return serve_json_bad(e, it->param, "an image_url part with {\"image_url\": {\"url\": \"data:image/...;base64,...\"}}");
    const char *u = url->valuestring;
    if (!strncmp(u, "data:", 5)) {
        const char *comma = strchr(u, ',');
        if (!comma || !strstr(u, ";base64") || strstr(u, ";base64") > comma)
            return SERVE_BAD_MEDIA(e, it->param, "'%s': only base64 data URLs are read (data:image/png;base64,...)", it->param);
        return part_base64(it, comma + 1, strlen(comma + 1), e);
    }
    if (!strncmp(u, "http://", 7) || !strncmp(u, "https://", 8)) {
        if (strlen(u) > 8192) return SERVE_BAD_MEDIA(e, it->param, "'%s': the URL is longer than 8192 bytes", it->param);
        return (it->url = strdup(u)) ? 0 : SERVE_OOM(e);
    }
    return SERVE_BAD_MEDIA(e, it->param, "'%s': the url must be a data: URL or an http(s) URL", it->param);
}

/* An input_audio part: {"input_audio": {"data": BASE64, "format": "wav" | "mp3" | ...}}. The
 * format is checked to be a word; the bytes are sniffed whatever it says (libsndfile). */
static int part_audio(serve_medium *it, const cJSON *part, serve_error *e) {
    const cJSON *ia = cJSON_GetObjectItemCaseSensitive(part, "input_audio");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(ia, "data");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(ia, "format");
    if (!cJSON_IsObject(ia) || !cJSON_IsString(data) || (fmt && !cJSON_IsNull(fmt) && !cJSON_IsString(fmt)))
        return serve_json_bad(e, it->param, "an input_audio part with {\"input_audio\": {\"data\": BASE64, \"format\": \"wav\"}}");
    if (cJSON_IsString(fmt)) {
        static const char *const known[] = {"wav", "mp3", "flac", "ogg", "opus", "oga", "aiff", "pcm16"};
        int ok = 0;
        for (size_t i = 0; i < sizeof known / sizeof *known; i++) ok |= !strcmp(fmt->valuestring, known[i]);
        if (!ok)
            return SERVE_BAD_MEDIA(e, it->param, "'%s': audio format '%.32s' is not read (wav, mp3, flac, ogg, opus, aiff)",
                             it->param, fmt->valuestring);
    }
    return part_base64(it, data->valuestring, strlen(data->valuestring), e);
}

/* A media content part of a chat message (OpenAI's image_url and input_audio; the Responses
 * API's input_image, whose image_url is the URL string), appended to m and to r's media. 0, or 400 naming the part (param). A part of another type is refused. */
int serve_media_part(serve_request *r, serve_message *m, const cJSON *part, const char *param, serve_error *e) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
    int image = cJSON_IsString(type) && (!strcmp(type->valuestring, "image_url") || !strcmp(type->valuestring, "input_image"));
    int audio = cJSON_IsString(type) && !strcmp(type->valuestring, "input_audio");
    if (!image && !audio)
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, param, "unsupported_content",
                               "'%s': content parts of type '%.64s' are not supported (text, image_url, input_audio)",
                               param, cJSON_IsString(type) ? type->valuestring : "?");
    serve_medium *it = serve_media_add(r, m, image ? PLUME_CHAT_PART_IMAGE : PLUME_CHAT_PART_AUDIO, param, e);
    if (!it) return e->status;
    return image ? part_image(it, part, e) : part_audio(it, part, e);
}

/* Ollama's "images" of a message: a list of base64 images (param names the list), put before
 * the message's text (Ollama's templates put them first). 0, or 400 naming the image. */
int serve_media_images(serve_request *r, serve_message *m, const cJSON *list, const char *param, serve_error *e) {
    if (!list || cJSON_IsNull(list) || (cJSON_IsArray(list) && !cJSON_GetArraySize(list))) return 0;
    if (!cJSON_IsArray(list)) return serve_json_bad(e, param, "a list of base64 images");
    char *text = m->content; /* the text goes after the images */
    m->content = NULL;
    int rc = 0, k = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, list) {
        char pp[96];
        snprintf(pp, sizeof pp, "%s[%d]", param, k++);
        serve_medium *it = cJSON_IsString(v) ? serve_media_add(r, m, PLUME_CHAT_PART_IMAGE, pp, e) : NULL;
        rc = !cJSON_IsString(v) ? serve_json_bad(e, pp, "a base64 image") : !it ? e->status
             : part_base64(it, v->valuestring, strlen(v->valuestring), e);
        if (rc) break;
    }
    if (!rc && text && *text) rc = serve_message_add_part(m, text, e);
    free(text);
    return rc;
}

/* An Anthropic image block of a user message: {"type": "image", "source": {"type": "base64",
 * "media_type", "data"} | {"type": "url", "url"}}. 0, or 400 naming the block. */
int serve_media_image_block(serve_request *r, serve_message *m, const cJSON *blk, const char *param, serve_error *e) {
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(blk, "source");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(src, "type");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(src, "data"), *url = cJSON_GetObjectItemCaseSensitive(src, "url");
    int b64 = cJSON_IsString(type) && !strcmp(type->valuestring, "base64") && cJSON_IsString(data);
    int remote = cJSON_IsString(type) && !strcmp(type->valuestring, "url") && cJSON_IsString(url) &&
                 (!strncmp(url->valuestring, "http://", 7) || !strncmp(url->valuestring, "https://", 8));
    if (!b64 && !remote)
        return serve_json_bad(e, param, "an image block with a source {\"type\": \"base64\", \"data\"} or {\"type\": \"url\", \"url\"}");
    serve_medium *it = serve_media_add(r, m, PLUME_CHAT_PART_IMAGE, param, e);
    if (!it) return e->status;
    if (b64) return part_base64(it, data->valuestring, strlen(data->valuestring), e);
    return (it->url = strdup(url->valuestring)) ? 0 : SERVE_OOM(e);
}

/* ---- remote images ------------------------------------------------------------------------ */

/* Whether an address is one a server must not be made to reach for a client: loopback,
 * private, link-local, carrier-grade NAT, multicast, unspecified, reserved. */
int serve_addr_private(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET) {
        uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
        uint32_t b0 = a >> 24, b1 = (a >> 16) & 0xff;
        return b0 == 0 || b0 == 10 || b0 == 127 || (b0 == 100 && (b1 & 0xc0) == 64) || (b0 == 169 && b1 == 254) ||
               (b0 == 172 && (b1 & 0xf0) == 16) || (b0 == 192 && b1 == 168) || (b0 == 192 && b1 == 0) ||
               (b0 == 198 && (b1 & 0xfe) == 18) || b0 >= 224;
    }
    if (sa->sa_family == AF_INET6) {
        const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        static const uint8_t v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(b, v4map, 12)) { /* ::ffff:a.b.c.d: the IPv4 rule */
            struct sockaddr_in s4 = {.sin_family = AF_INET};
            memcpy(&s4.sin_addr, b + 12, 4);
            return serve_addr_private((const struct sockaddr *)&s4);
        }
        int zero = 1;
        for (int i = 0; i < 15; i++) zero &= b[i] == 0;
        if (zero && (b[15] == 0 || b[15] == 1)) return 1; /* :: and ::1 */
        return (b[0] & 0xfe) == 0xfc || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || b[0] == 0xff ||
               (b[0] == 0x20 && b[1] == 0x01 && b[2] == 0x0d && b[3] == 0xb8) || /* 2001:db8::/32 documentation */
               (b[0] == 0x00 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b);   /* 64:ff9b::/96 NAT64 */
    }
    return 1;
}

/* A fetch in progress: the bytes so far, the limits, why it was cut. */
typedef struct {
    plume_buf body;
    size_t max;
    int32_t allow_private;
    int32_t refused_private, too_big;
} fetch_state;

/* curl's socket opener: refuse private addresses (every hop, redirects included, checked
 * where the connection is made, so a DNS answer that changes cannot slip past). */
static curl_socket_t fetch_socket(void *user, curlsocktype purpose, struct curl_sockaddr *a) {
    fetch_state *f = user;
    (void)purpose;
    if (!f->allow_private && serve_addr_private(&a->addr)) {
        f->refused_private = 1;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

/* curl's writer: keep at most max bytes. */
static size_t fetch_write(char *p, size_t size, size_t n, void *user) {
    fetch_state *f = user;
    n *= size; /* size is 1 */
    if (f->body.len + n > f->max) {
        f->too_big = 1;
        return 0;
    }
    plume_buf_put(&f->body, p, n);
    return f->body.oom ? 0 : n;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

/* libcurl's global set-up, once (connection threads fetch at the same time). */
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

/* Fetch a remote image into it->bytes: http(s) only, at most 3 redirects (each to http(s)),
 * o->media_max_bytes, o->media_timeout seconds, no proxy, and no private address unless the
 * server allows them. 0 or a 400 naming the part. */
static int fetch_url(serve_medium *it, const serve_media_opts *o, serve_error *e) {
    if (!o->allow_remote)
        return SERVE_BAD_MEDIA(e, it->param,
                         "'%s': remote image URLs are off on this server (start it with --allow-remote-media); send "
                         "the image as a data URL (data:image/png;base64,...)", it->param);
    pthread_once(&curl_once, curl_init);
    CURL *c = curl_easy_init();
    if (!c) return SERVE_OOM(e);
    fetch_state f = {.max = o->max_bytes, .allow_private = o->allow_remote > 1};
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, it->url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 3L);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)o->timeout);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)(o->timeout < 5 ? o->timeout : 5));
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)o->max_bytes);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "plume-serve");
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, fetch_socket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &f);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fetch_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &f);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    int rc = 0;
    if (f.refused_private)
        rc = SERVE_BAD_MEDIA(e, it->param, "'%s': the URL leads to a private or local address, which this server does not fetch",
                       it->param);
    else if (f.too_big || cc == CURLE_FILESIZE_EXCEEDED)
        rc = SERVE_BAD_MEDIA(e, it->param, "'%s': the image at the URL is larger than %zu bytes", it->param, o->max_bytes);
    else if (cc == CURLE_OPERATION_TIMEDOUT)
        rc = SERVE_BAD_MEDIA(e, it->param, "'%s': fetching the URL took longer than %d s", it->param, o->timeout);
    else if (cc == CURLE_TOO_MANY_REDIRECTS)
        rc = SERVE_BAD_MEDIA(e, it->param, "'%s': the URL redirects more than 3 times", it->param);
    else if (cc != CURLE_OK)
        rc = SERVE_BAD_MEDIA(e, it->param, "'%s': cannot fetch the URL: %s", it->param, *cerr ? cerr : curl_easy_strerror(cc));
    else if (status != 200)
        rc = SERVE_BAD_MEDIA(e, it->param, "'%s': the URL answered HTTP %ld", it->param, status);
    else if (f.body.oom)
        rc = SERVE_OOM(e);
    else if (!f.body.len)
        rc = SERVE_BAD_MEDIA(e, it->param, "'%s': the URL gave zero bytes", it->param);
    if (rc) {
        plume_buf_free(&f.body);
        return rc;
    }
    it->len = f.body.len;
    it->bytes = (uint8_t *)plume_buf_take(&f.body);
    return it->bytes ? 0 : SERVE_OOM(e);
}

/* ---- the prompt --------------------------------------------------------------------------- */

/* ---- the memory budget of decoded media ---------------------------------------------------
 * Decoded pixels and samples are held from the request's parse until the encoder thread has
 * run the towers, so they count against --max-request-memory beside bodies and parses: before
 * an image is decoded, the size its header declares is reserved at MEDIA_DECODE_BYTES per pixel
 * (libwebp's animation decoder holds two RGBA canvases while it decodes, 8 bytes a pixel, then
 * the RGB copy, 3), and once decoded, 3 bytes a pixel are held (an audio clip: 4 bytes a
 * sample) until serve_media_encode frees them. A request whose media alone exceed the budget is
 * a 413 naming the part; one that does not fit beside the others now a 429. */
#define MEDIA_DECODE_BYTES 11
/* medium_prepare's mark for a step that found the client gone (e holds the 499). */
#define GONE (-1000)

/* Take n more bytes of the budget for md (0), or a 413 / 429 naming the part. */
static int media_take(serve_media *md, const serve_media_opts *o, const serve_medium *it, size_t n, serve_error *e) {
    if (!o->mem_used || !n) return 0;
    md->pool = o->mem_used;
    if (n > o->mem_cap || md->held > o->mem_cap - n)
        return serve_error_set(e, 413, SERVE_ERR_REQUEST, it->param, "request_too_large",
                               "'%s': decoding the request's media up to this part would take about %zu MB, more than "
                               "the server allows for all requests in flight (--max-request-memory %zu MB); send "
                               "smaller images or shorter clips", it->param, (n > o->mem_cap ? n : md->held + n) >> 20,
                               o->mem_cap >> 20);
    size_t cur = atomic_load(o->mem_used);
    do {
        if (cur > o->mem_cap - n)
            return serve_error_set(e, 429, SERVE_ERR_BUSY, it->param, "server_busy",
                                   "the server is busy with other large requests; retry later");
    } while (!atomic_compare_exchange_weak(o->mem_used, &cur, cur + n));
    md->held += n;
    return 0;
}

/* Give n bytes of md's share back. */
static void media_give(serve_media *md, size_t n) {
    if (n > md->held) n = md->held;
    if (md->pool && n) atomic_fetch_sub(md->pool, n);
    md->held -= n;
}

/* Whether the client of the request has left (w asked): then 499 in e (no reply is sent) and
 * the server's count of abandoned media work goes up. */
static int client_left(const serve_media_opts *o, const serve_watch *w, const serve_medium *it, serve_error *e) {
    if (!w || !w->gone || !w->gone(w->ctx)) return 0;
    if (o->abandoned) atomic_fetch_add(o->abandoned, 1);
    return serve_error_set(e, 499, SERVE_ERR_REQUEST, it->param, "client_gone",
                           "the client went away; its media were not decoded further");
}

/* Decode and count one medium: its pixels or samples (within the memory budget), its tokens
 * and key, the client asked after each step (w). 0 or a 400 naming the part (413 / 429 over
 * the budget, 499 the client gone, 500 out of memory). */
static int medium_prepare(serve_media *md, serve_medium *it, const plume_model *m, const serve_media_opts *o,
                          const serve_watch *watch, serve_error *e) {
    char *err = NULL;
    int rc = 0;
    size_t took = 0; /* reserved for the decode */
    if (it->kind == PLUME_CHAT_PART_IMAGE) {
        if (!plume_model_has_vision(m))
            return SERVE_BAD_MEDIA(e, it->param, "'%s': this model takes no images (the bundle has no vision tower)", it->param);
        int32_t w = 0, h = 0; /* a header that cannot be read: the decoder says why */
        if (!plume_image_size(it->bytes, it->len, &w, &h, NULL)) {
            uint64_t px = (uint64_t)w * (uint64_t)h;
            took = px > SIZE_MAX / MEDIA_DECODE_BYTES ? SIZE_MAX : (size_t)px * MEDIA_DECODE_BYTES;
            if ((rc = media_take(md, o, it, took, e))) return rc;
        }
        rc = plume_image_decode(&it->img, it->bytes, it->len, &err);
        if (!rc && client_left(o, watch, it, e)) rc = GONE;
        if (!rc) rc = plume_image_shrink(it->img, m, NULL, &err); /* held until encoded: the tower's pixels only */
        if (!rc) rc = plume_image_tokens(m, it->img, NULL, &it->n_tokens, &it->key, &err);
    } else {
        if (!plume_model_has_audio(m))
            return SERVE_BAD_MEDIA(e, it->param, "'%s': this model takes no audio (the bundle has no audio tower)", it->param);
        uint64_t peak = 0; /* a header that cannot be read: the decoder says why */
        if (!plume_audio_decode_peak(it->bytes, it->len, &peak, NULL)) {
            took = peak > SIZE_MAX ? SIZE_MAX : (size_t)peak;
            if ((rc = media_take(md, o, it, took, e))) return rc;
        }
        rc = plume_audio_decode(&it->aud, it->bytes, it->len, &err);
        if (!rc && client_left(o, watch, it, e)) rc = GONE;
        if (!rc) rc = plume_audio_tokens(m, it->aud, &it->n_tokens, &it->key, &err);
    }
    if (rc == GONE) rc = e->status;
    else if (rc == PLUME_ENOMEM) rc = SERVE_OOM(e);
    else if (rc) rc = SERVE_BAD_MEDIA(e, it->param, "'%s': %s", it->param, err ? err : "cannot read it");
    free(err);
    free(it->bytes); /* decoded: the bytes are no longer needed */
    it->bytes = NULL;
    media_give(md, took);
    if (rc) return rc;
    size_t hold = it->img ? (size_t)plume_image_width(it->img) * (size_t)plume_image_height(it->img) * 3
                          : (size_t)plume_audio_n_samples(it->aud) * sizeof(float);
    return media_take(md, o, it, hold, e);
}

/* The placeholder text the chat template writes for a medium of a kind. */
static const char *placeholder_text(int32_t kind) { return kind == PLUME_CHAT_PART_IMAGE ? "<|image|>" : "<|audio|>"; }

/* Tokenize text[0..n) (no BOS) and append to b. 0 or 400. */
static int tokenize_piece(const plume_tokenizer *tok, const char *text, size_t n, plume_buf *b, serve_error *e) {
    if (!n) return 0;
    int32_t cap = (int32_t)(n < (1u << 27) ? n + 16 : (1u << 27));
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return SERVE_OOM(e);
    int32_t k = plume_tokenize(tok, text, n, ids, cap);
    if (k < 0 || k > cap) {
        free(ids);
        return serve_error_set(e, 400, SERVE_ERR_REQUEST, NULL, "invalid_utf8", "the text is not valid UTF-8");
    }
    plume_buf_put(b, ids, (size_t)k * sizeof *ids);
    free(ids);
    return b->oom ? SERVE_OOM(e) : 0;
}

/* The rendered prompt's tokens, each placeholder the template wrote (<|image|>, <|audio|>)
 * expanded into its medium's run: <|image> N x <|image|> <image|> (audio: <|audio> ...
 * <audio|>), the placeholder ids the model's (config.json), never the tokenizer's reading of
 * the text (a tokenizer without those tokens still works). The k-th image placeholder is the
 * k-th image part. Counts that differ (a system message's media, which the template drops, or
 * placeholder text typed into a message) are a 400. */
static int expand(const plume_model *m, serve_media *md, const char *text, plume_buf *b, serve_error *e) {
    const plume_tokenizer *tok = plume_model_tokenizer(m);
    int32_t next[2] = {0, 0}, have[2] = {0, 0}, want[2] = {0, 0};
    for (int32_t i = 0; i < md->n; i++) want[md->items[i].kind == PLUME_CHAT_PART_AUDIO]++;
    const char *p = text;
    for (;;) {
        const char *ai = strstr(p, "<|image|>"), *aa = strstr(p, "<|audio|>");
        const char *at = ai && (!aa || ai < aa) ? ai : aa;
        int rc = tokenize_piece(tok, p, at ? (size_t)(at - p) : strlen(p), b, e);
        if (rc || !at) return rc;
        int32_t k = at == aa; /* 0 image, 1 audio */
        int32_t kind = k ? PLUME_CHAT_PART_AUDIO : PLUME_CHAT_PART_IMAGE;
        have[k]++;
        while (next[k] < md->n && md->items[next[k]].kind != kind) next[k]++;
        if (next[k] >= md->n)
            return serve_error_set(e, 400, SERVE_ERR_REQUEST, "messages", "invalid_media",
                                   "the messages hold more %s placeholders than %s parts (%d given; the text may not "
                                   "contain '%s')", placeholder_text(kind), k ? "input_audio" : "image_url", want[k],
                                   placeholder_text(kind));
        serve_medium *it = &md->items[next[k]++];
        int32_t run[3] = {plume_model_media_token(m, k ? "boa" : "boi"), plume_model_media_token(m, k ? "audio" : "image"),
                          plume_model_media_token(m, k ? "eoa" : "eoi")};
        if (run[0] < 0 || run[1] < 0 || run[2] < 0)
            return SERVE_BAD_MEDIA(e, it->param, "'%s': the model has no %s tokens", it->param, k ? "audio" : "image");
        plume_buf_put(b, &run[0], sizeof run[0]);
        it->start = (int32_t)(b->len / sizeof(int32_t));
        for (int32_t r = 0; r < it->n_tokens; r++) plume_buf_put(b, &run[1], sizeof run[1]);
        plume_buf_put(b, &run[2], sizeof run[2]);
        if (b->oom) return SERVE_OOM(e);
        p = at + strlen("<|image|>");
    }
}

/* The prompt of a request with media: fetch (remote images), decode, check and count each
 * medium, tokenize the rendered text with the placeholders expanded into their runs, and note
 * each position's key. *ids malloc'd. 0 or a 400 naming the part (500 out of memory). */
int serve_media_prompt(const plume_model *m, serve_request *r, const serve_media_opts *o, const serve_watch *w,
                       const char *text, int32_t **ids, int32_t *n, serve_error *e) {
    serve_media *md = r->media;
    *ids = NULL;
    *n = 0;
    for (int32_t i = 0; i < md->n; i++) {
        serve_medium *it = &md->items[i];
        int rc = client_left(o, w, it, e);
        if (!rc && it->url && !it->bytes) rc = fetch_url(it, o, e);
        if (!rc && !it->img && !it->aud) rc = medium_prepare(md, it, m, o, w, e);
        if (rc) return rc;
        if (it->kind == PLUME_CHAT_PART_AUDIO && md->transcribe) md->seconds = plume_audio_seconds(it->aud);
    }
    plume_buf b = {0};
    int rc = expand(m, md, text, &b, e);
    int32_t count = (int32_t)(b.len / sizeof(int32_t));
    for (int32_t i = 0; !rc && i < md->n; i++)
        if (!md->items[i].start)
            rc = SERVE_BAD_MEDIA(e, md->items[i].param,
                           "'%s' has no place in the prompt (the chat template writes no media of a system message)",
                           md->items[i].param);
    free(md->keys);
    md->keys = NULL;
    if (!rc && !(md->keys = calloc((size_t)(count ? count : 1), sizeof *md->keys))) rc = SERVE_OOM(e);
    if (!rc && !(md->list = calloc((size_t)md->n, sizeof *md->list))) rc = SERVE_OOM(e);
    if (rc) {
        plume_buf_free(&b);
        return rc;
    }
    for (int32_t i = 0; i < md->n; i++)
        for (int32_t k = 0; k < md->items[i].n_tokens; k++)
            md->keys[md->items[i].start + k] = plume_embd_row_key(md->items[i].key, k);
    md->n_keys = count;
    *ids = (int32_t *)plume_buf_take(&b);
    *n = count;
    if (md->transcribe && r->max_tokens < 0) /* as plume transcribe: 256 tokens per 30 s clip */
        r->max_tokens = 256 * (int32_t)ceil((md->seconds > 0 ? md->seconds : 1) / 30.0);
    return *ids ? 0 : SERVE_OOM(e);
}

/* ---- the scheduler's side ------------------------------------------------------------------ */

/* Each prompt position's key (0: a token), or NULL. */
const uint64_t *serve_media_keys(const serve_media *md) { return md && md->n ? md->keys : NULL; }

/* Whether a prefill from `from` needs the medium encoded: its rows run past `from`, and it is
 * not encoded yet. */
static int medium_needed(const serve_medium *it, int32_t from) { return !it->emb && it->start + it->n_tokens > from; }

/* How many media a prefill from `from` needs encoded. */
int32_t serve_media_pending(const serve_media *md, int32_t from) {
    int32_t n = 0;
    for (int32_t i = 0; md && i < md->n; i++) n += medium_needed(&md->items[i], from);
    return n;
}

/* Encode, with the towers on enc's threads, every medium whose rows start at or after `from`,
 * or run past it (the ones a prefill from `from` needs), unless already encoded; then free
 * every medium's pixels and samples (a request's slot is set up once). On the scheduler's
 * encoder thread (serve_sched.c), which alone touches the media until it says it is done. */
int serve_media_encode(serve_media *md, plume_encoder *enc, int32_t from, int32_t *n_encoded, char **err) {
    *n_encoded = 0;
    for (int32_t i = 0; md && i < md->n; i++) {
        serve_medium *it = &md->items[i];
        if (!medium_needed(it, from)) continue;
        int rc = it->kind == PLUME_CHAT_PART_IMAGE ? plume_encoder_image(enc, &it->emb, it->img, NULL, err)
                                                   : plume_encoder_audio(enc, &it->emb, it->aud, err);
        if (rc) return rc;
        ++*n_encoded;
    }
    for (int32_t i = 0; md && i < md->n; i++) { /* pixels and samples are not needed again */
        plume_image_free(md->items[i].img);
        plume_audio_free(md->items[i].aud);
        md->items[i].img = NULL;
        md->items[i].aud = NULL;
    }
    serve_media_release(md);
    return 0;
}

/* The media a prefill from position pos feeds (those whose rows end after pos, in the prompt's
 * order) into *list, and how many of the first one's rows lie before pos (*skip): what
 * plume_batch_add_media takes. Returns how many. */
int32_t serve_media_at(serve_media *md, int32_t pos, const plume_embd *const **list, int32_t *skip) {
    int32_t k = 0;
    *skip = 0;
    for (int32_t i = 0; md && i < md->n; i++) {
        serve_medium *it = &md->items[i];
        if (it->start + it->n_tokens <= pos || !it->emb) continue;
        if (!k && it->start < pos) *skip = pos - it->start;
        md->list[k++] = it->emb;
    }
    *list = md ? md->list : NULL;
    return k;
}

/* /v1/models: the input modalities of the bundle. */
void serve_media_modalities(const plume_model *m, cJSON *model) {
    cJSON *mods = cJSON_AddArrayToObject(model, "input_modalities");
    if (!mods) return;
    cJSON_AddItemToArray(mods, cJSON_CreateString("text"));
    if (plume_model_has_vision(m)) cJSON_AddItemToArray(mods, cJSON_CreateString("image"));
    if (plume_model_has_audio(m)) cJSON_AddItemToArray(mods, cJSON_CreateString("audio"));
}

