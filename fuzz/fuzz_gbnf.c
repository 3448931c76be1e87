/* fuzz_gbnf.c -- the GBNF parser (src/constrain/gbnf.c) and the recognizer it feeds, on
 * arbitrary grammars: data[0] | grammar text [0xFF text to match]. A grammar is accepted or
 * refused with a message; an accepted one runs: its start state, the text's bytes stepped
 * one by one (twice: the second walk must find the same states, from the cache), and every
 * byte from the start state; then a second recognizer, which steps every byte from the
 * start first, walks the text. Invariants: a refusal has a message naming the grammar;
 * states stay within what the recognizer made; stepping is deterministic, and where a walk
 * dies or passes the per-step budget (CST_STEP_WORK) does not depend on what the recognizer
 * made before. */
#include "constrain/constrain.h"
#include "fuzz.h"

#define MAX_TEXT 256 /* bytes of text stepped: a grammar may make each step costly */

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char **argv[]) {
    (void)argc;
    (void)argv;
    return 0;
}

/* The states the text's bytes reach, into st[0 .. n] (st[0] the start); how many. */
static size_t run(cst_dfa *d, const char *t, size_t n, int32_t *st) {
    st[0] = cst_dfa_start(d);
    size_t k = 0;
    for (; k < n && st[k] >= 0; k++) st[k + 1] = cst_dfa_step(d, st[k], (uint8_t)t[k]);
    return k;
}

/* Parse, then step (the file comment). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    fuzz_in in = {data + 1, size - 1};
    size_t glen, tlen;
    char *gram = fuzz_field(&in, &glen), *text = fuzz_field(&in, &tlen);
    if (tlen > MAX_TEXT) tlen = MAX_TEXT;
    cst_grammar g;
    char *err = NULL;
    int rc = cst_grammar_parse(&g, gram, glen, &err);
    fuzz_note(err);
    if (rc) {
        if (!err || strncmp(err, "grammar: ", 9)) abort();
        free(err);
        free(gram);
        free(text);
        return 0;
    }
    if (g.root < 0 || g.root >= g.n_rules || g.rule_alts[g.n_rules] > g.n_elems) abort();
    cst_dfa *d = NULL;
    if (cst_dfa_new(&d, &g, NULL)) abort();
    int32_t a[MAX_TEXT + 1], b[MAX_TEXT + 1];
    size_t na = run(d, text, tlen, a), nb = run(d, text, tlen, b);
    if (na != nb || memcmp(a, b, (na + 1) * sizeof *a)) abort();
    for (size_t k = 0; k <= na; k++)
        if (a[k] >= cst_dfa_n_states(d) || a[k] < CST_LIMIT) abort();
    for (int c = 0; c < 256 && a[0] >= 0; c++) {
        int32_t s = cst_dfa_step(d, a[0], (uint8_t)c);
        if (s >= cst_dfa_n_states(d) || s < CST_LIMIT) abort();
    }
    (void)cst_dfa_matches(d, text, tlen);
    cst_dfa *e = NULL;
    if (cst_dfa_new(&e, &g, NULL)) abort();
    int32_t s0 = cst_dfa_start(e);
    for (int c = 0; c < 256 && s0 >= 0; c++) (void)cst_dfa_step(e, s0, (uint8_t)c);
    size_t ne = run(e, text, tlen, b);
    if (ne != na) abort();
    for (size_t k = 0; k <= na; k++)
        if ((a[k] < 0 || b[k] < 0) ? a[k] != b[k] : cst_dfa_accepting(d, a[k]) != cst_dfa_accepting(e, b[k])) abort();
    cst_dfa_free(e);
    cst_dfa_free(d);
    cst_grammar_free(&g);
    free(gram);
    free(text);
    return 0;
}
