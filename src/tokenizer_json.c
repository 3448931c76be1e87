/* tokenizer_json.c -- a tokenizer built from a Hugging Face tokenizer.json
 * (plume_tokenizer_open_json): the converter's path, and the fallback of a bundle without
 * tokenizer.bin. Checks that the pipeline is Gemma's, gathers vocab, added tokens and merges,
 * lays out the binary form tokenizer.c reads, and validates it as a file would be. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

/* Store v at b, little-endian. */
static void wr_u32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}

/* An added token while building: its content and id. */
typedef struct { const char *s; uint32_t n, id; } tb_added;

/* A trie node while building: left-child right-sibling links. */
typedef struct { uint32_t first_child, next_sibling, last_child, token, byte; } tb_node;

/* What the JSON gives, gathered before the binary form is laid out. Strings are borrowed from
 * the cJSON tree. */
typedef struct {
    const char *path;
    uint32_t n_vocab;
    const char **str; /* [n_vocab] piece of id i, NULL for an id the file leaves out */
    uint32_t *len;    /* [n_vocab] */
    uint8_t *flags;   /* [n_vocab] */
    tb_added *added;
    uint32_t n_added;
    const cJSON *merges;
    uint32_t n_merges;
    tb_node *tnodes;
    uint32_t n_tnodes;
} tb_state;

/* Whether j is the JSON string s. */
static int tb_is_string(const cJSON *j, const char *s) {
    return cJSON_IsString(j) && strcmp(j->valuestring, s) == 0;
}

/* Read a non-negative integer id below TOK_MAX_COUNT; 0 on success. */
static int tb_id(const cJSON *j, uint32_t *id) {
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0) || j->valuedouble >= TOK_MAX_COUNT ||
        j->valuedouble != (double)(uint32_t)j->valuedouble)
        return -1;
    *id = (uint32_t)j->valuedouble;
    return 0;
}

/* Check that the pipeline around the model is Gemma's: normalizer Replace(' ' -> U+2581), a
 * pre-tokenizer that only splits on ' ' (none remain after the normalizer), a BPE model
 * with byte fallback and no word prefixes or suffixes. */
static int tb_check_pipeline(const cJSON *root, const char *path, char **err) {
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(norm, "pattern");
    if (!tb_is_string(cJSON_GetObjectItemCaseSensitive(norm, "type"), "Replace") ||
        !tb_is_string(cJSON_GetObjectItemCaseSensitive(pat, "String"), " ") ||
        !tb_is_string(cJSON_GetObjectItemCaseSensitive(norm, "content"), "\xe2\x96\x81"))
        return plume_fail(err, PLUME_EFORMAT,
                          "%s: unsupported normalizer (want Replace ' ' -> U+2581, as Gemma's)",
                          path);
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (pre && !cJSON_IsNull(pre) &&
        (!tb_is_string(cJSON_GetObjectItemCaseSensitive(pre, "type"), "Split") ||
         !tb_is_string(cJSON_GetObjectItemCaseSensitive(
                           cJSON_GetObjectItemCaseSensitive(pre, "pattern"), "String"), " ")))
        return plume_fail(err, PLUME_EFORMAT,
                          "%s: unsupported pre_tokenizer (want none or Split on ' ')", path);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(model) || (type && !tb_is_string(type, "BPE")))
        return plume_fail(err, PLUME_EFORMAT, "%s: model is not BPE", path);
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
        return plume_fail(err, PLUME_EFORMAT, "%s: model.byte_fallback is not true", path);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges")))
        return plume_fail(err, PLUME_EFORMAT, "%s: model.ignore_merges is not supported", path);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        if (a && !cJSON_IsNull(a) && !tb_is_string(a, ""))
            return plume_fail(err, PLUME_EFORMAT, "%s: model.%s is not supported", path,
                              affixes[i]);
    }
    return 0;
}

/* The ids of model.vocab and added_tokens: check each, size b's arrays for the largest
 * (which must be dense: it bounds what a hostile file can make us allocate). */
