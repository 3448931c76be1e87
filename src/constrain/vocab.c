/* vocab.c -- plume_vocab: the vocabulary as bytes, sorted for mask walks.
 *
 * A mask asks, for every token, whether its bytes take the recognizer from the current state
 * to a live one. Tokens sorted by their bytes share prefixes with their neighbours, so a walk
 * in that order re-steps only the bytes after the prefix a token shares with the previous
 * one (lcp), and a prefix found dead skips every token after it that shares it: the walk is
 * a depth-first pass over the token trie without building the trie. The skip jumps: skip[i]
 * is the next token whose lcp is below token i's, so from a token that died at byte k the
 * walk follows skip while the lcp exceeds k, past whole subtrees of the dead prefix (after
 * two characters of a string of at most two, most of 262144 tokens are passed in a few
 * jumps, not visited one by one). The walk reads only
 * arrays in sorted order (lengths, shared prefixes, and each token's bytes after its shared
 * prefix: 1.2 MB for Gemma, against 2.3 MB of whole tokens), front to back, so it streams
 * instead of jumping to each token's bytes (which cost ~40 ms a walk over Gemma's 262144
 * tokens, against a few with the streamed arrays).
 *
 * Special tokens (<turn|>, <|tool_call>, <|"|>, ...) are symbols: their text is never matched
 * as bytes, only where a grammar names them. Every other token, added ones included
 * ("\n\n", "<table>", "<unused0>"), stands for the bytes it decodes to. */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "constrain.h"

/* One token while sorting: its first 8 bytes as a big-endian key (zeros after its end). */
typedef struct {
    uint64_t key;
    int32_t id;
} vocab_key;

/* Order two tokens by their bytes (a prefix first), then by id; the key settles most. */
static int key_cmp(const plume_vocab *v, const vocab_key *a, const vocab_key *b) {
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    uint32_t la = v->off[a->id + 1] - v->off[a->id], lb = v->off[b->id + 1] - v->off[b->id];
    int c = memcmp(v->bytes + v->off[a->id], v->bytes + v->off[b->id], la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Merge sort (stable, O(n log n) compares, no global state for a comparator). */
static void merge_sort(const plume_vocab *v, vocab_key *a, vocab_key *tmp, int32_t n) {
    for (int32_t w = 1; w < n; w *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * w) {
            int32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = key_cmp(v, &a[i], &a[j]) <= 0 ? a[i++] : a[j++];
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
        }
        memcpy(a, tmp, (size_t)n * sizeof *a);
    }
}

/* Sort by key with a least-significant-byte-first radix sort (8 passes, stable), then finish
 * each run of equal keys (tokens sharing their first 8 bytes) by their whole bytes. */
static void sort_keys(const plume_vocab *v, vocab_key *a, vocab_key *tmp, int32_t n) {
    vocab_key *src = a, *dst = tmp;
    for (int pass = 0; pass < 8; pass++) {
        int shift = 8 * pass;
        int32_t cnt[257] = {0};
        for (int32_t i = 0; i < n; i++) cnt[((src[i].key >> shift) & 255) + 1]++;
        if (cnt[((src[0].key >> shift) & 255) + 1] == n) continue; /* one bucket: nothing moves */
        for (int b = 0; b < 256; b++) cnt[b + 1] += cnt[b];
        for (int32_t i = 0; i < n; i++) dst[cnt[(src[i].key >> shift) & 255]++] = src[i];
        vocab_key *t = src;
        src = dst;
        dst = t;
    }
    if (src != a) memcpy(a, src, (size_t)n * sizeof *a);
    for (int32_t lo = 0, hi; lo < n; lo = hi) {
        for (hi = lo + 1; hi < n && a[hi].key == a[lo].key;) hi++;
        if (hi - lo > 1) merge_sort(v, a + lo, tmp, hi - lo);
    }
}

/* The token bytes by id, and which ids are symbols. 0 or PLUME_E*. */
static int vocab_bytes(plume_vocab *v, char **err) {
    size_t total = 0;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        int32_t n = plume_token_bytes(v->tok, id, NULL, 0);
        if (n < 0) return plume_fail(err, PLUME_EINVAL, "vocab: token %d has no bytes", id);
        v->off[id] = (uint32_t)total;
        total += (size_t)n;
        if (total > UINT32_MAX) return plume_fail(err, PLUME_ENOMEM, "vocab: the tokens hold more than 4 GB");
    }
    v->off[v->n_vocab] = (uint32_t)total;
    v->bytes = malloc(total ? total : 1);
    if (!v->bytes) return plume_fail(err, PLUME_ENOMEM, "vocab: out of memory");
    for (int32_t id = 0; id < v->n_vocab; id++) {
        int32_t n = (int32_t)(v->off[id + 1] - v->off[id]);
        plume_token_bytes(v->tok, id, v->bytes + v->off[id], n);
        v->symbol[id] = plume_token_is_special(v->tok, id) != 0;
    }
    return 0;
}

