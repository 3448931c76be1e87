/* tokenizer.c -- the Gemma 4 tokenizer (docs/TOKENIZER.md): BPE over 262144 pieces with byte
 * fallback, and 6414 added tokens matched whole in the raw text before anything else.
 *
 * Owns: the compact binary form (tokenizer.bin), encoding and decoding; tokenizer_json.c
 * builds the same form from a Hugging Face tokenizer.json (tokenizer.h is what both share).
 * Knows nothing of the model or the chat template.
 *
 * Design. Both loaders end at the same place: one flat little-endian *binary form* holding the
 * pieces, a hash table piece -> id, the merges with a hash table (left, right) -> rank, and
 * a byte trie of the added tokens. plume_tokenizer_open_json() builds the binary form in memory;
 * plume_tokenizer_save() writes it out as is; plume_tokenizer_open() maps a file and only
 * validates it (a checksum and a few linear passes over counts, offsets and indices,
 * since the bytes are untrusted), never rebuilding a table. Everything after that reads the
 * binary form through the validated view, so no file that passes can make the encoder read out
 * of bounds. The JSON path validates its own binary form the same way, so both behave alike.
 *
 * Workload: the real tokenizer.json is 14 MB (33 MB as npm ships it) and takes 1-2 s to
 * parse; the binary form is 16 MB and opens in 2-4 ms. Encoding is dominated by the BPE of long
 * segments (a paragraph without newlines is one BPE word), done with a binary heap keyed on
 * (rank, position) in O(n log n), and by the cache misses of the merge table lookups.
 */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- little helpers ---------------------------------------------------------------------- */

/* Little-endian u32 at b. */
static uint32_t rd_u32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* The binary form's checksum: FNV-1a over 64-bit little-endian words in four interleaved lanes
 * (words 0,4,8.. in lane 0, 1,5,9.. in lane 1, ...), the tail bytes into lane 0, then the
 * length and the lanes folded together. Four lanes keep the multiplier busy (~8 bytes per
 * cycle), so the check costs about what touching the file does. */
uint64_t plume_tok_checksum(const uint8_t *p, size_t n) {
    const uint64_t prime = 0x100000001b3ull, basis = 0xcbf29ce484222325ull;
    uint64_t h0 = basis, h1 = basis ^ 1, h2 = basis ^ 2, h3 = basis ^ 3;
    size_t i = 0;
    for (; n - i >= 32; i += 32) {
        uint64_t w[4];
        memcpy(w, p + i, 32); /* little-endian host (checked in tok_view) */
        h0 = (h0 ^ w[0]) * prime;
        h1 = (h1 ^ w[1]) * prime;
        h2 = (h2 ^ w[2]) * prime;
        h3 = (h3 ^ w[3]) * prime;
    }
    for (; i < n; i++) h0 = (h0 ^ p[i]) * prime;
    uint64_t r = (uint64_t)n;
    r = (r ^ h0) * prime;
    r = (r ^ h1) * prime;
    r = (r ^ h2) * prime;
    return (r ^ h3) * prime;
}



/* log2 of a power of two (caller checked). */
static uint32_t tok_log2(uint32_t x) {
    uint32_t r = 0;
    while ((1u << r) < x) r++;
    return r;
}

/* Value of a hex digit, or -1. */
static int tok_hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte a "<0xAB>" piece stands for, or -1 if the piece is not of that form. */
static int tok_byte_piece(const uint8_t *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int hi = tok_hexval(s[3]), lo = tok_hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

/* ---- UTF-8 ------------------------------------------------------------------------------- */

/* Classify the bytes at s[0..n), n >= 1, as the WHATWG decoder does: a whole character
 * (returns its length 1-4), a maximal invalid subpart (returns -its length; the byte after
 * it starts afresh) or a valid prefix that needs more bytes (returns 0). Strict: no
 * overlong forms, no surrogates, nothing above U+10FFFF. */
static int utf8_step(const uint8_t *s, size_t n) {
    uint8_t c = s[0], lo = 0x80, hi = 0xbf;
    int need;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) need = 1;
    else if (c >= 0xe0 && c <= 0xef) {
        need = 2;
        if (c == 0xe0) lo = 0xa0;
        if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 3;
        if (c == 0xf0) lo = 0x90;
        if (c == 0xf4) hi = 0x8f;
    } else {
        return -1;
    }
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= n) return 0;
        if (s[i] < lo || s[i] > hi) return -i;
        lo = 0x80;
        hi = 0xbf;
    }
    return need + 1;
}

/* Whether s[0..n) is entirely valid UTF-8. */
int tok_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        int r = utf8_step(s + i, n - i);
        if (r <= 0) return 0;
        i += (size_t)r;
    }
    return 1;
}