static int tb_size(tb_state *b, const cJSON *vocab, const cJSON *added, char **err) {
    const char *path = b->path;
    uint32_t max_id = 0, id = 0, n_added = 0;
    const cJSON *j;
    cJSON_ArrayForEach(j, vocab) {
        if (tb_id(j, &id))
            return plume_fail(err, PLUME_EFORMAT, "%s: vocab entry '%s' has a bad id", path,
                              j->string);
        if (id > max_id) max_id = id;
    }
    cJSON_ArrayForEach(j, added) {
        if (tb_id(cJSON_GetObjectItemCaseSensitive(j, "id"), &id) ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "content")))
            return plume_fail(err, PLUME_EFORMAT, "%s: added token %u has no id or content", path,
                              n_added);
        if (id > max_id) max_id = id;
        n_added++;
    }
    uint32_t n_vocab_entries = (uint32_t)cJSON_GetArraySize(vocab);
    if (max_id >= n_vocab_entries + n_added)
        return plume_fail(err, PLUME_EFORMAT, "%s: ids are not dense (largest %u, %u entries)",
                          path, max_id, n_vocab_entries + n_added);
    b->n_vocab = max_id + 1;
    b->str = calloc(b->n_vocab, sizeof *b->str);
    b->len = calloc(b->n_vocab, sizeof *b->len);
    b->flags = calloc(b->n_vocab, 1);
    b->added = calloc(n_added + 1, sizeof *b->added);
    if (!b->str || !b->len || !b->flags || !b->added)
        return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", path);
    return 0;
}

/* The added tokens into b (ids checked by tb_size): matched literally (HF: normalized false,
 * no strip, not single-word); their content is what decoding prints. */
static int tb_take_added(tb_state *b, const cJSON *added, char **err) {
    static const char *const off_keys[] = {"lstrip", "rstrip", "single_word", "normalized"};
    const char *path = b->path;
    uint32_t id = 0;
    const cJSON *j;
    cJSON_ArrayForEach(j, added) {
        const char *s = cJSON_GetObjectItemCaseSensitive(j, "content")->valuestring;
        tb_id(cJSON_GetObjectItemCaseSensitive(j, "id"), &id);
        for (int k = 0; k < 4; k++)
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, off_keys[k])))
                return plume_fail(err, PLUME_EFORMAT,
                                  "%s: added token '%s' sets %s (not supported)", path, s,
                                  off_keys[k]);
        if (!*s) return plume_fail(err, PLUME_EFORMAT, "%s: added token %u is empty", path, id);
        if (!tok_utf8_valid((const uint8_t *)s, strlen(s)))
            return plume_fail(err, PLUME_EFORMAT, "%s: added token %u is not whole UTF-8 characters", path, id);
        if (b->flags[id] & TOK_ADDED)
            return plume_fail(err, PLUME_EFORMAT, "%s: added token id %u appears twice", path, id);
        b->str[id] = s;
        b->len[id] = (uint32_t)strlen(s);
        b->flags[id] |= TOK_ADDED;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "special")))
            b->flags[id] |= TOK_SPECIAL;
        b->added[b->n_added++] = (tb_added){s, b->len[id], id};
    }
    return 0;
}

/* Gather model.vocab and added_tokens into b: pieces by id, flags, the added list, and the
 * merges (counted; read by tb_fill_merges). */
