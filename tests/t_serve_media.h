/* t_serve_media.h -- what the tests of the server's media (test_serve_media, test_serve_video)
 * share: request bodies written to tmp files, media parts as data URLs, the first answers of a
 * chat reply, the error shape of a refused part, `plume run`'s answer to compare with, and a
 * local HTTP server for remote media URLs. Include after t_serve.h (tmp, server, http). */
#ifndef PLUME_T_SERVE_MEDIA_H
#define PLUME_T_SERVE_MEDIA_H

#include "t_serve.h"

/* Write len bytes to tmp/name; the path (static, one at a time). */
static const char *write_tmp_bytes(const char *name, const void *bytes, size_t len) {
    static char path[800];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(bytes, 1, len, f);
        fclose(f);
    }
    return path;
}

/* Write text to tmp/name; the path (static, one at a time). */
static const char *write_tmp(const char *name, const char *text) { return write_tmp_bytes(name, text, strlen(text)); }

/* The base64 of a file (malloc'd), via base64(1). */
static char *b64_file(const char *path) {
    char *out = malloc(1 << 22);
    if (out && t_sh(out, 1 << 22, "base64 -w0 '%s'", path)) out[0] = 0;
    return out;
}

/* A chat request of one user message of parts (JSON text of the parts list), greedy, n
 * tokens, extra fields (",\"k\":v...", or NULL), posted to sv from a file; the status, the
 * body in out. */
static int chat(const server *sv, char *out, size_t cap, const char *parts, int max_tokens, const char *extra) {
    char *body = plume_sprintf("{\"model\":\"m\",\"max_tokens\":%d,\"temperature\":0%s,\"messages\":[{\"role\":\"user\","
                               "\"content\":%s}]}", max_tokens, extra ? extra : "", parts);
    const char *p = write_tmp(body ? "body.json" : "empty.json", body ? body : "");
    free(body);
    return http(sv, out, cap, "/v1/chat/completions", "-H 'Content-Type: application/json' --data-binary @%s", p);
}

/* A media part of a file as a data URL (malloc'd JSON): type "image_url" or "video_url". */
static char *url_part(const char *type, const char *path, const char *mime) {
    char *b = b64_file(path);
    char *s = plume_sprintf("{\"type\":\"%s\",\"%s\":{\"url\":\"data:%s;base64,%s\"}}", type, type, mime, b ? b : "");
    free(b);
    return s;
}

/* The content of choice i of a reply (malloc'd) and its usage; NULL when not there. */
static char *reply_of(const char *body, int i, int *prompt, int *cached) {
    cJSON *root = cJSON_Parse(body);
    cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "choices"), i);
    cJSON *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ch, "message"), "content");
    cJSON *u = cJSON_GetObjectItemCaseSensitive(root, "usage");
    cJSON *p = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    cJSON *k = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens_details"), "cached_tokens");
    char *s = cJSON_IsString(c) ? strdup(c->valuestring) : NULL;
    if (prompt) *prompt = cJSON_IsNumber(p) ? p->valueint : -1;
    if (cached) *cached = cJSON_IsNumber(k) ? k->valueint : -1;
    cJSON_Delete(root);
    return s;
}

/* Whether body is an error whose param is `param` and whose message holds `what` (OpenAI's
 * shape; Anthropic's error carries no param and Ollama's is a bare message: then the message
 * must name the param). */
static int refused(const char *body, const char *param, const char *what) {
    cJSON *root = cJSON_Parse(body);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(root, "error");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message"), *p = cJSON_GetObjectItemCaseSensitive(e, "param");
    if (!m) m = e; /* Ollama: {"error": "message"} */
    int ok = cJSON_IsString(m) && strstr(m->valuestring, what) &&
             (cJSON_IsString(p) ? !strcmp(p->valuestring, param) : strstr(m->valuestring, param) != NULL);
    cJSON_Delete(root);
    return ok;
}

/* What `plume run -m dir` answers greedily to a prompt with media flags, n tokens (malloc'd;
 * its last newline cut), or NULL. */
static char *cli_answer(const char *dir, const char *media_flags, const char *prompt, int n) {
    static char out[1 << 20];
    if (t_sh(out, sizeof out, "( %s/plume run -m %s %s -p '%s' -n %d --temp 0 2>/dev/null )", t_build(), dir, media_flags,
             prompt, n))
        return NULL;
    size_t k = strlen(out);
    if (k && out[k - 1] == '\n') out[k - 1] = 0;
    return strdup(out);
}

/* A local HTTP server of python3's http.server over dir, with handler (more lines of the
 * request handler class H, indented 4, or ""); its port (0 when it did not start within 30 s:
 * python3 starts slowly on a loaded host), its pid in *pid (kill it when done). */
static int www_start(const char *dir, const char *handler, pid_t *pid) {
    char cmd[4096], pp[800];
    snprintf(pp, sizeof pp, "%s/www.port", tmp);
    snprintf(cmd, sizeof cmd,
             "exec python3 -c 'import http.server,os,sys\n"
             "os.chdir(sys.argv[1])\n"
             "class H(http.server.SimpleHTTPRequestHandler):\n"
             "    def log_message(self, *a): pass\n"
             "%s"
             "s = http.server.HTTPServer((\"127.0.0.1\", 0), H)\n"
             "open(sys.argv[2], \"w\").write(str(s.server_port))\n"
             "s.serve_forever()' %s %s 2>/dev/null",
             handler, dir, pp);
    *pid = spawn_sh(cmd);
    int port = 0;
    for (int i = 0; i < 600 && !port; i++) {
        nap(50);
        FILE *f = fopen(pp, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1) port = 0;
            fclose(f);
        }
    }
    return port;
}

#endif