/* ---- lookups ----------------------------------------------------------------------------- */


/* Bits needed to write x (0 for 0). */
static uint32_t tok_bits(uint32_t x) {
    uint32_t b = 0;
    while (b < 32 && (x >> b)) b++;
    return b;
}

/* Width of the rank field of a merge-table slot: bits(n_merges), so that a rank field is
 * never all ones and TOK_NONE is no entry. The other 32 - rank_bits bits (13 for Gemma)
 * hold a fingerprint of (left, right), so a probe only reads merges[] when the fingerprint
 * matches: a lookup that misses (the common case) costs one cache miss, not one per probe. */
static uint32_t tok_rank_bits(uint32_t n_merges) {
    return tok_bits(n_merges) ? tok_bits(n_merges) : 1;
}


/* Rank of the merge (left, right), or TOK_NONE. */
static uint32_t tok_merge_find(const plume_tokenizer *t, uint32_t left, uint32_t right) {
    uint32_t fp, mask = t->merge_slots - 1, i = tok_merge_hash(t, left, right, &fp);
    uint32_t rank_mask = (1u << t->rank_bits) - 1;
    for (uint32_t probe = 0; probe < t->merge_slots; probe++, i = (i + 1) & mask) {
        uint32_t v = t->merge_ht[i];
        if (v == TOK_NONE) return TOK_NONE;
        if (v >> t->rank_bits != fp) continue;
        uint32_t r = v & rank_mask; /* < n_merges: checked at open */
        if (t->merges[r].left == left && t->merges[r].right == right) return r;
    }
    return TOK_NONE;
}

/* Child of trie node `node` along byte c, or TOK_NONE (binary search of its edges). */
static uint32_t tok_trie_child(const plume_tokenizer *t, uint32_t node, uint8_t c) {
    const tok_edge *e = t->edges + t->nodes[node].first_edge;
    uint32_t lo = 0, hi = t->nodes[node].n_edges;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (e[mid].byte == c) return e[mid].child;
        if (e[mid].byte < c) lo = mid + 1;
        else hi = mid;
    }
    return TOK_NONE;
}

/* The longest added token that starts at s[0..n): its id (and *len), or TOK_NONE. */
static uint32_t tok_added_match(const plume_tokenizer *t, const uint8_t *s, size_t n,
                                size_t *len) {
    uint32_t node = 0, best = TOK_NONE;
    for (size_t k = 0; k < n; k++) {
        node = tok_trie_child(t, node, s[k]);
        if (node == TOK_NONE) break;
        if (t->nodes[node].token != TOK_NONE) {
            best = t->nodes[node].token;
            *len = k + 1;
        }
    }
    return best;
}

/* ---- opening a binary form ----------------------------------------------------------------- */

/* Start of section i of bin (its bounds checked by tok_check_header, or set by the builder). */
static const void *tok_sec(const uint8_t *bin, int i) {
    return bin + plume_rd_u64le(bin + H_SECTIONS + 16 * i);
}

/* Point t's arrays at the sections of bin (header already checked by tok_view, or written
 * by the builder). */
void tok_bind(plume_tokenizer *t, const uint8_t *bin) {
    t->n_vocab = rd_u32(bin + H_N_VOCAB);
    t->n_merges = rd_u32(bin + H_N_MERGES);
    t->piece_slots = rd_u32(bin + H_PIECE_SLOTS);
    t->merge_slots = rd_u32(bin + H_MERGE_SLOTS);
    t->n_nodes = rd_u32(bin + H_TRIE_NODES);
    t->n_edges = rd_u32(bin + H_TRIE_EDGES);
    t->piece_shift = 64 - tok_log2(t->piece_slots);
    t->merge_shift = 64 - tok_log2(t->merge_slots);
    t->rank_bits = tok_rank_bits(t->n_merges);
    t->offsets = tok_sec(bin, SEC_OFFSETS);
    t->pieces = tok_sec(bin, SEC_PIECES);
    t->flags = tok_sec(bin, SEC_FLAGS);
    t->byte_ids = tok_sec(bin, SEC_BYTE_IDS);
    t->merges = tok_sec(bin, SEC_MERGES);
    t->piece_ht = tok_sec(bin, SEC_PIECE_HT);
    t->merge_ht = tok_sec(bin, SEC_MERGE_HT);
    t->nodes = tok_sec(bin, SEC_NODES);
    t->edges = tok_sec(bin, SEC_EDGES);
}

/* Check the header of bin[0..size): magic, version, size, checksum, counts, and that every
 * section lies inside the file with the size its count implies. */
