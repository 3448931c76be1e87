/* cmd_tokenize.c -- `plume tokenize` and `plume detokenize`: JSON lines in, JSON lines out.
 *
 *   {"text": "..."}  --tokenize-->  {"ids": [...]}   (no BOS)
 *   {"ids": [...]}   --detokenize-> {"text": "..."}
 *
 * The tokenizer comes from a bundle (-m BUNDLE: its tokenizer.bin, else its
 * hf_model/tokenizer.json) or a file (--tokenizer FILE: tokenizer.json or tokenizer.bin,
 * told apart by the binary form's magic). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"

/* ---- shared ------------------------------------------------------------------------------ */

/* Open the tokenizer named by --tokenizer FILE, or the one of bundle dir (-m or default). */
static int tk_open(const char *file, const char *bundle, plume_tokenizer **out) {
    char *err = NULL, *path = NULL;
    int rc;
    if (!file) {
        const char *dir = cli_model_path(bundle);
        if (!dir) return 1;
        path = plume_path_join(dir, "tokenizer.bin");
        if (path && !plume_file_exists(path)) {
            free(path);
            path = plume_path_join(dir, "hf_model/tokenizer.json");
            if (path && !plume_file_exists(path)) {
                cli_error("%s has neither tokenizer.bin nor hf_model/tokenizer.json", dir);
                free(path);
                return 1;
            }
        }
        if (!path) return cli_error("out of memory");
        file = path;
    }
    char magic[8] = {0};
    FILE *f = fopen(file, "rb");
    int is_bin = f && fread(magic, 1, 8, f) == 8 && !memcmp(magic, "PLUMETOK", 8);
    if (f) fclose(f);
    rc =
        is_bin ? plume_tokenizer_open(out, file, &err) : plume_tokenizer_open_json(out, file, &err);
    free(path);
    return rc ? cli_lib_error_free(err) : 0;
}

/* Whether s[0..n) is valid UTF-8 (strict, as the tokenizer wants it). */
static int tk_utf8_ok(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char c = s[i];
        size_t need;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) need = 1;
        else if (c >= 0xe0 && c <= 0xef)
            need = 2, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        else if (c >= 0xf0 && c <= 0xf4)
            need = 3, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        else return 0;
        if (need > n - i - 1) return 0;
        for (size_t k = 1; k <= need; k++) {
            if (s[i + k] < lo || s[i + k] > hi) return 0;
            lo = 0x80, hi = 0xbf;
        }
        i += need + 1;
    }
    return 1;
}

/* Parse one input line (already checked to be UTF-8) as a JSON object. cJSON strings end at
 * the first NUL, so each escaped \u0000 is turned into the byte 0xFF first (valid UTF-8
 * never holds it) and back by tk_string(). NULL if the line is not a JSON object. */
static cJSON *tk_parse(const char *line, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (line[i] == '\\' && n - i >= 6 && !memcmp(line + i, "\\u0000", 6)) {
            s[o++] = (char)0xff;
            i += 5;
        } else {
            s[o++] = line[i];
            if (line[i] == '\\' && i + 1 < n) s[o++] = line[++i];
        }
    }
    s[o] = 0;
    cJSON *j = cJSON_ParseWithOpts(s, NULL, 1); /* nothing may follow the object */
    free(s);
    if (j && !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        j = NULL;
    }
    return j;
}

/* The string under key with its NUL bytes restored, and its length; NULL if none. */
static const char *tk_string(const cJSON *obj, const char *key, size_t *len) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsString(v)) return NULL;
    *len = strlen(v->valuestring);
    for (size_t i = 0; i < *len; i++)
        if ((unsigned char)v->valuestring[i] == 0xff) v->valuestring[i] = 0;
    return v->valuestring;
}

/* Write s[0..n) as a JSON string (UTF-8 kept as is, controls escaped). */
static void tk_put_json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (c < 0x20) fprintf(f, "\\u%04x", c);
            else fputc(c, f);
        }
    }
    fputc('"', f);
}