static int tb_gather(tb_state *b, const cJSON *root, char **err) {
    const char *path = b->path;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab))
        return plume_fail(err, PLUME_EFORMAT, "%s: no model.vocab object", path);
    if (added && !cJSON_IsNull(added) && !cJSON_IsArray(added))
        return plume_fail(err, PLUME_EFORMAT, "%s: added_tokens is not an array", path);
    b->merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(b->merges))
        return plume_fail(err, PLUME_EFORMAT, "%s: no model.merges array", path);
    int rc = tb_size(b, vocab, added, err);
    if (rc) return rc;
    uint32_t id = 0;
    const cJSON *j;
    cJSON_ArrayForEach(j, vocab) {
        tb_id(j, &id);
        if (b->str[id])
            return plume_fail(err, PLUME_EFORMAT, "%s: vocab has two pieces with id %u", path, id);
        b->str[id] = j->string;
        b->len[id] = (uint32_t)strlen(j->string);
    }
    if ((rc = tb_take_added(b, added, err))) return rc;
    uint32_t n_merges = 0;
    cJSON_ArrayForEach(j, b->merges) n_merges++;
    if (n_merges >= TOK_MAX_COUNT)
        return plume_fail(err, PLUME_EFORMAT, "%s: too many merges", path);
    b->n_merges = n_merges;
    return 0;
}

/* qsort order of added tokens: bytewise, a prefix first, then by id. */
static int tb_added_cmp(const void *pa, const void *pb) {
    const tb_added *a = pa, *b = pb;
    uint32_t n = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->s, b->s, n);
    if (c) return c;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Build the added-token trie in b->tnodes. Inserting in sorted order means a node's
 * matching child, if any, is always the child made last; children come out sorted by byte.
 * When two added tokens share a content the lower id wins. */
static int tb_trie(tb_state *b, char **err) {
    qsort(b->added, b->n_added, sizeof *b->added, tb_added_cmp);
    uint64_t cap = 1;
    for (uint32_t i = 0; i < b->n_added; i++) cap += b->added[i].n;
    if (cap >= TOK_MAX_COUNT)
        return plume_fail(err, PLUME_EFORMAT, "%s: added tokens too long", b->path);
    b->tnodes = malloc(cap * sizeof *b->tnodes);
    if (!b->tnodes) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", b->path);
    b->tnodes[0] = (tb_node){TOK_NONE, TOK_NONE, TOK_NONE, TOK_NONE, 0};
    b->n_tnodes = 1;
    for (uint32_t i = 0; i < b->n_added; i++) {
        uint32_t node = 0;
        for (uint32_t k = 0; k < b->added[i].n; k++) {
            uint8_t c = (uint8_t)b->added[i].s[k];
            uint32_t last = b->tnodes[node].last_child;
            if (last != TOK_NONE && b->tnodes[last].byte == c) {
                node = last;
                continue;
            }
            uint32_t nn = b->n_tnodes++;
            b->tnodes[nn] = (tb_node){TOK_NONE, TOK_NONE, TOK_NONE, TOK_NONE, c};
            if (last == TOK_NONE) b->tnodes[node].first_child = nn;
            else b->tnodes[last].next_sibling = nn;
            b->tnodes[node].last_child = nn;
            node = nn;
        }
        if (b->tnodes[node].token == TOK_NONE) b->tnodes[node].token = b->added[i].id;
    }
    return 0;
}

/* A merge entry's two pieces: "a b" (one space) or ["a", "b"]; 0 on success. */
static int tb_merge_parts(const cJSON *m, const char **a, size_t *na, const char **bp, size_t *nb) {
    if (cJSON_IsArray(m)) {
        const cJSON *x = m->child, *y = x ? x->next : NULL;
        if (!cJSON_IsString(x) || !cJSON_IsString(y) || y->next) return -1;
        *a = x->valuestring, *na = strlen(x->valuestring);
        *bp = y->valuestring, *nb = strlen(y->valuestring);
        return 0;
    }
    if (!cJSON_IsString(m)) return -1;
    const char *s = m->valuestring, *sp = strchr(s, ' ');
    if (!sp || strchr(sp + 1, ' ')) return -1;
    *a = s, *na = (size_t)(sp - s), *bp = sp + 1, *nb = strlen(sp + 1);
    return 0;
}

/* Fill the merges section and its hash table. The result of each merge is the piece a+b;
 * when a pair repeats, the later rank wins (as in HF tokenizers and transformers.js). */