static int tok_check_header(const uint8_t *bin, size_t size, const char *name, char **err) {
    if (size < TOK_HEADER)
        return plume_fail(err, PLUME_EFORMAT, "%s: truncated (%zu bytes; the header alone is %u)",
                          name, size, TOK_HEADER);
    if (memcmp(bin + H_MAGIC, TOK_MAGIC, 8) != 0)
        return plume_fail(err, PLUME_EFORMAT, "%s: not a plume tokenizer (bad magic)", name);
    uint32_t version = rd_u32(bin + H_VERSION);
    if (version != TOK_VERSION)
        return plume_fail(err, PLUME_EFORMAT, "%s: format version %u, this plume reads %u", name,
                          version, TOK_VERSION);
    if (rd_u32(bin + H_HEADER_BYTES) != TOK_HEADER)
        return plume_fail(err, PLUME_EFORMAT, "%s: bad header size", name);
    uint64_t file_bytes = plume_rd_u64le(bin + H_FILE_BYTES);
    if (file_bytes != size)
        return plume_fail(err, PLUME_EFORMAT,
                          "%s: truncated or padded: header says %llu bytes, file has %zu", name,
                          (unsigned long long)file_bytes, size);
    if (plume_tok_checksum(bin + 32, size - 32) != plume_rd_u64le(bin + H_CHECKSUM))
        return plume_fail(err, PLUME_EFORMAT, "%s: checksum mismatch (the file is corrupt)", name);

    uint32_t n_vocab = rd_u32(bin + H_N_VOCAB), n_merges = rd_u32(bin + H_N_MERGES);
    uint32_t ps = rd_u32(bin + H_PIECE_SLOTS), ms = rd_u32(bin + H_MERGE_SLOTS);
    uint32_t nodes = rd_u32(bin + H_TRIE_NODES), edges = rd_u32(bin + H_TRIE_EDGES);
    uint32_t piece_bytes = rd_u32(bin + H_PIECE_BYTES);
    if (n_vocab < 256 || n_vocab > TOK_MAX_COUNT || n_merges > TOK_MAX_COUNT ||
        nodes < 1 || nodes > TOK_MAX_COUNT || edges > TOK_MAX_COUNT)
        return plume_fail(err, PLUME_EFORMAT, "%s: counts out of range", name);
    if (ps < 16 || (ps & (ps - 1)) || ps <= n_vocab || ps > (1u << 30) ||
        ms < 16 || (ms & (ms - 1)) || ms <= n_merges || ms > (1u << 30))
        return plume_fail(err, PLUME_EFORMAT, "%s: bad hash table sizes", name);

    static const char *names[SEC_COUNT] = {"offsets", "pieces", "flags", "byte ids", "merges",
                                           "piece table", "merge table", "trie nodes",
                                           "trie edges"};
    uint64_t want[SEC_COUNT] = {
        4ull * ((uint64_t)n_vocab + 1), piece_bytes, n_vocab, 4ull * 256, 12ull * n_merges,
        4ull * ps, 4ull * ms, 12ull * nodes, 8ull * edges,
    };
    for (int i = 0; i < SEC_COUNT; i++) {
        uint64_t off = plume_rd_u64le(bin + H_SECTIONS + 16 * i);
        uint64_t bytes = plume_rd_u64le(bin + H_SECTIONS + 16 * i + 8);
        if (bytes != want[i] || off % 8 || off < TOK_HEADER || off > size || bytes > size - off)
            return plume_fail(err, PLUME_EFORMAT, "%s: section '%s' out of bounds", name,
                              names[i]);
    }
    return 0;
}

/* The largest of v[i] + 1 over v[0..n) (so TOK_NONE counts as 0): every v[i] is TOK_NONE or
 * below `limit` iff the result is <= limit. Branch-free so it runs at memory speed. */
static uint32_t tok_max_plus1(const uint32_t *v, size_t n) {
    uint32_t m0 = 0, m1 = 0;
    size_t i = 0;
    for (; i + 2 <= n; i += 2) {
        uint32_t a = v[i] + 1, b = v[i + 1] + 1;
        m0 = a > m0 ? a : m0;
        m1 = b > m1 ? b : m1;
    }
    if (i < n) m0 = v[i] + 1 > m0 ? v[i] + 1 : m0;
    return m0 > m1 ? m0 : m1;
}

/* Check every index inside the sections of a bound binary form: piece offsets, flags, byte ids,
 * merges, both hash tables and the trie. Linear in its size; the big loops are
 * branch-free reductions, checked once at the end. */
