/* tokenizer.h -- what tokenizer.c (opening, encoding, decoding) and tokenizer_json.c (building
 * from tokenizer.json) share: the layout of a tokenizer.bin, the struct that views it, and the
 * lookups both do. Nothing else includes it (but the tokenizer fuzzer, for the checksum). */
#ifndef PLUME_TOKENIZER_H
#define PLUME_TOKENIZER_H

#include "common.h"

/* ---- the binary form (tokenizer.bin) --------------------------------------------------------
 *
 *  offset  size  field (all little-endian)
 *       0     8  magic "PLUMETOK"
 *       8     4  version (2)
 *      12     4  header bytes (256)
 *      16     8  file bytes
 *      24     8  checksum: plume_tok_checksum() of bytes [32, file bytes)
 *      32     4  n_vocab          ids are 0 .. n_vocab-1
 *      36     4  n_merges         rank = index
 *      40     4  n_added          ids flagged TOK_ADDED
 *      44     4  n_special        ids flagged TOK_SPECIAL
 *      48     4  piece_slots      power of two > n_vocab
 *      52     4  merge_slots      power of two > n_merges
 *      56     4  trie_nodes       node 0 is the root
 *      60     4  trie_edges
 *      64     4  piece_bytes      size of the pieces blob
 *      68     4  max_piece        longest piece in bytes
 *      72     8  (zero)
 *      80   144  sections: SEC_COUNT x {u64 offset, u64 bytes}, offsets 8-aligned
 *     224    32  (zero)
 */
#define TOK_MAGIC "PLUMETOK"
#define TOK_VERSION 2u
#define TOK_HEADER 256u
#define TOK_NONE 0xffffffffu     /* empty hash slot; trie node without a token; dead symbol */
#define TOK_MAX_COUNT (1u << 28) /* bound on vocab, merges and trie sizes */

enum { TOK_SPECIAL = 1, TOK_BYTE = 2, TOK_ADDED = 4, TOK_FLAGS_ALL = 7 };

enum {
    H_MAGIC = 0, H_VERSION = 8, H_HEADER_BYTES = 12, H_FILE_BYTES = 16, H_CHECKSUM = 24,
    H_N_VOCAB = 32, H_N_MERGES = 36, H_N_ADDED = 40, H_N_SPECIAL = 44, H_PIECE_SLOTS = 48,
    H_MERGE_SLOTS = 52, H_TRIE_NODES = 56, H_TRIE_EDGES = 60, H_PIECE_BYTES = 64,
    H_MAX_PIECE = 68, H_SECTIONS = 80,
};

/* Sections in file order; each holds a flat array. */
enum {
    SEC_OFFSETS,  /* u32 [n_vocab + 1]  piece i = pieces[offsets[i] .. offsets[i+1]) */
    SEC_PIECES,   /* u8  [piece_bytes]  UTF-8, U+2581 for space, "<0xAB>" for byte tokens */
    SEC_FLAGS,    /* u8  [n_vocab]      TOK_SPECIAL | TOK_BYTE | TOK_ADDED */
    SEC_BYTE_IDS, /* u32 [256]          id of byte token <0xXX> */
    SEC_MERGES,   /* tok_merge [n_merges] */
    SEC_PIECE_HT, /* u32 [piece_slots]  id or TOK_NONE; slot tok_piece_slot(), linear probing */
    SEC_MERGE_HT, /* u32 [merge_slots]  fingerprint << rank_bits | rank, or TOK_NONE;
                   * slot tok_merge_hash(), linear probing */
    SEC_NODES,    /* tok_node [trie_nodes] */
    SEC_EDGES,    /* tok_edge [trie_edges], each node's edges sorted by byte */
    SEC_COUNT
};

typedef struct { uint32_t left, right, result; } tok_merge;          /* ids */
typedef struct { uint32_t first_edge, n_edges, token; } tok_node;    /* token: id or NONE */
typedef struct { uint32_t byte, child; } tok_edge;                   /* byte < 256 */
_Static_assert(sizeof(tok_merge) == 12, "tok_merge is 12 bytes in the file");
_Static_assert(sizeof(tok_node) == 12, "tok_node is 12 bytes in the file");
_Static_assert(sizeof(tok_edge) == 8, "tok_edge is 8 bytes in the file");
_Static_assert(H_SECTIONS + 16 * SEC_COUNT <= TOK_HEADER, "section table fits the header");