/* Parse the flags both commands share; returns 0, or an exit status (help printed: -1). */
static int tk_flags(int argc, char **argv, const char *usage, int *skip, const char **file,
                    const char **bundle) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            return -1;
        } else if ((!strcmp(a, "--tokenizer") || !strcmp(a, "-m")) && i + 1 < argc) {
            *(a[1] == 'm' ? bundle : file) = argv[++i];
        } else if (skip && !strcmp(a, "--skip-special")) {
            *skip = 1;
        } else {
            return cli_error("%s: unknown or incomplete option '%s' (see plume %s --help)", argv[0],
                             a, argv[0]);
        }
    }
    if (*file && *bundle) return cli_error("%s: give -m or --tokenizer, not both", argv[0]);
    return 0;
}

/* ---- plume tokenize ---------------------------------------------------------------------- */

static const char tokenize_usage[] =
    "usage: plume tokenize [-m BUNDLE | --tokenizer FILE]\n"
    "\n"
    "Reads JSON lines {\"text\": \"...\"} on stdin and writes one {\"ids\": [...]} line for\n"
    "each (no BOS is added). Blank lines are skipped.\n"
    "\n"
    "  -m BUNDLE         use BUNDLE/tokenizer.bin, else BUNDLE/hf_model/tokenizer.json\n"
    "                    (default: $PLUME_MODEL, else ~/.cache/plume/gemma-4-e2b)\n"
    "  --tokenizer FILE  a tokenizer.json or a tokenizer.bin\n";

/* plume tokenize: {"text"} lines to {"ids"} lines. */
int cmd_tokenize(int argc, char **argv) {
    const char *file = NULL, *bundle = NULL;
    int rc = tk_flags(argc, argv, tokenize_usage, NULL, &file, &bundle);
    if (rc) return rc < 0 ? 0 : rc;
    plume_tokenizer *tok = NULL;
    if (tk_open(file, bundle, &tok)) return 1;
    char *line = NULL;
    size_t cap = 0;
    int32_t *ids = NULL, ids_cap = 0;
    ssize_t n;
    long lineno = 0;
    rc = 0;
    while (!rc && (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)n) continue;
        if (!tk_utf8_ok((unsigned char *)line, (size_t)n)) {
            rc = cli_error("tokenize: line %ld: not valid UTF-8", lineno);
            break;
        }
        cJSON *j = tk_parse(line, (size_t)n);
        size_t len = 0;
        const char *text = j ? tk_string(j, "text", &len) : NULL;
        if (!text) {
            rc = cli_error("tokenize: line %ld: %s", lineno,
                           j ? "no \"text\" string in the object" : "not a JSON object");
            cJSON_Delete(j);
            break;
        }
        int32_t need = plume_tokenize(tok, text, len, ids, ids_cap);
        if (need > ids_cap) {
            int32_t *grown = realloc(ids, sizeof *ids * (size_t)need);
            if (!grown) rc = cli_error("tokenize: out of memory");
            else ids = grown, ids_cap = need, need = plume_tokenize(tok, text, len, ids, ids_cap);
        }
        if (!rc && need < 0)
            rc = cli_error("tokenize: line %ld: %s", lineno,
                           need == PLUME_EINVAL ? "text is not valid UTF-8" : "text too long");
        if (!rc) {
            fputs("{\"ids\": [", stdout);
            for (int32_t i = 0; i < need; i++) printf(i ? ", %d" : "%d", ids[i]);
            fputs("]}\n", stdout);
        }
        cJSON_Delete(j);
    }
    free(line);
    free(ids);
    plume_tokenizer_free(tok);
    if (fflush(stdout) != 0 && !rc) rc = cli_error("tokenize: cannot write the output");
    return rc;
}

/* ---- plume detokenize -------------------------------------------------------------------- */