static int tok_check_body(const plume_tokenizer *t, const uint8_t *bin, const char *name,
                          char **err) {
    uint32_t n = t->n_vocab, piece_bytes = rd_u32(bin + H_PIECE_BYTES), max_piece = 0, down = 0;
    if (t->offsets[0] != 0 || t->offsets[n] != piece_bytes)
        return plume_fail(err, PLUME_EFORMAT, "%s: piece offsets do not span the pieces", name);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t a = t->offsets[i], b = t->offsets[i + 1];
        down |= b < a;
        max_piece = b - a > max_piece ? b - a : max_piece;
    }
    if (down) return plume_fail(err, PLUME_EFORMAT, "%s: piece offsets decrease", name);
    if (max_piece != rd_u32(bin + H_MAX_PIECE))
        return plume_fail(err, PLUME_EFORMAT, "%s: longest piece disagrees with header", name);

    uint32_t n_special = 0, n_byte = 0, n_added = 0, stray = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t f = t->flags[i];
        stray |= f & ~TOK_FLAGS_ALL;
        n_special += f & TOK_SPECIAL;
        n_byte += (f & TOK_BYTE) >> 1;
        n_added += (f & TOK_ADDED) >> 2;
    }
    if (stray) return plume_fail(err, PLUME_EFORMAT, "%s: unknown token flags", name);
    if (n_special != rd_u32(bin + H_N_SPECIAL) || n_added != rd_u32(bin + H_N_ADDED) ||
        n_byte != 256)
        return plume_fail(err, PLUME_EFORMAT, "%s: token flag counts disagree with header", name);
    /* 256 flagged ids whose pieces spell 256 distinct bytes: the decoder may parse any
     * TOK_BYTE piece without a check. */
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t id = t->byte_ids[b];
        if (id >= n || !(t->flags[id] & TOK_BYTE) ||
            tok_byte_piece(t->pieces + t->offsets[id], t->offsets[id + 1] - t->offsets[id]) !=
                (int)b)
            return plume_fail(err, PLUME_EFORMAT, "%s: byte token <0x%02X> is wrong", name, b);
    }
    /* Merges hold ids (< n, never TOK_NONE); the tables hold ids, ranks or TOK_NONE. */
    if (tok_max_plus1((const uint32_t *)(const void *)t->merges, 3 * (size_t)t->n_merges) > n)
        return plume_fail(err, PLUME_EFORMAT, "%s: a merge names an id out of range", name);
    if (tok_max_plus1(t->piece_ht, t->piece_slots) > n)
        return plume_fail(err, PLUME_EFORMAT, "%s: piece table holds an id out of range", name);
    /* An empty slot's rank field is all ones (>= n_merges), so every slot is fine iff as
     * many have a rank field >= n_merges as are empty. Counting, not branching: empty
     * slots are half the table at random, and a branch on them mispredicts half the time. */
    uint32_t rank_mask = (1u << t->rank_bits) - 1, over = 0, empty = 0;
    for (uint32_t i = 0; i < t->merge_slots; i++) {
        uint32_t v = t->merge_ht[i];
        over += (v & rank_mask) >= t->n_merges;
        empty += v == TOK_NONE;
    }
    if (over != empty)
        return plume_fail(err, PLUME_EFORMAT, "%s: merge table holds a rank out of range", name);
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        const tok_node *d = &t->nodes[i];
        if (d->first_edge > t->n_edges || d->n_edges > t->n_edges - d->first_edge ||
            (d->token != TOK_NONE && d->token >= n))
            return plume_fail(err, PLUME_EFORMAT, "%s: trie node %u out of range", name, i);
    }
    for (uint32_t i = 0; i < t->n_edges; i++)
        if (t->edges[i].byte > 255 || t->edges[i].child >= t->n_nodes)
            return plume_fail(err, PLUME_EFORMAT, "%s: trie edge %u out of range", name, i);
    return 0;
}

/* Check that the trie spells its tokens: a node holding a token is reached from the root by
 * exactly that token's piece, which is non-empty whole UTF-8, and no token sits at two nodes.
 * So a match starting at a character boundary of valid text ends at one, and the segments
 * between matches are valid UTF-8 (the encoder relies on it). Every node but the root has
 * one parent; the walks back up cost at most the pieces' bytes. */