static int tb_fill_merges(tb_state *b, const plume_tokenizer *t, tok_merge *merges,
                          uint32_t *ht, char **err) {
    size_t cap = 0;
    uint8_t *cat = NULL;
    if (plume_grow(&cat, &cap, 256, 1)) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", b->path);
    uint32_t r = 0, mask = t->merge_slots - 1;
    const cJSON *m;
    int rc = 0;
    cJSON_ArrayForEach(m, b->merges) {
        const char *sa, *sb;
        size_t na, nb;
        if (tb_merge_parts(m, &sa, &na, &sb, &nb)) {
            rc = plume_fail(err, PLUME_EFORMAT,
                            "%s: merge %u is neither \"a b\" nor [\"a\", \"b\"]", b->path, r);
            break;
        }
        if (plume_grow(&cat, &cap, na + nb, 1)) {
            rc = plume_fail(err, PLUME_ENOMEM, "%s: out of memory", b->path);
            break;
        }
        memcpy(cat, sa, na);
        memcpy(cat + na, sb, nb);
        uint32_t left = tok_piece_find(t, (const uint8_t *)sa, na);
        uint32_t right = tok_piece_find(t, (const uint8_t *)sb, nb);
        uint32_t result = tok_piece_find(t, cat, na + nb);
        if (left == TOK_NONE || right == TOK_NONE || result == TOK_NONE) {
            rc = plume_fail(err, PLUME_EFORMAT,
                            "%s: merge %u ('%.*s' '%.*s') names a piece not in the vocabulary",
                            b->path, r, (int)na, sa, (int)nb, sb);
            break;
        }
        merges[r] = (tok_merge){left, right, result};
        uint32_t fp, i = tok_merge_hash(t, left, right, &fp), rank_mask = (1u << t->rank_bits) - 1;
        while (ht[i] != TOK_NONE && (ht[i] >> t->rank_bits != fp ||
                                     merges[ht[i] & rank_mask].left != left ||
                                     merges[ht[i] & rank_mask].right != right))
            i = (i + 1) & mask;
        ht[i] = fp << t->rank_bits | r++;
    }
    free(cat);
    return rc;
}

/* Smallest power of two >= 2n (and >= 16): hash tables stay at most half full. */
static uint32_t tb_slots(uint32_t n) {
    uint32_t s = 16;
    while (s < 2 * n) s *= 2;
    return s;
}

/* Where section i of a binary form being built starts (its table is written first). */
static uint8_t *tb_sec(uint8_t *bin, int i) { return bin + plume_rd_u64le(bin + H_SECTIONS + 16 * i); }

/* Lay out the binary form: the header's counts and each section's offset and size (8-aligned,
 * after the header). *bin_out is malloc'd and zeroed (the padding between sections). */