static const char detokenize_usage[] =
    "usage: plume detokenize [-m BUNDLE | --tokenizer FILE] [--skip-special]\n"
    "\n"
    "Reads JSON lines {\"ids\": [...]} on stdin and writes one {\"text\": \"...\"} line for\n"
    "each. Byte tokens that do not form valid UTF-8 become U+FFFD. Blank lines are skipped.\n"
    "\n"
    "  -m BUNDLE         use BUNDLE/tokenizer.bin, else BUNDLE/hf_model/tokenizer.json\n"
    "                    (default: $PLUME_MODEL, else ~/.cache/plume/gemma-4-e2b)\n"
    "  --tokenizer FILE  a tokenizer.json or a tokenizer.bin\n"
    "  --skip-special    drop special tokens (<bos>, <|turn>, <turn|>, ...)\n";

/* Read the "ids" array of j into *ids (grown as needed); the count, or -1 with a message. */
static int32_t tk_ids(const cJSON *j, int32_t n_vocab, int32_t **ids, int32_t *cap, long lineno) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "ids"), *x;
    if (!cJSON_IsArray(a)) {
        cli_error("detokenize: line %ld: no \"ids\" array in the object", lineno);
        return -1;
    }
    int32_t n = 0, size = cJSON_GetArraySize(a);
    if (size > *cap) {
        int32_t *grown = realloc(*ids, sizeof **ids * (size_t)size);
        if (!grown) {
            cli_error("detokenize: out of memory");
            return -1;
        }
        *ids = grown, *cap = size;
    }
    cJSON_ArrayForEach(x, a) {
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (!cJSON_IsNumber(x) || v != (double)(int64_t)v) {
            cli_error("detokenize: line %ld: ids must be integers", lineno);
            return -1;
        }
        if (v < 0 || v >= n_vocab) {
            cli_error("detokenize: line %ld: id %.0f is outside the vocabulary (0..%d)", lineno, v,
                      n_vocab - 1);
            return -1;
        }
        (*ids)[n++] = (int32_t)v;
    }
    return n;
}

/* plume detokenize: {"ids"} lines to {"text"} lines. */
int cmd_detokenize(int argc, char **argv) {
    const char *file = NULL, *bundle = NULL;
    int skip = 0;
    int rc = tk_flags(argc, argv, detokenize_usage, &skip, &file, &bundle);
    if (rc) return rc < 0 ? 0 : rc;
    plume_tokenizer *tok = NULL;
    if (tk_open(file, bundle, &tok)) return 1;
    char *line = NULL, *text = NULL;
    size_t cap = 0, text_cap = 0;
    int32_t *ids = NULL, ids_cap = 0;
    ssize_t n;
    long lineno = 0;
    rc = 0;
    while (!rc && (n = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == (size_t)n) continue;
        cJSON *j = tk_utf8_ok((unsigned char *)line, (size_t)n) ? tk_parse(line, (size_t)n) : NULL;
        int32_t ni = j ? tk_ids(j, plume_tokenizer_n_vocab(tok), &ids, &ids_cap, lineno) : -2;
        cJSON_Delete(j);
        if (ni == -2) cli_error("detokenize: line %ld: not a JSON object", lineno);
        if (ni < 0) {
            rc = 1;
            break;
        }
        int64_t need = plume_detokenize(tok, ids, ni, skip, text, text_cap);
        if (need >= 0 && (size_t)need >= text_cap) {
            char *grown = realloc(text, (size_t)need + 1);
            if (!grown) {
                rc = cli_error("detokenize: out of memory");
                break;
            }
            text = grown, text_cap = (size_t)need + 1;
            need = plume_detokenize(tok, ids, ni, skip, text, text_cap);
        }
        if (need < 0) {
            rc = cli_error("detokenize: line %ld: bad ids", lineno);
            break;
        }
        fputs("{\"text\": ", stdout);
        tk_put_json_string(stdout, text, (size_t)need);
        fputs("}\n", stdout);
    }
    free(line);
    free(text);
    free(ids);
    plume_tokenizer_free(tok);
    if (fflush(stdout) != 0 && !rc) rc = cli_error("detokenize: cannot write the output");
    return rc;
}