static int tok_check_trie(const plume_tokenizer *t, const char *name, char **err) {
    uint32_t *parent = malloc((size_t)t->n_nodes * sizeof *parent);
    uint8_t *byte = malloc(t->n_nodes), *seen = calloc((size_t)t->n_vocab / 8 + 1, 1);
    int rc = 0;
    if (!parent || !byte || !seen) {
        rc = plume_fail(err, PLUME_ENOMEM, "%s: out of memory", name);
        goto done;
    }
    memset(parent, 0xff, (size_t)t->n_nodes * sizeof *parent);
    for (uint32_t i = 0; i < t->n_nodes && !rc; i++)
        for (uint32_t e = 0; e < t->nodes[i].n_edges && !rc; e++) {
            const tok_edge *d = &t->edges[t->nodes[i].first_edge + e];
            if (d->child == 0 || parent[d->child] != TOK_NONE)
                rc = plume_fail(err, PLUME_EFORMAT, "%s: the added-token trie is not a tree", name);
            else parent[d->child] = i, byte[d->child] = (uint8_t)d->byte;
        }
    for (uint32_t i = 0; i < t->n_nodes && !rc; i++) {
        uint32_t id = t->nodes[i].token, node = i;
        if (id == TOK_NONE) continue;
        const uint8_t *p = t->pieces + t->offsets[id];
        uint32_t n = t->offsets[id + 1] - t->offsets[id];
        if (seen[id / 8] & (1u << id % 8))
            rc = plume_fail(err, PLUME_EFORMAT, "%s: added token %u is in the trie twice", name, id);
        seen[id / 8] |= (uint8_t)(1u << id % 8);
        uint32_t k = n; /* bytes of the piece not yet matched, from its end */
        while (k > 0 && node != 0 && parent[node] != TOK_NONE && byte[node] == p[k - 1]) node = parent[node], k--;
        if (!rc && (k != 0 || node != 0 || n == 0 || !tok_utf8_valid(p, n)))
            rc = plume_fail(err, PLUME_EFORMAT, "%s: trie node %u does not spell added token %u as whole UTF-8", name, i, id);
    }
done:
    free(parent);
    free(byte);
    free(seen);
    return rc;
}

/* Validate the binary form bin[0..size) and point t at it; fill the small derived tables. */
int tok_view(plume_tokenizer *t, const uint8_t *bin, size_t size, const char *name,
                    char **err) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    (void)t; (void)bin; (void)size;
    return plume_fail(err, PLUME_EFORMAT, "%s: plume tokenizers need a little-endian host", name);
#else
    int rc = tok_check_header(bin, size, name, err);
    if (rc) return rc;
    tok_bind(t, bin);
    rc = tok_check_body(t, bin, name, err);
    if (!rc) rc = tok_check_trie(t, name, err);
    if (rc) return rc;
    t->bin = bin;
    t->bin_size = size;
    for (int c = 0; c < 128; c++) {
        uint8_t ch = (uint8_t)c;
        t->ascii_ids[c] = c == ' ' ? tok_piece_find(t, (const uint8_t *)"\xe2\x96\x81", 3)
                                   : tok_piece_find(t, &ch, 1);
    }
    memset(t->starts, 0, sizeof t->starts);
    const tok_node *root = &t->nodes[0];
    for (uint32_t e = 0; e < root->n_edges; e++) t->starts[t->edges[root->first_edge + e].byte] = 1;
    return 0;
#endif
}

/* Map tokenizer.bin and validate it; no table is rebuilt. (Mapping beats reading: a new
 * process pays 80+ ms of page faults to read 16 MB into fresh memory, 3-4 ms to map and
 * check it; prefaulting the map with MADV_POPULATE_READ measured no faster.) */
