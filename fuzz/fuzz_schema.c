/* fuzz_schema.c -- the JSON Schema and tool-call compilers (src/constrain/schema*.c, regex.c,
 * tools.c) on arbitrary input: data[0] bit 0: the dialect (JSON or Gemma tool-call
 * arguments), bit 1: tools mode; then a schema, or tools JSON 0xFF tool_choice. Either the
 * input is refused with a message, or the GBNF it compiles to is well formed: the grammar
 * parser may refuse it only for what a schema can mean (a $ref cycle that never ends, left
 * recursion through $ref), never for its syntax or an undefined rule, and its recognizer
 * starts. */
#include "constrain/constrain.h"
#include "fuzz.h"

/* Nothing to set up. */
int LLVMFuzzerInitialize(int *argc, char **argv[]) {
    (void)argc;
    (void)argv;
    return 0;
}

/* Compile, then parse what was compiled (the file comment). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int dialect = data[0] & 1 ? CST_GEMMA : CST_JSON, tools = data[0] & 2;
    fuzz_in in = {data + 1, size - 1};
    size_t len, clen;
    char *text = fuzz_field(&in, &len), *choice = fuzz_field(&in, &clen);
    char *gbnf = NULL, *err = NULL;
    int rc = tools ? cst_tools_to_gbnf(text, choice, &gbnf, &err) : cst_schema_to_gbnf(text, len, dialect, &gbnf, &err);
    fuzz_note(err);
    if (rc) {
        if (!err || !*err || gbnf) abort();
    } else {
        cst_grammar g;
        char *gerr = NULL;
        if (!gbnf) abort();
        if (cst_grammar_parse(&g, gbnf, strlen(gbnf), &gerr) == 0) {
            cst_dfa *d = NULL;
            if (cst_dfa_new(&d, &g, NULL)) abort();
            (void)cst_dfa_start(d);
            cst_dfa_free(d);
            cst_grammar_free(&g);
        } else if (!gerr || (!strstr(gerr, "left-recursive") && !strstr(gerr, "no finite text") &&
                             !strstr(gerr, "too large"))) {
            fprintf(stderr, "the compiled grammar is refused: %s\n%s\n", gerr ? gerr : "", gbnf);
            abort();
        }
        free(gerr);
    }
    free(err);
    free(gbnf);
    free(text);
    free(choice);
    return 0;
}