static int tb_header(const tb_state *b, uint8_t **bin_out, size_t *size_out, char **err) {
    uint64_t piece_bytes = 0;
    uint32_t max_piece = 0, n_special = 0, n_added = 0;
    for (uint32_t i = 0; i < b->n_vocab; i++) {
        piece_bytes += b->len[i];
        if (b->len[i] > max_piece) max_piece = b->len[i];
        n_special += (b->flags[i] & TOK_SPECIAL) != 0;
        n_added += (b->flags[i] & TOK_ADDED) != 0;
    }
    if (piece_bytes > 0x7fffffffu)
        return plume_fail(err, PLUME_EFORMAT, "%s: pieces too long", b->path);
    uint32_t n_edges = b->n_tnodes - 1;
    uint32_t hdr[] = {
        [H_N_VOCAB / 4] = b->n_vocab, [H_N_MERGES / 4] = b->n_merges,
        [H_N_ADDED / 4] = n_added, [H_N_SPECIAL / 4] = n_special,
        [H_PIECE_SLOTS / 4] = tb_slots(b->n_vocab), [H_MERGE_SLOTS / 4] = tb_slots(b->n_merges),
        [H_TRIE_NODES / 4] = b->n_tnodes, [H_TRIE_EDGES / 4] = n_edges,
        [H_PIECE_BYTES / 4] = (uint32_t)piece_bytes, [H_MAX_PIECE / 4] = max_piece,
    };
    uint64_t bytes[SEC_COUNT] = {
        4ull * (b->n_vocab + 1ull), piece_bytes, b->n_vocab, 4ull * 256, 12ull * b->n_merges,
        4ull * hdr[H_PIECE_SLOTS / 4], 4ull * hdr[H_MERGE_SLOTS / 4], 12ull * b->n_tnodes,
        8ull * n_edges,
    };
    uint64_t off[SEC_COUNT], size = TOK_HEADER;
    for (int i = 0; i < SEC_COUNT; i++) {
        off[i] = size;
        size = (size + bytes[i] + 7) & ~7ull;
    }
    uint8_t *bin = calloc(1, (size_t)size);
    if (!bin) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", b->path);
    memcpy(bin + H_MAGIC, TOK_MAGIC, 8);
    wr_u32(bin + H_VERSION, TOK_VERSION);
    wr_u32(bin + H_HEADER_BYTES, TOK_HEADER);
    plume_wr_u64le(bin + H_FILE_BYTES, size);
    for (int i = H_N_VOCAB / 4; i <= H_MAX_PIECE / 4; i++) wr_u32(bin + 4 * i, hdr[i]);
    for (int i = 0; i < SEC_COUNT; i++) {
        plume_wr_u64le(bin + H_SECTIONS + 16 * i, off[i]);
        plume_wr_u64le(bin + H_SECTIONS + 16 * i + 8, bytes[i]);
    }
    *bin_out = bin;
    *size_out = (size_t)size;
    return 0;
}

/* The pieces, their offsets and flags, and the piece table (t: bin bound). Ids go in in order,
 * so when two ids share a piece the lower one is found. */
static void tb_fill_pieces(const tb_state *b, uint8_t *bin, const plume_tokenizer *t) {
    uint32_t *offsets = (uint32_t *)(void *)tb_sec(bin, SEC_OFFSETS);
    uint8_t *pieces = tb_sec(bin, SEC_PIECES);
    uint32_t *piece_ht = (uint32_t *)(void *)tb_sec(bin, SEC_PIECE_HT);
    memcpy(tb_sec(bin, SEC_FLAGS), b->flags, b->n_vocab);
    uint32_t at = 0;
    for (uint32_t i = 0; i < b->n_vocab; i++) {
        offsets[i] = at;
        if (b->len[i]) memcpy(pieces + at, b->str[i], b->len[i]);
        at += b->len[i];
    }
    offsets[b->n_vocab] = at;
    memset(piece_ht, 0xff, 4ull * t->piece_slots);
    for (uint32_t id = 0; id < b->n_vocab; id++) {
        if (!b->len[id] || tok_piece_find(t, pieces + offsets[id], b->len[id]) != TOK_NONE)
            continue;
        uint32_t i = tok_piece_slot(tok_hash(pieces + offsets[id], b->len[id]), t->piece_shift);
        while (piece_ht[i] != TOK_NONE) i = (i + 1) & (t->piece_slots - 1);
        piece_ht[i] = id;
    }
}

/* The ids of the 256 byte-fallback pieces <0x00>..<0xFF>, flagged TOK_BYTE; each must exist. */
static int tb_fill_byte_ids(const tb_state *b, uint8_t *bin, const plume_tokenizer *t, char **err) {
    uint32_t *byte_ids = (uint32_t *)(void *)tb_sec(bin, SEC_BYTE_IDS);
    uint8_t *flags = tb_sec(bin, SEC_FLAGS);
    for (int c = 0; c < 256; c++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", c);
        byte_ids[c] = tok_piece_find(t, (const uint8_t *)name, 6);
        if (byte_ids[c] == TOK_NONE)
            return plume_fail(err, PLUME_EFORMAT, "%s: byte-fallback piece %s missing from vocab", b->path, name);
        flags[byte_ids[c]] |= TOK_BYTE;
    }
    return 0;
}