int plume_tokenizer_open(plume_tokenizer **out, const char *path, char **err) {
    *out = NULL;
    plume_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return plume_fail(err, PLUME_ENOMEM, "%s: out of memory", path);
    int rc = plume_map_open(&t->map, path, err);
    if (rc == 0) rc = tok_view(t, t->map.data, t->map.size, path, err);
    if (rc) {
        plume_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* Free a tokenizer (NULL is a no-op). */
void plume_tokenizer_free(plume_tokenizer *tok) {
    if (!tok) return;
    plume_map_free(&tok->map);
    free(tok->owned);
    free(tok);
}

/* Write the binary form as tokenizer.bin (temporary file + rename). */
int plume_tokenizer_save(const plume_tokenizer *tok, const char *path, char **err) {
    if (!tok || !tok->bin) return plume_fail(err, PLUME_EINVAL, "%s: no tokenizer to save", path);
    return plume_write_file(path, tok->bin, tok->bin_size, 0, err);
}

/* Number of ids (0 for NULL). */
int32_t plume_tokenizer_n_vocab(const plume_tokenizer *tok) {
    return tok ? (int32_t)tok->n_vocab : 0;
}

/* Whether id is special (dropped by skip_special); 0 for ids out of range. */
int32_t plume_token_is_special(const plume_tokenizer *tok, int32_t id) {
    if (!tok || id < 0 || (uint32_t)id >= tok->n_vocab) return 0;
    return (tok->flags[id] & TOK_SPECIAL) != 0;
}

/* The id of the token whose piece is exactly text (a special token's text, "<bos>"; U+2581
 * for a space in others), or -1 when none is. */
int32_t plume_token_find(const plume_tokenizer *tok, const char *text) {
    if (!tok || !text) return -1;
    uint32_t id = tok_piece_find(tok, (const uint8_t *)text, strlen(text));
    return id == TOK_NONE || id >= tok->n_vocab ? -1 : (int32_t)id;
}

/* The bytes id adds to decoded text with special tokens kept, without the byte-run fusing:
 * a byte token's byte, any other piece's UTF-8 with U+2581 as a space. Writes at most cap
 * bytes; returns the length, or PLUME_EINVAL for an id out of range. */
int32_t plume_token_bytes(const plume_tokenizer *tok, int32_t id, uint8_t *out, int32_t cap) {
    if (!tok || id < 0 || (uint32_t)id >= tok->n_vocab || cap < 0 || (!out && cap > 0)) return PLUME_EINVAL;
    const uint8_t *p = tok->pieces + tok->offsets[id];
    size_t n = tok->offsets[id + 1] - tok->offsets[id];
    if (tok->flags[id] & TOK_BYTE) {
        if (cap > 0) out[0] = (uint8_t)tok_byte_piece(p, n); /* checked at open */
        return 1;
    }
    int32_t len = 0;
    for (size_t i = 0; i < n;) {
        uint8_t b = p[i];
        size_t step = 1;
        if (i + 3 <= n && p[i] == 0xe2 && p[i + 1] == 0x96 && p[i + 2] == 0x81) b = ' ', step = 3;
        if (len < cap) out[len] = b;
        len++;
        i += step;
    }
    return len;
}

/* ---- encoding ---------------------------------------------------------------------------- */

/* A symbol of the BPE word being merged: a doubly linked list over an array, so a
 * symbol's index is its position (left to right) for the whole merge. */
typedef struct { uint32_t id; int32_t prev, next; } tok_sym;

/* Scratch memory of one plume_tokenize() call, grown as segments need. */
typedef struct {
    tok_sym *sym;    /* [cap] */
    uint64_t *heap;  /* [heap_cap >= 2 * cap] candidates (rank << 32 | position of the left
                      * symbol): at most one per initial pair plus one net per merge */
    size_t cap, heap_cap;
} tok_scratch;

/* Where encoded ids go: the caller's buffer, and the count the text needs. */
typedef struct { int32_t *ids; int64_t cap, n; } tok_out;

/* Record one id (written only while it fits). */
static void out_put(tok_out *o, uint32_t id) {
    if (o->n < o->cap) o->ids[o->n] = (int32_t)id;
    o->n++;
}

/* Make room for n symbols (and a heap of 2n candidates); 0 or PLUME_ENOMEM. */
static int scratch_reserve(tok_scratch *s, size_t n) {
    if (plume_grow(&s->sym, &s->cap, n, sizeof *s->sym) ||
        plume_grow(&s->heap, &s->heap_cap, 2 * n, sizeof *s->heap))
        return PLUME_ENOMEM;
    return 0;
}

/* Restore the min-heap property below index i of h[0..n). */
static void heap_down(uint64_t *h, size_t n, size_t i) {
    uint64_t x = h[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (x <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = x;
}

/* Add x to the min-heap h[0..*n). */
static void heap_push(uint64_t *h, size_t *n, uint64_t x) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= x) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = x;
}

/* Push the candidate merge of symbol i with its right neighbour, if there is one. */
static void bpe_candidate(const plume_tokenizer *t, tok_scratch *s, size_t *nh, int32_t i) {
    int32_t j = s->sym[i].next;
    if (j < 0) return;
    uint32_t r = tok_merge_find(t, s->sym[i].id, s->sym[j].id);
    if (r != TOK_NONE) heap_push(s->heap, nh, (uint64_t)r << 32 | (uint32_t)i);
}

/* Append the initial symbols of one character c[0..n) (spec step 3): its piece, else one
 * byte token per UTF-8 byte. A space is U+2581 here (step 2). */
static void bpe_char(const plume_tokenizer *t, tok_scratch *s, size_t *ns, const uint8_t *c,
                     size_t n) {
    uint32_t id;
    if (c[0] < 0x80) {
        id = t->ascii_ids[c[0]];
        if (c[0] == ' ') c = (const uint8_t *)"\xe2\x96\x81", n = 3;
    } else {
        id = tok_piece_find(t, c, n);
    }
    if (id != TOK_NONE) {
        s->sym[(*ns)++].id = id;
        return;
    }
    for (size_t k = 0; k < n; k++) s->sym[(*ns)++].id = t->byte_ids[c[k]];
}

/* BPE-encode one segment (no added tokens inside): spec steps 2-5. */
static int bpe_segment(const plume_tokenizer *t, tok_scratch *s, const uint8_t *p, size_t n,
                       tok_out *o) {
    if (n == 0) return 0;
    /* One symbol per byte at most, three for a space when U+2581 is not a piece. */
    if (scratch_reserve(s, t->ascii_ids[' '] == TOK_NONE ? 3 * n : n)) return PLUME_ENOMEM;
    size_t ns = 0;
    for (size_t i = 0; i < n;) {
        size_t len = p[i] < 0x80 ? 1 : (size_t)utf8_step(p + i, n - i); /* text checked valid */
        bpe_char(t, s, &ns, p + i, len);
        i += len;
    }
    for (size_t i = 0; i < ns; i++) {
        s->sym[i].prev = (int32_t)i - 1;
        s->sym[i].next = i + 1 < ns ? (int32_t)i + 1 : -1;
    }
    size_t nh = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        uint32_t r = tok_merge_find(t, s->sym[i].id, s->sym[i + 1].id);
        if (r != TOK_NONE) s->heap[nh++] = (uint64_t)r << 32 | (uint32_t)i;
    }
    for (size_t i = nh / 2; i-- > 0;) heap_down(s->heap, nh, i);

    /* Lowest rank first, leftmost on ties. A popped candidate is stale when its left symbol
     * has died or changed, or its right neighbour changed; pieces only grow, so an id never
     * comes back and the ids alone tell. */
    while (nh > 0) {
        uint64_t top = s->heap[0];
        s->heap[0] = s->heap[--nh];
        heap_down(s->heap, nh, 0);
        const tok_merge *m = &t->merges[top >> 32];
        int32_t i = (int32_t)(uint32_t)top, j = s->sym[i].next;
        if (s->sym[i].id != m->left || j < 0 || s->sym[j].id != m->right) continue;
        s->sym[i].id = m->result;
        s->sym[i].next = s->sym[j].next;
        if (s->sym[j].next >= 0) s->sym[s->sym[j].next].prev = i;
        s->sym[j].id = TOK_NONE;
        if (s->sym[i].prev >= 0) bpe_candidate(t, s, &nh, s->sym[i].prev);
        bpe_candidate(t, s, &nh, i);
    }
    for (int32_t i = 0; i >= 0; i = s->sym[i].next) out_put(o, s->sym[i].id);
    return 0;
}

/* Encode text (spec steps 1-5): returns the id count the text needs; ids[0..cap) get the
 * first ones. PLUME_EINVAL for invalid UTF-8, PLUME_ERANGE above ~700 MB, PLUME_ENOMEM. */
int32_t plume_tokenize(const plume_tokenizer *tok, const char *text, size_t len, int32_t *ids,
                       int32_t cap) {
    if (!tok || (!text && len) || cap < 0 || (!ids && cap > 0)) return PLUME_EINVAL;
    if (len == 0) return 0;
    if (len > INT32_MAX / 3) return PLUME_ERANGE;
    const uint8_t *p = (const uint8_t *)text;
    if (!tok_utf8_valid(p, len)) return PLUME_EINVAL;
    tok_scratch s = {0};
    tok_out o = {ids, cap, 0};
    int rc = 0;
    size_t seg = 0; /* start of the current segment */
    /* Spec step 1: the longest added token at each position; text between is a segment. */
    for (size_t i = 0; i < len && !rc;) {
        size_t mlen = 0;
        uint32_t id = tok->starts[p[i]] ? tok_added_match(tok, p + i, len - i, &mlen)
                                                 : TOK_NONE;
        if (id == TOK_NONE) {
            i++;
            continue;
        }
        rc = bpe_segment(tok, &s, p + seg, i - seg, &o);
        out_put(&o, id);
        i += mlen;
        seg = i;
    }
    if (!rc) rc = bpe_segment(tok, &s, p + seg, len - seg, &o);
    free(s.sym);
    free(s.heap);
    if (rc) return rc;
    return o.n > INT32_MAX ? PLUME_ERANGE : (int32_t)o.n;
}

/* ---- decoding ---------------------------------------------------------------------------- */

/* Where decoded text goes: at most cap - 1 bytes are kept (then a NUL); len counts all. */
typedef struct { char *out; size_t cap, len; } tok_sink;

/* Append n bytes (kept while they fit). */
static void sink_put(tok_sink *k, const void *p, size_t n) {
    if (k->len < k->cap) {
        size_t room = k->cap - k->len;
        memcpy(k->out + k->len, p, n < room ? n : room);
    }
    k->len += n;
}

/* NUL-terminate what was kept. */
static void sink_end(tok_sink *k) {
    if (k->cap > 0) k->out[k->len < k->cap ? k->len : k->cap - 1] = 0;
}

/* Emit the complete characters of ds's pending bytes, one U+FFFD per maximal invalid
 * subpart; keep a valid unfinished tail unless final, when it too becomes U+FFFD. */
static void dec_drain(plume_detok_stream *ds, tok_sink *k, int final) {
    int32_t i = 0, n = ds->n_pending;
    while (i < n) {
        int r = utf8_step(ds->pending + i, (size_t)(n - i));
        if (r > 0) {
            sink_put(k, ds->pending + i, (size_t)r);
            i += r;
        } else if (r < 0 || final) {
            sink_put(k, "\xef\xbf\xbd", 3);
            i += r < 0 ? -r : n - i;
        } else {
            break;
        }
    }
    memmove(ds->pending, ds->pending + i, (size_t)(n - i));
    ds->n_pending = n - i;
}

/* Decode one id (in range) into k: byte tokens join the pending run (ByteFallback + Fuse);
 * any other piece ends the run and is copied with U+2581 -> ' ' (Replace). */
static void dec_id(plume_detok_stream *ds, uint32_t id, tok_sink *k) {
    const plume_tokenizer *t = ds->tok;
    uint8_t f = t->flags[id];
    if ((f & TOK_SPECIAL) && ds->skip_special) return; /* dropped before decoding: byte runs join */
    const uint8_t *p = t->pieces + t->offsets[id];
    size_t n = t->offsets[id + 1] - t->offsets[id];
    if (f & TOK_BYTE) {
        ds->pending[ds->n_pending++] = (uint8_t)tok_byte_piece(p, n); /* checked at open */
        dec_drain(ds, k, 0);
        return;
    }
    dec_drain(ds, k, 1);
    size_t run = 0; /* start of the bytes not yet copied */
    for (size_t i = 0; i + 3 <= n;) {
        if (p[i] == 0xe2 && p[i + 1] == 0x96 && p[i + 2] == 0x81) {
            sink_put(k, p + run, i - run);
            sink_put(k, " ", 1);
            i += 3;
            run = i;
        } else {
            i++;
        }
    }
    sink_put(k, p + run, n - run);
}

/* Whether a caller's stream state is usable (it lives in caller memory). */
static int dec_state_ok(const plume_detok_stream *ds) {
    return ds && ds->tok && ds->n_pending >= 0 && ds->n_pending <= 3;
}

/* Decode ids whole (snprintf-like: at most cap - 1 bytes and a NUL); the full length. */
int64_t plume_detokenize(const plume_tokenizer *tok, const int32_t *ids, int32_t n,
                         int32_t skip_special, char *out, size_t cap) {
    if (!tok || n < 0 || (n > 0 && !ids) || (!out && cap > 0)) return PLUME_EINVAL;
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= tok->n_vocab) return PLUME_EINVAL;
    plume_detok_stream ds;
    plume_detok_stream_init(&ds, tok, skip_special);
    tok_sink k = {out, cap, 0};
    for (int32_t i = 0; i < n; i++) dec_id(&ds, (uint32_t)ids[i], &k);
    dec_drain(&ds, &k, 1);
    sink_end(&k);
    return (int64_t)k.len;
}