/* Sort the byte tokens and lay out lcp, len and the suffixes. 0 or PLUME_ENOMEM. */
static int vocab_sort(plume_vocab *v, char **err) {
    int32_t V = v->n_vocab, n = 0;
    vocab_key *k = malloc((size_t)V * sizeof *k), *tmp = malloc((size_t)V * sizeof *tmp);
    if (!k || !tmp) { free(k); free(tmp); return plume_fail(err, PLUME_ENOMEM, "vocab: out of memory"); }
    for (int32_t id = 0; id < V; id++) {
        uint32_t len = v->off[id + 1] - v->off[id];
        if (v->symbol[id] || len == 0 || len > 255) continue;
        uint64_t key = 0;
        for (uint32_t i = 0; i < 8; i++) key = key << 8 | (i < len ? v->bytes[v->off[id] + i] : 0);
        k[n++] = (vocab_key){key, id};
        if ((int32_t)len > v->max_len) v->max_len = (int32_t)len;
    }
    sort_keys(v, k, tmp, n);
    free(tmp);
    size_t sfx = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = k[i].id;
        uint32_t len = v->off[id + 1] - v->off[id], l = 0;
        if (i > 0) {
            int32_t pid = k[i - 1].id;
            uint32_t pl = v->off[pid + 1] - v->off[pid];
            while (l < pl && l < len && v->bytes[v->off[pid] + l] == v->bytes[v->off[id] + l]) l++;
        }
        v->order[i] = id;
        v->lcp[i] = (uint8_t)l;
        v->len[i] = (uint8_t)len;
        sfx += len - l;
    }
    v->n_sorted = n;
    free(k);
    v->sfx = malloc(sfx ? sfx : 1);
    if (!v->sfx) return plume_fail(err, PLUME_ENOMEM, "vocab: out of memory");
    for (int b = 0; b <= 256; b++) v->first[b] = n;
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t id = v->order[i];
        uint8_t b0 = v->bytes[v->off[id]];
        if (v->first[b0] == n) { v->first[b0] = i; v->sfx_at[b0] = (uint32_t)at; }
        memcpy(v->sfx + at, v->bytes + v->off[id] + v->lcp[i], (size_t)(v->len[i] - v->lcp[i]));
        at += (size_t)(v->len[i] - v->lcp[i]);
    }
    v->sfx_at[256] = (uint32_t)at;
    v->skip = malloc(((size_t)n + 1) * sizeof *v->skip);
    v->sfx_off = malloc(((size_t)n + 1) * sizeof *v->sfx_off);
    if (!v->skip || !v->sfx_off) return plume_fail(err, PLUME_ENOMEM, "vocab: out of memory");
    at = 0;
    for (int32_t i = 0; i < n; i++) {
        v->sfx_off[i] = (uint32_t)at;
        at += (size_t)(v->len[i] - v->lcp[i]);
    }
    v->sfx_off[n] = (uint32_t)at;
    /* next smaller lcp, right to left with a stack of candidates (kept in k's place) */
    int32_t *stack = malloc(((size_t)n + 1) * sizeof *stack), top = 0;
    if (!stack) return plume_fail(err, PLUME_ENOMEM, "vocab: out of memory");
    for (int32_t i = n - 1; i >= 0; i--) {
        while (top > 0 && v->lcp[stack[top - 1]] >= v->lcp[i]) top--;
        v->skip[i] = top > 0 ? stack[top - 1] : n;
        stack[top++] = i;
    }
    free(stack);
    for (int b = 255; b >= 0; b--) /* a first byte no token starts with: an empty range */
        if (v->first[b] > v->first[b + 1]) { v->first[b] = v->first[b + 1]; v->sfx_at[b] = v->sfx_at[b + 1]; }
    return 0;
}

/* Index the tokens of tok. */
int plume_vocab_new(plume_vocab **out, const plume_tokenizer *tok, char **err) {
    if (!out || !tok) return plume_fail(err, PLUME_EINVAL, "vocab: out or tokenizer is NULL");
    *out = NULL;
    int32_t V = plume_tokenizer_n_vocab(tok);
    plume_vocab *v = calloc(1, sizeof *v);
    if (!v) return plume_fail(err, PLUME_ENOMEM, "vocab: out of memory");
    v->tok = tok;
    v->n_vocab = V;
    v->off = malloc(((size_t)V + 1) * sizeof *v->off);
    v->symbol = calloc((size_t)V, 1);
    v->order = malloc((size_t)V * sizeof *v->order);
    v->lcp = malloc((size_t)V);
    v->len = malloc((size_t)V);
    int rc = !v->off || !v->symbol || !v->order || !v->lcp || !v->len
                 ? plume_fail(err, PLUME_ENOMEM, "vocab: out of memory for %d tokens", V) : 0;
    if (!rc) rc = vocab_bytes(v, err);
    if (!rc) rc = vocab_sort(v, err);
    if (rc) {
        plume_vocab_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

/* Free the index; NULL is a no-op. */
void plume_vocab_free(plume_vocab *v) {
    if (!v) return;
    free(v->off);
    free(v->bytes);
    free(v->symbol);
    free(v->order);
    free(v->lcp);
    free(v->len);
    free(v->sfx);
    free(v->skip);
    free(v->sfx_off);
    free(v);
}