/* The added-token trie: b's left-child right-sibling nodes as nodes with edge ranges. */
static void tb_fill_trie(const tb_state *b, uint8_t *bin) {
    tok_node *nodes = (tok_node *)(void *)tb_sec(bin, SEC_NODES);
    tok_edge *edges = (tok_edge *)(void *)tb_sec(bin, SEC_EDGES);
    uint32_t ne = 0;
    for (uint32_t i = 0; i < b->n_tnodes; i++) {
        nodes[i] = (tok_node){ne, 0, b->tnodes[i].token};
        for (uint32_t c = b->tnodes[i].first_child; c != TOK_NONE; c = b->tnodes[c].next_sibling) {
            edges[ne++] = (tok_edge){b->tnodes[c].byte, c};
            nodes[i].n_edges++;
        }
    }
}

/* Lay out the binary form, fill every section, seal it with the checksum; *bin_out is
 * malloc'd. */
static int tb_bin(tb_state *b, uint8_t **bin_out, size_t *size_out, char **err) {
    uint8_t *bin = NULL;
    size_t size = 0;
    int rc = tb_header(b, &bin, &size, err);
    if (rc) return rc;
    plume_tokenizer t = {0};
    tok_bind(&t, bin);
    tb_fill_pieces(b, bin, &t);
    rc = tb_fill_byte_ids(b, bin, &t, err);
    uint32_t *merge_ht = (uint32_t *)(void *)tb_sec(bin, SEC_MERGE_HT);
    memset(merge_ht, 0xff, 4ull * t.merge_slots);
    if (!rc) rc = tb_fill_merges(b, &t, (tok_merge *)(void *)tb_sec(bin, SEC_MERGES), merge_ht, err);
    tb_fill_trie(b, bin);
    if (rc) {
        free(bin);
        return rc;
    }
    plume_wr_u64le(bin + H_CHECKSUM, plume_tok_checksum(bin + 32, size - 32));
    *bin_out = bin;
    *size_out = size;
    return 0;
}

/* Whether the JSON text has an escaped NUL (\u0000) inside a string: cJSON would cut the
 * string there, so such files are refused rather than misread. */
static int tb_has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 6 <= n; i++) {
        if (s[i] != '\\') continue;
        if (memcmp(s + i, "\\u0000", 6) == 0) return 1;
        i++; /* skip the escaped character, so "\\u0000" (an escaped backslash) is no hit */
    }
    return 0;
}

/* Parse tokenizer.json, build the binary form in memory and validate it like a file. */
int plume_tokenizer_open_json(plume_tokenizer **out, const char *path, char **err) {
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    int rc = plume_read_file(path, &text, &len, err);
    if (rc) return rc;
    cJSON *root = NULL;
    tb_state b = {.path = path};
    plume_tokenizer *t = NULL;
    if (tb_has_nul_escape(text, len)) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: a string holds \\u0000 (not supported)", path);
        goto fail;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!cJSON_IsObject(root)) {
        rc = plume_fail(err, PLUME_EFORMAT, "%s: not a JSON object (syntax error near byte %zu)",
                        path, root ? (size_t)0 : (size_t)(end ? end - text : 0));
        goto fail;
    }
    free(text);
    text = NULL;
    if ((rc = tb_check_pipeline(root, path, err)) || (rc = tb_gather(&b, root, err)) ||
        (rc = tb_trie(&b, err)))
        goto fail;
    t = calloc(1, sizeof *t);
    if (!t) {
        rc = plume_fail(err, PLUME_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    if ((rc = tb_bin(&b, &t->owned, &t->bin_size, err))) goto fail;
    if ((rc = tok_view(t, t->owned, t->bin_size, path, err))) goto fail;
    *out = t;
    t = NULL;
fail:
    plume_tokenizer_free(t);
    free(b.str);
    free(b.len);
    free(b.flags);
    free(b.added);
    free(b.tnodes);
    cJSON_Delete(root);
    free(text);
    return rc;
}