/* Start a streaming decode with nothing pending. */
void plume_detok_stream_init(plume_detok_stream *ds, const plume_tokenizer *tok,
                             int32_t skip_special) {
    memset(ds, 0, sizeof *ds);
    ds->tok = tok;
    ds->skip_special = skip_special;
}

/* Run one step of the stream into out; when the text does not fit, leave the state as it
 * was and return the length needed, so the caller can retry with a larger buffer. */
static int32_t dec_stream_step(plume_detok_stream *ds, int64_t id, char *out, size_t cap) {
    if (!dec_state_ok(ds) || (!out && cap > 0)) return PLUME_EINVAL;
    if (id >= 0 && id >= ds->tok->n_vocab) return PLUME_EINVAL;
    plume_detok_stream saved = *ds;
    tok_sink k = {out, cap, 0};
    if (id >= 0) dec_id(ds, (uint32_t)id, &k);
    else dec_drain(ds, &k, 1);
    sink_end(&k);
    if (k.len >= cap) *ds = saved;
    return (int32_t)k.len;
}

/* Decode one id; only complete characters come out. */
int32_t plume_detok_stream_put(plume_detok_stream *ds, int32_t id, char *out, size_t cap) {
    if (id < 0) return PLUME_EINVAL;
    return dec_stream_step(ds, id, out, cap);
}

/* End the stream: a pending unfinished character becomes U+FFFD. */
int32_t plume_detok_stream_flush(plume_detok_stream *ds, char *out, size_t cap) {
    return dec_stream_step(ds, -1, out, cap);
}