struct plume_tokenizer {
    plume_map map;           /* the mapped tokenizer.bin (open), or empty */
    uint8_t *owned;          /* the binary form built from JSON (open_json), or NULL */
    const uint8_t *bin;      /* the validated binary form: map.data or owned */
    size_t bin_size;
    uint32_t n_vocab, n_merges, n_nodes, n_edges;
    uint32_t piece_slots, merge_slots;
    uint32_t piece_shift, merge_shift; /* 64 - log2(slots) */
    uint32_t rank_bits;                /* a merge-table slot: fingerprint | rank bits */
    const uint32_t *offsets;  /* [n_vocab + 1] */
    const uint8_t *pieces;    /* [piece_bytes] */
    const uint8_t *flags;     /* [n_vocab] */
    const uint32_t *byte_ids; /* [256] */
    const tok_merge *merges;  /* [n_merges] */
    const uint32_t *piece_ht; /* [piece_slots] */
    const uint32_t *merge_ht; /* [merge_slots] */
    const tok_node *nodes;    /* [n_nodes] */
    const tok_edge *edges;    /* [n_edges] */
    /* Derived at open (a few hundred lookups, not a rebuild): */
    uint32_t ascii_ids[128];  /* initial symbol of each ASCII char (' ' as U+2581) or NONE */
    uint8_t starts[256];      /* whether some added token starts with this byte */
};

/* ---- tokenizer.c's, for the builder ---------------------------------------------------------- */

/* The checksum sealing a tokenizer.bin (docs/TOKENIZER.md) over p[0..n). */
uint64_t plume_tok_checksum(const uint8_t *p, size_t n);
/* Point t's arrays at the sections of bin (header already checked by tok_view, or written
 * by the builder). */
void tok_bind(plume_tokenizer *t, const uint8_t *bin);
/* Validate the binary form bin[0..size) and point t at it; fill the small derived tables. */
int tok_view(plume_tokenizer *t, const uint8_t *bin, size_t size, const char *name, char **err);
/* Whether s[0..n) is entirely valid UTF-8. */
int tok_utf8_valid(const uint8_t *s, size_t n);

/* ---- lookups both files do ------------------------------------------------------------------ */

/* FNV-1a 64 of a piece's bytes (the piece hash table's key hash). */
static inline uint64_t tok_hash(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

/* Home slot of a piece: the top bits of its hash times the golden ratio. */
static inline uint32_t tok_piece_slot(uint64_t h, uint32_t shift) {
    return (uint32_t)((h * 0x9e3779b97f4a7c15ull) >> shift);
}

/* Id of the piece s[0..n), or TOK_NONE. Probes are bounded by the table size. */
static inline uint32_t tok_piece_find(const plume_tokenizer *t, const uint8_t *s, size_t n) {
    uint32_t mask = t->piece_slots - 1, i = tok_piece_slot(tok_hash(s, n), t->piece_shift);
    for (uint32_t probe = 0; probe < t->piece_slots; probe++, i = (i + 1) & mask) {
        uint32_t id = t->piece_ht[i];
        if (id == TOK_NONE) return TOK_NONE;
        uint32_t a = t->offsets[id], b = t->offsets[id + 1];
        if (b - a == n && memcmp(t->pieces + a, s, n) == 0) return id;
    }
    return TOK_NONE;
}

/* The hash of a merge (left, right): its home slot (top bits) and fingerprint (the next
 * 32 - rank_bits bits), both from one multiply. */
static inline uint32_t tok_merge_hash(const plume_tokenizer *t, uint32_t left, uint32_t right, uint32_t *fp) {
    uint64_t h = ((uint64_t)left << 32 | right) * 0x9e3779b97f4a7c15ull;
    uint32_t fp_bits = 32 - t->rank_bits;
    *fp = (uint32_t)(h >> (t->merge_shift - fp_bits)) & ((1u << fp_bits) - 1);
    return (uint32_t)(h >> t->merge_shift);
}

#endif /* PLUME_TOKENIZER_H */
